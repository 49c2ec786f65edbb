// GGUF (v2, v3) reader: metadata, tensor table, hyper-parameters and tokenizer of a llama or
// qwen2 model. Only the header is parsed up front; tensor bytes are read later, one tensor at a
// time, with pread from the file kept open in SourceModel::keep_alive.
//
// The file is untrusted: every count and length is checked against the bytes that remain in the
// file (and against fixed limits) before anything is allocated, so a hostile header yields an
// error message, never a huge allocation or a read out of bounds.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "convert/source_model.h"

namespace keel::convert {
namespace {

// ---- limits -----------------------------------------------------------------------------

constexpr uint64_t kMaxStringBytes = 256ull << 20;  // a chat template is a few KiB
constexpr uint64_t kMaxKeyBytes = 65535;            // GGUF spec
constexpr uint64_t kMaxArrayElems = 1ull << 24;     // vocabularies are ~10^5..10^6
constexpr uint64_t kMaxKvCount = 1ull << 20;
constexpr uint64_t kMaxTensorCount = 1ull << 20;
constexpr uint64_t kMaxTensorNameBytes = 256;  // GGML allows 63
constexpr uint32_t kMaxDims = 4;               // GGML_MAX_DIMS
constexpr uint64_t kMaxDimExtent = 1ull << 40;
constexpr uint32_t kMaxArrayDepth = 4;
constexpr uint64_t kMaxAlignment = 1ull << 20;
constexpr uint32_t kMaxHyper = 1u << 24;  // dims, heads, layers
constexpr size_t kChunkBytes = 1 << 20;

// ---- GGUF value types ---------------------------------------------------------------------

enum GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

const char* gguf_type_name(uint32_t t) {
  static const char* const names[] = {"UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
                                      "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};
  return t < 13 ? names[t] : "unknown";
}

// Size of one scalar of a fixed-size type; 0 for STRING/ARRAY/unknown.
uint32_t scalar_bytes(uint32_t t) {
  switch (t) {
    case kU8:
    case kI8:
    case kBool: return 1;
    case kU16:
    case kI16: return 2;
    case kU32:
    case kI32:
    case kF32: return 4;
    case kU64:
    case kI64:
    case kF64: return 8;
    default: return 0;
  }
}

bool is_integer_type(uint32_t t) {
  return t == kU8 || t == kI8 || t == kU16 || t == kI16 || t == kU32 || t == kI32 || t == kU64 || t == kI64;
}

// ---- GGML tensor types ----------------------------------------------------------------------

const char* ggml_type_name(uint32_t id) {
  switch (id) {
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 4: return "Q4_2";
    case 5: return "Q4_3";
    case 6: return "Q5_0";
    case 7: return "Q5_1";
    case 8: return "Q8_0";
    case 9: return "Q8_1";
    case 10: return "Q2_K";
    case 11: return "Q3_K";
    case 12: return "Q4_K";
    case 13: return "Q5_K";
    case 14: return "Q6_K";
    case 15: return "Q8_K";
    case 16: return "IQ2_XXS";
    case 17: return "IQ2_XS";
    case 18: return "IQ3_XXS";
    case 19: return "IQ1_S";
    case 20: return "IQ4_NL";
    case 21: return "IQ3_S";
    case 22: return "IQ2_S";
    case 23: return "IQ4_XS";
    case 24: return "I8";
    case 25: return "I16";
    case 26: return "I32";
    case 27: return "I64";
    case 28: return "F64";
    case 29: return "IQ1_M";
    case 30: return "BF16";
    case 31: return "Q4_0_4_4";
    case 32: return "Q4_0_4_8";
    case 33: return "Q4_0_8_8";
    case 34: return "TQ1_0";
    case 35: return "TQ2_0";
    case 39: return "MXFP4";
    default: return nullptr;
  }
}

std::optional<SrcType> src_type_from_ggml(uint32_t id) {
  switch (id) {
    case 0: return SrcType::F32;
    case 1: return SrcType::F16;
    case 2: return SrcType::Q4_0;
    case 3: return SrcType::Q4_1;
    case 6: return SrcType::Q5_0;
    case 7: return SrcType::Q5_1;
    case 8: return SrcType::Q8_0;
    case 12: return SrcType::Q4_K;
    case 13: return SrcType::Q5_K;
    case 14: return SrcType::Q6_K;
    case 30: return SrcType::BF16;
    default: return std::nullopt;
  }
}

constexpr const char* kSupportedTypes = "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K";

// ---- errors -------------------------------------------------------------------------------

struct GgufError {
  std::string message;
};

template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::string m;
  (m.append(parts), ...);
  throw GgufError{std::move(m)};
}

std::string str(uint64_t v) { return std::to_string(v); }
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s.substr(0, 80)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > 80) out += "...";
  return out + "'";
}

// ---- the open file ------------------------------------------------------------------------

