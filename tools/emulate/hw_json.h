// Hardware descriptions for the dataflow backend as JSON (schema in docs/emulator.md), the
// presets built into the tool, and the `host` description `keel emulate --calibrate` writes.
#pragma once

#include <string>
#include <vector>

#include "emulate/hw_desc.h"

namespace keel::hw {

// Parses a description; on failure `error` names the field, what was expected and what was found.
bool parse_hw_json(const std::string& text, const std::string& origin, HwDesc& out, std::string& error);
// The same description as JSON (what --calibrate writes; parse_hw_json reads it back).
std::string hw_to_json(const HwDesc& hw, const std::string& sources);

struct Preset {
  const char* name;
  const char* summary;
  const char* json;
};
const std::vector<Preset>& presets();
// Where `keel emulate --calibrate` writes the `host` description: $KEEL_CACHE_DIR/hw/host.json,
// else ~/.cache/keel/hw/host.json.
std::string host_hw_path();
// A preset name, `host`, or a path to a JSON file.
bool load_hw(const std::string& name_or_path, HwDesc& out, std::string& error);

}  // namespace keel::hw
