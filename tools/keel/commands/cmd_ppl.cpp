// keel ppl: perplexity of a text under the model, full causal context.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "convert/source_file.h"
#include "keel/cli/cli_util.h"
#include "keel/cli/command.h"
#include "keel/commands/commands.h"
#include "keel/cli/option_spec.h"
#include "keel/cli/session.h"

namespace keel::cli {
namespace {

const char kHelp[] =
    "usage: keel ppl -m MODEL.keel -f TEXT [--ctx N] [--json] [-q]\n"
    "\n"
    "Perplexity: exp of the mean negative log-likelihood of every token after the first, each\n"
    "predicted from the tokens before it that the KV policy keeps (full: all of them), over the\n"
    "first N tokens of the text. The text goes through the cache in chunks of at most 16 tokens\n"
    "(fewer with --chunk), so under a bounded policy any length fits the budget. rocketkv's\n"
    "sparse decode (stage 2) runs for one-token chunks only: --chunk 1 measures both its stages.\n"
    "\n"
    "options:\n"
    "%s";

struct PplOptions {
  std::string path;
  uint32_t ctx = 0;  // 0: the default, which depends on the policy
  bool json = false, quiet = false;
};

const OptionSpec<PplOptions> kPplOptions[] = {
    {.long_name = "--file", .short_name = "-f", .metavar = "FILE", .help = "the text", .field = &PplOptions::path},
    {.long_name = "--ctx",
     .metavar = "N",
     .help = "tokens evaluated (default: full: the trained context; bounded\n"
             "policies: the whole text)",
     .kind = OptionKind::U32,
     .field = &PplOptions::ctx},
    {.long_name = "--json",
     .help = "print {tokens, ppl, nll_mean, seconds, tokens_per_second, policy,\n"
             "budget, nll: [per-token NLL, token 1 onwards]}",
     .kind = OptionKind::Flag,
     .field = &PplOptions::json},
    {.long_name = "--quiet",
     .short_name = "-q",
     .help = "no progress lines on stderr (default: one per 10% of the tokens)",
     .kind = OptionKind::Flag,
     .field = &PplOptions::quiet},
};

struct Accum {
  const int32_t* ids;
  size_t n;
  uint32_t vocab;
  double nll_sum = 0;
  size_t scored = 0;
  std::vector<float>* curve = nullptr;
  // Progress on stderr every report_every scored tokens and at the last (0: never, --quiet).
  size_t report_every = 0;
  double t0 = 0;
};

void report(const Accum& a) {
  const size_t total = a.n - 1;
  const double seconds = now_seconds() - a.t0;
  fprintf(stderr, "keel ppl: %zu/%zu tokens scored (%d%%), perplexity so far %.4f, %.1f s, %.1f t/s\n", a.scored, total,
          int(100.0 * double(a.scored) / double(total)), std::exp(a.nll_sum / double(a.scored)), seconds,
          seconds > 0 ? double(a.scored) / seconds : 0.0);
}

void accumulate(void* ctx, size_t i, const float* logits) {
  Accum& a = *static_cast<Accum*>(ctx);
  if (i + 1 >= a.n) return;  // the last token predicts nothing we have
  double mx = logits[0];
  for (uint32_t v = 1; v < a.vocab; ++v) mx = logits[v] > mx ? logits[v] : mx;
  double sum = 0;
  for (uint32_t v = 0; v < a.vocab; ++v) sum += std::exp(double(logits[v]) - mx);
  const double nll = (mx + std::log(sum)) - double(logits[a.ids[i + 1]]);
  a.nll_sum += nll;
  ++a.scored;
  if (a.curve) a.curve->push_back(float(nll));
  if (a.report_every && (a.scored % a.report_every == 0 || a.scored == a.n - 1)) report(a);
}

}  // namespace

int cmd_ppl(int argc, char** argv) {
  SessionOptions so;
  // The command's options, then the session's, fill the help's one %s: the tables' text is
  // never a printf format.
  const std::string options_help = render_help(kPplOptions) + session_help();
  CommandLine cl("ppl", argc, argv, kHelp, &so, options_help.c_str());
  if (cl.help_shown()) return 0;
  PplOptions po;
  std::string no_checks;  // every value of these options' types is one ppl takes
  parse_options(cl.args, kPplOptions, po, no_checks);
  const std::string& path = po.path;
  uint32_t ctx = po.ctx;
  const bool json = po.json, quiet = po.quiet;
  if (!cl.finish()) return 2;
  if (path.empty()) return usage_error("ppl", "missing -f TEXT");
  std::string text, read_error;
  if (!convert::read_file(path, text, read_error)) return fail("ppl", read_error);

  so.logit_rows = 16;
  Session session;
  std::string error;
  if (!session.load(so, error)) return fail("ppl", error);
  std::vector<int32_t> ids;
  if (!encode_text(session.model(), text, true, false, ids, error)) return fail("ppl", error);
  if (!session.resolve_policy("full", error)) return usage_error("ppl", error);
  const bool full = session.policy() == KvPolicyKind::Full;
  if (ctx == 0 && full) ctx = session.model().shape().context_length;
  if (ctx && ids.size() > ctx) ids.resize(ctx);
  if (ids.size() < 2)
    return fail("ppl", "the text has " + std::to_string(ids.size()) + " tokens; at least 2 are needed");
  const uint32_t budget = uint32_t(session.kv_budget(ids.size()));
  if (full && budget < ids.size()) {
    return fail("ppl",
                std::to_string(ids.size()) + " tokens exceed --kv-budget " + std::to_string(budget) + " (policy full)");
  }
  if (!session.start(budget, error)) return fail("ppl", error);
  Accum acc{ids.data(), ids.size(), session.model().shape().vocab_size};
  // The per-token curve is host memory reserved before the first token.
  std::vector<float> curve;
  if (json) {
    curve.reserve(ids.size());
    acc.curve = &curve;
  }
  const double t0 = now_seconds();
  acc.t0 = t0;
  if (!quiet) acc.report_every = (ids.size() - 1 + 9) / 10;
  const Error e = session.runtime().score(0, Span<const int32_t>(ids.data(), ids.size()), accumulate, &acc);
  const double secs = now_seconds() - t0;
  if (!e.ok()) return fail("ppl", std::string(to_string(e.status())) + ": " + e.message());
  const double nll = acc.nll_sum / double(acc.scored);
  const double ppl = std::exp(nll);
  if (json) {
    printf(
        "{\"tokens\":%zu,\"scored\":%zu,\"ppl\":%.6f,\"nll_mean\":%.6f,\"seconds\":%.3f,\"tokens_per_second\":%.2f,"
        "\"policy\":\"%s\",\"budget\":%u,\"evicted\":%llu,\"nll\":[",
        ids.size(), acc.scored, ppl, nll, secs, ids.size() / secs, kv_policy_name(session.policy()), budget,
        (unsigned long long)session.runtime().kv_cache(0).evicted());
    for (size_t i = 0; i < curve.size(); ++i) printf("%s%.4f", i ? "," : "", curve[i]);
    printf("]}\n");
  } else {
    printf("%zu tokens, perplexity %.4f (mean NLL %.4f), policy %s, budget %u, in %.2f s (%.1f t/s)\n", ids.size(), ppl,
           nll, kv_policy_name(session.policy()), budget, secs, ids.size() / secs);
  }
  return 0;
}

}  // namespace keel::cli
