// Picks the next token from logits. Order of operations (as the Hugging Face logits warpers):
//   1. repetition penalty (CTRL style) on each distinct token among the last
//      `repetition_window` recent tokens: a positive logit is divided by the penalty, a
//      negative one multiplied;
//   2. temperature <= 0: greedy, the highest logit, the lowest id among equal ones; otherwise
//      logits are divided by the temperature and
//   3. top-k keeps the k most likely tokens (0 = off);
//   4. top-p keeps the shortest most-likely-first prefix whose probability, renormalized over
//      what top-k kept, reaches top_p (>= 1 = off);
//   5. min-p keeps tokens whose probability is at least min_p times the most likely one's
//      (<= 0 = off);
//   6. one draw from the renormalized survivors with the sampler's own PCG32 stream.
// Ties in probability rank the lower id first, so a seed fixes the result on every platform.
// Scratch for the candidate list comes from an arena sized by arena_bytes(vocab); sample()
// allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/arena.h"
#include "core/span.h"
#include "core/status.h"
#include "text/pcg32.h"
#include "text/text_sizes.h"

namespace keel::text {

struct SamplerConfig {
  float temperature = 0.0f;
  uint32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;  // 1 = off
  uint32_t repetition_window = 64;  // 0 = every recent token given
  uint64_t seed = 0;
};

class Sampler {
 public:
  // sampler_scratch_bytes (text/text_sizes.h), which the memory plan sizes its region by.
  static size_t arena_bytes(uint32_t vocab);

  // InvalidArgument for a config out of range (negative or NaN values, penalty <= 0).
  static Error check(const SamplerConfig& config);
  // check(config), then takes its buffers from `arena`.
  Error init(const SamplerConfig& config, uint32_t vocab, Arena& arena);

  // `logits` ([vocab] or fewer entries) is modified in place by the repetition penalty.
  // `recent_tokens` is the history, oldest first; ids outside the logits are ignored.
  // Returns the chosen id, or -1 when logits is empty, longer than the vocab this sampler was
  // sized for, or all NaN.
  int32_t sample(Span<float> logits, Span<const int32_t> recent_tokens);

  void reseed(uint64_t seed) { rng_.reseed(seed); }
  const SamplerConfig& config() const { return config_; }

 private:
  struct Candidate {
    float logit;
    int32_t id;
  };
  void apply_repetition_penalty(Span<float> logits, Span<const int32_t> recent);
  int32_t draw(const Candidate* c, size_t n, float max_logit, double total);

  SamplerConfig config_;
  uint32_t vocab_ = 0;
  Candidate* candidates_ = nullptr;  // [vocab]
  uint32_t* seen_ = nullptr;         // [ceil(vocab / 32)] bitmap, all clear between calls
  Pcg32 rng_;
};

}  // namespace keel::text
