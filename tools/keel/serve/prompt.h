// From an OpenAI request to the engine's input: the model's tokenizer in host memory (shared,
// read-only, so HTTP threads tokenize in parallel with the engine), the ChatML rendering of
// `messages`, and the sampler settings of a request.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "keel/serve/openai_request.h"
#include "model/model.h"
#include "text/sampler.h"
#include "text/tokenizer.h"

namespace keel::cli {

class HostTokenizer {
 public:
  bool init(const Model& model, std::string& error);
  // Appends the ids of `text`. parse_special: <|im_start|>-style control texts become their
  // tokens (template text); off for what a client wrote.
  bool encode(const std::string& text, bool add_bos, bool parse_special, std::vector<int32_t>& ids,
              std::string& error) const;
  const text::Tokenizer& tokenizer() const { return tok_; }
  bool has_chat_template() const { return tok_.im_start_id() >= 0 && tok_.im_end_id() >= 0; }

 private:
  std::vector<uint8_t> table_;
  text::Tokenizer tok_;
};

// The system message a ChatML template inserts when the conversation has none ("" if none).
std::string default_system_message(const Model& model);

// The prompt of a request: `prompt` as it is (with BOS when the tokenizer asks for it), or the
// messages rendered as ChatML — <|im_start|>ROLE\nCONTENT<|im_end|>\n per message, the
// template's default system message first when there is none, then <|im_start|>assistant\n.
// Message contents are encoded as text: a client's "<|im_end|>" is not a control token.
bool build_prompt(const OpenAiRequest& r, const HostTokenizer& tok, const std::string& default_system,
                  std::vector<int32_t>& ids, std::string& error);

// The request's sampling: temperature and top_p as given (temperature 0 = greedy), seed as given
// or `fallback_seed`, nothing else (no top-k, min-p or repetition penalty: OpenAI has none).
text::SamplerConfig request_sampler(const OpenAiRequest& r, uint64_t fallback_seed);

}  // namespace keel::cli
