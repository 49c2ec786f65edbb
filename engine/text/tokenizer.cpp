#include "text/tokenizer.h"

#include <cinttypes>
#include <cstring>

#include "core/check.h"
#include "text/bpe.h"
#include "text/pretokenize.h"

namespace keel::text {
namespace {

constexpr uint8_t kSpaceMark[3] = {0xE2, 0x96, 0x81};  // U+2581, SentencePiece's space
constexpr size_t kScratchAlign = 8;

bool is_special_type(fb::TokenType t) { return t == fb::TokenType::Control || t == fb::TokenType::UserDefined; }

size_t count_specials(const fb::Tokenizer* t) {
  const auto* types = t->token_types();
  const auto* tokens = t->tokens();
  if (!types || !tokens || types->size() != tokens->size()) return 0;
  size_t n = 0;
  for (uint32_t i = 0; i < types->size(); ++i) {
    if (is_special_type(types->Get(i)) && tokens->Get(i)->size() > 0) ++n;
  }
  return n;
}

// Specials are tried in this order: longer texts first, so the longest match wins.
bool special_before(const TokenStrings* tokens, int32_t a, int32_t b) {
  const size_t la = tokens->Get(uint32_t(a))->size(), lb = tokens->Get(uint32_t(b))->size();
  return la != lb ? la > lb : a < b;
}

void sift_down(const TokenStrings* tokens, int32_t* a, size_t i, size_t n) {
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) return;
    // Max-heap in "comes later" order, so that heap sort leaves the earliest first.
    if (c + 1 < n && special_before(tokens, a[c], a[c + 1])) ++c;
    if (!special_before(tokens, a[i], a[c])) return;
    const int32_t t = a[i];
    a[i] = a[c];
    a[c] = t;
    i = c;
  }
}

void sort_specials(const TokenStrings* tokens, int32_t* a, size_t n) {
  for (size_t i = n / 2; i-- > 0;) sift_down(tokens, a, i, n);
  for (size_t end = n; end > 1; --end) {
    const int32_t t = a[0];
    a[0] = a[end - 1];
    a[end - 1] = t;
    sift_down(tokens, a, 0, end - 1);
  }
}

// True when the piece holds a U+2581 right after some other character: merging could then
// cross the word cuts made before spaces.
bool piece_joins_across_space(const flatbuffers::String* s) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(s->data());
  const size_t n = s->size();
  for (size_t i = 1; i + 3 <= n; ++i) {
    if (memcmp(p + i, kSpaceMark, 3) != 0) continue;
    if (i < 3 || memcmp(p + i - 3, kSpaceMark, 3) != 0) return true;
  }
  return false;
}

Error check_id(const char* what, int32_t id, uint32_t n) {
  KEEL_ENSURE(id >= -1 && (id < 0 || uint32_t(id) < n), Status::ModelBadTokenizer,
              "tokenizer %s: expected -1 or an id below %" PRIu32 ", found %" PRId32, what, n, id);
  return Error();
}

}  // namespace

size_t Tokenizer::arena_bytes(const fb::Tokenizer* t) {
  if (!t || !t->tokens()) return 0;
  const size_t n = t->tokens()->size();
  size_t bytes = VocabIndex::arena_bytes(n);
  bytes += 256 * sizeof(int32_t) + alignof(int32_t);
  bytes += count_specials(t) * sizeof(int32_t) + alignof(int32_t);
  if (t->kind() == fb::TokenizerKind::ByteLevelBpe) {
    bytes += MergeTable::arena_bytes(t->merges() ? t->merges()->size() : 0);
  }
  return bytes;
}

size_t Tokenizer::scratch_bytes() {
  return kMaxWordBytes * sizeof(Symbol) + kMaxHeapPairs * sizeof(uint64_t) + kMaxWordBytes + 3 * kScratchAlign;
}

