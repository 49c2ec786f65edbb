#include "convert/keel_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "convert/pack.h"
#include "core/crc32c.h"
#include "model/file_checksums.h"
#include "llm/plan.h"
#include "model/model.h"
#include "model/weight_format.h"
#include "text/tokenizer.h"

namespace keel::convert {
namespace {

using keel::fb::DType;

bool is_vector_role(Role r) {
  return r == Role::AttnNorm || r == Role::FfnNorm || r == Role::OutputNorm || r == Role::Bq || r == Role::Bk ||
         r == Role::Bv || r == Role::AttnQNorm || r == Role::AttnKNorm || r == Role::PostAttnNorm ||
         r == Role::PostFfnNorm;
}

// The lossless keel counterpart of a GGML block type, if any.
bool lossless_target(SrcType s, DType& out) {
  switch (s) {
    case SrcType::Q8_0: out = DType::Q8; return true;
    case SrcType::Q4_0: out = DType::Q4; return true;
    case SrcType::Q4_1: out = DType::Q4M; return true;
    case SrcType::Q5_0: out = DType::Q5; return true;
    case SrcType::Q5_1: out = DType::Q5M; return true;
    case SrcType::Q4_K: out = DType::Q4K; return true;
    case SrcType::Q5_K: out = DType::Q5K; return true;
    case SrcType::Q6_K: out = DType::Q6K; return true;
    case SrcType::F32: out = DType::F32; return true;
    case SrcType::F16: out = DType::F16; return true;
    case SrcType::BF16: out = DType::BF16; return true;
    default: return false;
  }
}

void tensor_rows_cols(const SourceTensor& t, uint64_t& rows, uint64_t& cols) {
  if (t.shape.size() == 1) {
    rows = 1;
    cols = t.shape[0];
  } else {
    rows = t.shape[0];
    cols = t.shape[1];
  }
}

struct File {
  FILE* f = nullptr;
  ~File() {
    if (f) fclose(f);
  }
};

bool write_all(FILE* f, const void* p, size_t n, std::string& error, const std::string& path) {
  if (n && fwrite(p, 1, n, f) != n) {
    error = "cannot write " + path + ": " + strerror(errno);
    return false;
  }
  return true;
}

}  // namespace

DType target_dtype(const SourceTensor& t, QuantMode mode) {
  if (is_vector_role(t.role)) return DType::F32;
  const bool embed_or_head = t.role == Role::TokenEmbedding || t.role == Role::Output;
  DType lossless = DType::Q8;
  const bool has_lossless = lossless_target(t.type, lossless);
  switch (mode) {
    case QuantMode::Keep: return has_lossless ? lossless : DType::Q8;
    case QuantMode::F32: return DType::F32;
    case QuantMode::F16: return DType::F16;
    case QuantMode::Q8: return DType::Q8;
    case QuantMode::Q4:
      if (embed_or_head) return DType::Q8;
      return t.type == SrcType::Q4_1 ? DType::Q4M : DType::Q4;
  }
  return DType::Q8;
}

flatbuffers::Offset<keel::fb::Tokenizer> build_tokenizer(flatbuffers::FlatBufferBuilder& fbb,
                                                         const SourceTokenizer& tok) {
  auto tokens = fbb.CreateVectorOfStrings(tok.tokens);
  flatbuffers::Offset<flatbuffers::Vector<float>> scores;
  if (!tok.scores.empty()) scores = fbb.CreateVector(tok.scores);
  flatbuffers::Offset<flatbuffers::Vector<uint8_t>> types;
  if (!tok.token_types.empty()) types = fbb.CreateVector(tok.token_types);
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>> merges;
  if (!tok.merges.empty()) merges = fbb.CreateVectorOfStrings(tok.merges);
  keel::fb::TokenizerBuilder b(fbb);
  b.add_kind(tok.kind == TokenizerKind::ByteLevelBpe ? keel::fb::TokenizerKind::ByteLevelBpe
                                                     : keel::fb::TokenizerKind::SentencePieceBpe);
  b.add_pre(static_cast<keel::fb::PreTokenizer>(tok.pre));
  b.add_tokens(tokens);
  if (!tok.scores.empty()) b.add_scores(scores);
  if (!tok.token_types.empty()) {
    b.add_token_types(flatbuffers::Offset<flatbuffers::Vector<keel::fb::TokenType>>(types.o));
  }
  if (!tok.merges.empty()) b.add_merges(merges);
  b.add_bos_id(tok.bos_id);
  b.add_eos_id(tok.eos_id);
  b.add_pad_id(tok.pad_id);
  b.add_unk_id(tok.unk_id);
  b.add_im_start_id(tok.im_start_id);
  b.add_im_end_id(tok.im_end_id);
  b.add_add_bos(tok.add_bos);
  b.add_add_space_prefix(tok.add_space_prefix);
  return b.Finish();
}

namespace {

struct PlannedTensor {
  DType dtype;
  uint64_t rows, cols, offset, size;
  uint32_t crc32c;  // of the written bytes; known once the tensor is written
};

// Where the parts of the checksum trailer (model/file_checksums.h) lie in a finished metadata
// buffer. FlatBuffers builds back to front and the parts are built one after another, so each
// is one range, known from the builder's size before and after it.
struct MetadataParts {
  uint64_t tensor_table_end = 0;  // builder sizes: after the tensor table,
  uint64_t tokenizer_end = 0;     // after the tokenizer,
  uint64_t metadata_end = 0;      // before the Model table (the rest is the header)

