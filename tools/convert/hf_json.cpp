// The checked JSON helpers every part of the Hugging Face reader shares (hf_json.h).
#include "convert/hf_json.h"

#include <filesystem>
#include <system_error>

#include "convert/source_file.h"

namespace keel::convert::hf {

bool is_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

bool parse_json_file(const std::string& path, json& out, std::string& error) {
  std::string text;
  if (!read_file(path, text, error, kMaxJsonFile)) return false;
  out = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded()) {
    error = "'" + path + "' is not valid JSON";
    return false;
  }
  return true;
}

const json* member(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

bool as_u64(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = uint64_t(v.get<int64_t>());
    return true;
  }
  return false;
}

std::string short_dump(const json& v) {
  std::string s = v.dump();
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

}  // namespace keel::convert::hf
