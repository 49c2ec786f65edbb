// keel batch: a file of OpenAI request bodies (one JSON object a line) through the engine loop,
// several slots at once; results in input order.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "keel/cli/cli_util.h"
#include "keel/cli/command.h"
#include "keel/cli/option_spec.h"
#include "keel/commands/commands.h"
#include "keel/serve/completion_text.h"
#include "keel/serve/engine_loop.h"
#include "keel/serve/openai_response.h"
#include "keel/serve/prompt.h"
#include "keel/cli/session.h"

namespace keel::cli {
namespace {

using json = nlohmann::json;

const char kHelp[] =
    "usage: keel batch -m MODEL.keel -f REQUESTS.jsonl [--slots N] [--json] [options]\n"
    "\n"
    "Runs a file of requests through the engine loop, N at a time. Each non-blank line is a\n"
    "request body as the OpenAI API has it: `prompt` for a completion, `messages` for a chat\n"
    "(ChatML models), with max_tokens, temperature, top_p, seed, stop (docs/serve.md lists every\n"
    "field). A line that cannot be served gets an error naming its line number; the others run.\n"
    "\n"
    "options:\n"
    "%s"
    "\n"
    "Times are seconds from the start of the run (every request is submitted then; those beyond\n"
    "the free slots wait in the queue). tokens_per_second is a request's generated tokens after\n"
    "the first over the time since its first token; slot_occupancy is the mean fraction of slots\n"
    "busy over the run.\n";

struct BatchOptions {
  std::string path;
  uint32_t slots = 4, max_tokens = 2048;
  bool json = false;
};

const OptionSpec<BatchOptions> kBatchOptions[] = {
    {.long_name = "--file",
     .short_name = "-f",
     .metavar = "FILE",
     .help = "the requests, one JSON object a line (required)",
     .field = &BatchOptions::path},
    {.long_name = "--slots",
     .metavar = "N",
     .help = "sequences decoded side by side (default 4)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &BatchOptions::slots},
    {.long_name = "--max-tokens",
     .metavar = "N",
     .help = "most tokens a request may generate (default 2048); a request\n"
             "without max_tokens gets 16 (completion) or this (chat)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &BatchOptions::max_tokens},
    {.long_name = "--json",
     .help = "one JSON line per request in input order (text, tokens,\n"
             "prompt_tokens, finish_reason, time_to_first_token,\n"
             "tokens_per_second; or line and error), then\n"
             "{\"summary\": {requests, errors, tokens, seconds,\n"
             "tokens_per_second, slot_occupancy}}",
     .kind = OptionKind::Flag,
     .field = &BatchOptions::json},
};

struct Item {
  size_t line = 0;
  Endpoint endpoint = Endpoint::Completions;
  RequestError error;
  bool failed = false;
  std::string text;
  uint32_t prompt_tokens = 0, tokens = 0;
  const char* finish = nullptr;
  double first_token_s = -1, last_token_s = 0;
  std::unique_ptr<CompletionText> completion;
  LoopRequest request;
  uint64_t loop_id = 0;
  bool done = false;
};

}  // namespace

int cmd_batch(int argc, char** argv) {
  SessionOptions so;
  // The command's options, then the session's, fill the help's one %s: the tables' text is
  // never a printf format.
  const std::string options_help = render_help(kBatchOptions) + session_help();
  CommandLine cl("batch", argc, argv, kHelp, &so, options_help.c_str());
  if (cl.help_shown()) return 0;
  BatchOptions bo;
  std::string check_error;
  parse_options(cl.args, kBatchOptions, bo, check_error);
  if (!cl.finish()) return 2;
  if (bo.path.empty()) return usage_error("batch", "missing -f REQUESTS.jsonl");
  if (!check_error.empty()) return usage_error("batch", check_error);
  const std::string& path = bo.path;
  const uint32_t slots = bo.slots, max_tokens = bo.max_tokens;
  const bool as_json = bo.json;
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail("batch", "cannot open " + path);
  Session session;
  std::string error;
  so.slots = slots;
  so.queue_capacity = EngineLoop::plan_queue_capacity(slots, slots);
  if (!session.load(so, error)) return fail("batch", error);
  if (!session.resolve_policy(nullptr, error)) return usage_error("batch", error);
  const uint32_t budget = uint32_t(session.kv_budget(Session::kNeedUnknown));
  if (!session.start(budget, error)) return fail("batch", error);
  HostTokenizer tok;
  if (!tok.init(session.model(), error)) return fail("batch", error);
  const std::string model_id = namespace_from_path(so.model_path);
  const std::string system = default_system_message(session.model());

  RequestLimits limits;
  limits.max_tokens = max_tokens;
  std::random_device seeds;
  std::vector<Item> items;
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Item& it = items.emplace_back();
    it.line = n;
    // A body with `messages` is a chat request; everything else is read as a completion.
    const json probe = json::parse(line, nullptr, false);
    it.endpoint = probe.is_object() && probe.contains("messages") ? Endpoint::ChatCompletions : Endpoint::Completions;
    OpenAiRequest r;
    if (!parse_openai_request(line, it.endpoint, limits, r, it.error)) {
      it.failed = true;
      continue;
    }
    if (!r.model.empty() && r.model != model_id) {
      it.failed = true;
      it.error.message = "model '" + r.model + "' is not this run's; the model is '" + model_id + "'";
      it.error.code = "model_not_found";
      it.error.param = "model";
      continue;
    }
    if (!build_prompt(r, tok, system, it.request.prompt, error)) {
      it.failed = true;
      it.error.message = error;
      continue;
    }
    it.request.sampler = request_sampler(r, (uint64_t(seeds()) << 32) | seeds());
    it.request.max_tokens = r.max_tokens;
    it.prompt_tokens = uint32_t(it.request.prompt.size());
    it.completion = std::make_unique<CompletionText>(tok.tokenizer(), r.stop);
  }

  Runtime& rt = session.runtime();
  EngineLoop loop(rt, slots);
  std::vector<size_t> by_id;  // loop id -> item index (ids count from 1)
  by_id.push_back(SIZE_MAX);
  std::vector<LoopEvent> events;
  size_t next = 0;
  uint64_t tokens = 0;
  double busy_slot_seconds = 0;
  const double t0 = now_seconds();
  for (;;) {
    for (; next < items.size(); ++next) {
      Item& it = items[next];
      if (it.failed) continue;
      SubmitResult s = loop.submit(it.request);
      if (s.kind == SubmitResult::QueueFull) break;
      if (s.kind == SubmitResult::Refused) {
        it.failed = true;
        it.error.message = s.error;
        it.error.code = "context_length_exceeded";
        continue;
      }
      it.request.prompt = {};
      by_id.resize(s.id + 1, SIZE_MAX);
      by_id[s.id] = next;
    }
    if (loop.idle() && next == items.size()) break;
    const double step_t0 = now_seconds();
    const uint32_t busy = loop.active() + uint32_t(std::min<size_t>(loop.queued(), loop.slots() - loop.active()));
    events.clear();
    loop.step(events);
    const double t = now_seconds();
    busy_slot_seconds += (t - step_t0) * busy;
    for (const LoopEvent& ev : events) {
      Item& it = items[by_id[ev.id]];
      if (ev.token >= 0) {
        ++it.tokens;
        ++tokens;
        if (it.first_token_s < 0) it.first_token_s = t - t0;
        it.last_token_s = t - t0;
        if (it.completion->push(ev.token, it.text)) {
          loop.cancel(ev.id);
          it.finish = "stop";
          it.done = true;
          continue;
        }
      }
      if (ev.finish == FinishReason::Error) {
        it.failed = true;
        it.error.type = "server_error";
        it.error.message = ev.error;
      } else if (ev.finish != FinishReason::None) {
        const bool stopped = it.completion->finish(it.text);
        it.finish = openai_finish_reason(ev.finish, stopped);
        it.done = true;
      }
    }
  }
  const double seconds = now_seconds() - t0;

  size_t served = 0, errors = 0;
  for (const Item& it : items) {
    if (it.failed) {
      ++errors;
      const std::string err = error_body(it.error);
      if (as_json)
        printf("{\"line\": %zu, %s\n", it.line, err.substr(1).c_str());
      else
        printf("[line %zu] error: %s\n", it.line, it.error.message.c_str());
      continue;
    }
    ++served;
    const double decode_s = it.last_token_s - it.first_token_s;
    const double tps = it.tokens > 1 && decode_s > 0 ? (it.tokens - 1) / decode_s : 0;
    if (as_json) {
      json j = {{"line", it.line},
                {"text", it.text},
                {"tokens", it.tokens},
                {"prompt_tokens", it.prompt_tokens},
                {"finish_reason", it.finish},
                {"time_to_first_token", it.first_token_s < 0 ? json(nullptr) : json(it.first_token_s)},
                {"tokens_per_second", tps}};
      printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    } else {
      printf("[line %zu] %s\n", it.line, it.text.c_str());
    }
  }
  const double occupancy = seconds > 0 ? busy_slot_seconds / (seconds * slots) : 0;
  if (as_json) {
    json s = {{"requests", served},
              {"errors", errors},
              {"tokens", tokens},
              {"seconds", seconds},
              {"tokens_per_second", seconds > 0 ? tokens / seconds : 0},
              {"slot_occupancy", occupancy}};
    printf("%s\n", json{{"summary", s}}.dump().c_str());
  } else {
    fprintf(stderr, "[%zu requests, %zu errors, %llu tokens in %.2f s (%.1f t/s), %u slots, occupancy %.2f]\n", served,
            errors, (unsigned long long)tokens, seconds, seconds > 0 ? tokens / seconds : 0.0, slots, occupancy);
  }
  return 0;
}

}  // namespace keel::cli
