// Reader for a Hugging Face model directory: config.json (llama, mistral, qwen2, gemma3_text,
// gemma3), safetensors weights (one file, an index with shards, or every *.safetensors in the
// directory), tokenizer.json and, when present, tokenizer_config.json / chat_template.jinja.
// Each is read by its own file: hf_config.cpp, hf_safetensors.cpp, hf_tensors.cpp (names,
// shapes and order of the weights) and hf_tokenizer.cpp, with the JSON helpers of hf_json.cpp.
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "convert/hf_config.h"
#include "convert/hf_json.h"
#include "convert/hf_safetensors.h"
#include "convert/hf_tensors.h"
#include "convert/hf_tokenizer.h"
#include "convert/source_model.h"

namespace keel::convert {
namespace hf {
namespace {

std::optional<SourceModel> read_dir(const std::string& dir, std::string& error) {
  const std::string config_path = dir + "/config.json";
  if (!is_file(config_path)) {
    error = "config.json not found in '" + dir + "'";
    return std::nullopt;
  }
  json config;
  if (!parse_json_file(config_path, config, error)) return std::nullopt;
  SourceModel m;
  ConfigIds ids;
  if (!parse_config(config, m.hyper, ids, error)) return std::nullopt;

  if (!is_file(dir + "/tokenizer.json")) {
    error = "tokenizer.json not found in '" + dir + "' (tokenizer.model alone is not supported)";
    return std::nullopt;
  }
  json tcfg;
  if (!read_tokenizer_files(dir, ids, m.hyper.vocab_size, m.tokenizer, tcfg, error)) return std::nullopt;
  m.chat_template = chat_template(tcfg, dir);

  std::vector<StTensor> st;
  std::string what;
  if (!read_weights(dir, st, what, error)) return std::nullopt;
  if (!build_tensors(st, m, error)) return std::nullopt;

  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  const size_t slash = base.find_last_of('/');
  if (slash != std::string::npos) base = base.substr(slash + 1);
  const json* mt = member(config, "model_type");
  m.source_description = "Hugging Face " + mt->get<std::string>() + " (" + what + "): " + base;
  return m;
}

}  // namespace
}  // namespace hf

std::optional<SourceModel> read_hf_dir(const std::string& dir, std::string& error) {
  // Every JSON access of the hf_*.cpp readers checks types first; this only turns a missed case
  // into an error.
  try {
    return hf::read_dir(dir, error);
  } catch (const std::exception& e) {
    error = "Hugging Face directory '" + dir + "': " + e.what();
    return std::nullopt;
  }
}

}  // namespace keel::convert