  // The trailer's parts for a buffer of fb_size bytes followed by zeros up to data_offset.
  std::vector<keel::TrailerPart> parts(const uint8_t* fb, uint64_t fb_size, uint64_t data_offset) const {
    using keel::FilePart;
    const uint64_t header = fb_size - metadata_end, meta = metadata_end - tokenizer_end,
                   tok = tokenizer_end - tensor_table_end;
    std::vector<keel::TrailerPart> out = {
        {0, header, 0, uint32_t(FilePart::Header)},
        {header, meta, 0, uint32_t(FilePart::Metadata)},
        {header + meta, tok, 0, uint32_t(FilePart::Tokenizer)},
        {header + meta + tok, tensor_table_end, 0, uint32_t(FilePart::TensorTable)},
    };
    for (auto& p : out) p.crc32c = keel::crc32c(fb + p.offset, size_t(p.size));
    static const uint8_t zeros[64] = {};
    out.push_back({fb_size, data_offset - fb_size, keel::crc32c(zeros, size_t(data_offset - fb_size)),
                   uint32_t(FilePart::Padding)});
    return out;
  }
};

// Builds the metadata FlatBuffer. `data_offset` is written as given; every field is forced so
// the buffer's size does not depend on the values.
MetadataParts build_metadata(flatbuffers::FlatBufferBuilder& fbb, const SourceModel& m,
                             const std::vector<PlannedTensor>& planned, const WriteOptions& opts, uint64_t data_offset,
                             uint64_t data_size, const keel::MemoryPlan& plan) {
  MetadataParts parts;
  fbb.Clear();
  fbb.ForceDefaults(true);
  const SourceHyper& h = m.hyper;

  std::vector<flatbuffers::Offset<keel::fb::Tensor>> tensors;
  tensors.reserve(m.tensors.size());
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const SourceTensor& t = m.tensors[i];
    const PlannedTensor& p = planned[i];
    auto name = fbb.CreateString(t.name);
    std::vector<uint32_t> shape_v;
    for (uint64_t d : t.shape) shape_v.push_back(static_cast<uint32_t>(d));
    auto shape = fbb.CreateVector(shape_v);
    keel::fb::TensorBuilder tb(fbb);
    tb.add_name(name);
    tb.add_role(static_cast<keel::fb::TensorRole>(t.role));
    tb.add_layer(t.layer);
    tb.add_dtype(p.dtype);
    tb.add_shape(shape);
    tb.add_block_size(keel::is_quantized(p.dtype) ? keel::kQuantBlock : 0);
    tb.add_layout(keel::layout_for(p.dtype));
    tb.add_offset(p.offset);
    tb.add_size(p.size);
    tb.add_crc32c(p.crc32c);
    tensors.push_back(tb.Finish());
  }
  auto tensors_vec = fbb.CreateVector(tensors);
  parts.tensor_table_end = fbb.GetSize();
  auto tokenizer = build_tokenizer(fbb, m.tokenizer);
  parts.tokenizer_end = fbb.GetSize();
  auto arch_name = fbb.CreateString(h.arch_name);
  auto chat = fbb.CreateString(m.chat_template);
  auto source = fbb.CreateString(m.source_description);

