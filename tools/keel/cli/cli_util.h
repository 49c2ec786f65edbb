// Small helpers shared by the subcommands: error reporting, byte formatting, JSON strings,
// the progress bar.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "keel_generated.h"

namespace keel::cli {

// Prints "keel CMD: MESSAGE" (one line) to stderr; returns exit code 2 / 1.
int usage_error(const char* cmd, const std::string& message);
int fail(const char* cmd, const std::string& message);

std::string human_bytes(uint64_t n);
std::string json_string(const std::string& s);
std::vector<std::string> list_directory(const std::string& dir);
// "models/smollm2.keel" -> "smollm2"
std::string namespace_from_path(const std::string& path);

// "a,b,c" -> {"a", "b", "c"} (appended); false for an empty list or an empty item.
bool split_list(const std::string& s, std::vector<std::string>& out);
// "1024,2048" -> {1024, 2048} (appended); false for an empty list or an item that is not a number
// of type T (a negative one for an unsigned T).
template <typename T>
bool parse_list(const std::string& s, std::vector<T>& out) {
  std::vector<std::string> items;
  if (!split_list(s, items)) return false;
  for (const std::string& item : items) {
    if (std::is_unsigned_v<T> && item[0] == '-') return false;
    std::istringstream is(item);
    T v;
    if (!(is >> v) || !is.eof()) return false;
    out.push_back(v);
  }
  return true;
}

bool parse_kv_policy(const std::string& s, fb::KvPolicy& out);
// How a list of names reads: in an error ("a, b or c") or in a help line ("a | b | c").
enum class NameList { Prose, Help };
// "full, window, streaming, snapkv, snapstream or rocketkv" (without rocketkv: the policies a
// model file can name as its default), for errors naming what --kv-policy expects and its help.
std::string kv_policy_choices(bool with_rocketkv = true, NameList style = NameList::Prose);
// "auto, ref, native, xnnpack or dataflow": the backend registry's names (backend/registry.h),
// for errors naming what --backend expects and its help.
std::string backend_choices(NameList style = NameList::Prose);
const char* kv_policy_name(fb::KvPolicy p);

// Redraws one line on stderr when enabled (a terminal); silent otherwise.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled) {}
  void update(size_t done, size_t total, uint64_t bytes);
  void finish();

 private:
  bool enabled_;
  bool drawn_ = false;
};

}  // namespace keel::cli