struct OpenFile {
  int fd = -1;
  std::string path;
  uint64_t size = 0;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads exactly n bytes at offset; false with errno-based message on failure or early EOF.
bool pread_all(int fd, uint8_t* dst, uint64_t n, uint64_t offset, std::string& error) {
  uint64_t done = 0;
  while (done < n) {
    const size_t want = size_t(std::min<uint64_t>(n - done, 1u << 30));
    const ssize_t r = ::pread(fd, dst + done, want, off_t(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      error = std::string("read error at offset ") + str(offset + done) + ": " + std::strerror(errno);
      return false;
    }
    if (r == 0) {
      error = "unexpected end of file at offset " + str(offset + done);
      return false;
    }
    done += uint64_t(r);
  }
  return true;
}

// Sequential little-endian reader over the header, buffered in chunks; every read is checked
// against the file size first.
class Cursor {
 public:
  explicit Cursor(const OpenFile& f) : file_(f) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return file_.size - pos_; }
  // Describes what is being parsed, for truncation messages ("metadata key 'x'").
  void set_context(std::string c) { context_ = std::move(c); }

  void read(void* dst, uint64_t n, const char* what) {
    require(n, what);
    auto* d = static_cast<uint8_t*>(dst);
    while (n > 0) {
      if (pos_ < buf_start_ || pos_ >= buf_start_ + buf_.size()) fill();
      const uint64_t k = std::min<uint64_t>(n, buf_start_ + buf_.size() - pos_);
      std::memcpy(d, buf_.data() + (pos_ - buf_start_), size_t(k));
      d += k;
      pos_ += k;
      n -= k;
    }
  }

  void require(uint64_t n, const char* what) const {
    if (n > remaining()) {
      fail("file truncated: ", what, context_.empty() ? "" : " of ", context_, " needs ", str(n), " bytes at offset ",
           str(pos_), " but the file is ", str(file_.size), " bytes");
    }
  }

  template <typename T>
  T scalar(const char* what) {
    T v;
    read(&v, sizeof v, what);  // little-endian host asserted in ggml_dequant.cpp
    return v;
  }
  uint32_t u32(const char* what) { return scalar<uint32_t>(what); }
  uint64_t u64(const char* what) { return scalar<uint64_t>(what); }

  std::string string(const char* what, uint64_t max_bytes) {
    const uint64_t n = u64(what);
    if (n > max_bytes) {
      fail("string length ", str(n), " of ", what, context_.empty() ? "" : " in ", context_, " at offset ",
           str(pos_ - 8), " exceeds the limit of ", str(max_bytes), " bytes");
    }
    require(n, what);
    std::string s(size_t(n), '\0');
    read(s.data(), n, what);
    return s;
  }

 private:
  void fill() {
    buf_start_ = pos_;
    buf_.resize(size_t(std::min<uint64_t>(kChunkBytes, file_.size - pos_)));
    std::string err;
    if (!pread_all(file_.fd, buf_.data(), buf_.size(), buf_start_, err)) fail(err);
  }

  const OpenFile& file_;
  uint64_t pos_ = 0;
  uint64_t buf_start_ = 0;
  std::vector<uint8_t> buf_;
  std::string context_;
};

// ---- metadata -----------------------------------------------------------------------------

struct KvValue {
  uint32_t type = 0;
  // Scalars: integers in u (unsigned) or i (signed), floats in f, bools in u, strings in s.
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  std::string s;
  // Arrays: element type and count; strings in strs, fixed-size elements as raw bytes.
  uint32_t elem_type = 0;
  uint64_t count = 0;
  std::vector<std::string> strs;
  std::vector<uint8_t> raw;

  // Element i of a numeric array, converted.
  double num_at(uint64_t k) const {
    const uint8_t* p = raw.data() + k * scalar_bytes(elem_type);
    switch (elem_type) {
      case kU8:
      case kBool: return *p;
      case kI8: return int8_t(*p);
      case kU16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        return v;
      }
      case kI16: {
        int16_t v;
        std::memcpy(&v, p, 2);
        return v;
      }
      case kU32: {
        uint32_t v;
        std::memcpy(&v, p, 4);
        return v;
      }
      case kI32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        return v;
      }
      case kF32: {
        float v;
        std::memcpy(&v, p, 4);
        return v;
      }
      case kU64: {
        uint64_t v;
        std::memcpy(&v, p, 8);
        return double(v);
      }
      case kI64: {
        int64_t v;
        std::memcpy(&v, p, 8);
        return double(v);
      }
      case kF64: {
        double v;
        std::memcpy(&v, p, 8);
        return v;
      }
      default: return 0;
    }
  }
};

void read_scalar(Cursor& c, uint32_t type, KvValue& v, const std::string& key) {
  switch (type) {
    case kU8: v.u = c.scalar<uint8_t>("value"); break;
    case kI8: v.i = c.scalar<int8_t>("value"); break;
    case kU16: v.u = c.scalar<uint16_t>("value"); break;
    case kI16: v.i = c.scalar<int16_t>("value"); break;
    case kU32: v.u = c.scalar<uint32_t>("value"); break;
    case kI32: v.i = c.scalar<int32_t>("value"); break;
    case kU64: v.u = c.scalar<uint64_t>("value"); break;
    case kI64: v.i = c.scalar<int64_t>("value"); break;
    case kF32: v.f = c.scalar<float>("value"); break;
    case kF64: v.f = c.scalar<double>("value"); break;
    case kBool: {
      const uint8_t b = c.scalar<uint8_t>("value");
      if (b > 1) fail("metadata key ", quoted(key), ": BOOL value ", str(b), " is not 0 or 1");
      v.u = b;
      break;
    }
    case kString: v.s = c.string("string value", kMaxStringBytes); break;
    default: fail("metadata key ", quoted(key), " has unknown value type ", str(type));
  }
}

