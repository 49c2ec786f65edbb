#include "support/tokenizer_fixtures.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "convert/keel_writer.h"
#include "convert/source_file.h"
#include "flatbuffers/flatbuffers.h"
#include "support/test_support.h"
#include "text/stream_decoder.h"

namespace keel::test {
namespace {

using convert::PreTokenizer;
using convert::SourceTokenizer;
using convert::TokenizerKind;
using nlohmann::json;

constexpr uint8_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6;

bool read_text(const std::string& path, std::string& out) {
  std::string error;
  return convert::read_file(path, out, error);
}

const char* kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

bool byte_level_with_regex(const json& p, bool use_regex) {
  return p.value("type", "") == "ByteLevel" && p.value("use_regex", true) == use_regex &&
         !p.value("add_prefix_space", false);
}

bool detect_pre_tokenizer(const json& pre, PreTokenizer& out) {
  if (pre.is_null()) {
    out = PreTokenizer::None;
    return true;
  }
  if (byte_level_with_regex(pre, true)) {
    out = PreTokenizer::Gpt2;
    return true;
  }
  if (pre.value("type", "") != "Sequence") return false;
  const json& seq = pre["pretokenizers"];
  if (seq.size() == 2 && seq[0].value("type", "") == "Digits" && seq[0].value("individual_digits", false) &&
      byte_level_with_regex(seq[1], true)) {
    out = PreTokenizer::SmolLM;
    return true;
  }
  if (seq.size() == 2 && seq[0].value("type", "") == "Split" && byte_level_with_regex(seq[1], false)) {
    const std::string pattern = seq[0]["pattern"].value("Regex", "");
    if (pattern == kLlama3Pattern)
      out = PreTokenizer::Llama3;
    else if (pattern == kQwen2Pattern)
      out = PreTokenizer::Qwen2;
    else
      return false;
    return true;
  }
  return false;
}

// Minimal GGUF metadata reader: header and key/value pairs, no tensors.
class GgufMeta {
 public:
  explicit GgufMeta(std::string bytes) : b_(std::move(bytes)) {}

  bool parse(std::string& error) {
    if (b_.size() < 24 || b_.compare(0, 4, "GGUF") != 0) return fail(error, "not a GGUF file");
    pos_ = 4;
    const uint32_t version = u32();
    if (version != 2 && version != 3) return fail(error, "unsupported GGUF version");
    u64();  // tensors
    const uint64_t n_kv = u64();
    for (uint64_t i = 0; i < n_kv && ok_; ++i) {
      const std::string key = str();
      const uint32_t type = u32();
      Value v;
      v.type = type;
      if (type == 9) {
        v.elem_type = u32();
        const uint64_t n = u64();
        if (n > b_.size()) return fail(error, "array too long in " + key);
        for (uint64_t k = 0; k < n && ok_; ++k) read_scalar(v.elem_type, v);
      } else {
        read_scalar(type, v);
      }
      kv_[key] = std::move(v);
    }
    if (!ok_) return fail(error, "truncated metadata");
    return true;
  }

  struct Value {
    uint32_t type = 0, elem_type = 0;
    std::vector<std::string> strings;
    std::vector<double> numbers;
  };
  const Value* get(const std::string& key) const {
    auto it = kv_.find(key);
    return it == kv_.end() ? nullptr : &it->second;
  }

