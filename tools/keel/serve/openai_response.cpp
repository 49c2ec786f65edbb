#include "keel/serve/openai_response.h"

#include <nlohmann/json.hpp>

namespace keel::cli {

using json = nlohmann::json;

namespace {

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

json reason(const char* r) { return r ? json(r) : json(nullptr); }

json header(Endpoint e, const CompletionIds& ids, bool chunk) {
  const char* object = e == Endpoint::Completions ? "text_completion"
                       : chunk                    ? "chat.completion.chunk"
                                                  : "chat.completion";
  return {{"id", ids.id},
          {"object", object},
          {"created", ids.created},
          {"model", ids.model},
          {"system_fingerprint", nullptr}};
}

// The text is what the tokens decode to, which may end in U+FFFD but is always valid UTF-8.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

const char kSseDone[] = "data: [DONE]\n\n";

const char* openai_finish_reason(FinishReason r, bool stop_string) {
  if (stop_string) return "stop";
  // Cancelled and failed requests are answered with an error body, not a finish reason.
  const char* name = finish_reason_openai(r);
  return name ? name : "length";
}

std::string completion_body(Endpoint e, const CompletionIds& ids, const std::string& text, const char* finish_reason,
                            const Usage& usage) {
  json j = header(e, ids, false);
  json choice = {{"index", 0}, {"finish_reason", reason(finish_reason)}, {"logprobs", nullptr}};
  if (e == Endpoint::Completions)
    choice["text"] = text;
  else
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  j["choices"] = json::array({choice});
  j["usage"] = usage_json(usage);
  return dump(j);
}

std::string stream_chunk(Endpoint e, const CompletionIds& ids, const std::string& text, const char* finish_reason,
                         bool first) {
  json j = header(e, ids, true);
  json choice = {{"index", 0}, {"finish_reason", reason(finish_reason)}, {"logprobs", nullptr}};
  if (e == Endpoint::Completions) {
    choice["text"] = text;
  } else {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && !finish_reason)) delta["content"] = text;
    choice["delta"] = delta;
  }
  j["choices"] = json::array({choice});
  return dump(j);
}

std::string stream_usage_chunk(Endpoint e, const CompletionIds& ids, const Usage& usage) {
  json j = header(e, ids, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(usage);
  return dump(j);
}

std::string sse_event(const std::string& json_text) { return "data: " + json_text + "\n\n"; }

std::string error_body(const RequestError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return dump(json{{"error", err}});
}

std::string error_body(int status, const std::string& message, const std::string& type, const std::string& code) {
  RequestError e;
  e.http_status = status;
  e.message = message;
  e.type = type;
  e.code = code;
  return error_body(e);
}

std::string models_body(const std::string& model, int64_t created) {
  json m = {{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "keel"}};
  return dump(json{{"object", "list"}, {"data", json::array({m})}});
}

}  // namespace keel::cli