  auto scaling = keel::fb::CreateRopeScaling(fbb, static_cast<keel::fb::RopeScalingKind>(h.rope_scaling), h.rope_factor,
                                             h.rope_low_freq_factor, h.rope_high_freq_factor, h.rope_original_context);
  keel::fb::HyperBuilder hb(fbb);
  hb.add_vocab_size(h.vocab_size);
  hb.add_dim(h.dim);
  hb.add_n_layers(h.n_layers);
  hb.add_n_heads(h.n_heads);
  hb.add_n_kv_heads(h.n_kv_heads);
  hb.add_head_dim(h.head_dim);
  hb.add_ffn_dim(h.ffn_dim);
  hb.add_rope_theta(h.rope_theta);
  hb.add_rope_dim(h.rope_dim ? h.rope_dim : h.head_dim);
  hb.add_rope_style(static_cast<keel::fb::RopeStyle>(h.rope_style));
  hb.add_rope_scaling(scaling);
  hb.add_norm_eps(h.norm_eps);
  hb.add_context_length(h.context_length);
  hb.add_query_scale(h.query_scale);
  hb.add_sliding_window(h.sliding_window);
  hb.add_sliding_window_pattern(h.sliding_window_pattern);
  hb.add_rope_theta_local(h.rope_theta_local);
  auto hyper = hb.Finish();

  auto arch = keel::fb::CreateArchitecture(fbb, static_cast<keel::fb::ArchFamily>(h.family), arch_name, h.qkv_bias,
                                           h.tied_output);
  auto gen = keel::fb::CreateGeneration(fbb);
  const keel::RunDefaults d = run_defaults(opts, h.family);
  // The kernel runs use, not a placeholder: the reader takes the file's number for its policy.
  auto kv = keel::fb::CreateKvDefaults(fbb, opts.kv.policy, d.kv_budget_tokens, d.sinks, d.window, d.obs_window,
                                       d.snap_kernel(d.policy));
  auto mem = keel::fb::CreateMemoryPlan(fbb, opts.kv.budget_tokens, opts.slots, opts.chunk_tokens, data_size,
                                        plan.persistent_bytes, plan.scratch_bytes);

