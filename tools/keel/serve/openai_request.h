// Request bodies of the OpenAI API as `keel serve` and `keel batch` take them: /v1/completions
// (`prompt`) and /v1/chat/completions (`messages`), parsed and checked field by field. Every
// refusal names the field, what was expected and what was found.
//
// Fields used: model, prompt, messages (role system | developer | user | assistant; content a
// string or a list of {"type": "text"} parts), max_tokens, max_completion_tokens, temperature,
// top_p, seed, stop, stream, stream_options.include_usage.
// Fields accepted only at the value that changes nothing (refused otherwise, since the result
// would not be what was asked): n = 1, best_of = 1, echo = false, logprobs = false or null,
// top_logprobs = 0, presence_penalty = 0, frequency_penalty = 0, suffix = null or "",
// logit_bias = {} or null, tools = [] or null, tool_choice = "none" or null,
// response_format = {"type": "text"} or null.
// Every other field is ignored, as OpenAI-compatible servers do (clients send `user`,
// `metadata`, `store`, `service_tier`, `parallel_tool_calls` and newer fields freely).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace keel::cli {

enum class Endpoint : uint8_t { Completions, ChatCompletions };
const char* endpoint_path(Endpoint e);

struct ChatMessage {
  std::string role;  // system | user | assistant ("developer" is read as system)
  std::string content;
};

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;                  // empty when the body names none
  std::string prompt;                 // Completions
  std::vector<ChatMessage> messages;  // ChatCompletions
  uint32_t max_tokens = 0;
  float temperature = 1.0f;
  float top_p = 1.0f;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
};

struct RequestLimits {
  uint32_t max_tokens = 2048;                   // most tokens one request may ask for
  uint32_t default_max_tokens_chat = 0;         // chat without max_tokens: this (0 = max_tokens)
  uint32_t default_max_tokens_completion = 16;  // OpenAI's default for /v1/completions
  size_t max_body_bytes = 0;                    // larger bodies: 413 (0 = no limit)
};

constexpr size_t kMaxStopStrings = 4;  // as OpenAI
constexpr size_t kMaxStopBytes = 256;
constexpr size_t kMaxMessages = 1024;
// Arrays and objects nested deeper are refused before they are stored (a chat body needs 4).
constexpr size_t kMaxJsonDepth = 64;

struct RequestError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string code;   // e.g. "invalid_type", "model_not_found"; empty = null
  std::string param;  // the field; empty = null
};

// Byte offset of the first ill-formed UTF-8 sequence in `s`, or npos.
size_t invalid_utf8_offset(std::string_view s);

// Parses and checks `body`. False with `error` set when the request cannot be served as asked:
// 400 for JSON nested deeper than kMaxJsonDepth, numbers beyond a double or integers beyond
// 64 bits (the field named), 413 beyond limits.max_body_bytes. Nothing is thrown.
bool parse_openai_request(std::string_view body, Endpoint endpoint, const RequestLimits& limits, OpenAiRequest& out,
                          RequestError& error);

}  // namespace keel::cli
