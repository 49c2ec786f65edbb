#include "text/sampler.h"

#include <cmath>

#include "core/check.h"

namespace keel::text {
namespace {

// Candidate a ranks before b: higher logit, then lower id.
template <typename C>
bool ranks_before(const C& a, const C& b) {
  return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
}

// Max-heap in rank order: the root is the most likely candidate.
template <typename C>
void sift_down(C* a, size_t i, size_t n) {
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && ranks_before(a[c + 1], a[c])) ++c;
    if (!ranks_before(a[c], a[i])) return;
    const C t = a[i];
    a[i] = a[c];
    a[c] = t;
    i = c;
  }
}

}  // namespace

size_t Sampler::arena_bytes(uint32_t vocab) {
  static_assert(sizeof(Candidate) == 8 && alignof(Candidate) == 4, "text/text_sizes.h counts 8-byte candidates");
  return size_t(sampler_scratch_bytes(vocab));
}

Error Sampler::check(const SamplerConfig& config) {
  KEEL_ENSURE(config.temperature >= 0.0f, Status::InvalidArgument, "sampler: temperature must be >= 0, found %g",
              double(config.temperature));
  KEEL_ENSURE(config.top_p >= 0.0f, Status::InvalidArgument, "sampler: top_p must be >= 0, found %g",
              double(config.top_p));
  KEEL_ENSURE(config.min_p >= 0.0f && config.min_p <= 1.0f, Status::InvalidArgument,
              "sampler: min_p must be in [0, 1], found %g", double(config.min_p));
  KEEL_ENSURE(config.repetition_penalty > 0.0f, Status::InvalidArgument,
              "sampler: repetition_penalty must be > 0, found %g", double(config.repetition_penalty));
  return Error();
}

Error Sampler::init(const SamplerConfig& config, uint32_t vocab, Arena& arena) {
  KEEL_ENSURE(vocab > 0, Status::InvalidArgument, "sampler: vocab must be > 0");
  KEEL_TRY(check(config));
  candidates_ = arena.allocate_array<Candidate>(vocab, alignof(Candidate));
  seen_ = arena.allocate_array<uint32_t>(size_t(sampler_bitmap_words(vocab)), alignof(uint32_t));
  KEEL_ENSURE(candidates_ && seen_, Status::ArenaTooSmall, "sampler arena too small: needs %zu bytes",
              arena_bytes(vocab));
  for (size_t i = 0; i < size_t(sampler_bitmap_words(vocab)); ++i) seen_[i] = 0;
  config_ = config;
  vocab_ = vocab;
  rng_.reseed(config.seed);
  return Error();
}

void Sampler::apply_repetition_penalty(Span<float> logits, Span<const int32_t> recent) {
  const float penalty = config_.repetition_penalty;
  if (penalty == 1.0f || recent.empty()) return;
  size_t first = 0;
  if (config_.repetition_window > 0 && recent.size() > config_.repetition_window) {
    first = recent.size() - config_.repetition_window;
  }
  const size_t n = logits.size();
  for (size_t i = first; i < recent.size(); ++i) {
    const int32_t id = recent[i];
    if (id < 0 || size_t(id) >= n) continue;
    uint32_t& word = seen_[size_t(id) / 32];
    const uint32_t bit = 1u << (uint32_t(id) % 32);
    if (word & bit) continue;
    word |= bit;
    float& l = logits[size_t(id)];
    l = l > 0.0f ? l / penalty : l * penalty;
  }
  for (size_t i = first; i < recent.size(); ++i) {
    const int32_t id = recent[i];
    if (id >= 0 && size_t(id) < n) seen_[size_t(id) / 32] = 0;
  }
}

int32_t Sampler::draw(const Candidate* c, size_t n, float max_logit, double total) {
  const double r = double(rng_.next_float()) * total;
  double acc = 0.0;
  for (size_t i = 0; i < n; ++i) {
    acc += std::exp(double(c[i].logit - max_logit));
    if (r < acc) return c[i].id;
  }
  return c[n - 1].id;  // r rounded up to the total
}

