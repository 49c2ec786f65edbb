#include "text/stream_decoder.h"

#include <cinttypes>

#include "core/check.h"
#include "text/utf8.h"

namespace keel::text {

struct StreamDecoder::Writer {
  char* out;
  size_t capacity;
  size_t n = 0;
  bool overflow = false;
  void put(uint8_t b) {
    if (n < capacity) {
      out[n++] = char(b);
    } else {
      overflow = true;
    }
  }
  void put_replacement() {
    put(0xEF);
    put(0xBF);
    put(0xBD);
  }
};

void StreamDecoder::reset(const Tokenizer& tok, DecodeOptions options) {
  tok_ = &tok;
  options_ = options;
  n_pending_ = 0;
  need_ = 0;
  strip_space_ =
      options.strip_leading_space && tok.kind() == fb::TokenizerKind::SentencePieceBpe && tok.adds_space_prefix();
}

size_t StreamDecoder::max_push_bytes() const {
  const size_t token = tok_ ? tok_->max_token_bytes() : 0;
  return 3 * (token + 4);
}

void StreamDecoder::feed(uint8_t b, Writer& w) {
  if (n_pending_ > 0) {
    const bool ok = n_pending_ == 1 ? utf8_valid_second(pending_[0], b) : (b & 0xC0) == 0x80;
    if (ok) {
      pending_[n_pending_++] = b;
      if (n_pending_ == need_) {
        for (uint8_t i = 0; i < need_; ++i) w.put(pending_[i]);
        n_pending_ = 0;
      }
      return;
    }
    w.put_replacement();  // the held-back bytes can no longer form a character
    n_pending_ = 0;
  }
  const uint32_t len = utf8_sequence_length(b);
  if (len == 1) {
    w.put(b);
  } else if (len == 0) {
    w.put_replacement();
  } else {
    pending_[0] = b;
    n_pending_ = 1;
    need_ = uint8_t(len);
  }
}

Error StreamDecoder::push(int32_t id, Span<char> out, size_t* n_written) {
  if (n_written) *n_written = 0;
  KEEL_ENSURE(tok_ != nullptr, Status::InvalidArgument, "stream decoder has no tokenizer");
  KEEL_ENSURE(id >= 0 && uint32_t(id) < tok_->vocab_size(), Status::InvalidArgument,
              "token id %" PRId32 " outside the vocabulary of %" PRIu32, id, tok_->vocab_size());
  // Snapshot so that a token that does not fit leaves the stream unchanged.
  uint8_t saved_pending[4];
  for (int i = 0; i < 4; ++i) saved_pending[i] = pending_[i];
  const uint8_t saved_n = n_pending_, saved_need = need_;
  const bool saved_strip = strip_space_;

  Writer w{out.data(), out.size()};
  const fb::TokenType type = tok_->token_type(id);
  const bool spm = tok_->kind() == fb::TokenizerKind::SentencePieceBpe;
  if (type == fb::TokenType::Control) {
    if (spm && id == tok_->bos_id() && tok_->adds_space_prefix()) strip_space_ = true;
    if (options_.print_special) tok_->for_each_token_byte(id, [&](uint8_t b) { feed(b, w); });
  } else if (type == fb::TokenType::Unknown && !options_.print_special) {
    static constexpr uint8_t kReplacement[3] = {0xEF, 0xBF, 0xBD};
    for (uint8_t b : kReplacement) feed(b, w);
    strip_space_ = false;
  } else {
    // Only a piece that starts with U+2581 loses its space: a <0x20> byte token keeps it.
    const Span<const char> text = tok_->token_text(id);
    bool skip = strip_space_ && spm && text.size() >= 3 && uint8_t(text[0]) == 0xE2 && uint8_t(text[1]) == 0x96 &&
                uint8_t(text[2]) == 0x81;
    tok_->for_each_token_byte(id, [&](uint8_t b) {
      if (skip) {
        skip = false;
        return;
      }
      feed(b, w);
    });
    strip_space_ = false;
  }
  if (w.overflow) {
    for (int i = 0; i < 4; ++i) pending_[i] = saved_pending[i];
    n_pending_ = saved_n;
    need_ = saved_need;
    strip_space_ = saved_strip;
    return Error(Status::InvalidArgument, "token %" PRId32 " needs more than the %zu output bytes given", id,
                 out.size());
  }
  if (n_written) *n_written = w.n;
  return Error();
}

size_t StreamDecoder::flush(Span<char> out) {
  if (n_pending_ == 0) return 0;
  if (out.size() < 3) return 0;
  Writer w{out.data(), out.size()};
  w.put_replacement();
  n_pending_ = 0;
  return w.n;
}

Error decode(const Tokenizer& tok, Span<const int32_t> ids, Span<char> out, size_t* n_written, DecodeOptions options) {
  StreamDecoder dec(tok, options);
  size_t n = 0;
  if (n_written) *n_written = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    size_t k = 0;
    const Error e = dec.push(ids[i], out.subspan(n, out.size() - n), &k);
    if (!e.ok()) return e;
    n += k;
    if (n_written) *n_written = n;
  }
  if (dec.pending_bytes() > 0) {
    const size_t k = dec.flush(out.subspan(n, out.size() - n));
    KEEL_ENSURE(k > 0, Status::InvalidArgument, "output of %zu bytes is too small", out.size());
    n += k;
  }
  if (n_written) *n_written = n;
  return Error();
}

}  // namespace keel::text
