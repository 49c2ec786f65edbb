// keel passkey: retrieval of a number hidden at a chosen depth of a long text, through the KV
// policy under test.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <random>

#include "convert/source_file.h"
#include "keel/cli/cli_util.h"
#include "keel/cli/command.h"
#include "keel/commands/commands.h"
#include "keel/cli/generate.h"
#include "keel/cli/option_spec.h"
#include "keel/cli/session.h"

namespace keel::cli {
namespace {

const char kHelp[] =
    "usage: keel passkey -m MODEL.keel [--lengths 1024,2048,4096,8192,16384] [--depths 0,0.25,0.5,0.75,1]\n"
    "                    [--trials N] [--kv-policy P] [--kv-budget B] [--haystack PATH] [--seed S] [--json] [-q]\n"
    "\n"
    "Hides a random 5-7 digit pass key at each depth (0 = start, 1 = end) of essay text cut to each\n"
    "length in tokens, asks for it after the text, and checks the greedy answer. ChatML models get\n"
    "the question as a user turn. Reports accuracy per (length, depth) and overall.\n"
    "\n"
    "options:\n"
    "%s"
    "\n"
    "With --kv-policy full the budget defaults to the longest prompt; bounded policies default to\n"
    "the model's budget.\n";

struct PasskeyOptions {
  std::string lengths = "1024,2048,4096,8192,16384", depths = "0,0.25,0.5,0.75,1";
  uint32_t trials = 1;
  std::string haystack = "../shared/data/paul_graham_essays";
  uint64_t seed = 1;
  bool json = false, quiet = false;
};

const OptionSpec<PasskeyOptions> kPasskeyOptions[] = {
    {.long_name = "--lengths",
     .metavar = "L,...",
     .help = "haystack lengths in tokens (default 1024,2048,4096,8192,16384)",
     .field = &PasskeyOptions::lengths},
    {.long_name = "--depths",
     .metavar = "D,...",
     .help = "needle depths in [0, 1] (default 0,0.25,0.5,0.75,1)",
     .field = &PasskeyOptions::depths},
    {.long_name = "--trials",
     .metavar = "N",
     .help = "keys per (length, depth) (default 1)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &PasskeyOptions::trials},
    {.long_name = "--haystack",
     .metavar = "PATH",
     .help = "a text file or a directory of .txt files (default: the essays in\n"
             "../shared/data/paul_graham_essays)",
     .field = &PasskeyOptions::haystack},
    {.long_name = "--seed",
     .metavar = "S",
     .help = "key generator seed (default 1)",
     .kind = OptionKind::U64,
     .field = &PasskeyOptions::seed},
    {.long_name = "--json",
     .help = "print {accuracy, policy, budget, results: [{length, depth, trial, expected,\n"
             "answer, correct, seconds}]}",
     .kind = OptionKind::Flag,
     .field = &PasskeyOptions::json},
    {.long_name = "--quiet",
     .short_name = "-q",
     .help = "no progress line on stderr after each prompt",
     .kind = OptionKind::Flag,
     .field = &PasskeyOptions::quiet},
};

bool read_text(const std::string& path, std::string& out) {
  std::vector<std::string> files;
  const std::vector<std::string> names = list_directory(path);
  if (!names.empty()) {
    for (const std::string& n : names) {
      if (n.size() > 4 && n.substr(n.size() - 4) == ".txt") files.push_back(path + "/" + n);
    }
  } else {
    files.push_back(path);
  }
  for (const std::string& f : files) {
    std::string part, error;
    if (!convert::read_file(f, part, error)) return false;
    out += part;
    out += "\n\n";
  }
  return !out.empty();
}

}  // namespace

int cmd_passkey(int argc, char** argv) {
  SessionOptions so;
  // The command's options, then the session's, fill the help's one %s.
  const std::string options_help = render_help(kPasskeyOptions) + session_help();
  CommandLine cl("passkey", argc, argv, kHelp, &so, options_help.c_str());
  if (cl.help_shown()) return 0;
  PasskeyOptions po;
  std::string check_error;  // --trials 0, reported after the lists' errors
  parse_options(cl.args, kPasskeyOptions, po, check_error);
  const std::string &lengths_s = po.lengths, &depths_s = po.depths, &haystack = po.haystack;
  const uint32_t trials = po.trials;
  const uint64_t seed = po.seed;
  const bool json = po.json, quiet = po.quiet;
  if (!cl.finish()) return 2;
  std::vector<uint32_t> lengths;
  std::vector<double> depths;
  if (!parse_list(lengths_s, lengths)) return usage_error("passkey", "--lengths expects numbers like 1024,2048");
  if (!parse_list(depths_s, depths)) return usage_error("passkey", "--depths expects numbers like 0,0.5,1");
  for (double d : depths) {
    if (d < 0 || d > 1) return usage_error("passkey", "--depths must lie in [0, 1]");
  }
  if (!check_error.empty()) return usage_error("passkey", check_error);

  Session session;
  std::string error;
  if (!session.load(so, error)) return fail("passkey", error);
  std::string text;
  if (!read_text(haystack, text)) return fail("passkey", "cannot read the haystack " + haystack);
  const Model& model = session.model();
  // ChatML's markers only: Gemma's turn markers also fill im_start_id, and its prompt here is
  // plain text completed by the base model.
  const fb::Tokenizer* tok = model.meta()->tokenizer();
  const bool chat =
      tok->im_start_id() >= 0 && tok->tokens()->Get(uint32_t(tok->im_start_id()))->str() == "<|im_start|>";
  const std::string intro = "There is a pass key hidden inside a lot of irrelevant text. Find it and remember it.\n\n";
  const std::string question = "\n\nWhat is the pass key? The pass key is";
  std::vector<int32_t> hay, head, tail;
  if (!encode_text(model, text, false, false, hay, error)) return fail("passkey", error);
  const std::string head_text = chat ? "<|im_start|>user\n" + intro : intro;
  // A chat model answers in its own words; small models read a pre-filled "The pass key is"
  // as a definition to complete, so the assistant turn starts empty and the question asks for
  // the number itself.
  const std::string tail_text =
      chat ? "\n\nWhat is the pass key mentioned in the text above? Answer with the number only.<|im_end|>\n"
             "<|im_start|>assistant\n"
           : question;
  if (!encode_text(model, head_text, true, true, head, error) ||
      !encode_text(model, tail_text, false, true, tail, error)) {
    return fail("passkey", error);
  }
  if (!session.resolve_policy(nullptr, error)) return usage_error("passkey", error);
  const bool full = session.policy() == KvPolicyKind::Full;
  const uint32_t longest = *std::max_element(lengths.begin(), lengths.end());
  const uint32_t budget = uint32_t(session.kv_budget(uint64_t(longest) + 64));
  if (longest > hay.size()) {
    return fail("passkey", "the haystack has " + std::to_string(hay.size()) + " tokens; the longest length asks for " +
                               std::to_string(longest));
  }
  if (!session.start(budget, error)) return fail("passkey", error);
  Runtime& rt = session.runtime();
  std::mt19937_64 rng(seed);
  size_t correct = 0, total = 0;
  const size_t prompts = lengths.size() * depths.size() * trials;
  std::string results;
  if (!json) printf("| length | depth | correct |\n| ---: | ---: | ---: |\n");
  for (uint32_t len : lengths) {
    for (double depth : depths) {
      size_t ok_here = 0;
      for (uint32_t trial = 0; trial < trials; ++trial) {
        const uint32_t digits = 5 + uint32_t(rng() % 3);
        uint64_t lo = 1;
        for (uint32_t i = 1; i < digits; ++i) lo *= 10;
        const std::string key = std::to_string(lo + rng() % (9 * lo));
        std::vector<int32_t> needle;
        if (!encode_text(model, " The pass key is " + key + ". Remember it. " + key + " is the pass key. ", false,
                         false, needle, error)) {
          return fail("passkey", error);
        }
        const size_t filler =
            len > head.size() + needle.size() + tail.size() ? len - head.size() - needle.size() - tail.size() : 0;
        const size_t at = size_t(double(filler) * depth);
        std::vector<int32_t> ids(head);
        ids.insert(ids.end(), hay.begin(), hay.begin() + at);
        ids.insert(ids.end(), needle.begin(), needle.end());
        ids.insert(ids.end(), hay.begin() + at, hay.begin() + filler);
        ids.insert(ids.end(), tail.begin(), tail.end());
        if (full && ids.size() > budget) return fail("passkey", "prompt exceeds the KV budget (policy full)");
        const double t0 = now_seconds();
        Error e = rt.reset(0);
        if (e.ok()) e = rt.set_sampler(0, text::SamplerConfig{});
        if (!e.ok()) return fail("passkey", std::string(to_string(e.status())) + ": " + e.message());
        GenerateOptions go;
        go.max_tokens = 24;
        Generation g;
        if (!generate(rt, ids, go, nullptr, g, error)) return fail("passkey", error);
        // The answer is the first run of digits in the reply.
        std::string answer;
        for (char c : g.text) {
          if (isdigit(static_cast<unsigned char>(c)))
            answer += c;
          else if (!answer.empty())
            break;
        }
        const bool hit = answer == key;
        const double seconds = now_seconds() - t0;
        ok_here += hit;
        correct += hit;
        ++total;
        if (!quiet) {
          fprintf(stderr,
                  "passkey: %zu/%zu  length %zu  depth %.2f  trial %u  %s (answer '%s')  %.1f s  %zu/%zu found\n",
                  total, prompts, ids.size(), depth, trial, hit ? "found" : "missed", answer.c_str(), seconds, correct,
                  total);
        }
        char buf[512];  // the answer is digits from 24 generated tokens: well inside
        snprintf(buf, sizeof buf,
                 "%s{\"length\":%zu,\"depth\":%g,\"trial\":%u,\"expected\":\"%s\",\"answer\":\"%s\",\"correct\":%s,"
                 "\"seconds\":%.3f}",
                 results.empty() ? "" : ",", ids.size(), depth, trial, key.c_str(), answer.c_str(),
                 hit ? "true" : "false", seconds);
        results += buf;
      }
      if (!json) printf("| %u | %.2f | %zu/%u |\n", len, depth, ok_here, trials);
    }
  }
  const double accuracy = total ? double(correct) / total : 0.0;
  if (json) {
    printf("{\"accuracy\":%.4f,\"policy\":\"%s\",\"budget\":%u,\"results\":[%s]}\n", accuracy,
           kv_policy_name(session.policy()), budget, results.c_str());
  } else {
    printf("\naccuracy %.1f%% (%zu/%zu), policy %s, budget %u\n", 100 * accuracy, correct, total,
           kv_policy_name(session.policy()), budget);
  }
  return 0;
}

}  // namespace keel::cli
