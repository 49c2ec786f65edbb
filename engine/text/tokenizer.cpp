#include "text/tokenizer.h"

#include <cinttypes>
#include <cstring>

#include "core/check.h"
#include "text/bpe.h"
#include "text/pretokenize.h"
#include "text/text_sizes.h"
#include "text/word_cut.h"

namespace keel::text {
namespace {

constexpr uint8_t kSpaceMark[3] = {0xE2, 0x96, 0x81};  // U+2581, SentencePiece's space
constexpr size_t kScratchAlign = 8;
// SentencePiece: word starts tried one by one before every boundary of the buffer's tail at once.
constexpr int kWordStartsTried = 8;
// agreed_cut: how much shorter the second merge is, and how far before the first place where
// the two merges disagree the cut must stay.
constexpr size_t kCutProbeBytes = 256;
constexpr size_t kCutMarginBytes = 64;

bool has_bit(const uint64_t* bits, size_t i) { return (bits[i >> 6] >> (i & 63)) & 1u; }

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

uint8_t first_byte(const TokenStrings* tokens, int32_t id) { return uint8_t(tokens->Get(uint32_t(id))->data()[0]); }

// Specials are grouped by first byte, so that a position is compared only with the specials that
// can start there (Gemma 3 has 92 whose text starts with a space, tab or newline among 6,500),
// and in a group longer texts come first, so the longest match wins.
bool special_before(const TokenStrings* tokens, int32_t a, int32_t b) {
  const uint8_t first_a = first_byte(tokens, a), first_b = first_byte(tokens, b);
  if (first_a != first_b) return first_a < first_b;
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
  constexpr size_t bytes =
      kMaxWordBytes * sizeof(Symbol) + kMaxHeapPairs * sizeof(uint64_t) + kMaxWordBytes + 3 * kScratchAlign;
  static_assert(bytes <= kTokenizerScratchBytes, "encode's work buffers exceed the text scratch the plan reserves");
  return bytes;
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

  spm_vocab_ = SpmVocab{&vocab_, t->scores(), types_, byte_token_, unk_};
  can_search_cuts_ = max_token_bytes_ <= kMaxCutScanBytes;
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
  // The group of specials starting with s[0]: the first whose first byte is not below it.
  uint32_t lo = 0, hi = n_specials_;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (first_byte(tokens_, specials_[mid]) < s[0]) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  for (uint32_t i = lo; i < n_specials_ && first_byte(tokens_, specials_[i]) == s[0]; ++i) {
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
    // A pre-token longer than kMaxWordBytes is merged in pieces, cut where no token reaches
    // across (word_cut.h); only a stretch with no such place in reach is cut where it must be.
    while (len > 0) {
      size_t piece = len;
      if (piece > kMaxWordBytes) {
        const uint8_t* word = s + begin;
        auto token_end = [&](size_t i, size_t e_min, size_t e_max) {
          return byte_level_token_end(word, i, e_min, e_max);
        };
        auto any_byte = [](size_t) { return true; };  // byte-level symbols start as single bytes
        piece = can_search_cuts_
                    ? last_safe_cut(len, kMaxWordBytes / 2, kMaxWordBytes, max_token_bytes_, token_end, any_byte)
                    : 0;
        if (piece == 0) piece = agreed_cut(word, kMaxWordBytes, ws);
        if (piece == 0) {
          piece = kMaxWordBytes;
          while (piece > 1 && (word[piece] & 0xC0) == 0x80) --piece;
        }
      }
      bpe_encode_word(s + begin, piece, byte_token_, merges_, ws, sink);
      begin += piece;
      len -= piece;
    }
  }
}

size_t Tokenizer::byte_level_token_end(const uint8_t* word, size_t i, size_t e_min, size_t e_max) const {
  // The raw bytes [i, e) in the byte alphabet, as the merged symbols spell them (a byte the
  // vocabulary has no character for is dropped, as bpe_encode_word drops it), hashed as they grow.
  uint8_t spelled[2 * kMaxCutScanBytes];
  size_t m = 0, found = 0;
  uint64_t fnv = VocabIndex::kFnvStart;
  for (size_t e = i + 1; e <= e_max; ++e) {
    const uint8_t b = word[e - 1];
    if (byte_token_[b] >= 0) {
      const uint32_t k = utf8_encode(byte_to_code_point(b), spelled + m);
      for (uint32_t j = 0; j < k; ++j) fnv = VocabIndex::fnv_extend(fnv, spelled[m + j]);
      m += k;
    }
    if (e >= e_min && vocab_.find_hashed(fnv, spelled, m) >= 0) found = e;
  }
  return found;
}

size_t Tokenizer::spm_token_end(const uint8_t* word, size_t i, size_t e_min, size_t e_max) const {
  size_t found = 0;
  uint64_t fnv = VocabIndex::kFnvStart;
  for (size_t e = i + 1; e <= e_max; ++e) {
    fnv = VocabIndex::fnv_extend(fnv, word[e - 1]);
    if (e < e_min) continue;
    const int32_t id = vocab_.find_hashed(fnv, word + i, e - i);
    if (id >= 0 && spm_vocab_.usable(id)) found = e;
  }
  return found;
}

size_t Tokenizer::agreed_cut(const uint8_t* word, size_t n, WordScratch& ws) const {
  if (n <= kCutProbeBytes + kCutMarginBytes) return 0;
  auto merge = [&](size_t len) {
    return kind_ == fb::TokenizerKind::ByteLevelBpe ? bpe_merge_word(word, len, byte_token_, merges_, ws)
                                                    : spm_merge_word(word, len, spm_vocab_, ws);
  };
  const Symbol* sym = ws.symbols;
  uint64_t whole_starts[kMaxWordBytes / 64 + 1] = {};
  if (!merge(n)) return 0;
  for (int32_t i = 0; i >= 0; i = sym[i].next) whole_starts[sym[i].start >> 6] |= uint64_t(1) << (sym[i].start & 63);
  const size_t m = n - kCutProbeBytes;
  if (!merge(m)) return 0;
  // The first offset where the two merges disagree: a symbol of the shorter one that does not
  // start where one of the whole word's does, or that covers the start of one.
  size_t disagree = m;
  for (int32_t i = 0; i >= 0 && disagree == m; i = sym[i].next) {
    if (!has_bit(whole_starts, sym[i].start)) {
      disagree = sym[i].start;
      break;
    }
    for (size_t q = size_t(sym[i].start) + 1; q < size_t(sym[i].start) + sym[i].len; ++q) {
      if (has_bit(whole_starts, q)) {
        disagree = q;
        break;
      }
    }
  }
  size_t cut = 0;
  for (int32_t i = 0; i >= 0 && size_t(sym[i].start) + kCutMarginBytes <= disagree; i = sym[i].next) cut = sym[i].start;
  return cut;
}

// The run is rewritten (spaces as U+2581) into ws.text and merged a word at a time; each append
// is one first symbol, cut from the rewritten bytes as spm_merge_word cuts them, so every cut
// below falls between symbols. When no piece holds a U+2581 after another character (init()
// checks; true of SentencePiece vocabularies trained with split_by_whitespace, the default), no
// merge crosses the cut before a word's U+2581 and words are cut there. Otherwise (Gemma 3's
// ">\u2581</"), and for a word longer than the scratch, the text is cut only where no piece
// reaches across (word_cut.h): first at the last few word starts that are safe, else at any
// safe symbol start, else where two merges agree (agreed_cut), so the ids are those of merging
// the whole run at once, as llama.cpp does.
void Tokenizer::encode_sentencepiece(const uint8_t* s, size_t n, WordScratch& ws, TokenSink& sink) const {
  uint8_t* text = ws.text;
  size_t w = 0;
  bool last_was_space = false;
  auto encode_prefix = [&](size_t b) {
    spm_encode_word(text, b, spm_vocab_, ws, sink);
    memmove(text, text + b, w - b);
    w -= b;
  };
  // Makes room in a full buffer whose text goes on past w.
  auto cut = [&]() {
    size_t b = 0;
    if (can_search_cuts_ && w >= max_token_bytes_ + kMaxWordBytes / 2) {
      uint64_t starts[kMaxWordBytes / 64 + 1] = {};  // first symbols' starts, as spm_merge_word cuts them
      for (size_t i = 0; i < w; i += utf8_lead_length(text[i])) starts[i >> 6] |= uint64_t(1) << (i & 63);
      auto token_end = [&](size_t i, size_t e_min, size_t e_max) { return spm_token_end(text, i, e_min, e_max); };
      auto is_start = [&](size_t b) { return has_bit(starts, b); };
      // Boundaries tested must have max_token_bytes_ - 1 bytes of the text after them in the buffer.
      const size_t hi = w - max_token_bytes_ + 1, lo = kMaxWordBytes / 4;
      int tried = 0;
      for (size_t c = hi; c > lo && tried < kWordStartsTried; --c) {
        const bool word_start = is_start(c) && c + 3 <= w && memcmp(text + c, kSpaceMark, 3) == 0 &&
                                !(is_start(c - 3) && memcmp(text + c - 3, kSpaceMark, 3) == 0);
        if (!word_start) continue;
        ++tried;
        if (is_safe_cut(w, c, max_token_bytes_, token_end)) {
          b = c;
          break;
        }
      }
      if (b == 0) b = last_safe_cut(w, lo, hi, max_token_bytes_, token_end, is_start);
    }
    if (b == 0) b = agreed_cut(text, w, ws);
    if (b == 0) b = w;  // neither kind of cut: the one case where the ids may differ (docs/format.md)
    encode_prefix(b);
  };
  auto append = [&](const uint8_t* p, size_t k, bool is_space) {
    if (cut_words_at_spaces_ && is_space && w > 0 && !last_was_space) encode_prefix(w);
    if (w + k > kMaxWordBytes) cut();
    memcpy(text + w, p, k);
    w += k;
    last_was_space = is_space;
  };
  if (add_space_prefix_) append(kSpaceMark, 3, true);
  // The rewritten run byte by byte: a space gives the three bytes of U+2581.
  size_t i = 0, mark_left = 0;
  auto next_byte = [&](uint8_t* b) {
    if (mark_left > 0) {
      *b = kSpaceMark[3 - mark_left--];
      return true;
    }
    if (i >= n) return false;
    *b = s[i++];
    if (*b == ' ') {
      *b = kSpaceMark[0];
      mark_left = 2;
    }
    return true;
  };
  uint8_t symbol[4];
  while (next_byte(&symbol[0])) {
    size_t k = 1;
    while (k < utf8_lead_length(symbol[0]) && next_byte(&symbol[k])) ++k;
    append(symbol, k, k == 3 && memcmp(symbol, kSpaceMark, 3) == 0);
  }
  if (w > 0) encode_prefix(w);
}

}  // namespace keel::text
