// Reader for llama2.c checkpoints (run.c's legacy layout and export.py's versioned layouts 1
// and 2) and llama2.c tokenizer.bin files.
//
// Legacy checkpoint:
//   int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
//     (vocab_size < 0: the classifier is not shared with the embedding)
//   f32 token_embedding [vocab][dim], rms_att [L][dim], wq [L][dim][dim],
//       wk [L][kv_dim][dim], wv [L][kv_dim][dim], wo [L][dim][dim], rms_ffn [L][dim],
//       w1 [L][hidden][dim], w2 [L][dim][hidden], w3 [L][hidden][dim], rms_final [dim],
//       freq_cis_real [seq_len][head_dim/2], freq_cis_imag [seq_len][head_dim/2],
//       wcls [vocab][dim] (unshared only)
// Versioned checkpoint (256-byte header):
//   u32 magic 0x616b3432 ("ak42"), int32 version, the 7 int32 above (vocab_size >= 0),
//   u8 shared_classifier, [version 2: int32 group_size, unaligned at byte 37], zeros to 256.
//   Version 1: f32 rms_att [L][dim], rms_ffn [L][dim], rms_final [dim], token_embedding,
//              wq, wk, wv, wo, w1, w2, w3 (each [L][...]), wcls if unshared.
//   Version 2: the same norms in f32, then for each matrix of the version 1 order (one entry per
//              layer) int8 q [numel] followed by f32 scales [numel / group_size]; value = q * s.
// Version 2 tensors are exposed as F32: their group scales are f32 and groups need not be 32
// wide, so they match none of the block formats; `read` dequantizes them (q * s in float, as
// runq.c does).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "convert/source_file.h"
#include "convert/source_model.h"