  parts.metadata_end = fbb.GetSize();
  keel::fb::ModelBuilder mb(fbb);
  mb.add_format_version(keel::kFormatVersion);
  mb.add_data_offset(data_offset);
  mb.add_data_size(data_size);
  mb.add_arch(arch);
  mb.add_hyper(hyper);
  mb.add_tokenizer(tokenizer);
  mb.add_chat_template(chat);
  mb.add_generation(gen);
  mb.add_tensors(tensors_vec);
  mb.add_kv_defaults(kv);
  mb.add_memory_plan(mem);
  mb.add_source(source);
  fbb.Finish(mb.Finish(), keel::fb::ModelIdentifier());
  return parts;
}

// Rows [0, nr) of `raw` (the source encoding) -> `out` in the target dtype.
bool encode_rows(const SourceTensor& t, DType dtype, const uint8_t* raw, uint64_t raw_bytes, uint64_t nr, uint64_t cols,
                 std::vector<float>& f32, std::vector<uint8_t>& out, std::string& error) {
  out.assign(keel::tensor_bytes(dtype, nr, cols), 0);
  DType lossless;
  const bool direct = lossless_target(t.type, lossless) && lossless == dtype;
  if (direct && !keel::is_quantized(dtype)) {
    memcpy(out.data(), raw, raw_bytes);
    return true;
  }
  if (direct) return pack_from_ggml_blocks(t.type, raw, raw_bytes, nr, cols, dtype, out.data(), out.size(), error);
  const uint64_t n = nr * cols;
  f32.resize(n);
  if (!dequantize(t.type, raw, raw_bytes, f32.data(), n)) {
    error = "cannot decode " + std::to_string(raw_bytes) + " bytes of " + src_type_name(t.type) + " as " +
            std::to_string(n) + " elements";
    return false;
  }
  if (keel::is_quantized(dtype)) {
    quantize_pack(f32.data(), nr, cols, dtype, out.data());
  } else {
    convert_float(f32.data(), n, dtype, out.data());
  }
  return true;
}

// Writes one tensor (exactly p.size bytes). When the source reads byte ranges, a large matrix
// goes through in groups of whole 16-row panels, so the working set stays a few MiB whatever
// the tensor's size; otherwise the tensor is read whole.
bool write_tensor(FILE* f, const SourceTensor& t, PlannedTensor& p, std::vector<uint8_t>& raw, std::vector<float>& f32,
                  std::vector<uint8_t>& out, uint64_t& working, std::string& error) {
  const uint64_t row_bytes = encoded_bytes(t.type, p.cols);
  if (row_bytes == 0 || row_bytes * p.rows != t.n_bytes) {
    error = "tensor " + t.name + " has " + std::to_string(t.n_bytes) + " bytes; " + src_type_name(t.type) + " [" +
            std::to_string(p.rows) + ", " + std::to_string(p.cols) + "] takes " + std::to_string(row_bytes * p.rows);
    return false;
  }
  constexpr uint64_t kStepF32Bytes = 4u << 20;
  uint64_t step = p.rows;
  if (t.read_range) {
    step = kStepF32Bytes / (p.cols * 4) / keel::kPanelRows * keel::kPanelRows;
    if (step < keel::kPanelRows) step = keel::kPanelRows;
    if (step > p.rows) step = p.rows;
  } else {
    raw.clear();
    if (!t.read(raw, error)) {
      error = "tensor " + t.name + ": " + error;
      return false;
    }
    if (raw.size() != t.n_bytes) {
      error =
          "tensor " + t.name + ": read " + std::to_string(raw.size()) + " bytes, expected " + std::to_string(t.n_bytes);
      return false;
    }
  }
  uint64_t written = 0;
  p.crc32c = 0;
  for (uint64_t r0 = 0; r0 < p.rows; r0 += step) {
    const uint64_t nr = p.rows - r0 < step ? p.rows - r0 : step;
    const uint8_t* src = nullptr;
    if (t.read_range) {
      raw.resize(nr * row_bytes);
      if (!t.read_range(r0 * row_bytes, nr * row_bytes, raw.data(), error)) {
        error = "tensor " + t.name + ": " + error;
        return false;
      }
      src = raw.data();
    } else {
      src = raw.data() + r0 * row_bytes;
    }
    if (!encode_rows(t, p.dtype, src, nr * row_bytes, nr, p.cols, f32, out, error)) {
      error = "tensor " + t.name + ": " + error;
      return false;
    }
    if (fwrite(out.data(), 1, out.size(), f) != out.size()) {
      error = std::string("write failed: ") + strerror(errno);
      return false;
    }
    p.crc32c = keel::crc32c(out.data(), out.size(), p.crc32c);
    written += out.size();
    const uint64_t w = raw.capacity() + f32.capacity() * sizeof(float) + out.capacity();
    if (w > working) working = w;
  }
  if (written != p.size) {
    error = "internal: tensor " + t.name + " wrote " + std::to_string(written) + " bytes, planned " +
            std::to_string(p.size);
    return false;
  }
  return true;
}

}  // namespace

