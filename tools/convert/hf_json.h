// The JSON files of a Hugging Face model directory (config.json, tokenizer.json,
// tokenizer_config.json, model.safetensors.index.json) as the readers of its parts see them:
// read whole, parsed without exceptions, and accessed through checked helpers that never throw
// on a missing key or a value of the wrong type.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace keel::convert::hf {

using json = nlohmann::json;

// Far above any configuration or tokenizer file; it keeps the allocation a file's size drives
// reasonable.
constexpr uint64_t kMaxJsonFile = 512u << 20;

bool is_file(const std::string& path);
// The file at `path` parsed into `out`; false with `error` naming the path when it cannot be read
// or is not valid JSON.
bool parse_json_file(const std::string& path, json& out, std::string& error);
// obj[key] when obj is an object holding a non-null key, else nullptr.
const json* member(const json& obj, const char* key);
// A non-negative integer into `out`; false for anything else (negative, fractional, not a number).
bool as_u64(const json& v, uint64_t& out);
// v as JSON text, cut to 200 characters, for error messages.
std::string short_dump(const json& v);

}  // namespace keel::convert::hf
