// What the engine tests set up again and again: a .keel file converted in process and loaded, and
// a Runtime on heap arenas sized by its own plan. Every failure is a test failure (ADD_FAILURE)
// with what was being done, and an empty result; nothing skips.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "convert/keel_writer.h"
#include "convert/source_model.h"
#include "llm/run_config.h"
#include "llm/runtime.h"
#include "model/model.h"
#include "ports/linux/mapped_file.h"
#include "ports/linux/thread_pool.h"

namespace keel::test {

struct LoadedModel {
  port::MappedFile file;
  Model model;
};

// The source models the tests convert, each read once per process; nullptr, and the calling test
// failed, when it cannot be read (a later call tries again and fails again).
const convert::SourceModel* stories260k_source();  // ../shared, llama2.c format
const convert::SourceModel* smollm2_source();      // the GGUF of scripts/setup.sh
const convert::SourceModel* gemma3_source();       // the GGUF of scripts/setup.sh (models/gemma3.recipe)

// Writes `src` with `opts` to tmp/<file_name>: its path, or empty and the test failed. For a test
// that hands the file to a tool or loads it more than once.
std::string convert_to_file(const convert::SourceModel& src, const convert::WriteOptions& opts,
                            const std::string& file_name);
// Maps and loads a .keel file.
std::unique_ptr<LoadedModel> load_keel(const std::string& path);
// Writes `src` with `quant` to tmp/<file_name> and loads it.
std::unique_ptr<LoadedModel> convert_and_load(const convert::SourceModel& src, convert::QuantMode quant,
                                              const std::string& file_name);
// The same with every write option, for a file whose KV defaults or plan the test chooses.
std::unique_ptr<LoadedModel> convert_and_load(const convert::SourceModel& src, const convert::WriteOptions& opts,
                                              const std::string& file_name);
// stories260K (../shared, llama2.c format) converted with `quant`, once per process and quant;
// `model.loaded()` is false (and the first test to ask failed) when that did not work.
const LoadedModel& stories260k(convert::QuantMode quant);

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<uint8_t, FreeDeleter>;
// kPlanAlign-aligned heap bytes, at least one.
AlignedBuffer aligned_buffer(uint64_t bytes);

// A runtime on its own arenas, with a thread pool of config.plan.threads workers when that is
// more than one. `error` is what init returned.
struct TestRuntime {
  std::unique_ptr<LoadedModel> owned_model;  // set when the runtime owns its model
  const Model& model;
  MemoryPlan plan;
  AlignedBuffer persistent, scratch;
  std::unique_ptr<port::LinuxThreadPool> pool;
  Runtime runtime;
  Error error;
  // reserve_backend: the plan includes the backend's own bytes (XNNPACK operators, the dataflow
  // SRAM), as the tools plan them (ports/linux/backend_plan.h).
  TestRuntime(const Model& model, RuntimeConfig config, bool reserve_backend = true);
  TestRuntime(std::unique_ptr<LoadedModel> loaded, RuntimeConfig config, bool reserve_backend = true);
  TestRuntime(const TestRuntime&) = delete;
  TestRuntime& operator=(const TestRuntime&) = delete;

 private:
  void start(RuntimeConfig config, bool reserve_backend);
};

// Loads a .keel file and starts a runtime over it, configured from `overrides` as the tools
// configure theirs (make_runtime_config); nullptr, and the test failed, on any error.
std::unique_ptr<TestRuntime> start_runtime(const std::string& keel_path, const RunOverrides& overrides);
// A runtime that owns `loaded` (nullptr passes through), with the backend's bytes reserved.
std::unique_ptr<TestRuntime> start_runtime(std::unique_ptr<LoadedModel> loaded, const RuntimeConfig& config);

// n token ids in [0, vocab) from an xorshift generator: the same ids for the same seed.
std::vector<int32_t> pseudo_random_ids(size_t n, uint32_t vocab, uint64_t seed = 0x9e3779b97f4a7c15ull);

// The logits of slot 0 after prefilling `prompt` and after each of `steps` greedy decode steps,
// concatenated: what two runs must agree on bit for bit.
std::vector<float> greedy_logit_trace(Runtime& runtime, const std::vector<int32_t>& prompt, int steps);

}  // namespace keel::test
