// A verified, read-only view of a .keel image. Loading allocates nothing: the caller owns the
// bytes (mmapped file or flash) and keeps them alive as long as the Model is used.
#pragma once

#include <cstdint>

#include "core/result.h"
#include "core/span.h"
#include "keel_generated.h"

namespace keel {

// Version 2: every tensor carries a CRC-32C of its bytes. Version 3: a checksum trailer covers
// the metadata too (model/file_checksums.h), so every byte of the file is checked. Version 1
// files (no checksums) still load; only verification refuses them.
constexpr uint32_t kFormatVersion = 3;
constexpr uint32_t kOldestFormatVersion = 1;
constexpr uint32_t kFirstChecksumVersion = 2;
constexpr uint32_t kFirstTrailerVersion = 3;

// Upper bounds the verifier enforces; far above any edge model, low enough that products of
// them cannot overflow 64-bit arithmetic.
constexpr uint32_t kMaxLayers = 256;
constexpr uint32_t kMaxVocab = 1u << 22;
constexpr uint32_t kMaxDim = 1u << 16;
constexpr uint32_t kMaxHeads = 1024;
constexpr uint32_t kMaxHeadDim = 1024;
constexpr uint32_t kMaxFfnDim = 1u << 20;
constexpr uint32_t kMaxContext = 1u << 30;
constexpr uint32_t kRoleCount = 19;  // keel::fb::TensorRole values

struct ModelShape {
  uint32_t vocab_size = 0;
  uint32_t dim = 0;
  uint32_t n_layers = 0;
  uint32_t n_heads = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t ffn_dim = 0;
  uint32_t context_length = 0;
};

struct TensorView {
  fb::DType dtype = fb::DType::F32;
  uint32_t rows = 0;  // 1 for a vector
  uint32_t cols = 0;
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
  bool present() const { return data != nullptr; }
};

// Canonical tensor name for (role, layer), written into `buf`; returns buf.
const char* canonical_tensor_name(fb::TensorRole role, int layer, char* buf, size_t cap);
bool role_is_per_layer(fb::TensorRole role);

class Model {
 public:
  // Verifies `image` (docs/format.md "What the loader checks") and, on success, makes this a
  // view of it. On failure the Model is left empty. With `verify_sums`, the checksums are
  // checked too (verify_checksums; the trailer's before anything else), which reads every byte.
  Error load(Span<const uint8_t> image, bool verify_sums = false);

  bool loaded() const { return meta_ != nullptr; }
  const fb::Model* meta() const { return meta_; }
  const ModelShape& shape() const { return shape_; }
  // Tensor of a role in a layer (layer ignored for global roles); empty view if absent.
  TensorView tensor(fb::TensorRole role, int layer = -1) const;
  uint64_t weights_bytes() const { return data_size_; }
  // InvalidArgument naming the first id outside the vocabulary and its index.
  Error check_tokens(Span<const int32_t> tokens) const;
  bool has_checksums() const { return meta_ && meta_->format_version() >= kFirstChecksumVersion; }
  bool has_whole_file_checksums() const { return meta_ && meta_->format_version() >= kFirstTrailerVersion; }
  // Recomputes every checksum the file carries: version 3, each part of the metadata
  // (header, metadata, tokenizer, tensor table, padding), the zero padding between tensors and
  // every tensor; version 2, every tensor. ModelChecksumMismatch names the first part or tensor
  // whose bytes differ (and both sums), ModelNoChecksums for a version 1 file. Reads the file once.
  Error verify_checksums() const;

 private:
  Error load_structure(Span<const uint8_t> image);
  // The zero padding between tensors (version 3) and every tensor's CRC: verify_checksums but
  // for the trailer, which load() checks first.
  Error verify_data_checksums() const;

  Span<const uint8_t> image_;
  const fb::Model* meta_ = nullptr;
  const uint8_t* data_ = nullptr;
  uint64_t data_size_ = 0;
  ModelShape shape_;
  // Index+1 into meta_->tensors() per (layer, role); 0 = absent. Global roles use slot kMaxLayers.
  uint16_t index_[kMaxLayers + 1][kRoleCount] = {};
};

}  // namespace keel
