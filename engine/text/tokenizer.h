// Text <-> token ids for the two tokenizer kinds of the .keel format:
//  - ByteLevelBpe: GPT-2 byte alphabet, merges ranked by their index, a pre-tokenizer that
//    splits the text first (pretokenize.h). Any bytes encode, well-formed UTF-8 or not, as with
//    the Hugging Face tokenizers; like them, a byte whose alphabet character is not in the
//    vocabulary (SmolLM2 lacks 0xC0, 0xC1, 0xF5..0xFF and a few controls) is dropped.
//  - SentencePieceBpe: spaces become U+2581, a U+2581 is prepended to each run of text when the
//    model says so, score-ordered merges, <0xNN> byte fallback (spm.h).
//
// Memory: the token strings stay in the model image. init() takes the hash tables from an arena
// the caller sized with arena_bytes(); encode() takes at most scratch_bytes() from a scratch
// arena and gives it back before returning. Nothing here allocates, throws or does I/O.
//
// Special tokens: the texts of UserDefined tokens, and of Control tokens when
// EncodeOptions::parse_special is set, are matched literally in the input before
// pre-tokenization (leftmost first, the longest at a position), as the Hugging Face tokenizers
// do with added tokens and llama.cpp with its special tokens. Each run of text between them is
// encoded on its own; with SentencePiece each run gets the space prefix.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/arena.h"
#include "core/span.h"
#include "core/status.h"
#include "keel_generated.h"
#include "text/byte_unicode.h"
#include "text/merge_table.h"
#include "text/merge_work.h"
#include "text/spm.h"
#include "text/utf8.h"
#include "text/vocab_index.h"

namespace keel::text {

struct EncodeOptions {
  bool add_bos = true;               // prepend BOS if the model's tokenizer asks for it
  bool parse_special = false;        // match Control token texts in the input
  bool reject_invalid_utf8 = false;  // InvalidUtf8 instead of encoding ill-formed bytes
};

class Tokenizer {
 public:
  // Arena bytes init() takes for this table (worst-case alignment included).
  static size_t arena_bytes(const fb::Tokenizer* t);
  // Scratch bytes one encode() call takes at most, whatever the text length.
  static size_t scratch_bytes();

  // `t` must be verified and outlive the Tokenizer. ModelBadTokenizer names what is wrong.
  Error init(const fb::Tokenizer* t, Arena& arena);

  // Encodes text[0..len). Ids go to `out` while they fit; *n_written is the number of ids the
  // text encodes to. When that is more than out.size(), out holds the first out.size() ids and
  // the result is PromptTooLong (so an empty `out` counts the ids). Ill-formed UTF-8 is encoded
  // anyway (byte-level: its bytes; SentencePiece: byte fallback per byte, or unk) unless
  // options.reject_invalid_utf8 is set. ArenaTooSmall if `scratch` has < scratch_bytes() left.
  Error encode(const char* text, size_t len, const EncodeOptions& options, Span<int32_t> out, size_t* n_written,
               Arena& scratch) const;

  bool initialized() const { return table_ != nullptr; }
  fb::TokenizerKind kind() const { return kind_; }
  uint32_t vocab_size() const { return n_tokens_; }
  // The raw piece as stored (U+0120-style byte alphabet, U+2581 for spaces); empty if out of
  // range.
  Span<const char> token_text(int32_t id) const;
  fb::TokenType token_type(int32_t id) const;
  // Id of the token whose raw piece is text[0..len), or -1.
  int32_t token_id(const char* text, size_t len) const;
  // Control and UserDefined tokens: the ones matched literally in the input.
  bool is_special(int32_t id) const;

  // Calls f(uint8_t) for each byte token `id` stands for in text: byte-level pieces through the
  // inverse byte alphabet, SentencePiece U+2581 as a space and <0xNN> as its byte; Control,
  // UserDefined and Unknown tokens give their raw text. At most max_token_bytes() calls.
  template <typename F>
  void for_each_token_byte(int32_t id, F&& f) const;
  // Longest raw piece in bytes: a bound on the bytes of any one token.
  size_t max_token_bytes() const { return max_token_bytes_; }

  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  int32_t pad_id() const { return pad_; }
  int32_t unk_id() const { return unk_; }
  int32_t im_start_id() const { return im_start_; }
  int32_t im_end_id() const { return im_end_; }
  bool adds_bos() const { return add_bos_; }
  bool adds_space_prefix() const { return add_space_prefix_; }

