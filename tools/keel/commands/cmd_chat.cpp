// keel chat: a conversation in the model's turn markup (ChatML or Gemma's), one turn per line of
// input; the KV cache carries the conversation from turn to turn.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "keel/cli/cli_util.h"
#include "keel/cli/command.h"
#include "keel/cli/option_spec.h"
#include "keel/commands/commands.h"
#include "keel/cli/generate.h"
#include "keel/serve/prompt.h"
#include "keel/cli/session.h"

namespace keel::cli {
namespace {

const char kHelp[] =
    "usage: keel chat -m MODEL.keel [options]\n"
    "\n"
    "Chat with a ChatML model (<|im_start|>role ... <|im_end|>) or a Gemma model\n"
    "(<start_of_turn>user|model ... <end_of_turn>; it has no system role, so a system message\n"
    "opens the first user turn). Each line read from stdin is a user turn; the answer streams to\n"
    "stdout. On a terminal a '> ' prompt is shown; an empty line or end of input ends the chat.\n"
    "With -p, answers that one message and exits.\n"
    "\n"
    "options:\n"
    "%s"
    "\n"
    "The KV policy and budget default to the model's (keel info shows them): the conversation\n"
    "goes on for any length within the budget. With --kv-policy full it restarts when the budget\n"
    "is reached.\n";

struct ChatOptions {
  std::string once, system;
  bool has_once = false, has_system = false;
  uint32_t n_predict = 256;
  bool stats = false;
};

// The sampler's options are keel run's, listed there; here only their defaults.
const OptionSpec<ChatOptions> kChatOptions[] = {
    {.long_name = "--prompt",
     .short_name = "-p",
     .metavar = "TEXT",
     .help = "one user message, then exit",
     .field = &ChatOptions::once,
     .given = &ChatOptions::has_once},
    {.long_name = "--system",
     .metavar = "TEXT",
     .help = "system message (default: the one in the model's chat template,\n"
             "else none)",
     .field = &ChatOptions::system,
     .given = &ChatOptions::has_system},
    {.long_name = "--n-predict",
     .short_name = "-n",
     .metavar = "N",
     .help = "most tokens per answer (default 256)",
     .kind = OptionKind::U32,
     .field = &ChatOptions::n_predict},
};
// After the sampler line.
const OptionSpec<ChatOptions> kChatOutputOptions[] = {
    {.long_name = "--stats",
     .help = "print a timing and memory summary after each answer (stderr)",
     .kind = OptionKind::Flag,
     .field = &ChatOptions::stats},
};
const char kSamplerLine[] =
    "  --temp T --top-k K --top-p P --min-p P --repeat-penalty R --seed S   as for keel run\n"
    "                         (defaults 0.2, 40, 0.9, 0.05, 1.1, 42)\n";

// The markup of a turn, from the texts of the tokenizer's turn markers.
struct ChatFormat {
  std::string start, end;
  bool gemma = false;  // <start_of_turn>: roles user and model, no system role

