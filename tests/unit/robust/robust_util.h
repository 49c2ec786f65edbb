// Helpers the robustness tests share (header-only: tests/CMakeLists.txt builds one binary per
// *_test.cpp with tests/support only). Models are converted from ../shared by the real
// converter; a missing input fails the calling test, it never skips.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "convert/keel_writer.h"
#include "convert/source_model.h"
#include "llm/runtime.h"
#include "model/model.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"

namespace keel::robust {

// 64-byte aligned host memory (the arenas and model images need it; std::vector gives 16).
struct AlignedBuffer {
  struct Free {
    void operator()(uint8_t* p) const { free(p); }
  };
  std::unique_ptr<uint8_t, Free> mem;
  size_t size = 0;
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes)
      : mem(static_cast<uint8_t*>(aligned_alloc(64, (bytes + 63) / 64 * 64 + 64))), size(bytes) {
    if (mem) memset(mem.get(), 0, (bytes + 63) / 64 * 64 + 64);
  }
  uint8_t* data() const { return mem.get(); }
  Span<uint8_t> span(size_t n) const { return Span<uint8_t>(mem.get(), n); }
  Span<uint8_t> span() const { return span(size); }
};

// An aligned, writable copy of a .keel image (mmap gives pages; a vector's data may not be
// 8-byte aligned, which the loader requires).
struct Image {
  AlignedBuffer buf;
  explicit Image(const std::vector<uint8_t>& bytes) : buf(bytes.size()) {
    if (!bytes.empty()) memcpy(buf.data(), bytes.data(), bytes.size());
  }
  Span<const uint8_t> span() const { return Span<const uint8_t>(buf.data(), buf.size); }
  uint8_t* bytes() { return buf.data(); }
  size_t size() const { return buf.size; }
  fb::Model* meta() { return fb::GetMutableModel(buf.data()); }
};

// Writes `src` with the converter and returns the file's bytes (empty, and the test failed, on
// failure): the images the hostile tests copy and corrupt.
inline std::vector<uint8_t> write_model(const convert::SourceModel& src, convert::QuantMode quant,
                                        const std::string& name) {
  convert::WriteOptions wo;
  wo.quant = quant;
  const std::string path = test::convert_to_file(src, wo, name);
  return path.empty() ? std::vector<uint8_t>() : test::read_bytes(path);
}

// stories260K converted once per process (quant Q8: packed panels exercise the size checks).
inline const std::vector<uint8_t>& stories_keel_bytes() {
  static const std::vector<uint8_t> bytes = [] {
    const convert::SourceModel* src = test::stories260k_source();
    return src ? write_model(*src, convert::QuantMode::Q8, "robust_stories_q8.keel") : std::vector<uint8_t>();
  }();
  return bytes;
}

// stories260K with its weights as in the checkpoint (F32): flipped exponent bits give Inf/NaN.
inline const std::vector<uint8_t>& stories_f32_keel_bytes() {
  static const std::vector<uint8_t> bytes = [] {
    const convert::SourceModel* src = test::stories260k_source();
    return src ? write_model(*src, convert::QuantMode::Keep, "robust_stories_f32.keel") : std::vector<uint8_t>();
  }();
  return bytes;
}

// A loaded model together with the image it views.
struct LoadedModel {
  std::unique_ptr<Image> image;
  Model model;
};

inline std::unique_ptr<LoadedModel> load_image(const std::vector<uint8_t>& bytes) {
  auto l = std::make_unique<LoadedModel>();
  l->image = std::make_unique<Image>(bytes);
  const Error e = l->model.load(l->image->span());
  EXPECT_TRUE(e.ok()) << to_string(e.status()) << ": " << e.message();
  return l;
}

// Arenas of exactly the planned sizes for `config` (backend bytes 0: ref and native backends).
struct Arenas {
  MemoryPlan plan;
  AlignedBuffer persistent, scratch;
  Arenas(const Model& model, const RuntimeConfig& config)
      : plan(Runtime::plan(model, config)), persistent(plan.persistent_bytes), scratch(plan.scratch_bytes) {}
};

// The configuration the tests run stories260K with: native kernels (deterministic, no XNNPACK
// block to measure), one thread, chunks of 16 so that short prompts still span chunks.
inline RuntimeConfig stories_config(KvPolicyKind policy = KvPolicyKind::Full, uint32_t budget = 256) {
  RuntimeConfig rc;
  rc.backend = BackendKind::Native;
  rc.kv.kind = policy;
  rc.plan.kv_budget_tokens = budget;
  rc.plan.chunk_tokens = 16;
  rc.plan.threads = 1;
  return rc;
}

inline std::string describe(const Error& e) { return std::string(to_string(e.status())) + ": " + e.message(); }

// The request every robustness test serves after an error: forget the slot, prefill the
// prompt, then `n` greedy tokens. Returns the tokens; a failed step fails the calling test and
// returns what was produced so far.
inline std::vector<int32_t> greedy_request(Runtime& rt, uint32_t slot, const std::vector<int32_t>& prompt, size_t n) {
  std::vector<int32_t> out;
  Error e = rt.reset(slot);
  EXPECT_TRUE(e.ok()) << "reset: " << describe(e);
  e = rt.set_sampler(slot, text::SamplerConfig{});  // temperature 0: greedy
  EXPECT_TRUE(e.ok()) << "set_sampler: " << describe(e);
  e = rt.prefill(slot, Span<const int32_t>(prompt.data(), prompt.size()));
  EXPECT_TRUE(e.ok()) << "prefill: " << describe(e);
  if (!e.ok()) return out;
  for (size_t i = 0; i < n; ++i) {
    const Result<int32_t> t = rt.sample(slot);
    EXPECT_TRUE(t.ok()) << "sample: " << (t.ok() ? "" : describe(t.error()));
    if (!t.ok()) return out;
    out.push_back(t.value());
    e = rt.decode(slot, t.value());
    EXPECT_TRUE(e.ok()) << "decode: " << describe(e);
    if (!e.ok()) return out;
  }
  return out;
}

// Text -> ids with the runtime's own tokenizer (BOS first when the model asks for it).
inline std::vector<int32_t> tokenize(Runtime& rt, const std::string& text) {
  std::vector<int32_t> ids(text.size() + 8);
  size_t n = 0;
  const Error e =
      rt.tokenize(text.data(), text.size(), text::EncodeOptions{}, Span<int32_t>(ids.data(), ids.size()), &n);
  EXPECT_TRUE(e.ok()) << "tokenize: " << describe(e);
  ids.resize(e.ok() ? n : 0);
  return ids;
}

constexpr char kStoryPrompt[] = "Once upon a time, there was a little dog who liked to run in the park.";

}  // namespace keel::robust
