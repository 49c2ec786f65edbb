// The text scratch the memory plan reserves, alone in a header that includes nothing, so that
// llm/plan.h (a header firmware compiles alone) sizes the `sampler` and `text` regions by the
// sampler's own formula and the tokenizer's own bound.
#pragma once

#include <cstdint>

namespace keel::text {

// Words of the seen-token bitmap: one bit per vocabulary entry.
constexpr uint64_t sampler_bitmap_words(uint32_t vocab) { return (uint64_t(vocab) + 31) / 32; }

// What Sampler::init takes from an arena at any address: [vocab] candidates (f32 logit, i32
// id: 8 bytes, 4-aligned), then the bitmap of u32 words, each after up to its alignment of
// padding.
constexpr uint64_t sampler_scratch_bytes(uint32_t vocab) {
  return uint64_t(vocab) * 8 + 4 + sampler_bitmap_words(vocab) * 4 + 4;
}

// Scratch one Tokenizer::encode() call may take; tokenizer.cpp checks at compile time that its
// work buffers fit.
constexpr uint64_t kTokenizerScratchBytes = 64 * 1024;

}  // namespace keel::text
