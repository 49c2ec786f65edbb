// Writes a SourceModel as a .keel file (docs/format.md): quantizes or repacks each tensor,
// streaming one tensor at a time, then appends the FlatBuffer metadata and data section.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "convert/source_model.h"
#include "flatbuffers/flatbuffers.h"
#include "keel_generated.h"
#include "llm/plan.h"
#include "llm/run_config.h"

namespace keel::convert {

enum class QuantMode { Keep, F32, F16, Q8, Q4 };

// What the file's kv_defaults will say: the engine's defaults (llm/run_config.h) under the
// snapstream policy unless the caller chooses otherwise.
struct KvDefaultsOptions {
  keel::fb::KvPolicy policy = keel::fb::KvPolicy::SnapStream;
  uint32_t budget_tokens = keel::kDefaultKvBudgetTokens;
  uint32_t sinks = keel::kDefaultSinks;
  uint32_t window = 0;
  uint32_t obs_window = keel::kDefaultObsWindow;
  uint32_t snap_kernel = keel::kSnapKernelPolicyDefault;  // written resolved: the policy's kernel
};

struct WriteOptions {
  QuantMode quant = QuantMode::Keep;
  KvDefaultsOptions kv;
  uint32_t slots = 1;
  uint32_t chunk_tokens = keel::kDefaultChunkTokens;
  // Called after each tensor: (tensors done, tensors total, bytes written so far).
  std::function<void(size_t, size_t, uint64_t)> progress;
};

struct WriteStats {
  uint64_t file_bytes = 0;
  uint64_t data_bytes = 0;
  uint64_t largest_tensor_bytes = 0;  // largest working set (buffers) while writing one tensor
  size_t tensors = 0;
};

// The dtype a source tensor becomes under `mode` (norms and biases always F32).
keel::fb::DType target_dtype(const SourceTensor& t, QuantMode mode);

bool write_keel(const SourceModel& model, const WriteOptions& opts, const std::string& out_path, WriteStats& stats,
                std::string& error);

// Builds the tokenizer table; exposed for tests that need a tokenizer without a whole model.
flatbuffers::Offset<keel::fb::Tokenizer> build_tokenizer(flatbuffers::FlatBufferBuilder& fbb,
                                                         const SourceTokenizer& tok);

}  // namespace keel::convert

namespace keel::convert {
// Bytes of the engine's tokenizer tables for this tokenizer (an input of the memory plan).
uint64_t tokenizer_table_bytes(const SourceTokenizer& tok);
// The plan inputs of a source model.
keel::PlanShape plan_shape(const SourceModel& m);
// What a run of the written file uses by default (its kv_defaults and plan chunk, over the
// defaults of the model's architecture `family`), and the plan configuration of the file's
// memory_plan (and of `keel convert --header`): one thread.
keel::RunDefaults run_defaults(const WriteOptions& opts, ArchFamily family);
keel::RuntimeConfig file_run_config(const WriteOptions& opts, ArchFamily family);
}  // namespace keel::convert
