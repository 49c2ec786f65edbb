// The keel tool's side of keel::generate (llm/generate.h): streams the text to a FILE and keeps
// the text and ids for --json and --stats.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "llm/generate.h"

namespace keel::cli {

struct Generation {
  std::string text;
  std::vector<int32_t> ids;
  GenerateResult result;
};

// Prefills `prompt` on slot 0 and generates; `out` (may be null) receives the text as it is
// produced. Timings use now_seconds().
bool generate(Runtime& rt, const std::vector<int32_t>& prompt, GenerateOptions options, FILE* out, Generation& g,
              std::string& error);

}  // namespace keel::cli
