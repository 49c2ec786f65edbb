// Response bodies in the OpenAI API's shapes: whole completions with `usage`, the chunks of a
// stream (server-sent events, `data: {...}` then `data: [DONE]`), model lists and errors
// ({"error": {"message", "type", "param", "code"}}).
#pragma once

#include <cstdint>
#include <string>

#include "keel/serve/engine_loop.h"
#include "keel/serve/openai_request.h"

namespace keel::cli {

struct CompletionIds {
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  std::string model;
  int64_t created = 0;  // Unix seconds
};

struct Usage {
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
};

// "stop" for an end token or a stop string, "length" for max_tokens or a full KV budget.
const char* openai_finish_reason(FinishReason r, bool stop_string);

std::string completion_body(Endpoint e, const CompletionIds& ids, const std::string& text, const char* finish_reason,
                            const Usage& usage);
// One event of a stream: `text` as a delta (the first chat chunk also carries the role); a
// non-null finish_reason closes the choice.
std::string stream_chunk(Endpoint e, const CompletionIds& ids, const std::string& text, const char* finish_reason,
                         bool first);
// The last chunk when stream_options.include_usage is set: no choices, the usage.
std::string stream_usage_chunk(Endpoint e, const CompletionIds& ids, const Usage& usage);
std::string sse_event(const std::string& json);
extern const char kSseDone[];

std::string error_body(const RequestError& e);
std::string error_body(int status, const std::string& message, const std::string& type, const std::string& code);
std::string models_body(const std::string& model, int64_t created);

}  // namespace keel::cli
