// keel emulate --validate: the `host` preset against the native backend on this machine
// (docs/emulator.md). Measures, in one run and alternating, the native backend end to end
// (prefill and decode per token, as keel bench does) and op class by op class at several KV
// depths; fits the hardware description's rates on half of those shapes and reports the
// prediction error on the other half (tools/keel/emulate/validate_fit.h).
#pragma once

#include <cstdint>
#include <string>

#include "keel/cli/session.h"

namespace keel::cli {

// `start_hw`: the description whose rates the fit starts from (and keeps where no calibration
// shape depends on them). One thread.
int run_validate(const SessionOptions& so, const std::string& start_hw, uint32_t reps, uint32_t snap_depth,
                 bool as_json);

// The same fit and report from a previous run's `--json` output at `path`, measured on this
// model, without measuring. A file that does not record its start description is checked
// against, and started from, `start_hw` (empty: the one it names in start_hw).
int run_validate_measured(const SessionOptions& so, const std::string& start_hw, const std::string& path, bool as_json);

}  // namespace keel::cli