Error Tokenizer::init(const fb::Tokenizer* t, Arena& arena) {
  table_ = nullptr;
  KEEL_ENSURE(t != nullptr, Status::ModelMissingField, "model has no tokenizer table");
  const TokenStrings* tokens = t->tokens();
  KEEL_ENSURE(tokens && tokens->size() > 0, Status::ModelBadTokenizer,
              "tokenizer: expected a non-empty token list, found %" PRIu32 " tokens", tokens ? tokens->size() : 0u);
  const uint32_t n = tokens->size();
  KEEL_ENSURE(n < (1u << 30), Status::ModelBadTokenizer, "tokenizer: %" PRIu32 " tokens is too many", n);
  KEEL_ENSURE(t->kind() == fb::TokenizerKind::ByteLevelBpe || t->kind() == fb::TokenizerKind::SentencePieceBpe,
              Status::ModelBadTokenizer, "tokenizer: unknown kind %d", int(t->kind()));
  KEEL_ENSURE(t->pre() >= fb::PreTokenizer::MIN && t->pre() <= fb::PreTokenizer::MAX, Status::ModelBadTokenizer,
              "tokenizer: unknown pre-tokenizer %d", int(t->pre()));
  KEEL_ENSURE(!t->scores() || t->scores()->size() == n, Status::ModelBadTokenizer,
              "tokenizer: expected %" PRIu32 " scores, found %" PRIu32, n, t->scores()->size());
  KEEL_ENSURE(!t->token_types() || t->token_types()->size() == n, Status::ModelBadTokenizer,
              "tokenizer: expected %" PRIu32 " token types, found %" PRIu32, n, t->token_types()->size());
  KEEL_TRY(check_id("bos_id", t->bos_id(), n));
  KEEL_TRY(check_id("eos_id", t->eos_id(), n));
  KEEL_TRY(check_id("pad_id", t->pad_id(), n));
  KEEL_TRY(check_id("unk_id", t->unk_id(), n));
  KEEL_TRY(check_id("im_start_id", t->im_start_id(), n));
  KEEL_TRY(check_id("im_end_id", t->im_end_id(), n));

  tokens_ = tokens;
  types_ = t->token_types();
  kind_ = t->kind();
  pre_ = t->pre();
  n_tokens_ = n;
  bos_ = t->bos_id();
  eos_ = t->eos_id();
  pad_ = t->pad_id();
  unk_ = t->unk_id();
  im_start_ = t->im_start_id();
  im_end_ = t->im_end_id();
  add_bos_ = t->add_bos();
  add_space_prefix_ = t->add_space_prefix();
  max_token_bytes_ = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const size_t len = tokens->Get(i)->size();
    if (len > max_token_bytes_) max_token_bytes_ = len;
  }

  KEEL_ENSURE(vocab_.init(tokens, arena), Status::ArenaTooSmall, "tokenizer arena too small: needs %zu bytes",
              arena_bytes(t));

  byte_token_ = arena.allocate_array<int32_t>(256, alignof(int32_t));
  KEEL_ENSURE(byte_token_, Status::ArenaTooSmall, "tokenizer arena too small: needs %zu bytes", arena_bytes(t));
  for (int b = 0; b < 256; ++b) byte_token_[b] = -1;
  if (kind_ == fb::TokenizerKind::ByteLevelBpe) {
    for (int b = 0; b < 256; ++b) {
      uint8_t buf[4];
      const uint32_t len = utf8_encode(byte_to_code_point(uint8_t(b)), buf);
      byte_token_[b] = vocab_.find(buf, len);
    }
  } else {
    for (uint32_t i = n; i-- > 0;) {  // backwards: the lowest id wins
      const flatbuffers::String* s = tokens->Get(i);
      const int byte = parse_byte_token(s->data(), s->size());
      if (byte >= 0) byte_token_[byte] = int32_t(i);
    }
  }

  n_specials_ = uint32_t(count_specials(t));
  specials_ = arena.allocate_array<int32_t>(n_specials_, alignof(int32_t));
  KEEL_ENSURE(specials_, Status::ArenaTooSmall, "tokenizer arena too small: needs %zu bytes", arena_bytes(t));
  memset(special_first_byte_, 0, sizeof special_first_byte_);
  uint32_t k = 0;
  for (uint32_t i = 0; i < n && k < n_specials_; ++i) {
    const flatbuffers::String* s = tokens->Get(i);
    if (!is_special_type(types_->Get(i)) || s->size() == 0) continue;
    specials_[k++] = int32_t(i);
    const uint8_t first = uint8_t(s->data()[0]);
    special_first_byte_[first >> 5] |= 1u << (first & 31);
  }
  sort_specials(tokens, specials_, n_specials_);

  if (kind_ == fb::TokenizerKind::ByteLevelBpe) {
    KEEL_TRY(merges_.init(t->merges(), vocab_, arena));
  } else {
    cut_words_at_spaces_ = true;
    for (uint32_t i = 0; i < n && cut_words_at_spaces_; ++i) {
      if (piece_joins_across_space(tokens->Get(i))) cut_words_at_spaces_ = false;
    }
  }
  table_ = t;
  return Error();
}