int32_t Sampler::sample(Span<float> logits, Span<const int32_t> recent_tokens) {
  const size_t n_logits = logits.size();
  if (n_logits == 0 || n_logits > vocab_ || !candidates_) return -1;
  apply_repetition_penalty(logits, recent_tokens);

  // Greedy, also the answer when only one candidate can survive.
  int32_t best = -1;
  for (size_t i = 0; i < n_logits; ++i) {
    const float l = logits[i];
    if (l != l) continue;  // NaN
    if (best < 0 || l > logits[size_t(best)]) best = int32_t(i);
  }
  if (best < 0 || config_.temperature <= 0.0f || config_.top_k == 1) return best;
  // Candidates: finite logits scaled by 1 / temperature.
  const float inv_t = 1.0f / config_.temperature;
  const float max_logit = logits[size_t(best)] * inv_t;
  if (!std::isfinite(max_logit)) return best;
  size_t n = 0;
  double total = 0.0;
  for (size_t i = 0; i < n_logits; ++i) {
    const float x = logits[i] * inv_t;
    if (!(x > -INFINITY)) continue;  // -inf and NaN can never be drawn
    candidates_[n++] = Candidate{x, int32_t(i)};
    total += std::exp(double(x - max_logit));
  }

  const bool use_k = config_.top_k > 0 && config_.top_k < n;
  const bool use_p = config_.top_p < 1.0f;
  const bool use_min_p = config_.min_p > 0.0f;
  if (!use_k && !use_p && !use_min_p) return draw(candidates_, n, max_logit, total);

  // Without top-k, drop up front what can never survive, so that only the survivors are
  // sorted: min-p's rejects, and any token with less than (1 - top_p) / n of the mass (all of
  // them together hold less than 1 - top_p, so they form a tail that top-p cuts anyway).
  if (!use_k) {
    double cutoff = use_min_p ? double(config_.min_p) : 0.0;
    if (use_p) {
      const double tail = (1.0 - double(config_.top_p)) * total / double(n);
      if (tail > cutoff) cutoff = tail;
    }
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      const Candidate c = candidates_[i];
      if (c.id == best || std::exp(double(c.logit - max_logit)) >= cutoff) candidates_[kept++] = c;
    }
    n = kept;
  }

  // Heap sort from the top: candidates_[n - 1 - j] is the j-th most likely after j + 1 pops.
  for (size_t i = n / 2; i-- > 0;) sift_down(candidates_, i, n);
  size_t sorted = 0;
  auto pop_next = [&]() {
    const size_t end = n - sorted;
    const Candidate top = candidates_[0];
    candidates_[0] = candidates_[end - 1];
    candidates_[end - 1] = top;
    sift_down(candidates_, 0, end - 1);
    ++sorted;
  };
  auto nth = [&](size_t j) -> const Candidate& { return candidates_[n - 1 - j]; };

  size_t keep = n;
  if (use_k) {
    total = 0.0;
    for (size_t j = 0; j < config_.top_k; ++j) {
      pop_next();
      total += std::exp(double(nth(j).logit - max_logit));
    }
    keep = config_.top_k;
  }
  // Walk most-likely-first; stop at the top-p mass or below min-p.
  const double min_ratio = double(config_.min_p);
  const double p_target = double(config_.top_p) * total;
  double kept_mass = 0.0;
  size_t j = 0;
  for (; j < keep; ++j) {
    if (j == sorted) pop_next();
    const double w = std::exp(double(nth(j).logit - max_logit));
    if (use_min_p && j > 0 && w < min_ratio) break;  // the best token has w == 1
    kept_mass += w;
    if (use_p && kept_mass >= p_target) {
      ++j;
      break;
    }
  }
  // The survivors nth(0..j) sit reversed at the end of the array; draw most likely first.
  const double r = double(rng_.next_float()) * kept_mass;
  double acc = 0.0;
  for (size_t i = 0; i < j; ++i) {
    acc += std::exp(double(nth(i).logit - max_logit));
    if (r < acc) return nth(i).id;
  }
  return nth(j - 1).id;
}

}  // namespace keel::text