// Parses an array body (element type, count, elements). Nested arrays are validated and
// skipped: no key the reader uses holds one.
void read_array(Cursor& c, KvValue& v, const std::string& key, uint32_t depth) {
  if (depth > kMaxArrayDepth) fail("metadata key ", quoted(key), ": arrays nested too deeply");
  v.elem_type = c.u32("array element type");
  v.count = c.u64("array length");
  const uint32_t eb = scalar_bytes(v.elem_type);
  // Smallest encoding of one element: a string is at least its 8-byte length, an array at
  // least its type and length.
  const uint64_t min_elem = v.elem_type == kString ? 8 : v.elem_type == kArray ? 12 : eb;
  if (min_elem == 0) {
    fail("metadata key ", quoted(key), " is an array of unknown value type ", str(v.elem_type));
  }
  if (v.count > kMaxArrayElems || v.count > c.remaining() / min_elem) {
    fail("metadata key ", quoted(key), ": array length ", str(v.count), " of ", gguf_type_name(v.elem_type),
         " at offset ", str(c.pos() - 8), " is larger than the rest of the file (", str(c.remaining()),
         " bytes) allows: file truncated or corrupt");
  }
  if (v.elem_type == kString) {
    // Grows with what is actually parsed, so a hostile count costs no more than the file.
    v.strs.reserve(size_t(std::min<uint64_t>(v.count, 1u << 16)));
    for (uint64_t k = 0; k < v.count; ++k) v.strs.push_back(c.string("array string", kMaxStringBytes));
  } else if (v.elem_type == kArray) {
    for (uint64_t k = 0; k < v.count; ++k) {
      KvValue inner;
      read_array(c, inner, key, depth + 1);
    }
  } else {
    v.raw.resize(size_t(v.count * eb));
    c.read(v.raw.data(), v.raw.size(), "array data");
    if (v.elem_type == kBool) {
      for (uint8_t b : v.raw) {
        if (b > 1) fail("metadata key ", quoted(key), ": BOOL array element ", str(b), " is not 0 or 1");
      }
    }
  }
}

using Metadata = std::map<std::string, KvValue>;

// ---- typed access to metadata ---------------------------------------------------------------

class Meta {
 public:
  explicit Meta(const Metadata& m) : m_(m) {}

  const KvValue* find(const std::string& key) const {
    auto it = m_.find(key);
    return it == m_.end() ? nullptr : &it->second;
  }

  std::optional<uint64_t> opt_uint(const std::string& key, uint64_t max) const {
    const KvValue* v = find(key);
    if (!v) return std::nullopt;
    if (!is_integer_type(v->type)) {
      fail("metadata key ", quoted(key), " has type ", gguf_type_name(v->type), ", expected an integer");
    }
    const bool is_signed = v->type == kI8 || v->type == kI16 || v->type == kI32 || v->type == kI64;
    if (is_signed && v->i < 0) fail("metadata key ", quoted(key), " is negative (", std::to_string(v->i), ")");
    const uint64_t x = is_signed ? uint64_t(v->i) : v->u;
    if (x > max) fail("metadata key ", quoted(key), " = ", str(x), " exceeds the limit ", str(max));
    return x;
  }

  uint32_t req_u32(const std::string& key, uint32_t max = kMaxHyper) const {
    auto x = opt_uint(key, max);
    if (!x) fail("missing metadata key ", quoted(key));
    return uint32_t(*x);
  }

  std::optional<double> opt_float(const std::string& key) const {
    const KvValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type == kF32 || v->type == kF64) return v->f;
    if (is_integer_type(v->type)) {
      return v->type == kI8 || v->type == kI16 || v->type == kI32 || v->type == kI64 ? double(v->i) : double(v->u);
    }
    fail("metadata key ", quoted(key), " has type ", gguf_type_name(v->type), ", expected a number");
  }

  std::optional<std::string> opt_string(const std::string& key) const {
    const KvValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != kString) {
      fail("metadata key ", quoted(key), " has type ", gguf_type_name(v->type), ", expected STRING");
    }
    return v->s;
  }

  std::optional<bool> opt_bool(const std::string& key) const {
    const KvValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != kBool) {
      fail("metadata key ", quoted(key), " has type ", gguf_type_name(v->type), ", expected BOOL");
    }
    return v->u != 0;
  }

  // An array of strings (`strings`) or of fixed-size numbers; nullptr when the key is absent.
  const KvValue* opt_array(const std::string& key, bool strings) const {
    const KvValue* v = find(key);
    if (!v) return nullptr;
    const bool ok = v->type == kArray && (strings ? v->elem_type == kString : (scalar_bytes(v->elem_type) != 0));
    if (!ok) {
      fail("metadata key ", quoted(key), " has type ", gguf_type_name(v->type),
           v->type == kArray ? std::string(" of ") + gguf_type_name(v->elem_type) : std::string(),
           ", expected an array of ", strings ? "STRING" : "numbers");
    }
    return v;
  }

 private:
  const Metadata& m_;
};

// ---- tensor names -------------------------------------------------------------------------

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> ne;  // innermost first, as stored
  uint32_t ggml_type = 0;
  uint64_t offset = 0;  // relative to the data section
};

struct RoleName {
  const char* suffix;
  Role role;
};
constexpr RoleName kBlockTensors[] = {
    {"attn_norm.weight", Role::AttnNorm},
    {"attn_q.weight", Role::Wq},
    {"attn_k.weight", Role::Wk},
    {"attn_v.weight", Role::Wv},
    {"attn_output.weight", Role::Wo},
    {"attn_q.bias", Role::Bq},
    {"attn_k.bias", Role::Bk},
    {"attn_v.bias", Role::Bv},
    {"ffn_norm.weight", Role::FfnNorm},
    {"ffn_gate.weight", Role::FfnGate},
    {"ffn_up.weight", Role::FfnUp},
    {"ffn_down.weight", Role::FfnDown},
    {"attn_q_norm.weight", Role::AttnQNorm},
    {"attn_k_norm.weight", Role::AttnKNorm},
    {"post_attention_norm.weight", Role::PostAttnNorm},
    {"post_ffw_norm.weight", Role::PostFfnNorm},
};