Span<const char> Tokenizer::token_text(int32_t id) const {
  if (!tokens_ || id < 0 || uint32_t(id) >= n_tokens_) return {};
  const flatbuffers::String* s = tokens_->Get(uint32_t(id));
  return Span<const char>(s->data(), s->size());
}

fb::TokenType Tokenizer::token_type(int32_t id) const {
  if (!types_ || id < 0 || uint32_t(id) >= n_tokens_) return fb::TokenType::Normal;
  return types_->Get(uint32_t(id));
}

int32_t Tokenizer::token_id(const char* text, size_t len) const {
  if (!tokens_) return -1;
  return vocab_.find(reinterpret_cast<const uint8_t*>(text), len);
}

bool Tokenizer::is_special(int32_t id) const { return is_special_type(token_type(id)); }

size_t Tokenizer::match_special(const uint8_t* s, size_t n, bool control, int32_t* id) const {
  if ((special_first_byte_[s[0] >> 5] & (1u << (s[0] & 31))) == 0) return 0;
  for (uint32_t i = 0; i < n_specials_; ++i) {
    if (!control && types_->Get(uint32_t(specials_[i])) == fb::TokenType::Control) continue;
    const flatbuffers::String* t = tokens_->Get(uint32_t(specials_[i]));
    if (t->size() <= n && memcmp(t->data(), s, t->size()) == 0) {
      *id = specials_[i];
      return t->size();
    }
  }
  return 0;
}

Error Tokenizer::encode(const char* text, size_t len, const EncodeOptions& options, Span<int32_t> out,
                        size_t* n_written, Arena& scratch) const {
  if (n_written) *n_written = 0;
  KEEL_ENSURE(table_ != nullptr, Status::InvalidArgument, "tokenizer is not initialized");
  KEEL_ENSURE(text != nullptr || len == 0, Status::InvalidArgument, "text is null");
  const uint8_t* s = reinterpret_cast<const uint8_t*>(text);
  if (options.reject_invalid_utf8) {
    for (size_t i = 0; i < len;) {
      const DecodedChar c = utf8_decode(s + i, len - i);
      KEEL_ENSURE(c.cp != kInvalidCodePoint, Status::InvalidUtf8,
                  "text is not UTF-8: ill-formed byte 0x%02x at offset %zu", s[i], i);
      i += c.len;
    }
  }

  const size_t free_bytes = scratch.capacity() - scratch.used();
  ArenaScope scope(scratch);
  WordScratch ws;
  ws.symbols = scratch.allocate_array<Symbol>(kMaxWordBytes, kScratchAlign);
  ws.heap = scratch.allocate_array<uint64_t>(kMaxHeapPairs, kScratchAlign);
  ws.text = scratch.allocate_array<uint8_t>(kMaxWordBytes, kScratchAlign);
  KEEL_ENSURE(ws.symbols && ws.heap && ws.text, Status::ArenaTooSmall, "encode needs %zu scratch bytes, %zu are free",
              scratch_bytes(), free_bytes);

  TokenSink sink{out.data(), out.size()};
  if (options.add_bos && add_bos_ && bos_ >= 0) sink.push(bos_);
  size_t run_start = 0;
  if (n_specials_ > 0) {
    for (size_t i = 0; i < len;) {
      int32_t id = -1;
      const size_t m = match_special(s + i, len - i, options.parse_special, &id);
      if (m == 0) {
        ++i;
        continue;
      }
      encode_run(s + run_start, i - run_start, ws, sink);
      sink.push(id);
      i += m;
      run_start = i;
    }
  }
  encode_run(s + run_start, len - run_start, ws, sink);

  if (n_written) *n_written = sink.count;
  KEEL_ENSURE(sink.count <= out.size(), Status::PromptTooLong, "text encodes to %zu tokens, the output holds %zu",
              sink.count, out.size());
  return Error();
}

