// Safetensors headers read and checked against their files (dtype F32, F16 or BF16, a shape whose
// byte size is the data range's, ranges inside the data), and the weights of a directory found
// through its index, its single file or its shards.
#include "convert/hf_safetensors.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>
#include <utility>

#include "convert/hf_json.h"

namespace keel::convert::hf {
namespace {

constexpr uint64_t kMaxSafetensorsHeader = 100u << 20;  // the safetensors format's own limit

bool read_safetensors(const std::string& path, std::vector<StTensor>& out, std::string& error) {
  auto f = open_file(path, error);
  if (!f) return false;
  auto fail = [&](const std::string& what) {
    error = "safetensors '" + path + "': " + what;
    return false;
  };
  if (f->size < 8) return fail("truncated: " + std::to_string(f->size) + " bytes, the header length needs 8");
  uint8_t b8[8];
  if (!read_at(*f, b8, 8, 0, error)) return false;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | b8[i];
  if (n < 2 || n > f->size - 8 || n > kMaxSafetensorsHeader)
    return fail("header length " + std::to_string(n) + " is invalid (file has " + std::to_string(f->size) +
                " bytes; the header must fit after the 8-byte length and " + "be at most " +
                std::to_string(kMaxSafetensorsHeader) + ")");
  std::string text(n, '\0');
  if (!read_at(*f, text.data(), n, 8, error)) return false;
  const json header = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return fail("header is not a JSON object");
  const uint64_t data_start = 8 + n, data_size = f->size - data_start;

  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string& tensor = name;  // clang 14 cannot capture a structured binding
    auto bad = [&](const std::string& what) { return fail("tensor '" + tensor + "': " + what); };
    const json* dtype = member(info, "dtype");
    const json* shape = member(info, "shape");
    const json* offsets = member(info, "data_offsets");
    if (!dtype || !dtype->is_string() || !shape || !shape->is_array() || !offsets || !offsets->is_array() ||
        offsets->size() != 2)
      return bad("expected {dtype, shape, data_offsets: [begin, end]}, found " + short_dump(info));
    StTensor t;
    t.name = name;
    uint64_t elem_bytes;
    const std::string dt = dtype->get<std::string>();
    if (dt == "F32") {
      t.type = SrcType::F32;
      elem_bytes = 4;
    } else if (dt == "F16") {
      t.type = SrcType::F16;
      elem_bytes = 2;
    } else if (dt == "BF16") {
      t.type = SrcType::BF16;
      elem_bytes = 2;
    } else {
      return bad("dtype " + dt + " is not supported (expected F32, F16 or BF16)");
    }
    uint64_t numel = 1;
    for (const json& d : *shape) {
      uint64_t x;
      if (!as_u64(d, x) || x > (uint64_t(1) << 40) || __builtin_mul_overflow(numel, x, &numel) ||
          numel > (uint64_t(1) << 48))
        return bad("shape " + short_dump(*shape) + " is invalid");
      t.shape.push_back(x);
    }
    uint64_t begin, end;
    if (!as_u64((*offsets)[0], begin) || !as_u64((*offsets)[1], end) || begin > end)
      return bad("data_offsets " + short_dump(*offsets) + " are invalid");
    if (end > data_size)
      return bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 "] pass the end of the data (" + std::to_string(data_size) + " bytes)");
    if (end - begin != numel * elem_bytes)
      return bad(std::to_string(end - begin) + " data bytes, but " + dt + " " + short_dump(*shape) + " needs " +
                 std::to_string(numel * elem_bytes));
    t.offset = data_start + begin;
    t.n_bytes = end - begin;
    t.file = f;
    out.push_back(std::move(t));
  }
  return true;
}

bool plain_file_name(const std::string& s) {
  return !s.empty() && s.find('/') == std::string::npos && s != "." && s != "..";
}

}  // namespace

bool read_weights(const std::string& dir, std::vector<StTensor>& tensors, std::string& what, std::string& error) {
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::vector<std::string> files;
  std::map<std::string, std::string> weight_map;  // tensor -> shard
  if (is_file(index_path)) {
    json index;
    if (!parse_json_file(index_path, index, error)) return false;
    const json* wm = member(index, "weight_map");
    if (!wm || !wm->is_object()) {
      error = "'" + index_path + "': missing 'weight_map' object";
      return false;
    }
    std::set<std::string> shards;
    for (const auto& [name, file] : wm->items()) {
      if (!file.is_string() || !plain_file_name(file.get<std::string>())) {
        error = "'" + index_path + "': tensor '" + name + "' maps to " + short_dump(file) +
                ", expected a file name in the same directory";
        return false;
      }
      weight_map[name] = file.get<std::string>();
      shards.insert(file.get<std::string>());
    }
    files.assign(shards.begin(), shards.end());
    what = "model.safetensors.index.json, " + std::to_string(files.size()) + " shards";
  } else if (is_file(dir + "/model.safetensors")) {
    files.push_back("model.safetensors");
    what = "model.safetensors";
  } else {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0 && is_file(e.path().string()))
        files.push_back(name);
    }
    std::sort(files.begin(), files.end());
    what = std::to_string(files.size()) + " *.safetensors files";
  }
  if (files.empty()) {
    error = "no weights in '" + dir + "' (expected model.safetensors, model.safetensors.index.json or *.safetensors)";
    return false;
  }
  std::map<std::string, std::string> seen;  // tensor -> file
  for (const std::string& file : files) {
    std::vector<StTensor> part;
    if (!read_safetensors(dir + "/" + file, part, error)) return false;
    for (StTensor& t : part) {
      auto [it, fresh] = seen.emplace(t.name, file);
      if (!fresh) {
        error = "tensor '" + t.name + "' is in both '" + it->second + "' and '" + file + "'";
        return false;
      }
      tensors.push_back(std::move(t));
    }
  }
  for (const auto& [name, file] : weight_map) {
    auto it = seen.find(name);
    if (it == seen.end() || it->second != file) {
      error = "model.safetensors.index.json places '" + name + "' in '" + file + "', which does not hold it";
      return false;
    }
  }
  return true;
}

}  // namespace keel::convert::hf
