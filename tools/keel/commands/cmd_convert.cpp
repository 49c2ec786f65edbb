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
#include "keel/cli/option_spec.h"
#include "keel/commands/commands.h"
#include "keel/commands/header_writer.h"
#include "ports/linux/mapped_file.h"

namespace keel::cli {
namespace {

const char kHelpHead[] =
    "usage: keel convert IN -o OUT.keel [options]\n"
    "\n"
    "Converts a model to the .keel format (docs/format.md). IN is one of:\n"
    "  a GGUF file (v2/v3; F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K tensors)\n"
    "  a Hugging Face directory (config.json, *.safetensors, tokenizer.json); model_type\n"
    "    llama, mistral, qwen2, gemma3_text, or gemma3 (its text model)\n"
    "  a llama2.c checkpoint (legacy or versioned header), with --tokenizer FILE\n"
    "\n"
    "options:\n";
const char kHelpTail[] =
    "\n"
    "A progress bar is drawn on a terminal only. Exit status 0 on success, 1 on failure,\n"
    "2 on a usage error.\n";

// The command line, flat: the KV and plan numbers go into convert::WriteOptions afterwards.
struct ConvertOptions {
  std::string out_path, tokenizer, policy = "snapstream", header, header_ns;
  convert::QuantMode quant = convert::QuantMode::Keep;
  uint32_t kv_budget = convert::WriteOptions{}.kv.budget_tokens;
  uint32_t sinks = convert::WriteOptions{}.kv.sinks;
  uint32_t window = convert::WriteOptions{}.kv.window;
  uint32_t obs_window = convert::WriteOptions{}.kv.obs_window;
  uint32_t snap_kernel = convert::WriteOptions{}.kv.snap_kernel;
  uint32_t slots = convert::WriteOptions{}.slots;
  uint32_t chunk = convert::WriteOptions{}.chunk_tokens;
  bool json = false, quiet = false;
};

bool store_quant(const std::string& v, ConvertOptions& o) {
  static constexpr struct {
    const char* name;
    convert::QuantMode mode;
  } kModes[] = {{"keep", convert::QuantMode::Keep},
                {"f32", convert::QuantMode::F32},
                {"f16", convert::QuantMode::F16},
                {"q8", convert::QuantMode::Q8},
                {"q4", convert::QuantMode::Q4}};
  for (const auto& m : kModes) {
    if (v == m.name) {
      o.quant = m.mode;
      return true;
    }
  }
  return false;
}

// The policies a file can name as its default, from the policy table.
const std::string kPolicyHelp =
    "default KV policy stored in the file (default snapstream; on a\n"
    "model with sliding-window layers it governs the global layers\n"
    "only): " +
    kv_policy_choices(false, NameList::Help);

const OptionSpec<ConvertOptions> kConvertOptions[] = {
    {.long_name = "--output",
     .short_name = "-o",
     .metavar = "FILE",
     .help = "the .keel file to write (required)",
     .field = &ConvertOptions::out_path},
    {.long_name = "--quant",
     .metavar = "MODE",
     .help = "keep | f32 | f16 | q8 | q4 (default keep)\n"
             "  keep: every GGUF type as it is, losslessly: Q8_0->Q8, Q4_0->Q4,\n"
             "  Q4_1->Q4M, Q5_0->Q5, Q5_1->Q5M, Q4_K->Q4K, Q5_K->Q5K, Q6_K->Q6K\n"
             "  and float types; Hugging Face and llama2.c floats as they are\n"
             "  q4: block matrices Q4 (Q4M from Q4_1), embedding and output Q8",
     .kind = OptionKind::Custom,
     .store = store_quant,
     .expects = "keep, f32, f16, q8 or q4"},
    {.long_name = "--tokenizer",
     .metavar = "FILE",
     .help = "llama2.c tokenizer .bin (default: the only tok*.bin beside IN)",
     .field = &ConvertOptions::tokenizer},
    {.long_name = "--kv-policy", .metavar = "P", .help = kPolicyHelp.c_str(), .field = &ConvertOptions::policy},
    {.long_name = "--kv-budget",
     .metavar = "N",
     .help = "default KV budget in tokens (default 1024)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &ConvertOptions::kv_budget},
    {.long_name = "--sinks",
     .metavar = "N",
     .help = "attention sinks (default 4)",
     .kind = OptionKind::U32,
     .field = &ConvertOptions::sinks},
    {.long_name = "--window",
     .metavar = "N",
     .help = "snapstream's recent window (default 0: a quarter of the budget)",
     .kind = OptionKind::U32,
     .field = &ConvertOptions::window},
    {.long_name = "--obs-window",
     .metavar = "N",
     .help = "SnapKV observation window (default 32)",
     .kind = OptionKind::U32,
     .field = &ConvertOptions::obs_window},
    {.long_name = "--snap-kernel",
     .metavar = "N",
     .help = "SnapKV pooling kernel, odd; 0 = adaptive (default: the policy's:\n"
             "31 for snapstream and snapkv)",
     .kind = OptionKind::U32,
     .field = &ConvertOptions::snap_kernel},
    {.long_name = "--slots",
     .metavar = "N",
     .help = "sequences planned for (default 1)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &ConvertOptions::slots},
    {.long_name = "--chunk",
     .metavar = "N",
     .help = "prefill chunk in tokens (default 64)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &ConvertOptions::chunk},
    {.long_name = "--header",
     .metavar = "FILE",
     .help = "also write a C++ header with constexpr shape and arena sizes for\n"
             "the budget, slots and chunk above",
     .field = &ConvertOptions::header},
    {.long_name = "--header-namespace",
     .metavar = "NS",
     .help = "namespace of the header (default: from the output file name)",
     .field = &ConvertOptions::header_ns},
    {.long_name = "--json",
     .help = "print the summary as JSON",
     .kind = OptionKind::Flag,
     .field = &ConvertOptions::json},
    {.long_name = "--quiet",
     .short_name = "-q",
     .help = "no progress bar",
     .kind = OptionKind::Flag,
     .field = &ConvertOptions::quiet},
};

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
  const std::string help = kHelpHead + render_help(kConvertOptions) + kHelpTail;
  CommandLine cl("convert", argc, argv, help.c_str());
  if (cl.help_shown()) return 0;
  ConvertOptions co;
  std::string check_error;
  parse_options(cl.args, kConvertOptions, co, check_error);
  if (!cl.finish(1, "exactly one input")) return 2;
  const std::vector<std::string>& pos = cl.positionals;
  if (!check_error.empty()) return usage_error("convert", check_error);
  if (co.out_path.empty()) return usage_error("convert", "missing -o OUT.keel");
  convert::WriteOptions opts;
  opts.quant = co.quant;
  if (!parse_kv_policy(co.policy, opts.kv.policy)) {
    return usage_error("convert", "--kv-policy expects " + kv_policy_choices(false) +
                                      " (the file's default; rocketkv is chosen when a run starts), got '" + co.policy +
                                      "'");
  }
  opts.kv.budget_tokens = co.kv_budget;
  opts.kv.sinks = co.sinks;
  opts.kv.window = co.window;
  opts.kv.obs_window = co.obs_window;
  opts.kv.snap_kernel = co.snap_kernel;
  opts.slots = co.slots;
  opts.chunk_tokens = co.chunk;
  const std::string& out_path = co.out_path;
  std::string& tokenizer = co.tokenizer;
  std::string& header = co.header;
  std::string& header_ns = co.header_ns;
  const bool json = co.json, quiet = co.quiet;
  {
    // The defaults the file names must be ones a run can use.
    // Before the model is read its family is not known; every family's kernels are odd, so the
    // check does not depend on it.
    const RuntimeConfig rc =
        resolve_runtime_config(convert::run_defaults(opts, convert::ArchFamily::Llama), RunOverrides{});
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
