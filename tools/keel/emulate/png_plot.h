// `keel emulate --plot`: on-chip KV bytes against context length, as a PNG written here (no
// plotting library): full in red, the bounded policy at its budget in blue, the SRAM capacity
// in gray. The axes' ranges are printed, since the image has no text.
#pragma once

#include <string>

#include "keel/emulate/emulate_model.h"

namespace keel::cli {

bool plot_kv_onchip(const EmuConfig& c, const std::string& path, std::string& error);

}  // namespace keel::cli
