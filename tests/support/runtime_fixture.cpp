#include "support/runtime_fixture.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>

#include "ports/linux/backend_plan.h"
#include "support/test_support.h"

namespace keel::test {

namespace {

template <typename Read>
const convert::SourceModel* read_once(std::optional<convert::SourceModel>& slot, const char* name, Read read) {
  if (slot) return &*slot;
  std::string err;
  slot = read(err);
  if (!slot) ADD_FAILURE() << "cannot read " << name << ": " << err;
  return slot ? &*slot : nullptr;
}

}  // namespace

const convert::SourceModel* stories260k_source() {
  static std::optional<convert::SourceModel> src;
  return read_once(src, "stories260K", [](std::string& err) {
    return convert::read_llama2c(require_file(shared_path("models/stories260K/stories260K.bin")),
                                 require_file(shared_path("models/stories260K/tok512.bin")), err);
  });
}

const convert::SourceModel* smollm2_source() {
  static std::optional<convert::SourceModel> src;
  return read_once(src, "SmolLM2",
                   [](std::string& err) { return convert::read_gguf(require_file(smollm2_gguf()), err); });
}

const convert::SourceModel* gemma3_source() {
  static std::optional<convert::SourceModel> src;
  return read_once(src, "Gemma 3",
                   [](std::string& err) { return convert::read_gguf(require_file(gemma3_gguf()), err); });
}

std::string convert_to_file(const convert::SourceModel& src, const convert::WriteOptions& opts,
                            const std::string& file_name) {
  convert::WriteStats stats;
  std::string err;
  const std::string path = tmp_path(file_name);
  if (!convert::write_keel(src, opts, path, stats, err)) {
    ADD_FAILURE() << "cannot write '" << path << "': " << err;
    return std::string();
  }
  return path;
}

std::unique_ptr<LoadedModel> load_keel(const std::string& path) {
  auto l = std::make_unique<LoadedModel>();
  std::string err;
  if (path.empty() || !l->file.open(path, err)) {
    ADD_FAILURE() << "cannot open '" << path << "': " << err;
    return nullptr;
  }
  const Error e = l->model.load(Span<const uint8_t>(l->file.data(), l->file.size()));
  if (!e.ok()) {
    ADD_FAILURE() << "cannot load '" << path << "': " << to_string(e.status()) << ": " << e.message();
    return nullptr;
  }
  return l;
}

std::unique_ptr<LoadedModel> convert_and_load(const convert::SourceModel& src, convert::QuantMode quant,
                                              const std::string& file_name) {
  convert::WriteOptions opts;
  opts.quant = quant;
  return convert_and_load(src, opts, file_name);
}

std::unique_ptr<LoadedModel> convert_and_load(const convert::SourceModel& src, const convert::WriteOptions& opts,
                                              const std::string& file_name) {
  const std::string path = convert_to_file(src, opts, file_name);
  return path.empty() ? nullptr : load_keel(path);
}

const LoadedModel& stories260k(convert::QuantMode quant) {
  static std::map<convert::QuantMode, std::unique_ptr<LoadedModel>> converted;
  std::unique_ptr<LoadedModel>& slot = converted[quant];
  if (slot) return *slot;
  const convert::SourceModel* src = stories260k_source();
  if (src) slot = convert_and_load(*src, quant, "stories260K_q" + std::to_string(int(quant)) + ".keel");
  if (!slot) slot = std::make_unique<LoadedModel>();  // not loaded: the callers' checks fail
  return *slot;
}

AlignedBuffer aligned_buffer(uint64_t bytes) {
  return AlignedBuffer(static_cast<uint8_t*>(std::aligned_alloc(kPlanAlign, plan_align(bytes ? bytes : 1))));
}

TestRuntime::TestRuntime(const Model& m, RuntimeConfig config, bool reserve_backend) : model(m) {
  start(config, reserve_backend);
}

TestRuntime::TestRuntime(std::unique_ptr<LoadedModel> loaded, RuntimeConfig config, bool reserve_backend)
    : owned_model(std::move(loaded)), model(owned_model->model) {
  start(config, reserve_backend);
}

void TestRuntime::start(RuntimeConfig config, bool reserve_backend) {
  std::string err;
  if (reserve_backend && !port::reserve_backend_bytes(model, config, err)) {
    ADD_FAILURE() << "cannot plan the backend: " << err;
    error = Error(Status::InvalidArgument, "the backend's bytes could not be planned");
    return;
  }
  plan = Runtime::plan(model, config);
  persistent = aligned_buffer(plan.persistent_bytes);
  scratch = aligned_buffer(plan.scratch_bytes);
  if (config.plan.threads > 1) pool = std::make_unique<port::LinuxThreadPool>(config.plan.threads);
  error = runtime.init(model, config, Span<uint8_t>(persistent.get(), plan.persistent_bytes),
                       Span<uint8_t>(scratch.get(), plan.scratch_bytes), pool ? pool->pool() : nullptr);
}

std::unique_ptr<TestRuntime> start_runtime(std::unique_ptr<LoadedModel> loaded, const RuntimeConfig& config) {
  if (!loaded) return nullptr;
  auto r = std::make_unique<TestRuntime>(std::move(loaded), config);
  if (!r->error.ok()) {
    ADD_FAILURE() << "cannot start a runtime: " << to_string(r->error.status()) << ": " << r->error.message();
    return nullptr;
  }
  return r;
}

std::unique_ptr<TestRuntime> start_runtime(const std::string& keel_path, const RunOverrides& overrides) {
  std::unique_ptr<LoadedModel> loaded = load_keel(keel_path);
  if (!loaded) return nullptr;
  RuntimeConfig config;
  const Error e = make_runtime_config(loaded->model, overrides, &config);
  if (!e.ok()) {
    ADD_FAILURE() << "cannot configure a runtime for '" << keel_path << "': " << to_string(e.status()) << ": "
                  << e.message();
    return nullptr;
  }
  return start_runtime(std::move(loaded), config);
}

std::vector<int32_t> pseudo_random_ids(size_t n, uint32_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(n);
  for (auto& id : ids) {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    id = int32_t(seed % vocab);
  }
  return ids;
}

std::vector<float> greedy_logit_trace(Runtime& runtime, const std::vector<int32_t>& prompt, int steps) {
  std::vector<float> out;
  EXPECT_TRUE(runtime.prefill(0, Span<const int32_t>(prompt.data(), prompt.size())).ok());
  for (int i = 0; i <= steps; ++i) {
    const Span<const float> l = runtime.logits(0);
    out.insert(out.end(), l.begin(), l.end());
    if (i == steps) break;
    const Result<int32_t> t = runtime.sample(0);
    EXPECT_TRUE(t.ok());
    if (!t.ok()) break;
    EXPECT_TRUE(runtime.decode(0, t.value()).ok());
  }
  return out;
}

}  // namespace keel::test
