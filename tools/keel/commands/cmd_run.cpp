// keel run: prompt in, generated text streamed out.
#include <unistd.h>

#include <cstdio>

#include "convert/source_file.h"
#include "keel/cli/cli_util.h"
#include "keel/cli/command.h"
#include "keel/commands/commands.h"
#include "keel/cli/session.h"
#include "keel/cli/generate.h"

namespace keel::cli {
namespace {

// Up to the sampler options, whose lines are the sampler table's (sampler_help()).
const char kHelpHead[] =
    "usage: keel run -m MODEL.keel (-p TEXT | -f FILE) [options]\n"
    "\n"
    "Generates a continuation of the prompt and streams it to stdout.\n"
    "\n"
    "options:\n"
    "  -p, --prompt TEXT      the prompt (special tokens such as <|im_start|> are recognized)\n"
    "  -f, --file FILE        read the prompt from FILE\n"
    "  -n, --n-predict N      tokens to generate (default 128); stops early at end of sequence\n";
const char kHelpTail[] =
    "  --json                 print {text, tokens, prefill_tps, decode_tps, memory} instead\n"
    "%s"
    "\n"
    "The KV policy defaults to the model's (keel info shows it). With --kv-policy full the budget\n"
    "defaults to prompt + N tokens (at most the trained context) and a longer sequence is refused;\n"
    "the other policies keep the cache within --kv-budget (default: the model's) for any length.\n";

}  // namespace

int cmd_run(int argc, char** argv) {
  SessionOptions so;
  const std::string help = kHelpHead + sampler_help() + kHelpTail;
  CommandLine cl("run", argc, argv, help.c_str(), &so);
  if (cl.help_shown()) return 0;
  Args& args = cl.args;
  std::string prompt, prompt_file;
  const bool has_prompt = args.value("--prompt", "-p", prompt);
  const bool has_file = args.value("--file", "-f", prompt_file);
  uint32_t n_predict = 128;
  args.u32("--n-predict", "-n", n_predict);
  text::SamplerConfig sc = sampler_defaults(0.8f, 0.95f);
  parse_sampler_options(args, sc);
  const bool json = args.flag("--json");
  if (!cl.finish()) return 2;
  if (has_prompt == has_file) return usage_error("run", "give exactly one of -p TEXT or -f FILE");
  if (has_file) {
    std::string error;
    if (!convert::read_file(prompt_file, prompt, error)) return fail("run", "prompt file: " + error);
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