  // What goes before the first user message for `system` (empty: nothing).
  std::string system_prefix(const std::string& system) const {
    if (system.empty()) return "";
    return gemma ? system + "\n\n" : start + "system\n" + system + end + "\n";
  }
  // A user turn and the opening of the answer; `prefix` is system_prefix() on the first turn.
  std::string user_turn(const std::string& prefix, const std::string& line) const {
    if (gemma) return start + "user\n" + prefix + line + end + "\n" + start + "model\n";
    return prefix + start + "user\n" + line + end + "\n" + start + "assistant\n";
  }
};

}  // namespace

int cmd_chat(int argc, char** argv) {
  SessionOptions so;
  // The command's options, then the session's, fill the help's one %s: the tables' text is
  // never a printf format.
  const std::string options_help =
      render_help(kChatOptions) + kSamplerLine + render_help(kChatOutputOptions) + session_help();
  CommandLine cl("chat", argc, argv, kHelp, &so, options_help.c_str());
  if (cl.help_shown()) return 0;
  ChatOptions co;
  std::string no_checks;  // every value of these options' types is one chat takes
  parse_options(cl.args, kChatOptions, co, no_checks);
  text::SamplerConfig sc = sampler_defaults(0.2f, 0.9f, 1.1f);
  parse_sampler_options(cl.args, sc);
  parse_options(cl.args, kChatOutputOptions, co, no_checks);
  if (!cl.finish()) return 2;
  const bool has_once = co.has_once, has_system = co.has_system, stats = co.stats;
  const uint32_t n_predict = co.n_predict;
  std::string &once = co.once, &system = co.system;

  Session session;
  std::string error;
  if (!session.load(so, error)) return fail("chat", error);
  const Model& model = session.model();
  const fb::Tokenizer* tok = model.meta()->tokenizer();
  if (tok->im_start_id() < 0 || tok->im_end_id() < 0) {
    return fail("chat",
                "the model's tokenizer has no turn markers (<|im_start|>/<|im_end|> or "
                "<start_of_turn>/<end_of_turn>); chat needs a chat model (use keel run for plain completion)");
  }
  ChatFormat fmt;
  fmt.start = tok->tokens()->Get(uint32_t(tok->im_start_id()))->str();
  fmt.end = tok->tokens()->Get(uint32_t(tok->im_end_id()))->str();
  fmt.gemma = fmt.start == "<start_of_turn>";
  if (!has_system) system = default_system_message(model);
  if (!session.resolve_policy(nullptr, error)) return usage_error("chat", error);
  const bool full = session.policy() == KvPolicyKind::Full;
  const uint32_t budget = uint32_t(session.kv_budget(Session::kNeedUnknown));
  if (!session.start(budget, error)) return fail("chat", error);
  Runtime& rt = session.runtime();
  Error e = rt.set_sampler(0, sc);
  if (!e.ok()) return fail("chat", e.message());
  // Ends at the turn's end marker or EOS (the defaults), which stays in the cache for the next turn.
  GenerateOptions go;
  go.max_tokens = n_predict;
  go.feed_last = true;

  const bool interactive = !has_once && isatty(STDIN_FILENO);
  std::string pending = fmt.system_prefix(system);
  bool fresh = true;
  for (;;) {
    std::string line;
    if (has_once) {
      if (!fresh && !once.empty()) break;
      line = once;
      once.clear();
    } else {
      if (interactive) {
        printf("> ");
        fflush(stdout);
      }
      if (!std::getline(std::cin, line) || line.empty()) break;
    }
    if (line.empty()) break;
    std::string turn = fmt.user_turn(pending, line);
    // Turns after the first follow the end token already in the cache.
    if (!fresh) turn = "\n" + turn;
    std::vector<int32_t> ids;
    if (!encode_text(model, turn, fresh, true, ids, error)) return fail("chat", error);
    if (full && rt.sequence_length(0) + ids.size() + 1 > budget) {
      fprintf(stderr, "[conversation reached the KV budget of %u tokens; starting over]\n", budget);
      (void)rt.reset(0);
      fresh = true;
      turn = fmt.user_turn(fmt.system_prefix(system), line);
      if (!encode_text(model, turn, true, true, ids, error)) return fail("chat", error);
      if (ids.size() + 1 > budget)
        return fail("chat", "one message of " + std::to_string(ids.size()) +
                                " tokens exceeds the KV budget; raise --kv-budget");
    }
    Generation g;
    if (!generate(rt, ids, go, stdout, g, error)) return fail("chat", error);
    const double prefill_s = g.result.prefill_seconds;
    pending.clear();
    fresh = false;
    printf("\n");
    fflush(stdout);
    if (g.result.finish == FinishReason::KvFull) {
      fprintf(stderr, "[KV budget of %u tokens reached; the next message starts a new conversation]\n", budget);
      (void)rt.reset(0);
      fresh = true;
      pending = fmt.system_prefix(system);
    }
    if (stats) {
      const MemoryPlan& p = session.plan();
      fprintf(stderr,
              "[prompt %zu tokens in %.0f ms (%.1f t/s), answer %zu tokens at %.1f t/s; KV %llu/%u tokens; "
              "weights %s mapped, arenas %s + %s, peak RSS %s]\n",
              ids.size(), prefill_s * 1000, ids.size() / prefill_s, g.ids.size(),
              g.result.tokens_decoded ? g.result.tokens_decoded / g.result.decode_seconds : 0.0,
              (unsigned long long)rt.sequence_length(0), budget, human_bytes(model.weights_bytes()).c_str(),
              human_bytes(p.persistent_bytes).c_str(), human_bytes(p.scratch_bytes).c_str(),
              human_bytes(port::peak_rss_bytes()).c_str());
    }
    if (has_once) break;
  }
  return 0;
}

}  // namespace keel::cli
