// The tokenizer of a Hugging Face model directory: tokenizer.json (a BPE model, byte-level or
// SentencePiece-style with byte fallback) and, when present, tokenizer_config.json (special
// token texts, add_bos_token, the chat template) or chat_template.jinja.
#pragma once

#include <cstdint>
#include <string>

#include "convert/hf_config.h"
#include "convert/hf_json.h"
#include "convert/source_model.h"

namespace keel::convert::hf {

// dir/tokenizer.json and, when present, dir/tokenizer_config.json into `tok`, with config.json's
// special ids `ids` and its `vocab_rows` embedding rows (0: none to match). `tcfg` receives
// tokenizer_config.json, an empty object when there is none. Callers check first that
// tokenizer.json exists, each with its own message. False with `error` naming the file and what
// it holds.
bool read_tokenizer_files(const std::string& dir, const ConfigIds& ids, uint32_t vocab_rows, SourceTokenizer& tok,
                          json& tcfg, std::string& error);

// tokenizer_config.json's chat_template (one string, or a list of named templates: the
// "default" one, else the first), else dir/chat_template.jinja, else empty.
std::string chat_template(const json& tcfg, const std::string& dir);

}  // namespace keel::convert::hf
