// Declarative command-line options: each option is written once, as {names, metavar, help, kind,
// field}, and both its --help lines and its parsing come from that one entry, so the two cannot
// drift apart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <variant>

#include "keel/cli/args.h"

namespace keel::cli {

// How an option's value is read, checked and stored.
enum class OptionKind : uint8_t {
  Text,           // std::string, as given
  U32,            // uint32_t
  U32AtLeastOne,  // uint32_t; 0 is an error ("--sinks must be at least 1")
  U64,            // uint64_t
  F32,            // float
  ZeroIsNone,     // a uint32_t on the command line into an int32_t: 0 is stored as -1, above INT32_MAX is an error
  OneOf,          // one of the two words in `choices`, stored as 1 or 2 into a uint32_t (0: not given)
  Flag,           // bool, true when present
  NegatedFlag,    // bool, false when present (--no-verify)
  Custom,         // the value goes to `store`; its false is "NAME expects <expects>, got 'V'"
};

template <typename T>
struct OptionSpec {
  using Field =
      std::variant<std::monostate, std::string T::*, uint32_t T::*, uint64_t T::*, float T::*, int32_t T::*, bool T::*>;
  const char* long_name;             // "--sinks"
  const char* short_name = nullptr;  // "-m", or none
  const char* metavar = nullptr;     // "N"; none for a flag
  // The help as printed: lines separated by '\n' (no trailing one), each continuation line
  // indented to the help column when rendered.
  const char* help = "";
  OptionKind kind = OptionKind::Text;
  Field field = {};
  const char* choices[2] = {nullptr, nullptr};      // OneOf
  bool (*store)(const std::string&, T&) = nullptr;  // Custom
  const char* expects = nullptr;                    // Custom: what the error names as accepted
  bool T::*given = nullptr;                         // set to true when the option is on the command line (any kind)
};

// Column where an option's help starts (two-space indent, then the names padded to it).
inline constexpr size_t kHelpColumn = 25;

// One option's help lines: "  -m, --model FILE       the .keel model (required)\n" and the
// continuation lines indented to kHelpColumn (a name reaching the column: all of its help).
std::string render_option_help(const char* long_name, const char* short_name, const char* metavar, const char* help);

// `text` as a printf format that prints it unchanged ('%' doubled): a table's help placed into
// CommandLine's help, which is a format whose one %s is the session's help.
std::string printf_literal(const std::string& text);

template <typename T>
std::string render_help(std::span<const OptionSpec<T>> table) {
  std::string out;
  for (const OptionSpec<T>& o : table) out += render_option_help(o.long_name, o.short_name, o.metavar, o.help);
  return out;
}
template <typename T, size_t N>
std::string render_help(const OptionSpec<T> (&table)[N]) {
  return render_help(std::span<const OptionSpec<T>>(table));
}

namespace option_detail {

// Sets `error` to `message` unless an earlier check already failed: the first error is the one reported.
void first_error(std::string& error, std::string message);
std::string expects_error(const char* name, const std::string& expects, const std::string& got);

}  // namespace option_detail

// Reads every option of `table` from `args` into `out`. A malformed value (not a number, a
// missing value) is args.error(), as Args reports it; a well-formed value a check refuses
// ("--sinks must be at least 1") is `check_error`, kept as the first such error. Options absent
// from `args` leave their fields as they were (the caller's defaults).
template <typename T>
void parse_options(Args& args, std::type_identity_t<std::span<const OptionSpec<T>>> table, T& out,
                   std::string& check_error) {
  using option_detail::first_error;
  for (const OptionSpec<T>& o : table) {
    const char* name = o.long_name;
    bool present = false;
    switch (o.kind) {
      case OptionKind::Text: present = args.value(name, o.short_name, out.*std::get<std::string T::*>(o.field)); break;
      case OptionKind::U32: present = args.u32(name, o.short_name, out.*std::get<uint32_t T::*>(o.field)); break;
      case OptionKind::U32AtLeastOne: {
        uint32_t& f = out.*std::get<uint32_t T::*>(o.field);
        present = args.u32(name, o.short_name, f);
        if (present && f == 0) first_error(check_error, std::string(name) + " must be at least 1");
        break;
      }
      case OptionKind::U64: present = args.u64(name, o.short_name, out.*std::get<uint64_t T::*>(o.field)); break;
      case OptionKind::F32: present = args.f32(name, o.short_name, out.*std::get<float T::*>(o.field)); break;
      case OptionKind::ZeroIsNone: {
        uint32_t v = 0;
        present = args.u32(name, o.short_name, v);
        if (!present) break;
        if (v > uint32_t(INT32_MAX))
          first_error(check_error, std::string(name) + " " + std::to_string(v) + " is too large");
        else
          out.*std::get<int32_t T::*>(o.field) = v == 0 ? -1 : int32_t(v);
        break;
      }
      case OptionKind::OneOf: {
        std::string v;
        present = args.value(name, o.short_name, v);
        if (!present) break;
        uint32_t& f = out.*std::get<uint32_t T::*>(o.field);
        if (v == o.choices[0])
          f = 1;
        else if (v == o.choices[1])
          f = 2;
        else
          first_error(check_error,
                      option_detail::expects_error(name, std::string(o.choices[0]) + " or " + o.choices[1], v));
        break;
      }
      case OptionKind::Flag:
        present = args.flag(name, o.short_name);
        if (present) out.*std::get<bool T::*>(o.field) = true;
        break;
      case OptionKind::NegatedFlag:
        present = args.flag(name, o.short_name);
        if (present) out.*std::get<bool T::*>(o.field) = false;
        break;
      case OptionKind::Custom: {
        std::string v;
        present = args.value(name, o.short_name, v);
        if (present && !o.store(v, out)) first_error(check_error, option_detail::expects_error(name, o.expects, v));
        break;
      }
    }
    if (present && o.given) out.*o.given = true;
  }
}

}  // namespace keel::cli