 private:
  bool fail(std::string& error, const std::string& what) {
    error = what;
    return false;
  }
  bool need(size_t n) {
    if (b_.size() - pos_ < n) ok_ = false;
    return ok_;
  }
  template <typename T>
  T scalar() {
    T v{};
    if (!need(sizeof(T))) return v;
    memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint32_t u32() { return scalar<uint32_t>(); }
  uint64_t u64() { return scalar<uint64_t>(); }
  std::string str() {
    const uint64_t n = u64();
    if (!need(n)) return {};
    std::string s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  void read_scalar(uint32_t type, Value& v) {
    switch (type) {
      case 0: v.numbers.push_back(scalar<uint8_t>()); break;
      case 1: v.numbers.push_back(scalar<int8_t>()); break;
      case 2: v.numbers.push_back(scalar<uint16_t>()); break;
      case 3: v.numbers.push_back(scalar<int16_t>()); break;
      case 4: v.numbers.push_back(scalar<uint32_t>()); break;
      case 5: v.numbers.push_back(scalar<int32_t>()); break;
      case 6: v.numbers.push_back(scalar<float>()); break;
      case 7: v.numbers.push_back(scalar<uint8_t>()); break;
      case 8: v.strings.push_back(str()); break;
      case 10: v.numbers.push_back(double(scalar<uint64_t>())); break;
      case 11: v.numbers.push_back(double(scalar<int64_t>())); break;
      case 12: v.numbers.push_back(scalar<double>()); break;
      default: ok_ = false;
    }
  }

  std::string b_;
  size_t pos_ = 0;
  bool ok_ = true;
  std::map<std::string, Value> kv_;
};

}  // namespace

bool load_hf_tokenizer_json(const std::string& dir, SourceTokenizer& out, std::string& error) {
  std::string text;
  if (!read_text(dir + "/tokenizer.json", text)) {
    error = "cannot read " + dir + "/tokenizer.json";
    return false;
  }
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.contains("model") || j["model"].value("type", "") != "BPE") {
    error = "expected a BPE tokenizer.json";
    return false;
  }
  out = SourceTokenizer{};
  out.kind = TokenizerKind::ByteLevelBpe;
  if (!detect_pre_tokenizer(j["pre_tokenizer"], out.pre)) {
    error = "unsupported pre_tokenizer " + j["pre_tokenizer"].dump();
    return false;
  }
  std::map<int32_t, std::pair<std::string, uint8_t>> by_id;
  for (const auto& [piece, id] : j["model"]["vocab"].items()) {
    by_id[id.get<int32_t>()] = {piece, kNormal};
  }
  for (const auto& a : j["added_tokens"]) {
    by_id[a["id"].get<int32_t>()] = {a["content"].get<std::string>(),
                                     a.value("special", false) ? kControl : kUserDefined};
  }
  if (by_id.empty() || by_id.rbegin()->first != int32_t(by_id.size()) - 1) {
    error = "token ids are not dense";
    return false;
  }
  for (const auto& [id, entry] : by_id) {
    out.tokens.push_back(entry.first);
    out.token_types.push_back(entry.second);
    if (entry.first == "<|im_start|>") out.im_start_id = id;
    if (entry.first == "<|im_end|>") out.im_end_id = id;
  }
  for (const auto& m : j["model"]["merges"]) {
    out.merges.push_back(m.is_string() ? m.get<std::string>()
                                       : m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  std::string config_text;
  if (read_text(dir + "/config.json", config_text)) {
    const json c = json::parse(config_text, nullptr, false);
    if (!c.is_discarded()) {
      out.bos_id = c.value("bos_token_id", -1);
      out.eos_id = c.value("eos_token_id", -1);
      out.pad_id = c.value("pad_token_id", -1);
    }
  }
  return true;
}

bool load_llama2c_tokenizer(const std::string& path, SourceTokenizer& out, std::string& error) {
  std::string b;
  if (!read_text(path, b) || b.size() < 4) {
    error = "cannot read " + path;
    return false;
  }
  out = SourceTokenizer{};
  out.kind = TokenizerKind::SentencePieceBpe;
  size_t pos = 4;  // int32 max_token_length
  while (pos < b.size()) {
    float score;
    int32_t len;
    if (b.size() - pos < 8) {
      error = "truncated token header";
      return false;
    }
    memcpy(&score, b.data() + pos, 4);
    memcpy(&len, b.data() + pos + 4, 4);
    pos += 8;
    if (len < 0 || b.size() - pos < size_t(len)) {
      error = "truncated token";
      return false;
    }
    std::string piece = b.substr(pos, size_t(len));
    pos += size_t(len);
    // The llama2.c exporter spelled U+2581 as ' ' and BOS/EOS as "\n<s>\n" / "\n</s>\n".
    std::string restored;
    for (char c : piece) {
      if (c == ' ')
        restored += "\xE2\x96\x81";
      else
        restored += c;
    }
    const size_t id = out.tokens.size();
    uint8_t type = kNormal;
    if (id == 0) type = kUnknown;
    if (id == 1) restored = "<s>", type = kControl;
    if (id == 2) restored = "</s>", type = kControl;
    if (text::parse_byte_token(restored.data(), restored.size()) >= 0) type = kByte;
    out.tokens.push_back(restored);
    out.scores.push_back(score);
    out.token_types.push_back(type);
  }
  out.unk_id = 0;
  out.bos_id = 1;
  out.eos_id = 2;
  out.add_bos = true;
  out.add_space_prefix = true;
  return true;
}

bool load_gguf_vocab(const std::string& path, SourceTokenizer& out, std::string& error) {
  std::string bytes;
  if (!read_text(path, bytes)) {
    error = "cannot read " + path;
    return false;
  }
  GgufMeta meta(std::move(bytes));
  if (!meta.parse(error)) return false;
  const auto* model = meta.get("tokenizer.ggml.model");
  const auto* tokens = meta.get("tokenizer.ggml.tokens");
  if (!model || model->strings.empty() || !tokens) {
    error = "no tokenizer.ggml.model / tokens";
    return false;
  }
  out = SourceTokenizer{};
  out.tokens = tokens->strings;
  if (model->strings[0] == "llama") {
    out.kind = TokenizerKind::SentencePieceBpe;
    out.add_space_prefix = true;
  } else if (model->strings[0] == "gpt2") {
    out.kind = TokenizerKind::ByteLevelBpe;
    out.pre = PreTokenizer::Gpt2;
  } else {
    error = "unsupported tokenizer model " + model->strings[0];
    return false;
  }
  if (const auto* v = meta.get("tokenizer.ggml.scores")) {
    for (double d : v->numbers) out.scores.push_back(float(d));
  }
  if (const auto* v = meta.get("tokenizer.ggml.token_type")) {
    for (double d : v->numbers) out.token_types.push_back(uint8_t(d));
  }
  if (const auto* v = meta.get("tokenizer.ggml.merges")) out.merges = v->strings;
  auto id = [&](const char* key) {
    const auto* v = meta.get(key);
    return v && !v->numbers.empty() ? int32_t(v->numbers[0]) : -1;
  };
  out.bos_id = id("tokenizer.ggml.bos_token_id");
  out.eos_id = id("tokenizer.ggml.eos_token_id");
  out.unk_id = id("tokenizer.ggml.unknown_token_id");
  out.pad_id = id("tokenizer.ggml.padding_token_id");
  if (const auto* v = meta.get("tokenizer.ggml.add_bos_token")) out.add_bos = v->numbers[0] != 0;
  if (const auto* v = meta.get("tokenizer.ggml.add_space_prefix")) {
    out.add_space_prefix = v->numbers[0] != 0;
  }
  return true;
}

std::vector<uint8_t> build_tokenizer_table(const SourceTokenizer& tok) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto tokens = fbb.CreateVectorOfStrings(tok.tokens);
  flatbuffers::Offset<flatbuffers::Vector<float>> scores;
  if (!tok.scores.empty()) scores = fbb.CreateVector(tok.scores);
  flatbuffers::Offset<flatbuffers::Vector<fb::TokenType>> types;
  if (!tok.token_types.empty()) {
    types = fbb.CreateVector(reinterpret_cast<const fb::TokenType*>(tok.token_types.data()), tok.token_types.size());
  }
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>> merges;
  if (!tok.merges.empty()) merges = fbb.CreateVectorOfStrings(tok.merges);
  fb::TokenizerBuilder b(fbb);
  b.add_kind(fb::TokenizerKind(uint8_t(tok.kind)));
  b.add_pre(fb::PreTokenizer(uint8_t(tok.pre)));
  b.add_tokens(tokens);
  if (!tok.scores.empty()) b.add_scores(scores);
  if (!tok.token_types.empty()) b.add_token_types(types);
  if (!tok.merges.empty()) b.add_merges(merges);
  b.add_bos_id(tok.bos_id);
  b.add_eos_id(tok.eos_id);
  b.add_pad_id(tok.pad_id);
  b.add_unk_id(tok.unk_id);
  b.add_im_start_id(tok.im_start_id);
  b.add_im_end_id(tok.im_end_id);
  b.add_add_bos(tok.add_bos);
  b.add_add_space_prefix(tok.add_space_prefix);
  fbb.Finish(b.Finish());
  std::vector<uint8_t> out(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  flatbuffers::Verifier verifier(out.data(), out.size());
  EXPECT_TRUE(verifier.VerifyBuffer<fb::Tokenizer>(nullptr)) << "tokenizer table fails verify";
  return out;
}

std::vector<int32_t> LoadedTokenizer::encode(const std::string& text, bool add_bos, bool parse_special) {
  text::EncodeOptions opt;
  opt.add_bos = add_bos;
  opt.parse_special = parse_special;
  size_t n = 0;
  // First call counts, second fills: exercises the PromptTooLong contract on every string.
  Error e = tok.encode(text.data(), text.size(), opt, Span<int32_t>(), &n, scratch);
  if (n > 0) {
    EXPECT_EQ(e.status(), Status::PromptTooLong) << e.message();
  } else {
    EXPECT_TRUE(e.ok()) << e.message();
  }
  std::vector<int32_t> ids(n);
  size_t n2 = 0;
  e = tok.encode(text.data(), text.size(), opt, Span<int32_t>(ids.data(), ids.size()), &n2, scratch);
  EXPECT_TRUE(e.ok()) << e.message();
  EXPECT_EQ(n2, n);
  EXPECT_EQ(scratch.used(), 0u) << "encode must give its scratch back";
  ids.resize(n2);
  return ids;
}

std::string LoadedTokenizer::decode(const std::vector<int32_t>& ids, bool print_special) {
  text::DecodeOptions opt;
  opt.print_special = print_special;
  text::StreamDecoder dec(tok, opt);
  std::string out;
  std::vector<char> buf(dec.max_push_bytes());
  for (int32_t id : ids) {
    size_t n = 0;
    const Error e = dec.push(id, Span<char>(buf.data(), buf.size()), &n);
    EXPECT_TRUE(e.ok()) << e.message();
    out.append(buf.data(), n);
  }
  const size_t n = dec.flush(Span<char>(buf.data(), buf.size()));
  out.append(buf.data(), n);
  return out;
}

namespace {

// Sizes the arenas for t->table and initializes the tokenizer over it.
std::unique_ptr<LoadedTokenizer> init_loaded(std::unique_ptr<LoadedTokenizer> t) {
  const auto* table = flatbuffers::GetRoot<fb::Tokenizer>(t->table.data());
  t->arena_memory.resize(text::Tokenizer::arena_bytes(table));
  t->scratch_memory.resize(text::Tokenizer::scratch_bytes());
  t->arena.reset(t->arena_memory.data(), t->arena_memory.size());
  t->scratch.reset(t->scratch_memory.data(), t->scratch_memory.size());
  const Error e = t->tok.init(table, t->arena);
  if (!e.ok()) {
    ADD_FAILURE() << "Tokenizer::init: " << e.message();
    return nullptr;
  }
  return t;
}

}  // namespace

std::unique_ptr<LoadedTokenizer> make_tokenizer(const SourceTokenizer& src) {
  auto t = std::make_unique<LoadedTokenizer>();
  t->table = build_tokenizer_table(src);
  return init_loaded(std::move(t));
}

std::unique_ptr<LoadedTokenizer> make_tokenizer_as_converted(const SourceTokenizer& src) {
  auto t = std::make_unique<LoadedTokenizer>();
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(convert::build_tokenizer(fbb, src));
  t->table.assign(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  flatbuffers::Verifier verifier(t->table.data(), t->table.size());
  if (!verifier.VerifyBuffer<fb::Tokenizer>(nullptr)) {
    ADD_FAILURE() << "the converter's tokenizer table does not verify";
    return nullptr;
  }
  return init_loaded(std::move(t));
}

std::vector<std::string> read_ggml_vocab_inputs(const std::string& path) {
  std::string all;
  if (!read_text(path, all)) return {};
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  for (;;) {
    const size_t next = all.find(sep, pos);
    if (next == std::string::npos) break;
    out.push_back(all.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return out;
}

std::vector<std::vector<int32_t>> read_ggml_vocab_outputs(const std::string& path) {
  std::string all;
  if (!read_text(path, all)) return {};
  std::vector<std::vector<int32_t>> out;
  std::stringstream lines(all);
  std::string line;
  while (std::getline(lines, line)) {
    std::stringstream ids(line);
    std::vector<int32_t> v;
    int32_t id;
    while (ids >> id) v.push_back(id);
    out.push_back(v);
  }
  return out;
}

}  // namespace keel::test
