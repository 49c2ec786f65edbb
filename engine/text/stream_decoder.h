// Turns token ids into UTF-8 text one token at a time. Bytes that may still become a character
// (an incomplete UTF-8 sequence at the end of a token) are held back until the next token
// completes or breaks them, so every call emits well-formed UTF-8 only. Ill-formed bytes come
// out as U+FFFD, one per maximal ill-formed subpart (as Rust's String::from_utf8_lossy, which
// the Hugging Face decoders use).
//
// Control tokens (BOS, EOS, <|im_end|>, ...) print nothing unless print_special is set; the
// unknown token prints U+FFFD. SentencePiece with a space prefix: the space the encoder put in
// front of the text is dropped from the first piece after BOS and, with strip_leading_space,
// from the first piece of the stream (as SentencePiece's decoder and llama2.c do).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/span.h"
#include "core/status.h"
#include "text/tokenizer.h"

namespace keel::text {

struct DecodeOptions {
  bool print_special = false;       // print the raw text of Control tokens
  bool strip_leading_space = true;  // SentencePiece: drop the prefix space at the stream start
};

class StreamDecoder {
 public:
  StreamDecoder() = default;
  explicit StreamDecoder(const Tokenizer& tok, DecodeOptions options = {}) { reset(tok, options); }
  // Starts a new stream; held-back bytes are dropped.
  void reset(const Tokenizer& tok, DecodeOptions options = {});

  // Most bytes one push() can write: every byte of the longest token plus the held-back ones
  // turned into U+FFFD.
  size_t max_push_bytes() const;

  // Appends the text `id` completes to out[0..*n_written). InvalidArgument for an id out of
  // range, or when `out` cannot hold this token's text (nothing is consumed then; out.size()
  // >= max_push_bytes() always suffices).
  Error push(int32_t id, Span<char> out, size_t* n_written);

  // Ends the stream: held-back bytes become one U+FFFD. Returns bytes written (<= 3), or 0
  // when `out` is smaller than needed.
  size_t flush(Span<char> out);

  // Bytes held back waiting for the rest of a character (0..3).
  size_t pending_bytes() const { return n_pending_; }

 private:
  struct Writer;
  void feed(uint8_t b, Writer& w);

  const Tokenizer* tok_ = nullptr;
  DecodeOptions options_;
  uint8_t pending_[4] = {};
  uint8_t n_pending_ = 0;
  uint8_t need_ = 0;          // length of the sequence being completed
  bool strip_space_ = false;  // drop a leading space from the next piece
};

// Whole-sequence convenience over StreamDecoder: decodes ids and flushes. InvalidArgument when
// `out` is too small (*n_written then counts what was written).
Error decode(const Tokenizer& tok, Span<const int32_t> ids, Span<char> out, size_t* n_written,
             DecodeOptions options = {});

}  // namespace keel::text
