// The keel tool's option tables (tools/keel/cli/option_spec.h): the session's and the sampler's
// entries are well formed, every kind stores and checks its value, and the help renders in the
// layout every `keel <command> --help` uses.
#include "keel/cli/option_spec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "keel/cli/args.h"
#include "keel/cli/session.h"

namespace keel::cli {
namespace {

// An Args over `items` as if they followed the program name.
struct Argv {
  explicit Argv(std::vector<std::string> items) : strings(std::move(items)) {
    strings.insert(strings.begin(), "keel");
    for (std::string& s : strings) ptrs.push_back(s.data());
  }
  Args args() { return Args(int(ptrs.size()), ptrs.data()); }
  std::vector<std::string> strings;
  std::vector<char*> ptrs;
};

bool is_flag(OptionKind k) { return k == OptionKind::Flag || k == OptionKind::NegatedFlag; }

template <typename T>
void expect_well_formed(std::span<const OptionSpec<T>> table, std::set<std::string>& names) {
  for (const OptionSpec<T>& o : table) {
    ASSERT_NE(o.long_name, nullptr);
    const std::string name = o.long_name;
    EXPECT_EQ(name.rfind("--", 0), 0u) << name;
    EXPECT_GT(name.size(), 2u) << name;
    ASSERT_NE(o.help, nullptr) << name;
    EXPECT_GT(std::string(o.help).size(), 0u) << name;
    EXPECT_NE(std::string(o.help).back(), '\n') << name << ": the renderer ends the help's last line";
    EXPECT_EQ(o.metavar == nullptr, is_flag(o.kind)) << name << ": a value needs a metavar, a flag has none";
    EXPECT_TRUE(names.insert(name).second) << name << " is declared twice";
    if (o.short_name) {
      EXPECT_TRUE(names.insert(o.short_name).second) << o.short_name << " is declared twice";
    }
    if (o.kind == OptionKind::OneOf) {
      EXPECT_TRUE(o.choices[0] && o.choices[1]) << name;
    }
    if (o.kind == OptionKind::Custom) {
      EXPECT_TRUE(o.store && o.expects) << name;
    }
    if (o.kind != OptionKind::Custom) {
      EXPECT_FALSE(std::holds_alternative<std::monostate>(o.field)) << name;
    }
  }
}

TEST(OptionSpecTables, NamesHelpAndFieldsAreWellFormedAndUniqueAcrossTables) {
  std::set<std::string> names;
  expect_well_formed(session_option_table(), names);
  expect_well_formed(sampler_option_table(), names);
  EXPECT_GE(session_option_table().size(), 20u);
  EXPECT_EQ(sampler_option_table().size(), 6u);
}

// The numeric value stored by `o` in `out`, as a double (NaN for a non-numeric field).
template <typename T>
double stored(const OptionSpec<T>& o, const T& out) {
  return std::visit(
      [&](auto field) -> double {
        using F = decltype(field);
        if constexpr (std::is_same_v<F, std::monostate> || std::is_same_v<F, std::string T::*> ||
                      std::is_same_v<F, bool T::*>) {
          return NAN;
        } else {
          return double(out.*field);
        }
      },
      o.field);
}

template <typename T>
void expect_numbers_stored(std::span<const OptionSpec<T>> table, size_t& checked) {
  for (const OptionSpec<T>& o : table) {
    const bool integer = o.kind == OptionKind::U32 || o.kind == OptionKind::U32AtLeastOne ||
                         o.kind == OptionKind::U64 || o.kind == OptionKind::ZeroIsNone;
    if (!integer && o.kind != OptionKind::F32) continue;
    const char* value = integer ? "7" : "0.5";
    for (const bool equals_form : {false, true}) {
      Argv argv(equals_form ? std::vector<std::string>{std::string(o.long_name) + "=" + value}
                            : std::vector<std::string>{o.long_name, value});
      Args args = argv.args();
      T out{};
      std::string error;
      parse_options<T>(args, table, out, error);
      EXPECT_TRUE(args.ok()) << o.long_name << ": " << args.error();
      EXPECT_EQ(error, "") << o.long_name;
      EXPECT_EQ(stored(o, out), integer ? 7.0 : 0.5) << o.long_name;
      std::vector<std::string> rest;
      EXPECT_TRUE(args.finish(rest)) << o.long_name << " was left unconsumed";
    }
    if (o.short_name) {
      Argv argv({o.short_name, value});
      Args args = argv.args();
      T out{};
      std::string error;
      parse_options<T>(args, table, out, error);
      EXPECT_EQ(stored(o, out), integer ? 7.0 : 0.5) << o.short_name;
    }
    ++checked;
  }
}

TEST(OptionSpecTables, EveryNumericOptionStoresItsValueInItsField) {
  size_t checked = 0;
  expect_numbers_stored(session_option_table(), checked);
  expect_numbers_stored(sampler_option_table(), checked);
  // threads, sram-bytes, kv-budget, sinks, window, obs-window, snap-kernel, snap-hold,
  // sparse-budget, rocket-page, rocket-topk, rocket-r, chunk; temp, top-k, top-p, min-p,
  // repeat-penalty, seed.
  EXPECT_EQ(checked, 19u);
}

// Every check in the session table refuses a value it cannot take, naming the option.
TEST(OptionSpecTables, EveryCheckRejectsABadValueNamingTheOption) {
  size_t checked = 0;
  for (const OptionSpec<SessionOptions>& o : session_option_table()) {
    std::string bad, want;
    switch (o.kind) {
      case OptionKind::U32AtLeastOne:
        bad = "0";
        want = std::string(o.long_name) + " must be at least 1";
        break;
      case OptionKind::ZeroIsNone:
        bad = "2147483648";
        want = std::string(o.long_name) + " 2147483648 is too large";
        break;
      case OptionKind::OneOf:
        bad = "x";
        want = std::string(o.long_name) + " expects " + o.choices[0] + " or " + o.choices[1] + ", got 'x'";
        break;
      case OptionKind::Custom:
        bad = "x";
        want = std::string(o.long_name) + " expects " + o.expects + ", got 'x'";
        break;
      default: continue;
    }
    Argv argv({o.long_name, bad});
    Args args = argv.args();
    SessionOptions so;
    parse_session_options(args, so);
    EXPECT_TRUE(args.ok()) << args.error();
    EXPECT_EQ(so.error, want);
    ++checked;
  }
  EXPECT_EQ(checked, 13u);
}

TEST(OptionSpecSession, MessagesAndStoredValuesAsBefore) {
  struct Case {
    std::vector<std::string> argv;
    std::string error;
  } cases[] = {
      {{"--sinks", "0"}, "--sinks must be at least 1"},
      {{"--kv-type", "x"}, "--kv-type expects f16, q8 or q4, got 'x'"},
      {{"--rocket-select", "x"}, "--rocket-select expects group or head, got 'x'"},
      {{"--kv-positions=both"}, "--kv-positions expects cache or original, got 'both'"},
      {{"--sparse-attention", "dense"}, "--sparse-attention expects none or topk, got 'dense'"},
      {{"--snap-hold", "3000000000"}, "--snap-hold 3000000000 is too large"},
      {{"--sparse-attention", "topk"}, "--sparse-attention topk needs --sparse-budget B"},
      // The first refused value is the one reported.
      {{"--chunk", "0", "--sinks", "0"}, "--sinks must be at least 1"},
  };
  for (const Case& c : cases) {
    Argv argv(c.argv);
    Args args = argv.args();
    SessionOptions so;
    parse_session_options(args, so);
    EXPECT_EQ(so.error, c.error) << c.argv[0];
  }

  Argv argv({"-m", "a.keel", "--kv-type", "q4", "--snap-kernel", "0", "--snap-hold", "9", "--rocket-select", "head",
             "--kv-positions", "cache", "--sparse-attention", "topk", "--sparse-budget", "256", "--no-verify",
             "--backend=ref"});
  Args args = argv.args();
  SessionOptions so;
  parse_session_options(args, so);
  std::vector<std::string> rest;
  ASSERT_TRUE(args.finish(rest)) << args.error();
  EXPECT_EQ(so.error, "");
  EXPECT_EQ(so.model_path, "a.keel");
  EXPECT_EQ(so.kv_type, KvType::Q4);
  EXPECT_EQ(so.snap_kernel, -1);
  EXPECT_EQ(so.snap_hold, 9);
  EXPECT_EQ(so.rocket_select, 2u);
  EXPECT_EQ(so.kv_positions, 1u);
  EXPECT_TRUE(so.sparse_topk);
  EXPECT_FALSE(so.sparse_none);
  EXPECT_EQ(so.sparse_budget, 256u);
  EXPECT_FALSE(so.verify);
  EXPECT_EQ(so.backend, "ref");

  SessionOptions defaults;
  Argv none({});
  Args empty = none.args();
  parse_session_options(empty, defaults);
  EXPECT_TRUE(defaults.verify);
  EXPECT_EQ(defaults.backend, "auto");
  EXPECT_EQ(defaults.snap_kernel, 0);
}

TEST(OptionSpecSampler, MalformedNumberIsArgsErrorAndDefaultsStay) {
  Argv argv({"--temp", "warm", "--top-k", "5"});
  Args args = argv.args();
  text::SamplerConfig c = sampler_defaults(0.8f, 0.95f);
  parse_sampler_options(args, c);
  EXPECT_EQ(args.error(), "option --temp expects a number, got 'warm'");
  EXPECT_FLOAT_EQ(c.temperature, 0.8f);
  EXPECT_EQ(c.top_k, 5u);
  EXPECT_EQ(c.seed, 42u);
}

struct Small {
  std::string name;
  uint32_t count = 0;
  bool quiet = false;
  bool name_given = false, count_given = false;
};

const OptionSpec<Small> kSmall[] = {
    {.long_name = "--name",
     .short_name = "-n",
     .metavar = "TEXT",
     .help = "who",
     .field = &Small::name,
     .given = &Small::name_given},
    {.long_name = "--count",
     .metavar = "N",
     .help = "how many, a help long enough\nto go on a second line\nand a third",
     .kind = OptionKind::U32AtLeastOne,
     .field = &Small::count,
     .given = &Small::count_given},
    {.long_name = "--quiet", .help = "no output", .kind = OptionKind::Flag, .field = &Small::quiet},
    {.long_name = "--a-rather-long-option",
     .metavar = "VALUE",
     .help = "wider than the column",
     .kind = OptionKind::Text,
     .field = &Small::name},
};

TEST(OptionSpecRender, ReproducesTheHelpLayout) {
  EXPECT_EQ(render_help(kSmall),
            "  -n, --name TEXT        who\n"
            "  --count N              how many, a help long enough\n"
            "                         to go on a second line\n"
            "                         and a third\n"
            "  --quiet                no output\n"
            "  --a-rather-long-option VALUE\n"
            "                         wider than the column\n");
}

TEST(OptionSpecRender, SessionAndSamplerHelpKeepTheirLines) {
  const std::string& s = session_help();
  EXPECT_EQ(s.rfind("  -m, --model FILE       the .keel model (required)\n", 0), 0u);
  EXPECT_NE(s.find("  --kv-type T            f16 | q8 | q4: how the KV cache stores keys and values (default f16;\n"
                   "                         q8 and q4 read about 1/2 and 1/3 of the bytes per cached token)\n"
                   "  --sinks N              attention sinks"),
            std::string::npos);
  const std::string footer = "  Defaults are the model's where its file names them (keel info: run defaults).\n";
  ASSERT_GT(s.size(), footer.size());
  EXPECT_EQ(s.substr(s.size() - footer.size()), footer);
  EXPECT_EQ(sampler_help().rfind("  --temp T               temperature, 0 = greedy (default 0.8)\n", 0), 0u);
  EXPECT_NE(sampler_help().find("  --seed S               sampler seed (default 42)\n"), std::string::npos);
}

// A command that takes some session options its own way renders the rest from the same table.
TEST(OptionSpecRender, SessionHelpWithoutSomeOptionsDropsTheirWholeEntries) {
  const char* except[] = {"--kv-policy", "--threads", "--kv-type"};
  const std::string s = session_help_without(except);
  EXPECT_EQ(s.find("--kv-policy"), std::string::npos) << s;
  EXPECT_EQ(s.find("--threads"), std::string::npos) << s;
  EXPECT_EQ(s.find("q8 and q4 read about"), std::string::npos) << "a continuation line of --kv-type stayed:\n" << s;
  EXPECT_EQ(s.rfind("  -m, --model FILE", 0), 0u);
  EXPECT_NE(s.find("  --sinks N              attention sinks"), std::string::npos);
  EXPECT_EQ(session_help_without({}), session_help());
  // Every line of the full help that names none of them is kept, in order.
  std::string expected;
  bool skipping = false;
  for (size_t b = 0; b < session_help().size();) {
    const size_t e = session_help().find('\n', b) + 1;
    const std::string line = session_help().substr(b, e - b);
    b = e;
    if (line.rfind("  -", 0) == 0)
      skipping = line.find("--kv-policy ") == 2 || line.find("-t, --threads") == 2 || line.find("--kv-type ") == 2;
    if (!skipping) expected += line;
  }
  EXPECT_EQ(s, expected);
}

TEST(OptionSpecParse, FlagsAndTextAndTheFirstCheckError) {
  Argv argv({"--quiet", "-n", "x", "--count", "0"});
  Args args = argv.args();
  Small s;
  std::string error;
  parse_options(args, kSmall, s, error);
  EXPECT_TRUE(s.quiet);
  EXPECT_EQ(s.name, "x");
  EXPECT_EQ(error, "--count must be at least 1");
  EXPECT_TRUE(s.name_given);
  EXPECT_TRUE(s.count_given) << "a value a check refuses was still given";
}

// `given` tells an option given an empty text from one not given at all.
TEST(OptionSpecParse, GivenMarksPresenceEvenOfAnEmptyValue) {
  Argv argv({"--name", ""});
  Args args = argv.args();
  Small s;
  std::string error;
  parse_options(args, kSmall, s, error);
  EXPECT_TRUE(s.name_given);
  EXPECT_EQ(s.name, "");
  EXPECT_FALSE(s.count_given);
  EXPECT_TRUE(error.empty()) << error;
}

}  // namespace
}  // namespace keel::cli