namespace keel::convert {
namespace {

constexpr uint32_t kVersionedMagic = 0x616b3432;
constexpr uint64_t kVersionedHeaderBytes = 256;

// Upper bounds on header fields: far above any llama2.c model, low enough that every size
// computed from them fits in 64 bits with room to spare.
constexpr int32_t kMaxDim = 1 << 16;
constexpr int32_t kMaxHidden = 1 << 18;
constexpr int32_t kMaxLayers = 1 << 10;
constexpr int32_t kMaxHeads = 1 << 10;
constexpr int32_t kMaxVocab = 1 << 22;
constexpr int32_t kMaxSeqLen = 1 << 24;
constexpr int32_t kMaxTokenBytes = 1 << 16;

int32_t load_i32(const uint8_t* p) {
  int32_t v;
  memcpy(&v, p, 4);
  return v;
}

struct Header {
  int version = 0;  // 0 = legacy
  int32_t dim = 0, hidden = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab = 0, seq_len = 0;
  bool shared = true;
  int32_t group_size = 0;  // version 2
};

bool check_field(const char* name, int32_t v, int32_t max, std::string& error) {
  if (v <= 0 || v > max) {
    error = std::string("header field ") + name + " = " + std::to_string(v) + " is out of range (expected 1.." +
            std::to_string(max) + ")";
    return false;
  }
  return true;
}

bool read_header(const OpenFile& f, Header& h, std::string& error) {
  uint8_t b[41] = {};
  if (f.size < 28) {
    error = "truncated: " + std::to_string(f.size) + " bytes, a header needs at least 28";
    return false;
  }
  uint32_t magic;
  if (!read_at(f, b, f.size >= sizeof b ? sizeof b : 28, 0, error)) return false;
  memcpy(&magic, b, 4);
  const uint8_t* fields = b;
  if (magic == kVersionedMagic) {
    if (f.size < kVersionedHeaderBytes) {
      error = "truncated: versioned header needs " + std::to_string(kVersionedHeaderBytes) + " bytes, file has " +
              std::to_string(f.size);
      return false;
    }
    h.version = load_i32(b + 4);
    if (h.version != 1 && h.version != 2) {
      error = "unsupported llama2.c export version " + std::to_string(h.version) +
              " (supported: 1 = fp32, 2 = int8 Q8_0 groups)";
      return false;
    }
    fields = b + 8;
    if (b[36] > 1) {
      error = "header shared_classifier flag is " + std::to_string(b[36]) + " (expected 0 or 1)";
      return false;
    }
    h.shared = b[36] == 1;
    if (h.version == 2) h.group_size = load_i32(b + 37);
  }
  h.dim = load_i32(fields + 0);
  h.hidden = load_i32(fields + 4);
  h.n_layers = load_i32(fields + 8);
  h.n_heads = load_i32(fields + 12);
  h.n_kv_heads = load_i32(fields + 16);
  h.vocab = load_i32(fields + 20);
  h.seq_len = load_i32(fields + 24);
  if (h.version == 0) {
    h.shared = h.vocab > 0;
    if (h.vocab < 0 && h.vocab != INT32_MIN) h.vocab = -h.vocab;
  }
  if (!check_field("dim", h.dim, kMaxDim, error) || !check_field("hidden_dim", h.hidden, kMaxHidden, error) ||
      !check_field("n_layers", h.n_layers, kMaxLayers, error) || !check_field("n_heads", h.n_heads, kMaxHeads, error) ||
      !check_field("n_kv_heads", h.n_kv_heads, kMaxHeads, error) ||
      !check_field("vocab_size", h.vocab, kMaxVocab, error) || !check_field("seq_len", h.seq_len, kMaxSeqLen, error))
    return false;
  if (h.dim % h.n_heads != 0 || (h.dim / h.n_heads) % 2 != 0) {
    error =
        "dim " + std::to_string(h.dim) + " is not n_heads " + std::to_string(h.n_heads) + " times an even head size";
    return false;
  }
  if (h.n_kv_heads > h.n_heads || h.n_heads % h.n_kv_heads != 0) {
    error = "n_heads " + std::to_string(h.n_heads) + " is not a multiple of n_kv_heads " + std::to_string(h.n_kv_heads);
    return false;
  }
  if (h.version == 2 && (h.group_size <= 0 || h.group_size > kMaxDim || h.dim % h.group_size != 0)) {
    error = "version 2 group_size " + std::to_string(h.group_size) +
            " is invalid (expected a positive divisor of dim " + std::to_string(h.dim) + ")";
    return false;
  }
  return true;
}

// Where one tensor's bytes are in the checkpoint.
struct Placement {
  std::string name;
  Role role;
  int layer;
  std::vector<uint64_t> shape;
  uint64_t offset = 0;        // f32 data, or int8 quants for version 2
  uint64_t scale_offset = 0;  // version 2 quantized only
  bool quantized = false;
  uint64_t numel() const {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    return n;
  }
};

std::string block_name(int layer, const char* what) { return "blk." + std::to_string(layer) + "." + what; }

// One tensor, or one per layer stored back to back as [L][...] when `layered`.
struct Kind {
  Role role;
  const char* name;  // without "blk.N." for layered kinds
  std::vector<uint64_t> shape;
  bool layered;
};

// Lays the tensors out and returns them in canonical order; `end` is the offset one past the
// last byte the layout implies.
std::vector<Placement> layout(const Header& h, uint64_t& end) {
  const uint64_t dim = uint64_t(h.dim), hidden = uint64_t(h.hidden), vocab = uint64_t(h.vocab);
  const uint64_t head_dim = dim / uint64_t(h.n_heads);
  const uint64_t kv_dim = head_dim * uint64_t(h.n_kv_heads);
  const int L = h.n_layers;

  const Kind embd{Role::TokenEmbedding, "token_embd.weight", {vocab, dim}, false};
  const Kind att_norm{Role::AttnNorm, "attn_norm.weight", {dim}, true};
  const Kind wq{Role::Wq, "attn_q.weight", {dim, dim}, true};
  const Kind wk{Role::Wk, "attn_k.weight", {kv_dim, dim}, true};
  const Kind wv{Role::Wv, "attn_v.weight", {kv_dim, dim}, true};
  const Kind wo{Role::Wo, "attn_output.weight", {dim, dim}, true};
  const Kind ffn_norm{Role::FfnNorm, "ffn_norm.weight", {dim}, true};
  const Kind w1{Role::FfnGate, "ffn_gate.weight", {hidden, dim}, true};
  const Kind w2{Role::FfnDown, "ffn_down.weight", {dim, hidden}, true};
  const Kind w3{Role::FfnUp, "ffn_up.weight", {hidden, dim}, true};
  const Kind out_norm{Role::OutputNorm, "output_norm.weight", {dim}, false};
  const Kind wcls{Role::Output, "output.weight", {vocab, dim}, false};

  std::vector<Placement> placed;
  uint64_t pos = h.version == 0 ? 28 : kVersionedHeaderBytes;
  auto place = [&](const Kind& k, bool quantized) {
    const int n = k.layered ? L : 1;
    for (int l = 0; l < n; ++l) {
      Placement p;
      p.name = k.layered ? block_name(l, k.name) : std::string(k.name);
      p.role = k.role;
      p.layer = k.layered ? l : -1;
      p.shape = k.shape;
      p.quantized = quantized;
      p.offset = pos;
      if (quantized) {
        pos += p.numel();
        p.scale_offset = pos;
        pos += p.numel() / uint64_t(h.group_size) * 4;
      } else {
        pos += p.numel() * 4;
      }
      placed.push_back(std::move(p));
    }
  };
  if (h.version == 0) {
    place(embd, false);
    place(att_norm, false);
    for (const Kind* k : {&wq, &wk, &wv, &wo}) place(*k, false);
    place(ffn_norm, false);
    for (const Kind* k : {&w1, &w2, &w3}) place(*k, false);
    place(out_norm, false);
    pos += 2 * uint64_t(h.seq_len) * (head_dim / 2) * 4;  // freq_cis_real, freq_cis_imag
    if (!h.shared) place(wcls, false);
  } else {
    const bool q = h.version == 2;
    place(att_norm, false);
    place(ffn_norm, false);
    place(out_norm, false);
    place(embd, q);
    for (const Kind* k : {&wq, &wk, &wv, &wo, &w1, &w2, &w3}) place(*k, q);
    if (!h.shared) place(wcls, q);
  }
  end = pos;

  // Canonical order: embedding, each block in forward order, final norm, classifier.
  auto rank = [](const Placement& p) {
    switch (p.role) {
      case Role::TokenEmbedding: return 0;
      case Role::AttnNorm: return 1;
      case Role::Wq: return 2;
      case Role::Wk: return 3;
      case Role::Wv: return 4;
      case Role::Wo: return 5;
      case Role::FfnNorm: return 6;
      case Role::FfnGate: return 7;
      case Role::FfnUp: return 8;
      case Role::FfnDown: return 9;
      case Role::OutputNorm: return 10;
      default: return 11;
    }
  };
  const auto key = [&](const Placement& p) {
    const int block = p.layer >= 0 ? p.layer : (p.role == Role::TokenEmbedding ? -1 : L);
    return std::pair<int, int>(block, rank(p));
  };
  std::stable_sort(placed.begin(), placed.end(),
                   [&](const Placement& a, const Placement& b) { return key(a) < key(b); });
  return placed;
}

ByteReader make_reader(std::shared_ptr<OpenFile> file, const Placement& p, int32_t group_size) {
  const uint64_t numel = p.numel();
  if (!p.quantized) {
    const uint64_t offset = p.offset;
    return [file, offset, numel](std::vector<uint8_t>& out, std::string& error) {
      out.resize(numel * 4);
      return read_at(*file, out.data(), out.size(), offset, error);
    };
  }
  const uint64_t q_offset = p.offset, s_offset = p.scale_offset;
  const uint64_t gs = uint64_t(group_size);
  return [file, q_offset, s_offset, numel, gs](std::vector<uint8_t>& out, std::string& error) {
    std::vector<int8_t> q(numel);
    std::vector<float> s(numel / gs);
    if (!read_at(*file, q.data(), q.size(), q_offset, error) ||
        !read_at(*file, s.data(), s.size() * 4, s_offset, error))
      return false;
    out.resize(numel * 4);
    for (uint64_t i = 0; i < numel; ++i) {
      const float v = float(q[i]) * s[i / gs];
      memcpy(out.data() + i * 4, &v, 4);
    }
    return true;
  };
}

bool read_tokenizer(const std::string& path, uint32_t vocab, SourceTokenizer& tok, std::string& error) {
  auto f = open_file(path, error);
  if (!f) return false;
  auto fail = [&](const std::string& what) {
    error = "llama2.c tokenizer '" + path + "': " + what;
    return false;
  };
  if (f->size < 4) return fail("truncated: no max_token_length");
  uint8_t b4[4];
  if (!read_at(*f, b4, 4, 0, error)) return false;
  const int32_t max_len = load_i32(b4);
  if (max_len <= 0 || max_len > kMaxTokenBytes)
    return fail("max_token_length " + std::to_string(max_len) + " is out of range (expected 1.." +
                std::to_string(kMaxTokenBytes) + ")");
  // Bounded by the vocabulary, so a hostile size cannot make us read a huge file.
  const uint64_t max_bytes = 4 + uint64_t(vocab) * (8 + uint64_t(max_len));
  if (f->size > max_bytes)
    return fail(std::to_string(f->size) + " bytes is more than " + std::to_string(vocab) + " tokens of at most " +
                std::to_string(max_len) + " bytes can take (" + std::to_string(max_bytes) +
                "); its token count does not match vocab_size " + std::to_string(vocab));
  std::vector<uint8_t> data(f->size);
  if (!read_at(*f, data.data(), data.size(), 0, error)) return false;

  tok.tokens.clear();
  tok.scores.clear();
  uint64_t pos = 4;
  while (pos < data.size()) {
    const uint64_t id = tok.tokens.size();
    if (data.size() - pos < 8)
      return fail("truncated in token " + std::to_string(id) + " (score and length need 8 bytes, " +
                  std::to_string(data.size() - pos) + " left)");
    float score;
    memcpy(&score, data.data() + pos, 4);
    const int32_t len = load_i32(data.data() + pos + 4);
    pos += 8;
    if (len < 0 || len > max_len)
      return fail("token " + std::to_string(id) + " has length " + std::to_string(len) + " (expected 0.." +
                  std::to_string(max_len) + ")");
    if (uint64_t(len) > data.size() - pos)
      return fail("truncated in token " + std::to_string(id) + " (needs " + std::to_string(len) + " bytes, " +
                  std::to_string(data.size() - pos) + " left)");
    tok.tokens.emplace_back(reinterpret_cast<const char*>(data.data() + pos), size_t(len));
    tok.scores.push_back(score);
    pos += uint64_t(len);
  }
  if (tok.tokens.size() != vocab)
    return fail("has " + std::to_string(tok.tokens.size()) + " tokens, the checkpoint's vocab_size is " +
                std::to_string(vocab));

  // llama2.c's tokenizer export writes BOS/EOS as "\n<s>\n" / "\n</s>\n" and replaces the
  // SentencePiece word marker U+2581 by a space; restore SentencePiece's own spelling so the
  // vocabulary matches what other sources of the same tokenizer carry.
  tok.token_types.assign(vocab, 1);  // Normal
  for (uint32_t i = 0; i < vocab; ++i) {
    std::string& t = tok.tokens[i];
    if (i == 1 && t == "\n<s>\n") t = "<s>";
    if (i == 2 && t == "\n</s>\n") t = "</s>";
    std::string restored;
    restored.reserve(t.size());
    for (char c : t) {
      if (c == ' ')
        restored += "\xE2\x96\x81";
      else
        restored += c;
    }
    t = std::move(restored);
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && isxdigit(uint8_t(t[3])) &&
        isxdigit(uint8_t(t[4])))
      tok.token_types[i] = 6;  // Byte
  }
  if (vocab > 0) tok.token_types[0] = 2;  // Unknown
  if (vocab > 1) tok.token_types[1] = 3;  // Control
  if (vocab > 2) tok.token_types[2] = 3;  // Control
  tok.kind = TokenizerKind::SentencePieceBpe;
  tok.pre = PreTokenizer::None;
  tok.unk_id = 0;
  tok.bos_id = 1;
  tok.eos_id = 2;
  tok.add_bos = true;
  tok.add_space_prefix = true;
  return true;
}

}  // namespace