uint64_t tokenizer_table_bytes(const SourceTokenizer& tok) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(build_tokenizer(fbb, tok));
  return keel::text::Tokenizer::arena_bytes(flatbuffers::GetRoot<keel::fb::Tokenizer>(fbb.GetBufferPointer()));
}

keel::PlanShape plan_shape(const SourceModel& m) {
  const SourceHyper& h = m.hyper;
  keel::PlanShape p{h.vocab_size, h.dim,      h.n_layers, h.n_heads,
                    h.n_kv_heads, h.head_dim, h.ffn_dim,  static_cast<uint32_t>(tokenizer_table_bytes(m.tokenizer))};
  if (h.family == ArchFamily::Gemma3) {
    p.local_layers = keel::local_layer_count(h.n_layers, h.sliding_window_pattern);
    p.sliding_window = h.sliding_window;
  }
  return p;
}

keel::RunDefaults run_defaults(const WriteOptions& opts, ArchFamily family) {
  // The architecture's kernels (a Gemma 3 snapkv file's default is 31), then the file's choices.
  keel::RunDefaults d = keel::architecture_run_defaults(static_cast<keel::fb::ArchFamily>(family));
  d.policy = static_cast<keel::KvPolicyKind>(opts.kv.policy);
  d.kv_budget_tokens = opts.kv.budget_tokens;
  d.sinks = opts.kv.sinks;
  d.window = opts.kv.window;
  d.obs_window = opts.kv.obs_window;
  if (opts.kv.snap_kernel != keel::kSnapKernelPolicyDefault && uint32_t(d.policy) < keel::kKvPolicyCount) {
    d.snap_kernels[uint32_t(d.policy)] = opts.kv.snap_kernel;
  }
  d.chunk_tokens = opts.chunk_tokens;
  return d;
}

keel::RuntimeConfig file_run_config(const WriteOptions& opts, ArchFamily family) {
  keel::RunOverrides o;
  o.slots = opts.slots;
  return keel::resolve_runtime_config(run_defaults(opts, family), o);
}

