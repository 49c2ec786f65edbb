#include "keel/cli/args.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace keel::cli {

Args::Args(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) items_.emplace_back(argv[i]);
  used_.assign(items_.size(), false);
}

static bool matches(const std::string& item, const char* long_name, const char* short_name) {
  return (long_name && item == long_name) || (short_name && item == short_name);
}

bool Args::flag(const char* long_name, const char* short_name) {
  bool found = false;
  for (size_t i = 0; i < items_.size(); ++i) {
    if (!used_[i] && matches(items_[i], long_name, short_name)) {
      used_[i] = true;
      found = true;
    }
  }
  return found;
}

bool Args::value(const char* long_name, const char* short_name, std::string& out) {
  bool found = false;
  const std::string eq = std::string(long_name) + "=";
  for (size_t i = 0; i < items_.size(); ++i) {
    if (used_[i]) continue;
    if (items_[i].rfind(eq, 0) == 0) {
      used_[i] = true;
      out = items_[i].substr(eq.size());
      found = true;
    } else if (matches(items_[i], long_name, short_name)) {
      used_[i] = true;
      if (i + 1 >= items_.size()) {
        if (error_.empty()) error_ = std::string("option ") + long_name + " needs a value";
        return false;
      }
      used_[i + 1] = true;
      out = items_[i + 1];
      found = true;
      ++i;
    }
  }
  return found;
}

bool Args::u64(const char* long_name, const char* short_name, uint64_t& out) {
  std::string s;
  if (!value(long_name, short_name, s)) return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = strtoull(s.c_str(), &end, 10);
  if (s.empty() || s[0] == '-' || *end != '\0' || errno == ERANGE) {
    if (error_.empty())
      error_ = std::string("option ") + long_name + " expects a non-negative integer, got '" + s + "'";
    return false;
  }
  out = v;
  return true;
}

bool Args::u32(const char* long_name, const char* short_name, uint32_t& out) {
  uint64_t v = 0;
  if (!u64(long_name, short_name, v)) return false;
  if (v > 0xffffffffull) {
    if (error_.empty()) error_ = std::string("option ") + long_name + " is out of range: " + std::to_string(v);
    return false;
  }
  out = static_cast<uint32_t>(v);
  return true;
}

bool Args::f32(const char* long_name, const char* short_name, float& out) {
  std::string s;
  if (!value(long_name, short_name, s)) return false;
  char* end = nullptr;
  const float v = strtof(s.c_str(), &end);
  if (s.empty() || *end != '\0') {
    if (error_.empty()) error_ = std::string("option ") + long_name + " expects a number, got '" + s + "'";
    return false;
  }
  out = v;
  return true;
}

bool Args::finish(std::vector<std::string>& positionals) {
  positionals.clear();
  for (size_t i = 0; i < items_.size(); ++i) {
    if (used_[i]) continue;
    if (items_[i].size() > 1 && items_[i][0] == '-') {
      if (error_.empty()) error_ = "unknown option '" + items_[i] + "'";
      continue;
    }
    positionals.push_back(items_[i]);
  }
  return error_.empty();
}

}  // namespace keel::cli