std::optional<SourceModel> read_llama2c(const std::string& checkpoint, const std::string& tokenizer_bin,
                                        std::string& error) {
  auto file = open_file(checkpoint, error);
  if (!file) return std::nullopt;
  Header h;
  if (!read_header(*file, h, error)) {
    error = "llama2.c checkpoint '" + checkpoint + "': " + error;
    return std::nullopt;
  }
  uint64_t end = 0;
  std::vector<Placement> placed = layout(h, end);
  if (h.version == 2) {
    for (const Placement& p : placed) {
      if (p.quantized && p.numel() % uint64_t(h.group_size) != 0) {
        error = "llama2.c checkpoint '" + checkpoint + "': tensor " + p.name + " has " + std::to_string(p.numel()) +
                " elements, not a multiple of group_size " + std::to_string(h.group_size);
        return std::nullopt;
      }
    }
  }
  const std::string what = h.version == 0 ? std::string("legacy") : "version " + std::to_string(h.version);
  if (file->size < end) {
    error = "llama2.c checkpoint '" + checkpoint + "': truncated: the " + what + " header (dim " +
            std::to_string(h.dim) + ", " + std::to_string(h.n_layers) + " layers, vocab " + std::to_string(h.vocab) +
            ") implies " + std::to_string(end) + " bytes, the file has " + std::to_string(file->size);
    return std::nullopt;
  }
  if (file->size > end) {
    error = "llama2.c checkpoint '" + checkpoint + "': the " + what + " header implies " + std::to_string(end) +
            " bytes, the file has " + std::to_string(file->size) +
            " (trailing data: not a llama2.c checkpoint of this layout)";
    return std::nullopt;
  }

  SourceModel m;
  if (!read_tokenizer(tokenizer_bin, uint32_t(h.vocab), m.tokenizer, error)) return std::nullopt;

  const size_t slash = checkpoint.find_last_of('/');
  const std::string base = slash == std::string::npos ? checkpoint : checkpoint.substr(slash + 1);
  if (h.version == 0)
    m.source_description = "llama2.c legacy fp32: " + base;
  else if (h.version == 1)
    m.source_description = "llama2.c v1 fp32: " + base;
  else
    m.source_description = "llama2.c v2 int8 (group " + std::to_string(h.group_size) + ", dequantized to F32): " + base;

  SourceHyper& hy = m.hyper;
  hy.arch_name = "llama";
  hy.vocab_size = uint32_t(h.vocab);
  hy.dim = uint32_t(h.dim);
  hy.n_layers = uint32_t(h.n_layers);
  hy.n_heads = uint32_t(h.n_heads);
  hy.n_kv_heads = uint32_t(h.n_kv_heads);
  hy.head_dim = uint32_t(h.dim / h.n_heads);
  hy.ffn_dim = uint32_t(h.hidden);
  hy.rope_dim = hy.head_dim;
  hy.context_length = uint32_t(h.seq_len);
  hy.rope_theta = 10000.0f;
  hy.norm_eps = 1e-5f;
  hy.rope_style = RopeStyle::Interleaved;  // run.c rotates (2i, 2i+1)
  hy.rope_scaling = RopeScalingKind::None;
  hy.qkv_bias = false;
  hy.tied_output = h.shared;

  for (const Placement& p : placed) {
    SourceTensor t;
    t.name = p.name;
    t.role = p.role;
    t.layer = p.layer;
    t.shape = p.shape;
    t.type = SrcType::F32;
    t.n_bytes = p.numel() * 4;
    t.read = make_reader(file, p, h.group_size);
    m.tensors.push_back(std::move(t));
  }
  m.keep_alive.push_back(file);
  return m;
}

}  // namespace keel::convert
