// Minimal command-line parsing for the subcommands: `--name value`, `--name=value`, flags and
// positionals, with errors that name the option and what was expected.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel::cli {

class Args {
 public:
  Args(int argc, char** argv);
  // Consumes a flag (no value). Returns true if present.
  bool flag(const char* long_name, const char* short_name = nullptr);
  // Consumes an option with a value; returns false if absent.
  bool value(const char* long_name, const char* short_name, std::string& out);
  bool u32(const char* long_name, const char* short_name, uint32_t& out);
  bool u64(const char* long_name, const char* short_name, uint64_t& out);
  bool f32(const char* long_name, const char* short_name, float& out);
  // After all options are consumed: the remaining positionals; an error for leftover options.
  bool finish(std::vector<std::string>& positionals);
  const std::string& error() const { return error_; }
  bool ok() const { return error_.empty(); }

 private:
  std::vector<std::string> items_;
  std::vector<bool> used_;
  std::string error_;
};

}  // namespace keel::cli
