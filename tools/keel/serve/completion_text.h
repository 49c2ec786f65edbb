// The text of one completion as it streams: tokens through text::StreamDecoder (whole UTF-8
// characters only), then the stop strings. A stop string is matched on the decoded text, may
// span tokens, and is cut from the output with everything after it, as OpenAI does; text that
// could still become the start of a stop string is held back until it cannot.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/stream_decoder.h"
#include "text/tokenizer.h"

namespace keel::cli {

class CompletionText {
 public:
  CompletionText(const text::Tokenizer& tok, std::vector<std::string> stops);
  // Appends to `out` the text that is now final. True when a stop string matched: the
  // completion ends there (later tokens must not be pushed).
  bool push(int32_t token, std::string& out);
  // The end of the stream (not stopped): the held-back text, and U+FFFD for an incomplete
  // character. True if that completed a stop string.
  bool finish(std::string& out);
  bool stopped() const { return stopped_; }

 private:
  bool release(std::string& out, bool final);

  text::StreamDecoder decoder_;
  std::vector<char> piece_;
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace keel::cli