 private:
  void encode_run(const uint8_t* s, size_t n, WordScratch& ws, TokenSink& sink) const;
  void encode_byte_level(const uint8_t* s, size_t n, WordScratch& ws, TokenSink& sink) const;
  void encode_sentencepiece(const uint8_t* s, size_t n, WordScratch& ws, TokenSink& sink) const;
  // The largest e in [e_min, e_max] such that word[i, e) spells a token merging can form, or 0
  // (word_cut.h). Byte-level: `word` is raw bytes; SentencePiece: the rewritten text.
  size_t byte_level_token_end(const uint8_t* word, size_t i, size_t e_min, size_t e_max) const;
  size_t spm_token_end(const uint8_t* word, size_t i, size_t e_min, size_t e_max) const;
  // Where no safe cut is in reach: word[0, n) and word[0, n - 256) are merged and the cut is
  // the last symbol start at least 64 bytes before the first offset where the two disagree, on
  // the evidence that the end of the text moves no symbol that far back (as in the long runs
  // of one repeated word or character that have no safe cut). 0 when there is none.
  size_t agreed_cut(const uint8_t* word, size_t n, WordScratch& ws) const;
  // Length of the longest UserDefined (or, with `control`, Control) token at s[0..n) (0 if
  // none); its id in *id.
  size_t match_special(const uint8_t* s, size_t n, bool control, int32_t* id) const;

  const fb::Tokenizer* table_ = nullptr;
  const TokenStrings* tokens_ = nullptr;
  const flatbuffers::Vector<fb::TokenType>* types_ = nullptr;
  fb::TokenizerKind kind_ = fb::TokenizerKind::ByteLevelBpe;
  fb::PreTokenizer pre_ = fb::PreTokenizer::None;
  uint32_t n_tokens_ = 0;
  size_t max_token_bytes_ = 0;
  VocabIndex vocab_;
  MergeTable merges_;
  int32_t* byte_token_ = nullptr;  // [256] token of each byte (alphabet char or <0xNN>), or -1
  int32_t* specials_ = nullptr;    // [n_specials_] by first byte, then decreasing text length, then id
  uint32_t n_specials_ = 0;
  uint32_t special_first_byte_[8] = {};  // bitmap of the first bytes of special texts
  int32_t bos_ = -1, eos_ = -1, pad_ = -1, unk_ = -1, im_start_ = -1, im_end_ = -1;
  bool add_bos_ = false;
  bool add_space_prefix_ = false;
  bool cut_words_at_spaces_ = false;  // SentencePiece: see encode_sentencepiece
  // Longest token the safe-cut search handles (word_cut.h); a vocabulary with a longer one cuts
  // long words at fixed offsets instead.
  static constexpr size_t kMaxCutScanBytes = 256;
  bool can_search_cuts_ = false;
  SpmVocab spm_vocab_;
};

template <typename F>
void Tokenizer::for_each_token_byte(int32_t id, F&& f) const {
  if (id < 0 || uint32_t(id) >= n_tokens_) return;
  const flatbuffers::String* s = tokens_->Get(uint32_t(id));
  const uint8_t* p = reinterpret_cast<const uint8_t*>(s->data());
  const size_t n = s->size();
  const fb::TokenType type = token_type(id);
  const bool raw =
      type == fb::TokenType::Control || type == fb::TokenType::UserDefined || type == fb::TokenType::Unknown;
  if (raw) {
    for (size_t i = 0; i < n; ++i) f(p[i]);
    return;
  }
  if (kind_ == fb::TokenizerKind::SentencePieceBpe) {
    const int byte = parse_byte_token(s->data(), n);
    if (byte >= 0) {
      f(uint8_t(byte));
      return;
    }
    for (size_t i = 0; i < n; ++i) {
      if (i + 3 <= n && p[i] == 0xE2 && p[i + 1] == 0x96 && p[i + 2] == 0x81) {
        f(uint8_t(' '));
        i += 2;
      } else {
        f(p[i]);
      }
    }
    return;
  }
  for (size_t i = 0; i < n;) {
    const DecodedChar c = utf8_decode(p + i, n - i);
    const int byte = c.cp == kInvalidCodePoint ? -1 : code_point_to_byte(c.cp);
    if (byte >= 0) {
      f(uint8_t(byte));
    } else {
      for (uint32_t k = 0; k < c.len; ++k) f(p[i + k]);
    }
    i += c.len;
  }
}

}  // namespace keel::text
