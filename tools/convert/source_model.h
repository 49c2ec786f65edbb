// The converter's in-memory view of a source model (GGUF, Hugging Face, llama2.c) before it
// is written as .keel: hyper-parameters, tokenizer and a table of tensors whose bytes are read
// on demand, one tensor at a time, so converting never holds the whole model in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace keel::convert {

// Element types a source file may hold. Numbering is ours, not GGML's.
enum class SrcType : uint8_t {
  F32,
  F16,
  BF16,
  Q8_0,
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q4_K,
  Q5_K,
  Q6_K,
};

const char* src_type_name(SrcType t);

// Matches keel.fb.TensorRole numbering.
enum class Role : uint8_t {
  TokenEmbedding,
  AttnNorm,
  Wq,
  Wk,
  Wv,
  Wo,
  Bq,
  Bk,
  Bv,
  FfnNorm,
  FfnGate,
  FfnDown,
  FfnUp,
  OutputNorm,
  Output,
  AttnQNorm,
  AttnKNorm,
  PostAttnNorm,
  PostFfnNorm,
};

const char* role_name(Role r);

// Reads a tensor's raw bytes (in its SrcType encoding) into `out`. Returns false and fills
// `error` on an I/O failure.
using ByteReader = std::function<bool(std::vector<uint8_t>& out, std::string& error)>;
// Reads bytes [offset, offset + n) of a tensor's raw encoding into out[0..n).
using RangeReader = std::function<bool(uint64_t offset, uint64_t n, uint8_t* out, std::string& error)>;

struct SourceTensor {
  std::string name;  // canonical: "token_embd.weight", "blk.N.attn_q.weight", ...
  Role role = Role::TokenEmbedding;
  int layer = -1;               // -1 outside the blocks
  std::vector<uint64_t> shape;  // outermost first: [rows, cols] for a matrix, [n] for a vector
  SrcType type = SrcType::F32;
  uint64_t n_bytes = 0;  // bytes of the raw encoding
  ByteReader read;
  // Optional: lets the writer stream a large tensor a few row panels at a time.
  RangeReader read_range;
};

enum class RopeStyle : uint8_t { Interleaved, Halves };
// Matches keel.fb.ArchFamily numbering.
enum class ArchFamily : uint8_t { Llama, Gemma3 };
enum class RopeScalingKind : uint8_t { None, Linear, Llama3 };

struct SourceHyper {
  std::string arch_name = "llama";
  uint32_t vocab_size = 0, dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, ffn_dim = 0, rope_dim = 0,
           context_length = 0;
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  RopeStyle rope_style = RopeStyle::Interleaved;
  RopeScalingKind rope_scaling = RopeScalingKind::None;
  float rope_factor = 1.0f, rope_low_freq_factor = 1.0f, rope_high_freq_factor = 4.0f;
  uint32_t rope_original_context = 0;
  bool qkv_bias = false;
  bool tied_output = false;
  ArchFamily family = ArchFamily::Llama;
  // Gemma 3 (docs/format.md): 0 = absent.
  float query_scale = 0.0f;
  uint32_t sliding_window = 0, sliding_window_pattern = 0;
  float rope_theta_local = 0.0f;
};

enum class TokenizerKind : uint8_t { ByteLevelBpe, SentencePieceBpe };
// Matches keel.fb.PreTokenizer numbering.
enum class PreTokenizer : uint8_t { None, Gpt2, Llama3, SmolLM, Qwen2 };

struct SourceTokenizer {
  TokenizerKind kind = TokenizerKind::SentencePieceBpe;
  PreTokenizer pre = PreTokenizer::None;
  std::vector<std::string> tokens;
  std::vector<float> scores;         // SentencePiece
  std::vector<uint8_t> token_types;  // keel.fb.TokenType values (GGUF numbering)
  std::vector<std::string> merges;   // byte-level BPE, "a b" in rank order
  int32_t bos_id = -1, eos_id = -1, pad_id = -1, unk_id = -1;
  int32_t im_start_id = -1, im_end_id = -1;
  bool add_bos = false;
  bool add_space_prefix = false;
};

struct SourceModel {
  std::string source_description;  // e.g. "GGUF v3: SmolLM2-135M-Instruct.Q4_1.gguf"
  SourceHyper hyper;
  SourceTokenizer tokenizer;
  std::string chat_template;
  std::vector<SourceTensor> tensors;
  // Owns whatever the readers need to stay alive (open files, mappings).
  std::vector<std::shared_ptr<void>> keep_alive;
};

// Each reader returns a model or fills `error` with a message naming what was expected and
// what was found (file, tensor, type). They validate structure, never trust sizes.
std::optional<SourceModel> read_gguf(const std::string& path, std::string& error);
std::optional<SourceModel> read_llama2c(const std::string& checkpoint, const std::string& tokenizer_bin,
                                        std::string& error);
std::optional<SourceModel> read_hf_dir(const std::string& dir, std::string& error);

// Dequantizes `n` elements of raw bytes `src` of type `t` into `dst`. `src_bytes` is checked
// against the encoding size of `n` elements; returns false on mismatch.
bool dequantize(SrcType t, const uint8_t* src, size_t src_bytes, float* dst, size_t n);
// Bytes needed to encode n elements of type t (n must be a multiple of the block size);
// 0 if n is not a whole number of blocks.
uint64_t encoded_bytes(SrcType t, uint64_t n);
// Elements per block (1 for float types).
uint32_t block_elems(SrcType t);

}  // namespace keel::convert

namespace keel::convert {
// The tokenizer part of a Hugging Face directory (tokenizer.json, tokenizer_config.json,
// config.json when present), also used on its own by tests and tools.
std::optional<SourceTokenizer> read_hf_tokenizer(const std::string& dir, std::string& error);
// The tokenizer of a GGUF file; works on vocabulary-only files that hold no tensors.
std::optional<SourceTokenizer> read_gguf_tokenizer(const std::string& path, std::string& error);
}  // namespace keel::convert
