#include "llm/architecture.h"

namespace keel {
namespace {

const Architecture* const kArchitectures[] = {&kLlamaArchitecture, &kGemma3Architecture};

}  // namespace

const Architecture* find_architecture(fb::ArchFamily family) {
  for (const Architecture* a : kArchitectures) {
    if (a->family == family) return a;
  }
  return nullptr;
}

}  // namespace keel
