// keel emulate --validate's evaluation (docs/emulator.md): measured tests of the native backend
// (end to end and op class by op class), the emulator's counters for each, the fit of a host
// description's rates on the calibration half and the report on the other half; and the JSON
// that carries a measurement to a later re-fit (`--validate --measured FILE.json`).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "emulate/cost_model.h"

namespace keel::cli {

using OpMicros = std::array<double, kDfOps>;

constexpr uint32_t kValidateChunk = 64;     // prefill test: one chunk of this many tokens
constexpr uint32_t kValidateDecodeRun = 8;  // decode test: this many tokens one at a time

// A measured configuration: KV policy and depth, one half of the shapes or the other.
struct ValidatePoint {
  bool snapstream = false;
  uint32_t depth = 0, budget = 0;
  bool calibration = false;
};
// Reported on depths 0, 1k, 4k (full) and snap_depth (snapstream, budget 4096); calibrated on
// the depths between them and on snapstream with another budget, so no reported shape is seen.
std::vector<ValidatePoint> validate_points(uint32_t snap_depth);
// The full policy's budget: every full point's depth plus a decode run and two chunks.
uint32_t validate_full_budget(const std::vector<ValidatePoint>& points);

// One test (decode or prefill) at one point: what was measured and what the emulator counts.
struct ValidateTest {
  ValidatePoint point;
  bool prefill = false;
  uint32_t visible = 0, prefix = 0, capacity = 0;
  // The SnapKV compression the pass runs (a prefill chunk past a snapstream budget; queries 0
  // when it runs none): its scoring counted as kv_policy, its selection and compaction as
  // kv_compact.
  SnapCompression snap;
  // Samples of microseconds per token (decode: one per token; prefill: one per chunk) and of the
  // op classes' microseconds per pass (decode: kValidateDecodeRun passes per repetition). A
  // neighbour's burst lands in a few samples; the medians skip it. (Microseconds, as the JSON
  // has them, so that a re-fit reads back exactly what was written.)
  std::vector<double> e2e_us;
  std::vector<OpMicros> ops_us;
  // Filled by validate_report.
  DfCounterSet counters;
  bool double_buffered = false;
  uint64_t footprint_bytes = 0;  // df_pass_footprint_bytes of the pass
  const DfModel* model = nullptr;
  uint32_t tokens() const { return prefill ? kValidateChunk : 1; }
  double e2e_s() const;
  double op_s(uint32_t op) const;  // per pass
  double op_us_per_token(uint32_t op) const;
};

// What a measurement ran on and what it measured.
struct ValidateRun {
  std::string model_fingerprint;  // validate_fingerprint of the measured model
  uint32_t reps = 0, snap_depth = 0;
  std::string start_name;  // --hw as given
  HwDesc start;            // the description the fit starts from
  std::vector<ValidateTest> tests;
};

// The model's shape and weight types as one line: a measurement re-fits only on its own model.
std::string validate_fingerprint(const DfModel& m);

// Counts every test's pass over the host schedule, fits `run.start`'s rates on the calibration
// half and prints the report (or the JSON). 0 on success, else the exit code after an error.
int validate_report(ValidateRun& run, const DfModel& m, bool as_json);

// Derived facts of the points' sessions, for a file that does not record them (written before
// they were): the KV capacity of each point's session and the snapstream policy's settings.
struct ValidateSessionFacts {
  uint32_t full_capacity = 0;
  std::vector<uint32_t> snap_capacity;  // per snapstream point, in order
  uint32_t sinks = 0, window = 0, obs_window = 0, planned_obs_window = 0, snap_kernel = 0;
};

// Reads a previous `--validate --json` output for model `m`. A file that names its model and
// start description (format 2) is self-contained; an older one has its prefix, capacity and
// SnapKV queries derived from `facts`, and its model checked by recomputing its recorded
// unfitted predictions with `run.start` (the description it was started from, as given by
// --hw). On failure `error` names what was expected and what was found.
bool read_measured(const std::string& path, const DfModel& m, const ValidateSessionFacts& facts, ValidateRun& run,
                   std::string& error);

}  // namespace keel::cli
