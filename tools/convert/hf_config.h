// config.json of a Hugging Face model directory: the hyper-parameters of a llama, mistral, qwen2,
// gemma3_text or gemma3 (multimodal; its text_config is read) model, and the special token ids
// it states.
#pragma once

#include <cstdint>
#include <string>

#include "convert/hf_json.h"
#include "convert/source_model.h"

namespace keel::convert::hf {

// The special token ids config.json states; -1 where it states none. tokenizer_config.json's
// token texts take precedence over them (hf_tokenizer.cpp).
struct ConfigIds {
  int64_t bos = -1, eos = -1, pad = -1;
};

// Fills `h` and `ids` from a parsed config.json; false with `error` ("config.json: ...") naming
// the key, what it holds and what was expected.
bool parse_config(const json& c, SourceHyper& h, ConfigIds& ids, std::string& error);

}  // namespace keel::convert::hf
