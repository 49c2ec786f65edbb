// keel run: prompt in, generated text streamed out.
#include <unistd.h>

#include <cstdio>

#include "convert/source_file.h"
#include "keel/cli/cli_util.h"
#include "keel/cli/command.h"
#include "keel/cli/option_spec.h"
#include "keel/commands/commands.h"
#include "keel/cli/session.h"
#include "keel/cli/generate.h"

namespace keel::cli {
namespace {

const char kHelpHead[] =
    "usage: keel run -m MODEL.keel (-p TEXT | -f FILE) [options]\n"
    "\n"
    "Generates a continuation of the prompt and streams it to stdout.\n"
    "\n"
    "options:\n";
const char kHelpTail[] =
    "%s"
    "\n"
    "The KV policy defaults to the model's (keel info shows it). With --kv-policy full the budget\n"
    "defaults to prompt + N tokens (at most the trained context) and a longer sequence is refused;\n"
    "the other policies keep the cache within --kv-budget (default: the model's) for any length.\n";

struct RunOptions {
  std::string prompt, prompt_file;
  bool has_prompt = false, has_file = false;
  uint32_t n_predict = 128;
  bool json = false;
};

// The prompt's options; the sampler's come after them in the help, then the output's.
const OptionSpec<RunOptions> kPromptOptions[] = {
    {.long_name = "--prompt",
     .short_name = "-p",
     .metavar = "TEXT",
     .help = "the prompt (special tokens such as <|im_start|> are recognized)",
     .field = &RunOptions::prompt,
     .given = &RunOptions::has_prompt},
    {.long_name = "--file",
     .short_name = "-f",
     .metavar = "FILE",
     .help = "read the prompt from FILE",
     .field = &RunOptions::prompt_file,
     .given = &RunOptions::has_file},
    {.long_name = "--n-predict",
     .short_name = "-n",
     .metavar = "N",
     .help = "tokens to generate (default 128); stops early at end of sequence",
     .kind = OptionKind::U32,
     .field = &RunOptions::n_predict},
};
const OptionSpec<RunOptions> kOutputOptions[] = {
    {.long_name = "--json",
     .help = "print {text, tokens, prefill_tps, decode_tps, memory} instead",
     .kind = OptionKind::Flag,
     .field = &RunOptions::json},
};

}  // namespace

int cmd_run(int argc, char** argv) {
  SessionOptions so;
  const std::string help =
      kHelpHead + render_help(kPromptOptions) + sampler_help() + render_help(kOutputOptions) + kHelpTail;
  CommandLine cl("run", argc, argv, help.c_str(), &so);
  if (cl.help_shown()) return 0;
  RunOptions ro;
  std::string no_checks;  // every value of these options' types is one run takes
  parse_options(cl.args, kPromptOptions, ro, no_checks);
  text::SamplerConfig sc = sampler_defaults(0.8f, 0.95f);
  parse_sampler_options(cl.args, sc);
  parse_options(cl.args, kOutputOptions, ro, no_checks);
  if (!cl.finish()) return 2;
  const bool has_prompt = ro.has_prompt, has_file = ro.has_file, json = ro.json;
  const uint32_t n_predict = ro.n_predict;
  std::string& prompt = ro.prompt;
  if (has_prompt == has_file) return usage_error("run", "give exactly one of -p TEXT or -f FILE");
  if (has_file) {
    std::string error;
    if (!convert::read_file(ro.prompt_file, prompt, error)) return fail("run", "prompt file: " + error);
  }

  Session session;
  std::string error;
  if (!session.load(so, error)) return fail("run", error);
  std::vector<int32_t> ids;
  if (!encode_text(session.model(), prompt, true, true, ids, error)) return fail("run", error);
  if (ids.empty()) return fail("run", "the prompt encodes to no tokens; give a non-empty prompt");
  if (!session.resolve_policy(nullptr, error)) return usage_error("run", error);
  const uint32_t ctx = session.model().shape().context_length;
  uint64_t need = ids.size() + uint64_t(n_predict);
  const bool full = session.policy() == KvPolicyKind::Full;
  const uint32_t budget = uint32_t(session.kv_budget(need < ctx ? need : ctx));
  if (full && ids.size() > budget) {
    return fail("run", "prompt of " + std::to_string(ids.size()) + " tokens exceeds the KV budget of " +
                           std::to_string(budget) + " tokens (policy full); raise --kv-budget");
  }
  if (!session.start(budget, error)) return fail("run", error);
  Runtime& rt = session.runtime();
  GenerateOptions go;
  go.max_tokens = n_predict;
  go.sampler = &sc;
  Generation g;
  if (!generate(rt, ids, go, json ? nullptr : stdout, g, error)) return fail("run", error);
  if (!json) printf("\n");
  const uint32_t generated = g.result.tokens_generated, decoded = g.result.tokens_decoded;
  const double decode_time = g.result.decode_seconds;
  const std::string& out_text = g.text;
  const std::vector<int32_t>& out_ids = g.ids;
  const double prefill_tps = ids.size() / g.result.prefill_seconds;
  const double decode_tps = decoded ? decoded / decode_time : 0.0;
  const MemoryPlan& p = session.plan();
  if (json) {
    printf("{\"text\":%s,\"tokens\":[", json_string(out_text).c_str());
    for (size_t i = 0; i < out_ids.size(); ++i) printf("%s%d", i ? "," : "", out_ids[i]);
    printf(
        "],\"prompt_tokens\":%zu,\"generated_tokens\":%u,\"prefill_tps\":%.2f,\"decode_tps\":%.2f,"
        "\"backend\":\"%s\",\"threads\":%u,\"memory\":{\"weights_bytes\":%llu,\"persistent_bytes\":%llu,"
        "\"scratch_bytes\":%llu,\"peak_rss_bytes\":%llu}}\n",
        ids.size(), generated, prefill_tps, decode_tps, backend_name(rt.backend().kind()), session.threads(),
        (unsigned long long)session.model().weights_bytes(), (unsigned long long)p.persistent_bytes,
        (unsigned long long)p.scratch_bytes, (unsigned long long)port::peak_rss_bytes());
  } else {
    fprintf(stderr,
            "\n[prompt %zu tokens at %.1f t/s, generated %u tokens at %.1f t/s; persistent %s, scratch %s, "
            "peak RSS %s]\n",
            ids.size(), prefill_tps, generated, decode_tps, human_bytes(p.persistent_bytes).c_str(),
            human_bytes(p.scratch_bytes).c_str(), human_bytes(port::peak_rss_bytes()).c_str());
  }
  return 0;
}

}  // namespace keel::cli