bool write_keel(const SourceModel& m, const WriteOptions& opts, const std::string& out_path, WriteStats& stats,
                std::string& error) {
  stats = WriteStats{};
  // 1. Sizes and offsets of every tensor are known from shapes and target dtypes alone.
  std::vector<PlannedTensor> planned;
  planned.reserve(m.tensors.size());
  uint64_t cursor = 0;
  for (const SourceTensor& t : m.tensors) {
    if (t.shape.empty() || t.shape.size() > 2) {
      error = "tensor " + t.name + " has rank " + std::to_string(t.shape.size()) + "; expected 1 or 2";
      return false;
    }
    PlannedTensor p{};
    p.dtype = target_dtype(t, opts.quant);
    tensor_rows_cols(t, p.rows, p.cols);
    p.offset = cursor;
    p.size = keel::tensor_bytes(p.dtype, p.rows, p.cols);
    cursor = keel::align64(cursor + p.size);
    planned.push_back(p);
  }
  // The data section ends with the last tensor (no trailing padding).
  const uint64_t data_size = planned.empty() ? 0 : planned.back().offset + planned.back().size;

  const keel::RuntimeConfig rc = file_run_config(opts, m.hyper.family);
  const keel::MemoryPlan plan = keel::plan_memory(plan_shape(m), rc.plan, rc.kv);

  // 2. Metadata: build once to learn its size, then again with the final data offset. All
  // fields are forced present, so the size does not change between the two builds, nor when
  // the tensors' checksums are filled in after they are written (step 4).
  flatbuffers::FlatBufferBuilder fbb(1 << 20);
  build_metadata(fbb, m, planned, opts, 0, data_size, plan);
  const uint64_t data_offset = keel::align64(fbb.GetSize());
  build_metadata(fbb, m, planned, opts, data_offset, data_size, plan);
  if (keel::align64(fbb.GetSize()) != data_offset) {
    error = "internal: metadata size changed between builds";
    return false;
  }

  File file;
  const std::string tmp_path = out_path + ".partial";
  file.f = fopen(tmp_path.c_str(), "wb");
  if (!file.f) {
    error = "cannot create " + tmp_path + ": " + strerror(errno);
    return false;
  }
  static const uint8_t zeros[64] = {};
  if (!write_all(file.f, fbb.GetBufferPointer(), fbb.GetSize(), error, tmp_path) ||
      !write_all(file.f, zeros, data_offset - fbb.GetSize(), error, tmp_path)) {
    return false;
  }

  // 3. Tensors, one at a time, each streamed in groups of row panels where the source allows.
  std::vector<uint8_t> raw, out;
  std::vector<float> f32;
  uint64_t written = 0;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    PlannedTensor& p = planned[i];
    if (written < p.offset && !write_all(file.f, zeros, p.offset - written, error, tmp_path)) return false;
    uint64_t working = 0;
    if (!write_tensor(file.f, m.tensors[i], p, raw, f32, out, working, error)) {
      fclose(file.f);
      file.f = nullptr;
      remove(tmp_path.c_str());
      return false;
    }
    if (working > stats.largest_tensor_bytes) stats.largest_tensor_bytes = working;
    written = p.offset + p.size;
    // Release the buffers of a large whole-tensor read so peak memory stays near one tensor's.
    if (working > (16u << 20)) {
      std::vector<uint8_t>().swap(raw);
      std::vector<uint8_t>().swap(out);
      std::vector<float>().swap(f32);
    }
    if (opts.progress) opts.progress(i + 1, m.tensors.size(), data_offset + written);
  }
  // 4. The checksum trailer of the final metadata after the data, then the metadata itself,
  // now with every tensor's checksum, over the placeholder.
  const MetadataParts layout = build_metadata(fbb, m, planned, opts, data_offset, data_size, plan);
  if (keel::align64(fbb.GetSize()) != data_offset) {
    error = "internal: metadata size changed with the checksums";
    return false;
  }
  const std::vector<keel::TrailerPart> parts = layout.parts(fbb.GetBufferPointer(), fbb.GetSize(), data_offset);
  std::vector<uint8_t> trailer(keel::kTrailerFixedBytes + parts.size() * keel::kTrailerPartBytes);
  keel::write_trailer(parts.data(), uint32_t(parts.size()), trailer.data());
  if (!write_all(file.f, trailer.data(), trailer.size(), error, tmp_path)) return false;
  if (fseek(file.f, 0, SEEK_SET) != 0 || !write_all(file.f, fbb.GetBufferPointer(), fbb.GetSize(), error, tmp_path)) {
    if (error.empty()) error = "cannot seek in " + tmp_path + ": " + strerror(errno);
    return false;
  }
  if (fflush(file.f) != 0 || fclose(file.f) != 0) {
    file.f = nullptr;
    error = "cannot write " + tmp_path + ": " + strerror(errno);
    return false;
  }
  file.f = nullptr;
  if (rename(tmp_path.c_str(), out_path.c_str()) != 0) {
    error = "cannot rename " + tmp_path + " to " + out_path + ": " + strerror(errno);
    return false;
  }
  stats.file_bytes = data_offset + data_size + trailer.size();
  stats.data_bytes = data_size;
  stats.tensors = m.tensors.size();
  return true;
}

}  // namespace keel::convert
