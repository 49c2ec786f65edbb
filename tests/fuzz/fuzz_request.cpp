// libFuzzer target: any byte string as the body of a POST to /v1/completions and to
// /v1/chat/completions goes through the functions keel serve answers it with
// (parse_openai_request, then error_body for a refusal). Nothing may escape as an exception; a
// refusal is a 400 or 413 whose answer is OpenAI-shaped JSON naming the problem; an accepted
// request holds only what the parser promises to let through.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "keel/serve/openai_request.h"
#include "keel/serve/openai_response.h"

namespace {

using keel::cli::Endpoint;
using keel::cli::OpenAiRequest;
using keel::cli::RequestError;
using keel::cli::RequestLimits;

[[noreturn]] void fail(const char* what, std::string_view detail = {}) {
  fprintf(stderr, "fuzz_request: %s%s%.*s\n", what, detail.empty() ? "" : ": ", int(detail.size()), detail.data());
  abort();
}

bool utf8(std::string_view s) { return keel::cli::invalid_utf8_offset(s) == std::string_view::npos; }

// The refusal's status and the answer keel serve would send for it.
void check_refusal(const RequestError& e) {
  if (e.http_status != 400 && e.http_status != 413) fail("a refusal is neither 400 nor 413", e.message);
  if (e.message.empty()) fail("a refusal without a message");
  if (e.type != "invalid_request_error") fail("a client error typed otherwise", e.type);
  if (!utf8(e.message)) fail("a refusal message that is not UTF-8 (the answer would carry U+FFFD)", e.message);
  const std::string body = keel::cli::error_body(e);
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("error") || !j["error"].is_object()) fail("error body is not JSON", body);
  const nlohmann::json& err = j["error"];
  if (!err.contains("message") || err["message"] != e.message) fail("error body lost the message", body);
  if (!err.contains("param") || !err.contains("code") || !err.contains("type")) fail("error body shape", body);
}

void check_accepted(const OpenAiRequest& r, Endpoint e, const RequestLimits& limits) {
  if (r.endpoint != e) fail("the request names another endpoint");
  if (!utf8(r.model) || !utf8(r.prompt)) fail("accepted text that is not UTF-8");
  if (e == Endpoint::Completions) {
    if (!r.messages.empty()) fail("a completion with messages");
  } else {
    if (r.messages.empty() || r.messages.size() > keel::cli::kMaxMessages) fail("message count out of bounds");
    if (!r.prompt.empty()) fail("a chat request with a prompt");
    for (const auto& m : r.messages) {
      if (m.role != "system" && m.role != "user" && m.role != "assistant") fail("a role let through", m.role);
      if (!utf8(m.content)) fail("message content that is not UTF-8");
    }
  }
  if (r.max_tokens < 1 || r.max_tokens > limits.max_tokens) fail("max_tokens out of bounds");
  if (!(r.temperature >= 0.0f && r.temperature <= 2.0f)) fail("temperature out of bounds");
  if (!(r.top_p >= 0.0f && r.top_p <= 1.0f)) fail("top_p out of bounds");
  if (r.stop.size() > keel::cli::kMaxStopStrings) fail("too many stop strings");
  for (const auto& s : r.stop) {
    if (s.empty() || s.size() > keel::cli::kMaxStopBytes || !utf8(s)) fail("a stop string out of bounds", s);
  }
}

void one(std::string_view body, Endpoint e) {
  // keel serve's defaults (--max-tokens 2048, --max-body-bytes 1 MiB).
  RequestLimits limits;
  limits.max_body_bytes = 1 << 20;
  OpenAiRequest r;
  RequestError err;
  if (keel::cli::parse_openai_request(body, e, limits, r, err))
    check_accepted(r, e, limits);
  else
    check_refusal(err);

  // A limit below the body's size refuses it whatever it holds: 413, or 400 for what is checked
  // first (an empty or ill-formed body).
  if (body.size() > 1) {
    limits.max_body_bytes = body.size() - 1;
    RequestError small;
    if (keel::cli::parse_openai_request(body, e, limits, r, small)) fail("a body past max_body_bytes accepted");
    check_refusal(small);
    if (small.http_status != 413 && utf8(body)) fail("a body past max_body_bytes not 413", small.message);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  try {
    one(body, Endpoint::Completions);
    one(body, Endpoint::ChatCompletions);
  } catch (const std::exception& ex) {
    fail("an exception escaped the request parser", ex.what());
  }
  return 0;
}