bool is_gemma_role(Role r) {
  return r == Role::AttnQNorm || r == Role::AttnKNorm || r == Role::PostAttnNorm || r == Role::PostFfnNorm;
}

constexpr const char* kKnownNames =
    "token_embd.weight, output_norm.weight, output.weight, blk.N.{attn_norm, attn_q, attn_k, "
    "attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}.weight, blk.N.attn_{q,k,v}.bias, "
    "gemma3: blk.N.{attn_q_norm, attn_k_norm, post_attention_norm, post_ffw_norm}.weight";

// Role and layer of a canonical tensor name; nullopt if the name is not one we know.
std::optional<std::pair<Role, int>> role_of(const std::string& name) {
  if (name == "token_embd.weight") return std::pair{Role::TokenEmbedding, -1};
  if (name == "output_norm.weight") return std::pair{Role::OutputNorm, -1};
  if (name == "output.weight") return std::pair{Role::Output, -1};
  if (name.rfind("blk.", 0) != 0) return std::nullopt;
  size_t p = 4;
  uint64_t layer = 0;
  const size_t digits_start = p;
  while (p < name.size() && name[p] >= '0' && name[p] <= '9' && p - digits_start < 7) {
    layer = layer * 10 + uint64_t(name[p] - '0');
    ++p;
  }
  const size_t n_digits = p - digits_start;
  if (n_digits == 0 || (n_digits > 1 && name[digits_start] == '0')) return std::nullopt;
  if (p >= name.size() || name[p] != '.') return std::nullopt;
  const std::string suffix = name.substr(p + 1);
  for (const auto& rn : kBlockTensors) {
    if (suffix == rn.suffix) return std::pair{rn.role, int(layer)};
  }
  return std::nullopt;
}

