// keel convert: GGUF, Hugging Face directory or llama2.c checkpoint -> .keel (+ C++ header).
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "convert/keel_writer.h"
#include "convert/source_model.h"
#include "keel/cli/args.h"
#include "keel/cli/cli_util.h"
#include "keel/cli/command.h"
#include "keel/commands/commands.h"
#include "keel/commands/header_writer.h"
#include "ports/linux/mapped_file.h"

namespace keel::cli {
namespace {

const char kHelp[] =
    "usage: keel convert IN -o OUT.keel [options]\n"
    "\n"
    "Converts a model to the .keel format (docs/format.md). IN is one of:\n"
    "  a GGUF file (v2/v3; F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K tensors)\n"
    "  a Hugging Face directory (config.json, *.safetensors, tokenizer.json); model_type\n"
    "    llama, mistral, qwen2, gemma3_text, or gemma3 (its text model)\n"
    "  a llama2.c checkpoint (legacy or versioned header), with --tokenizer FILE\n"
    "\n"
    "options:\n"
    "  -o, --output FILE      the .keel file to write (required)\n"
    "  --quant MODE           keep | f32 | f16 | q8 | q4 (default keep)\n"
    "                           keep: every GGUF type as it is, losslessly: Q8_0->Q8, Q4_0->Q4,\n"
    "                           Q4_1->Q4M, Q5_0->Q5, Q5_1->Q5M, Q4_K->Q4K, Q5_K->Q5K, Q6_K->Q6K\n"
    "                           and float types; Hugging Face and llama2.c floats as they are\n"
    "                           q4: block matrices Q4 (Q4M from Q4_1), embedding and output Q8\n"
    "  --tokenizer FILE       llama2.c tokenizer .bin (default: the only tok*.bin beside IN)\n"
    "  --kv-policy P          default KV policy stored in the file: full | window | streaming |\n"
    "                           snapkv | snapstream (default snapstream; on a model with\n"
    "                           sliding-window layers it governs the global layers only)\n"
    "  --kv-budget N          default KV budget in tokens (default 1024)\n"
    "  --sinks N              attention sinks (default 4)\n"
    "  --window N             snapstream's recent window (default 0: a quarter of the budget)\n"
    "  --obs-window N         SnapKV observation window (default 32)\n"
    "  --snap-kernel N        SnapKV pooling kernel, odd; 0 = adaptive (default: the policy's,\n"
    "                           7 for snapkv, 31 for snapstream)\n"
    "  --slots N              sequences planned for (default 1)\n"
    "  --chunk N              prefill chunk in tokens (default 64)\n"
    "  --header FILE          also write a C++ header with constexpr shape and arena sizes for\n"
    "                           the budget, slots and chunk above\n"
    "  --header-namespace NS  namespace of the header (default: from the output file name)\n"
    "  --json                 print the summary as JSON\n"
    "  -q, --quiet            no progress bar\n"
    "\n"
    "A progress bar is drawn on a terminal only. Exit status 0 on success, 1 on failure,\n"
    "2 on a usage error.\n";

bool is_directory(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool starts_with_magic(const std::string& p, const char* magic) {
  FILE* f = fopen(p.c_str(), "rb");
  if (!f) return false;
  char buf[4] = {};
  const size_t n = fread(buf, 1, 4, f);
  fclose(f);
  return n == 4 && memcmp(buf, magic, 4) == 0;
}

std::string find_llama2c_tokenizer(const std::string& checkpoint) {
  const size_t slash = checkpoint.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : checkpoint.substr(0, slash);
  std::string found;
  int count = 0;
  for (const std::string& name : list_directory(dir)) {
    if (name.rfind("tok", 0) == 0 && name.size() > 4 && name.substr(name.size() - 4) == ".bin") {
      found = dir + "/" + name;
      ++count;
    }
  }
  return count == 1 ? found : std::string();
}

}  // namespace

int cmd_convert(int argc, char** argv) {
  CommandLine cl("convert", argc, argv, kHelp);
  if (cl.help_shown()) return 0;
  Args& args = cl.args;
  std::string out_path, quant = "keep", tokenizer, policy = "snapstream", header, header_ns;
  convert::WriteOptions opts;
  args.value("--output", "-o", out_path);
  args.value("--quant", nullptr, quant);
  args.value("--tokenizer", nullptr, tokenizer);
  args.value("--kv-policy", nullptr, policy);
  args.u32("--kv-budget", nullptr, opts.kv.budget_tokens);
  args.u32("--sinks", nullptr, opts.kv.sinks);
  args.u32("--window", nullptr, opts.kv.window);
  args.u32("--obs-window", nullptr, opts.kv.obs_window);
  args.u32("--snap-kernel", nullptr, opts.kv.snap_kernel);
  args.u32("--slots", nullptr, opts.slots);
  args.u32("--chunk", nullptr, opts.chunk_tokens);
  args.value("--header", nullptr, header);
  args.value("--header-namespace", nullptr, header_ns);
  const bool json = args.flag("--json");
  const bool quiet = args.flag("--quiet", "-q");
  if (!cl.finish(1, "exactly one input")) return 2;
  const std::vector<std::string>& pos = cl.positionals;
  if (out_path.empty()) return usage_error("convert", "missing -o OUT.keel");

  if (quant == "keep")
    opts.quant = convert::QuantMode::Keep;
  else if (quant == "f32")
    opts.quant = convert::QuantMode::F32;
  else if (quant == "f16")
    opts.quant = convert::QuantMode::F16;
  else if (quant == "q8")
    opts.quant = convert::QuantMode::Q8;
  else if (quant == "q4")
    opts.quant = convert::QuantMode::Q4;
  else
    return usage_error("convert", "--quant expects keep, f32, f16, q8 or q4, got '" + quant + "'");
  if (!parse_kv_policy(policy, opts.kv.policy)) {
    return usage_error("convert", "--kv-policy expects " + kv_policy_choices(false) +
                                      " (the file's default; rocketkv is chosen when a run starts), got '" + policy +
                                      "'");
  }
  if (opts.slots == 0 || opts.chunk_tokens == 0 || opts.kv.budget_tokens == 0) {
    return usage_error("convert", "--slots, --chunk and --kv-budget must be at least 1");
  }
  {
    // The defaults the file names must be ones a run can use.
    const RuntimeConfig rc = resolve_runtime_config(convert::run_defaults(opts), RunOverrides{});
    const Error e = validate_kv_policy(rc.kv, rc.plan.kv_budget_tokens, rc.plan.chunk_tokens);
    if (!e.ok()) return usage_error("convert", std::string("the KV defaults: ") + e.message());
  }

  const std::string& in = pos[0];
  const auto t0 = std::chrono::steady_clock::now();
  std::string error;
  std::optional<convert::SourceModel> model;
  if (is_directory(in)) {
    model = convert::read_hf_dir(in, error);
  } else if (starts_with_magic(in, "GGUF")) {
    model = convert::read_gguf(in, error);
  } else {
    if (access(in.c_str(), R_OK) != 0) return fail("convert", "cannot read " + in + ": " + strerror(errno));
    if (tokenizer.empty()) tokenizer = find_llama2c_tokenizer(in);
    if (tokenizer.empty()) {
      return fail("convert", in + " is not GGUF or a directory, so it is read as a llama2.c checkpoint, "
                                  "which needs --tokenizer FILE (no single tok*.bin found beside it)");
    }
    model = convert::read_llama2c(in, tokenizer, error);
  }
  if (!model) return fail("convert", error);

  ProgressBar bar(!quiet && isatty(STDERR_FILENO));
  opts.progress = [&](size_t done, size_t total, uint64_t bytes) { bar.update(done, total, bytes); };
  convert::WriteStats stats;
  const bool ok = convert::write_keel(*model, opts, out_path, stats, error);
  bar.finish();
  if (!ok) return fail("convert", error);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  if (!header.empty()) {
    if (header_ns.empty()) header_ns = namespace_from_path(out_path);
    if (!write_model_header(*model, opts, header, header_ns, error)) return fail("convert", error);
  }

  const uint64_t peak = port::peak_rss_bytes();
  if (json) {
    printf(
        "{\"output\":%s,\"source\":%s,\"tensors\":%zu,\"file_bytes\":%llu,\"seconds\":%.3f,"
        "\"peak_rss_bytes\":%llu,\"largest_tensor_working_bytes\":%llu%s%s%s}\n",
        json_string(out_path).c_str(), json_string(model->source_description).c_str(), stats.tensors,
        (unsigned long long)stats.file_bytes, seconds, (unsigned long long)peak,
        (unsigned long long)stats.largest_tensor_bytes,
        header.empty() ? "" : ",\"header\":", header.empty() ? "" : json_string(header).c_str(), "");
  } else {
    printf("wrote %s: %zu tensors, %s, %.2f s, peak RSS %s (largest tensor working set %s)\n", out_path.c_str(),
           stats.tensors, human_bytes(stats.file_bytes).c_str(), seconds, human_bytes(peak).c_str(),
           human_bytes(stats.largest_tensor_bytes).c_str());
    if (!header.empty()) printf("wrote %s (namespace %s)\n", header.c_str(), header_ns.c_str());
  }
  return 0;
}

}  // namespace keel::cli