void Tokenizer::encode_run(const uint8_t* s, size_t n, WordScratch& ws, TokenSink& sink) const {
  if (n == 0) return;
  if (kind_ == fb::TokenizerKind::ByteLevelBpe) {
    encode_byte_level(s, n, ws, sink);
  } else {
    encode_sentencepiece(s, n, ws, sink);
  }
}

void Tokenizer::encode_byte_level(const uint8_t* s, size_t n, WordScratch& ws, TokenSink& sink) const {
  PreTokenIterator it(pre_, s, n);
  size_t begin, len;
  while (it.next(&begin, &len)) {
    // A pre-token longer than kMaxWordBytes is merged in pieces cut at character starts.
    while (len > 0) {
      size_t piece = len;
      if (piece > kMaxWordBytes) {
        piece = kMaxWordBytes;
        while (piece > 1 && (s[begin + piece] & 0xC0) == 0x80) --piece;
      }
      bpe_encode_word(s + begin, piece, byte_token_, merges_, ws, sink);
      begin += piece;
      len -= piece;
    }
  }
}

// Words are cut before each U+2581 that follows another character. When no piece holds a U+2581
// after another character (init() checks; true of SentencePiece vocabularies trained with
// split_by_whitespace, the default), no merge crosses such a cut and the result is that of
// merging the whole run at once. Otherwise, and for a word longer than kMaxWordBytes, words are
// only cut every kMaxWordBytes bytes.
void Tokenizer::encode_sentencepiece(const uint8_t* s, size_t n, WordScratch& ws, TokenSink& sink) const {
  SpmVocab vocab;
  vocab.index = &vocab_;
  vocab.scores = table_->scores();
  vocab.types = types_;
  vocab.byte_token = byte_token_;
  vocab.unk_id = unk_;
  size_t w = 0;
  bool last_was_space = false;
  auto flush = [&]() {
    if (w > 0) spm_encode_word(ws.text, w, vocab, ws, sink);
    w = 0;
  };
  auto append = [&](const uint8_t* p, size_t k, bool is_space) {
    if ((cut_words_at_spaces_ && is_space && w > 0 && !last_was_space) || w + k > kMaxWordBytes) {
      flush();
    }
    memcpy(ws.text + w, p, k);
    w += k;
    last_was_space = is_space;
  };
  if (add_space_prefix_) append(kSpaceMark, 3, true);
  for (size_t i = 0; i < n;) {
    const DecodedChar c = utf8_decode(s + i, n - i);
    if (c.cp == ' ') {
      append(kSpaceMark, 3, true);
    } else {
      append(s + i, c.len, c.cp == 0x2581);
    }
    i += c.len;
  }
  flush();
}

}  // namespace keel::text