std::string shape_str(const std::vector<uint64_t>& s) {
  std::string out = "[";
  for (size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + str(s[k]);
  return out + "]";
}

std::string basename_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// ---- the reader ----------------------------------------------------------------------------

class GgufReader {
 public:
  explicit GgufReader(std::shared_ptr<OpenFile> f) : file_(std::move(f)), cur_(*file_) {}

  SourceModel read() {
    read_header_and_metadata();
    read_tensor_infos();
    SourceModel m;
    m.keep_alive.push_back(file_);
    Meta meta(kv_);
    const std::string arch = read_hyper(meta, m.hyper);
    read_tokenizer(meta, m);
    build_tensors(m);
    m.source_description = "GGUF v" + str(version_) + " (" + arch + "): " + basename_of(file_->path);
    return m;
  }

  // The tokenizer of a GGUF file, tensors not required (vocabulary-only files).
  SourceTokenizer read_tokenizer_only() {
    read_header_and_metadata();
    SourceModel m;
    Meta meta(kv_);
    read_tokenizer(meta, m);
    return m.tokenizer;
  }

 private:
  void read_header_and_metadata() {
    cur_.set_context("the header");
    uint8_t magic[4];
    cur_.read(magic, 4, "magic");
    if (std::memcmp(magic, "GGUF", 4) != 0) {
      char hex[32];
      std::snprintf(hex, sizeof hex, "%02x %02x %02x %02x", magic[0], magic[1], magic[2], magic[3]);
      fail("not a GGUF file: magic bytes are ", hex, ", expected 47 47 55 46 (\"GGUF\")");
    }
    version_ = cur_.u32("version");
    if (version_ == 1) fail("GGUF version 1 is not supported (supported: 2, 3); re-convert the model");
    if (version_ == 0x02000000u || version_ == 0x03000000u) {
      fail("big-endian GGUF files are not supported");
    }
    if (version_ != 2 && version_ != 3) {
      fail("unsupported GGUF version ", str(version_), " (supported: 2, 3)");
    }
    tensor_count_ = cur_.u64("tensor count");
    const uint64_t kv_count = cur_.u64("metadata key/value count");
    // Each key/value takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor info at
    // least 8 (name length) + 4 (n_dims) + 8 (one extent) + 4 (type) + 8 (offset).
    if (kv_count > kMaxKvCount || kv_count > cur_.remaining() / 13) {
      fail("metadata key/value count ", str(kv_count), " is impossible for a file of ", str(file_->size),
           " bytes: file truncated or corrupt");
    }
    if (tensor_count_ > kMaxTensorCount || tensor_count_ > cur_.remaining() / 32) {
      fail("tensor count ", str(tensor_count_), " is impossible for a file of ", str(file_->size),
           " bytes: file truncated or corrupt");
    }
    for (uint64_t k = 0; k < kv_count; ++k) {
      cur_.set_context("metadata key #" + str(k));
      std::string key = cur_.string("key", kMaxKeyBytes);
      if (key.empty()) fail("metadata key #", str(k), " has an empty name");
      cur_.set_context("metadata key " + quoted(key));
      KvValue v;
      v.type = cur_.u32("value type");
      if (v.type == kArray) {
        read_array(cur_, v, key, 1);
      } else {
        read_scalar(cur_, v.type, v, key);
      }
      if (kv_.count(key)) fail("duplicate metadata key ", quoted(key));
      kv_.emplace(std::move(key), std::move(v));
    }
    cur_.set_context("");
    Meta meta(kv_);
    if (auto a = meta.opt_uint("general.alignment", kMaxAlignment)) {
      alignment_ = *a;
      if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {
        fail("general.alignment = ", str(alignment_), " is not a power of two");
      }
    }
  }

  void read_tensor_infos() {
    infos_.reserve(size_t(std::min<uint64_t>(tensor_count_, 4096)));
    for (uint64_t k = 0; k < tensor_count_; ++k) {
      cur_.set_context("tensor info #" + str(k));
      TensorInfo ti;
      ti.name = cur_.string("tensor name", kMaxTensorNameBytes);
      cur_.set_context("tensor info #" + str(k) + " " + quoted(ti.name));
      const uint32_t n_dims = cur_.u32("n_dims");
      if (n_dims == 0 || n_dims > kMaxDims) {
        fail("tensor ", quoted(ti.name), " has n_dims = ", str(n_dims), " (expected 1..", str(kMaxDims), ")");
      }
      uint64_t n_elems = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        const uint64_t e = cur_.u64("dimension");
        if (e == 0 || e > kMaxDimExtent || n_elems > kMaxDimExtent / e) {
          fail("tensor ", quoted(ti.name), " has an invalid dimension ", str(d), " = ", str(e));
        }
        n_elems *= e;
        ti.ne.push_back(e);
      }
      ti.ggml_type = cur_.u32("tensor type");
      ti.offset = cur_.u64("tensor offset");
      infos_.push_back(std::move(ti));
    }
    cur_.set_context("");
    const uint64_t end_of_infos = cur_.pos();
    data_start_ = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
  }

  std::string read_hyper(const Meta& meta, SourceHyper& h) {
    const auto arch = meta.opt_string("general.architecture");
    if (!arch) fail("missing metadata key 'general.architecture'");
    if (*arch != "llama" && *arch != "qwen2" && *arch != "gemma3") {
      fail("unsupported architecture ", quoted(*arch), " (supported: llama, qwen2, gemma3)");
    }
    const std::string a = *arch + ".";
    h.arch_name = *arch;
    h.family = *arch == "gemma3" ? ArchFamily::Gemma3 : ArchFamily::Llama;
    // GGML's NEOX rotation (gemma3, qwen2) pairs the halves of a head.
    h.rope_style = *arch == "llama" ? RopeStyle::Interleaved : RopeStyle::Halves;
    h.context_length = meta.req_u32(a + "context_length", std::numeric_limits<uint32_t>::max());
    h.dim = meta.req_u32(a + "embedding_length");
    h.n_layers = meta.req_u32(a + "block_count", 4096);
    h.ffn_dim = meta.req_u32(a + "feed_forward_length");
    h.n_heads = meta.req_u32(a + "attention.head_count", 4096);
    h.n_kv_heads = uint32_t(meta.opt_uint(a + "attention.head_count_kv", 4096).value_or(h.n_heads));
    const std::pair<uint32_t, const char*> counts[] = {
        {h.context_length, "context_length"}, {h.dim, "embedding_length"},
        {h.n_layers, "block_count"},          {h.ffn_dim, "feed_forward_length"},
        {h.n_heads, "attention.head_count"},  {h.n_kv_heads, "attention.head_count_kv"}};
    for (const auto& [v, name] : counts) {
      if (v == 0) fail("metadata key ", quoted(a + name), " is 0");
    }
    if (h.n_heads % h.n_kv_heads != 0) {
      fail("attention.head_count ", str(h.n_heads), " is not a multiple of attention.head_count_kv ",
           str(h.n_kv_heads));
    }
    const auto key_len = meta.opt_uint(a + "attention.key_length", kMaxHyper);
    const auto value_len = meta.opt_uint(a + "attention.value_length", kMaxHyper);
    if (key_len) {
      h.head_dim = uint32_t(*key_len);
    } else {
      if (h.dim % h.n_heads != 0) {
        fail("embedding_length ", str(h.dim), " is not a multiple of attention.head_count ", str(h.n_heads),
             " and attention.key_length is missing");
      }
      h.head_dim = h.dim / h.n_heads;
    }
    if (value_len && *value_len != h.head_dim) {
      fail("attention.value_length ", str(*value_len), " differs from the head size ", str(h.head_dim),
           " (not supported)");
    }
    if (h.head_dim == 0 || h.head_dim % 2 != 0) fail("head size ", str(h.head_dim), " is not even");
    h.rope_dim = uint32_t(meta.opt_uint(a + "rope.dimension_count", kMaxHyper).value_or(h.head_dim));
    if (h.rope_dim == 0 || h.rope_dim > h.head_dim || h.rope_dim % 2 != 0) {
      fail("rope.dimension_count ", str(h.rope_dim), " must be even and within the head size ", str(h.head_dim));
    }
    const auto eps = meta.opt_float(a + "attention.layer_norm_rms_epsilon");
    if (!eps) fail("missing metadata key ", quoted(a + "attention.layer_norm_rms_epsilon"));
    if (!(*eps > 0 && *eps < 1)) fail("attention.layer_norm_rms_epsilon ", std::to_string(*eps), " is out of range");
    h.norm_eps = float(*eps);
    h.rope_theta = float(meta.opt_float(a + "rope.freq_base").value_or(10000.0));
    if (!(h.rope_theta > 0) || !std::isfinite(h.rope_theta)) fail("rope.freq_base is not a positive number");

    // RoPE scaling: linear (position interpolation) only. Llama-3 style scaling is stored in
    // GGUF as a rope_freqs.weight tensor, refused in build_tensors.
    std::string scaling = meta.opt_string(a + "rope.scaling.type").value_or("none");
    double factor = meta.opt_float(a + "rope.scaling.factor").value_or(1.0);
    if (const auto legacy = meta.opt_float(a + "rope.scale_linear")) {
      if (scaling == "none" && *legacy != 1.0) scaling = "linear";
      factor = *legacy;
    }
    if (scaling == "linear") {
      if (!(factor > 0) || !std::isfinite(factor)) fail("rope scaling factor is not a positive number");
      h.rope_scaling = RopeScalingKind::Linear;
      h.rope_factor = float(factor);
      h.rope_original_context = uint32_t(
          meta.opt_uint(a + "rope.scaling.original_context_length", std::numeric_limits<uint32_t>::max()).value_or(0));
    } else if (scaling != "none") {
      fail("unsupported rope scaling type ", quoted(scaling), " (supported: none, linear)");
    }

    const auto vocab = meta.opt_uint(a + "vocab_size", std::numeric_limits<uint32_t>::max());
    if (vocab) h.vocab_size = uint32_t(*vocab);  // else: the number of tokens, set later
    if (h.family == ArchFamily::Gemma3) read_gemma3_hyper(meta, a, h);
    return *arch;
  }

  // What a gemma3 GGUF states (attention.sliding_window) and what it leaves to the architecture,
  // as llama.cpp reads the same files: every sixth layer global, local layers at RoPE base
  // 10,000 without scaling, and attention scaled by 1/sqrt(query_pre_attn_scalar), which
  // Gemma 3's configs set to head_dim except for the 27B model (62 layers), where it is
  // dim / n_heads. Newer files may name the pattern and the local base; those keys win.
  void read_gemma3_hyper(const Meta& meta, const std::string& a, SourceHyper& h) {
    const auto window = meta.opt_uint(a + "attention.sliding_window", std::numeric_limits<uint32_t>::max());
    if (!window || *window == 0) fail("missing or zero metadata key ", quoted(a + "attention.sliding_window"));
    h.sliding_window = uint32_t(*window);
    h.sliding_window_pattern = uint32_t(meta.opt_uint(a + "attention.sliding_window_pattern", kMaxHyper).value_or(6));
    if (h.sliding_window_pattern == 0) fail(a, "attention.sliding_window_pattern is 0");
    h.rope_theta_local = float(meta.opt_float(a + "rope.freq_base_swa").value_or(10000.0));
    if (!(h.rope_theta_local > 0) || !std::isfinite(h.rope_theta_local)) {
      fail("rope.freq_base_swa is not a positive number");
    }
    const double scalar = h.n_layers == 62 ? double(h.dim) / h.n_heads : double(h.head_dim);
    h.query_scale = float(1.0 / std::sqrt(scalar));
  }

  void read_tokenizer(const Meta& meta, SourceModel& m) {
    SourceTokenizer& t = m.tokenizer;
    const auto model = meta.opt_string("tokenizer.ggml.model");
    if (!model) fail("missing metadata key 'tokenizer.ggml.model'");
    if (*model == "gpt2") {
      t.kind = TokenizerKind::ByteLevelBpe;
    } else if (*model == "llama") {
      t.kind = TokenizerKind::SentencePieceBpe;
    } else {
      fail("unsupported tokenizer model ", quoted(*model), " (supported: gpt2, llama)");
    }
    const bool spm = t.kind == TokenizerKind::SentencePieceBpe;

    const KvValue* tokens = meta.opt_array("tokenizer.ggml.tokens", true);
    if (!tokens) fail("missing metadata key 'tokenizer.ggml.tokens'");
    if (tokens->count == 0) fail("tokenizer.ggml.tokens is empty");
    t.tokens = tokens->strs;
    const uint64_t n = t.tokens.size();
    if (m.hyper.vocab_size == 0) {
      m.hyper.vocab_size = uint32_t(n);
    } else if (m.hyper.vocab_size != n) {
      fail("vocab_size ", str(m.hyper.vocab_size), " differs from the number of tokens ", str(n));
    }

    if (const KvValue* scores = meta.opt_array("tokenizer.ggml.scores", false); scores && spm) {
      if (scores->count != n) {
        fail("tokenizer.ggml.scores has ", str(scores->count), " entries, expected ", str(n));
      }
      t.scores.resize(n);
      for (uint64_t k = 0; k < n; ++k) t.scores[k] = float(scores->num_at(k));
    } else if (spm) {
      fail("missing metadata key 'tokenizer.ggml.scores' (required by a SentencePiece vocabulary)");
    }

    if (const KvValue* types = meta.opt_array("tokenizer.ggml.token_type", false)) {
      if (types->count != n) {
        fail("tokenizer.ggml.token_type has ", str(types->count), " entries, expected ", str(n));
      }
      t.token_types.resize(n);
      for (uint64_t k = 0; k < n; ++k) {
        const double v = types->num_at(k);
        if (!(v >= 0 && v <= 6) || v != std::floor(v)) {
          fail("tokenizer.ggml.token_type[", str(k), "] = ", std::to_string(v), " is not a token type (0..6)");
        }
        t.token_types[k] = uint8_t(v);
      }
    }

    if (!spm) {
      const KvValue* merges = meta.opt_array("tokenizer.ggml.merges", true);
      if (!merges) fail("missing metadata key 'tokenizer.ggml.merges' (required by a gpt2 vocabulary)");
      t.merges = merges->strs;
      const std::string pre = meta.opt_string("tokenizer.ggml.pre").value_or("default");
      if (pre == "smollm") {
        t.pre = PreTokenizer::SmolLM;
      } else if (pre == "gpt-2" || pre == "default") {
        t.pre = PreTokenizer::Gpt2;
      } else if (pre == "llama-bpe" || pre == "llama3") {
        t.pre = PreTokenizer::Llama3;
      } else if (pre == "qwen2") {
        t.pre = PreTokenizer::Qwen2;
      } else {
        fail("unsupported pre-tokenizer tokenizer.ggml.pre = ", quoted(pre),
             " (supported: smollm, gpt-2, default, llama-bpe, llama3, qwen2)");
      }
    } else {
      t.pre = PreTokenizer::None;
    }

    auto special = [&](const char* key) -> int32_t {
      const auto id = meta.opt_uint(key, std::numeric_limits<uint32_t>::max());
      if (!id) return -1;
      if (*id >= n) fail(key, " = ", str(*id), " is outside the vocabulary of ", str(n), " tokens");
      return int32_t(*id);
    };
    t.bos_id = special("tokenizer.ggml.bos_token_id");
    t.eos_id = special("tokenizer.ggml.eos_token_id");
    t.pad_id = special("tokenizer.ggml.padding_token_id");
    t.unk_id = special("tokenizer.ggml.unknown_token_id");
    for (uint64_t k = 0; k < n; ++k) {
      if (t.im_start_id < 0 && t.tokens[k] == "<|im_start|>") t.im_start_id = int32_t(k);
      if (t.im_end_id < 0 && t.tokens[k] == "<|im_end|>") t.im_end_id = int32_t(k);
    }
    // Gemma's turn markers serve where a vocabulary has no ChatML ones (keel chat reads which).
    for (uint64_t k = 0; k < n && t.im_start_id < 0; ++k) {
      if (t.tokens[k] == "<start_of_turn>") t.im_start_id = int32_t(k);
    }
    for (uint64_t k = 0; k < n && t.im_end_id < 0; ++k) {
      if (t.tokens[k] == "<end_of_turn>") t.im_end_id = int32_t(k);
    }
    t.add_bos = meta.opt_bool("tokenizer.ggml.add_bos_token").value_or(spm);
    t.add_space_prefix = meta.opt_bool("tokenizer.ggml.add_space_prefix").value_or(spm);
    m.chat_template = meta.opt_string("tokenizer.chat_template").value_or("");
  }

  // Expected shape (outermost first) of a tensor of role r, with a description of it.
  static std::pair<std::vector<uint64_t>, const char*> expected_shape(Role r, const SourceHyper& h) {
    const uint64_t q = uint64_t(h.n_heads) * h.head_dim, kv = uint64_t(h.n_kv_heads) * h.head_dim;
    switch (r) {
      case Role::TokenEmbedding:
      case Role::Output: return {{h.vocab_size, h.dim}, "[vocab_size, embedding_length]"};
      case Role::AttnNorm:
      case Role::FfnNorm:
      case Role::OutputNorm: return {{h.dim}, "[embedding_length]"};
      case Role::Wq: return {{q, h.dim}, "[head_count*head_dim, embedding_length]"};
      case Role::Wk:
      case Role::Wv: return {{kv, h.dim}, "[head_count_kv*head_dim, embedding_length]"};
      case Role::Wo: return {{h.dim, q}, "[embedding_length, head_count*head_dim]"};
      case Role::Bq: return {{q}, "[head_count*head_dim]"};
      case Role::Bk:
      case Role::Bv: return {{kv}, "[head_count_kv*head_dim]"};
      case Role::FfnGate:
      case Role::FfnUp: return {{h.ffn_dim, h.dim}, "[feed_forward_length, embedding_length]"};
      case Role::FfnDown: return {{h.dim, h.ffn_dim}, "[embedding_length, feed_forward_length]"};
      case Role::AttnQNorm:
      case Role::AttnKNorm: return {{h.head_dim}, "[head_dim]"};
      case Role::PostAttnNorm:
      case Role::PostFfnNorm: return {{h.dim}, "[embedding_length]"};
    }
    return {{}, ""};
  }

  void build_tensors(SourceModel& m) {
    SourceHyper& h = m.hyper;
    struct Extent {
      uint64_t begin, end;
      size_t index;
    };
    std::vector<Extent> extents;
    std::map<std::string, size_t> seen;
    for (size_t k = 0; k < infos_.size(); ++k) {
      const TensorInfo& ti = infos_[k];
      if (seen.count(ti.name)) fail("duplicate tensor ", quoted(ti.name));
      seen.emplace(ti.name, k);
      if (ti.name == "rope_freqs.weight") {
        fail(
            "tensor 'rope_freqs.weight' holds Llama-3 style per-frequency RoPE factors, which "
            "GGUF input does not support; convert from the Hugging Face checkpoint instead");
      }
      const auto role = role_of(ti.name);
      if (!role) fail("unknown tensor ", quoted(ti.name), " (expected one of ", kKnownNames, ")");
      const auto type = src_type_from_ggml(ti.ggml_type);
      if (!type) {
        const char* tn = ggml_type_name(ti.ggml_type);
        fail("tensor ", ti.name, " has type ", tn ? tn : "unknown", " (", str(ti.ggml_type),
             "), supported: ", kSupportedTypes);
      }
      SourceTensor t;
      t.name = ti.name;
      t.role = role->first;
      t.layer = role->second;
      t.type = *type;
      t.shape.assign(ti.ne.rbegin(), ti.ne.rend());
      if (t.layer >= 0 && uint32_t(t.layer) >= h.n_layers) {
        fail("tensor ", ti.name, " names layer ", str(uint64_t(t.layer)), " but block_count is ", str(h.n_layers));
      }
      const auto [want, what] = expected_shape(t.role, h);
      if (t.shape != want) {
        fail("tensor ", ti.name, " has shape ", shape_str(t.shape), ", expected ", shape_str(want), " = ", what);
      }
      const uint32_t be = block_elems(t.type);
      if (ti.ne[0] % be != 0) {
        fail("tensor ", ti.name, ": row length ", str(ti.ne[0]), " is not a multiple of the ", src_type_name(t.type),
             " block size ", str(be));
      }
      uint64_t n_elems = 1;
      for (uint64_t e : ti.ne) n_elems *= e;  // bounded when the info was read
      t.n_bytes = encoded_bytes(t.type, n_elems);
      if (ti.offset % alignment_ != 0) {
        fail("tensor ", ti.name, " data offset ", str(ti.offset), " is not a multiple of the alignment ",
             str(alignment_));
      }
      const uint64_t begin = data_start_ + ti.offset;
      if (ti.offset > file_->size || begin > file_->size || t.n_bytes > file_->size - begin) {
        fail("tensor ", ti.name, " data [", str(data_start_), " + ", str(ti.offset), ", +", str(t.n_bytes),
             " bytes) extends past the end of the file (", str(file_->size),
             " bytes); the file is truncated or corrupt");
      }
      extents.push_back({begin, begin + t.n_bytes, m.tensors.size()});
      t.read_range = [file = file_, begin, n = t.n_bytes, name = ti.name](uint64_t off, uint64_t len, uint8_t* out,
                                                                          std::string& error) {
        if (off > n || len > n - off) {
          error = "tensor " + name + ": range [" + str(off) + ", +" + str(len) + ") outside its " + str(n) + " bytes";
          return false;
        }
        std::string err;
        if (!pread_all(file->fd, out, len, begin + off, err)) {
          error = file->path + ": tensor " + name + ": " + err;
          return false;
        }
        return true;
      };
      t.read = [file = file_, begin, n = t.n_bytes, name = ti.name](std::vector<uint8_t>& out, std::string& error) {
        try {
          out.resize(size_t(n));
        } catch (const std::bad_alloc&) {
          error = "out of memory reading tensor " + name + " (" + str(n) + " bytes)";
          return false;
        }
        std::string err;
        if (!pread_all(file->fd, out.data(), n, begin, err)) {
          error = file->path + ": tensor " + name + ": " + err;
          return false;
        }
        return true;
      };
      m.tensors.push_back(std::move(t));
    }

    std::sort(extents.begin(), extents.end(), [](const Extent& x, const Extent& y) { return x.begin < y.begin; });
    for (size_t k = 1; k < extents.size(); ++k) {
      if (extents[k].begin < extents[k - 1].end) {
        fail("tensors ", m.tensors[extents[k - 1].index].name, " and ", m.tensors[extents[k].index].name,
             " overlap in the data section");
      }
    }

    auto require = [&](const std::string& name) {
      if (!seen.count(name)) fail("missing tensor ", name);
    };
    require("token_embd.weight");
    require("output_norm.weight");
    h.tied_output = !seen.count("output.weight");
    h.qkv_bias = seen.count("blk.0.attn_q.bias") != 0;
    for (uint32_t l = 0; l < h.n_layers; ++l) {
      const std::string p = "blk." + str(l) + ".";
      for (const auto& rn : kBlockTensors) {
        const bool bias = rn.role == Role::Bq || rn.role == Role::Bk || rn.role == Role::Bv;
        const std::string name = p + rn.suffix;
        if (is_gemma_role(rn.role)) {
          if (h.family == ArchFamily::Gemma3) {
            require(name);
          } else if (seen.count(name)) {
            fail("tensor ", name, " belongs to gemma3, not to ", h.arch_name);
          }
        } else if (!bias) {
          require(name);
        } else if (h.qkv_bias && !seen.count(name)) {
          fail("missing tensor ", name,
               " (blk.0.attn_q.bias is present, so every layer needs "
               "q, k and v biases)");
        } else if (!h.qkv_bias && seen.count(name)) {
          fail("tensor ", name, " is present but blk.0.attn_q.bias is not");
        }
      }
    }
  }

  std::shared_ptr<OpenFile> file_;
  Cursor cur_;
  uint32_t version_ = 0;
  uint64_t tensor_count_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_start_ = 0;
  Metadata kv_;
  std::vector<TensorInfo> infos_;
};

}  // namespace

