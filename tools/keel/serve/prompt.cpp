#include "keel/serve/prompt.h"

#include "core/arena.h"

namespace keel::cli {

bool HostTokenizer::init(const Model& model, std::string& error) {
  const fb::Tokenizer* t = model.meta()->tokenizer();
  table_.assign(text::Tokenizer::arena_bytes(t) + 64, 0);
  Arena arena(table_.data(), table_.size());
  const Error e = tok_.init(t, arena);
  if (!e.ok()) {
    error = std::string("tokenizer: ") + e.message();
    return false;
  }
  return true;
}

bool HostTokenizer::encode(const std::string& text, bool add_bos, bool parse_special, std::vector<int32_t>& ids,
                           std::string& error) const {
  std::vector<uint8_t> scratch(text::Tokenizer::scratch_bytes() + 64);
  Arena arena(scratch.data(), scratch.size());
  text::EncodeOptions eo;
  eo.add_bos = add_bos;
  eo.parse_special = parse_special;
  size_t n = 0;
  Error e = tok_.encode(text.data(), text.size(), eo, Span<int32_t>(), &n, arena);
  if (!e.ok() && e.status() != Status::PromptTooLong) {
    error = std::string("tokenizer: ") + e.message();
    return false;
  }
  const size_t at = ids.size();
  ids.resize(at + n);
  e = tok_.encode(text.data(), text.size(), eo, Span<int32_t>(ids.data() + at, n), &n, arena);
  if (!e.ok()) {
    error = std::string("tokenizer: ") + e.message();
    return false;
  }
  return true;
}

std::string default_system_message(const Model& m) {
  const auto* t = m.meta()->chat_template();
  if (!t) return "";
  const std::string s = t->str();
  const std::string key = "<|im_start|>system\n";
  const size_t at = s.find(key);
  if (at == std::string::npos) return "";
  const size_t end = s.find("<|im_end|>", at);
  if (end == std::string::npos) return "";
  const std::string body = s.substr(at + key.size(), end - at - key.size());
  // A template that interpolates the message ({{ ... }}) has no fixed default.
  return body.find("{{") == std::string::npos && body.find("{%") == std::string::npos ? body : "";
}

bool build_prompt(const OpenAiRequest& r, const HostTokenizer& tok, const std::string& default_system,
                  std::vector<int32_t>& ids, std::string& error) {
  ids.clear();
  if (r.endpoint == Endpoint::Completions) return tok.encode(r.prompt, true, false, ids, error);
  if (!tok.has_chat_template()) {
    error =
        "this model has no chat template (its tokenizer has no <|im_start|>/<|im_end|> tokens); use "
        "/v1/completions";
    return false;
  }
  bool first = true;
  auto message = [&](const std::string& role, const std::string& content) {
    const bool ok = tok.encode("<|im_start|>" + role + "\n", first, true, ids, error) &&
                    tok.encode(content, false, false, ids, error) &&
                    tok.encode("<|im_end|>\n", false, true, ids, error);
    first = false;
    return ok;
  };
  if (r.messages.front().role != "system" && !default_system.empty() && !message("system", default_system))
    return false;
  for (const ChatMessage& m : r.messages) {
    if (!message(m.role, m.content)) return false;
  }
  return tok.encode("<|im_start|>assistant\n", false, true, ids, error);
}

text::SamplerConfig request_sampler(const OpenAiRequest& r, uint64_t fallback_seed) {
  text::SamplerConfig c;
  c.temperature = r.temperature;
  c.top_p = r.top_p;
  c.seed = r.seed ? *r.seed : fallback_seed;
  return c;
}

}  // namespace keel::cli