namespace {

std::shared_ptr<OpenFile> open_gguf(const std::string& path, std::string& error) {
  auto file = std::make_shared<OpenFile>();
  file->path = path;
  file->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file->fd < 0) {
    error = path + ": cannot open: " + std::strerror(errno);
    return nullptr;
  }
  struct stat st {};
  if (::fstat(file->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error = path + ": not a regular file";
    return nullptr;
  }
  file->size = uint64_t(st.st_size);
  return file;
}

}  // namespace

std::optional<SourceTokenizer> read_gguf_tokenizer(const std::string& path, std::string& error) {
  auto file = open_gguf(path, error);
  if (!file) return std::nullopt;
  try {
    GgufReader reader(file);
    return reader.read_tokenizer_only();
  } catch (const GgufError& e) {
    error = path + ": " + e.message;
  } catch (const std::bad_alloc&) {
    error = path + ": out of memory while reading the GGUF header";
  }
  return std::nullopt;
}

std::optional<SourceModel> read_gguf(const std::string& path, std::string& error) {
  auto file = open_gguf(path, error);
  if (!file) return std::nullopt;
  try {
    GgufReader reader(file);
    return reader.read();
  } catch (const GgufError& e) {
    error = path + ": " + e.message;
  } catch (const std::bad_alloc&) {
    error = path + ": out of memory while reading the GGUF header";
  }
  return std::nullopt;
}

}  // namespace keel::convert
