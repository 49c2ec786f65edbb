#include "keel/emulate/host_validate.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "emulate/cost_model.h"
#include "backend/registry.h"
#include "emulate/hw_json.h"
#include "keel/cli/cli_util.h"
#include "keel/emulate/emulate_model.h"
#include "keel/emulate/validate_fit.h"
#include "kernels/rope.h"
#include "kv/snapkv.h"
#include "llm/plan.h"
#include "llm/transformer.h"

namespace keel::cli {
namespace {

constexpr uint32_t kChunk = kValidateChunk;
constexpr uint32_t kDecodeRun = kValidateDecodeRun;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// One forward pass issued op by op as transformer.cpp issues them, on the model's own weights and
// a KV cache of every layer (so that what streams from DRAM streams here too), each op class
// timed. Embedding and RoPE are not issued: the emulator does not model them.
class OpBench {
 public:
  OpBench(const Model& m, Backend& be, uint32_t capacity) : m_(m), be_(be), cap_(capacity) {
    const ModelShape& s = m.shape();
    q_dim_ = s.n_heads * s.head_dim;
    kv_dim_ = s.n_kv_heads * s.head_dim;
    const uint32_t widest = std::max({s.dim, s.ffn_dim, q_dim_});
    x_.assign(uint64_t(kChunk) * s.dim, 0.1f), xb_ = x_;
    q_.assign(uint64_t(kChunk) * q_dim_, 0.1f), att_ = q_;
    k_.assign(uint64_t(kChunk) * kv_dim_, 0.1f), v_ = k_;
    hb_.assign(uint64_t(kChunk) * s.ffn_dim, 0.1f), hb2_ = hb_;
    xq_.resize(uint64_t(kChunk) * act_blocks(widest));
    logits_.resize(s.vocab_size);
    // As the runtime plans them: a score row and a re-rotated query per query head of a group,
    // so that attention takes a KV head's query heads together as the transformer's does.
    group_ = plan_query_rows(s.n_heads, s.n_kv_heads);
    rows_.resize(uint64_t(group_) * cap_), qrot_.resize(uint64_t(group_) * s.head_dim);
    shift_cos_.assign(s.head_dim / 2, 1.0f), shift_sin_.assign(s.head_dim / 2, 0.0f);
    positions_.assign(uint64_t(s.n_kv_heads) * cap_, 0);
    const uint64_t per_layer = uint64_t(s.n_kv_heads) * cap_ * s.head_dim;
    keys_.resize(per_layer * s.n_layers), values_.resize(per_layer * s.n_layers);
    std::vector<float> row(s.head_dim);
    uint32_t state = 12345;
    for (uint64_t i = 0; i < keys_.size(); i += s.head_dim) {
      for (float& f : row) state = state * 1664525u + 1013904223u, f = float(state >> 8) / float(1 << 24) - 0.5f;
      be_.to_half(row.data(), s.head_dim, keys_.data() + i);
      be_.to_half(row.data(), s.head_dim, values_.data() + i);
    }
    sums_.resize(cap_), pooled_.resize(cap_), order_.resize(cap_), keep_.resize(cap_);
    gathered_keys_.resize(uint64_t(cap_) * s.head_dim), gathered_values_.resize(uint64_t(cap_) * s.head_dim);
    cos_.resize(s.head_dim / 2), sin_.resize(s.head_dim / 2);
    for (uint32_t i = 0; i < s.head_dim / 2; ++i) inv_freq_.push_back(std::pow(10000.0, -2.0 * i / s.head_dim));
    output_norm_ = m.tensor(fb::TensorRole::OutputNorm);
    output_ =
        m.meta()->arch()->tied_output() ? m.tensor(fb::TensorRole::TokenEmbedding) : m.tensor(fb::TensorRole::Output);
  }

  // Seconds per op class of a pass of n tokens after `visible` cached entries, one logit row;
  // with snap.queries > 0 also the SnapKV compression that follows it, as kv/snapkv_compress.cpp
  // runs it: the scoring (every observation query of every query head against all entries, the
  // prefix apart, each row softmaxed) timed as kv_policy; the rows summed, the candidates pooled
  // and selected by the engine's snapkv_select, the kept keys and values gathered and written
  // back, and the new prefix's keys re-rotated in runs of equal distance, timed as kv_compact.
  OpMicros forward(uint32_t n, uint32_t visible, uint32_t prefix, const SnapCompression& snap = {}) {
    OpMicros us{};
    auto timed = [&](DfOp op, auto&& fn) {
      const double t0 = now_s();
      fn();
      us[uint32_t(op)] += (now_s() - t0) * 1e6;
    };
    const ModelShape& s = m_.shape();
    const uint32_t dim = s.dim, ffn = s.ffn_dim, hd = s.head_dim;
    const uint64_t per_layer = uint64_t(s.n_kv_heads) * cap_ * hd;
    for (uint32_t l = 0; l < s.n_layers; ++l) {
      const LayerWeights w = layer_weights(m_, l);
      const float* attn_norm = reinterpret_cast<const float*>(w.attn_norm.data);
      timed(DfOp::Norm, [&] {
        for (uint32_t t = 0; t < n; ++t)
          be_.rmsnorm(&x_[uint64_t(t) * dim], attn_norm, dim, 1e-5f, &xb_[uint64_t(t) * dim]);
      });
      const bool shared_q = is_quantized(w.wq.dtype) && is_quantized(w.wk.dtype) && is_quantized(w.wv.dtype);
      if (shared_q) timed(DfOp::Quantize, [&] { be_.quantize_rows(xb_.data(), n, dim, dim, xq_.data()); });
      timed(DfOp::QkvProj, [&] {
        be_.matmul(w.wq, xb_.data(), dim, xq_.data(), shared_q, n, q_.data(), q_dim_);
        be_.matmul(w.wk, xb_.data(), dim, xq_.data(), shared_q, n, k_.data(), kv_dim_);
        be_.matmul(w.wv, xb_.data(), dim, xq_.data(), shared_q, n, v_.data(), kv_dim_);
      });
      uint16_t* keys = keys_.data() + l * per_layer;
      uint16_t* values = values_.data() + l * per_layer;
      timed(DfOp::KvWrite, [&] {
        for (uint32_t h = 0; h < s.n_kv_heads; ++h)
          for (uint32_t t = 0; t < n; ++t) {
            const uint64_t at = uint64_t(h) * cap_ * hd + uint64_t(visible + t) * hd;
            be_.to_half(&k_[uint64_t(t) * kv_dim_ + h * hd], hd, keys + at);
            be_.to_half(&v_[uint64_t(t) * kv_dim_ + h * hd], hd, values + at);
          }
      });
      AttentionArgs a{};
      a.q = q_.data(), a.out = att_.data(), a.keys = keys, a.values = values;
      a.head_stride = uint64_t(cap_) * hd;
      a.n = n, a.n_heads = s.n_heads, a.n_kv_heads = s.n_kv_heads, a.head_dim = hd;
      a.visible = visible, a.prefix = prefix, a.rope_pairs = hd / 2, a.rope_halves = true;
      a.shift_cos = shift_cos_.data(), a.shift_sin = shift_sin_.data();
      a.positions = positions_.data(), a.positions_stride = cap_;
      a.rows = rows_.data(), a.qrot = qrot_.data(), a.row_capacity = cap_, a.query_rows = group_;
      timed(DfOp::Attention, [&] { be_.attention_many(&a, 1); });
      timed(DfOp::OutProj, [&] { be_.matmul(w.wo, att_.data(), q_dim_, xq_.data(), false, n, xb_.data(), dim); });
      timed(DfOp::Residual, [&] {
        for (uint32_t t = 0; t < n; ++t)
          be_.add(&x_[uint64_t(t) * dim], &xb_[uint64_t(t) * dim], dim, &x_[uint64_t(t) * dim]);
      });
      const float* ffn_norm = reinterpret_cast<const float*>(w.ffn_norm.data);
      timed(DfOp::Norm, [&] {
        for (uint32_t t = 0; t < n; ++t)
          be_.rmsnorm(&x_[uint64_t(t) * dim], ffn_norm, dim, 1e-5f, &xb_[uint64_t(t) * dim]);
      });
      const bool shared_f = is_quantized(w.gate.dtype) && is_quantized(w.up.dtype);
      if (shared_f) timed(DfOp::Quantize, [&] { be_.quantize_rows(xb_.data(), n, dim, dim, xq_.data()); });
      timed(DfOp::FfnIn, [&] {
        be_.matmul(w.gate, xb_.data(), dim, xq_.data(), shared_f, n, hb_.data(), ffn);
        be_.matmul(w.up, xb_.data(), dim, xq_.data(), shared_f, n, hb2_.data(), ffn);
      });
      timed(DfOp::Residual, [&] {
        for (uint32_t t = 0; t < n; ++t)
          be_.silu_mul(&hb_[uint64_t(t) * ffn], &hb2_[uint64_t(t) * ffn], ffn, &hb_[uint64_t(t) * ffn]);
      });
      timed(DfOp::FfnDown, [&] { be_.matmul(w.down, hb_.data(), ffn, xq_.data(), false, n, xb_.data(), dim); });
      timed(DfOp::Residual, [&] {
        for (uint32_t t = 0; t < n; ++t)
          be_.add(&x_[uint64_t(t) * dim], &xb_[uint64_t(t) * dim], dim, &x_[uint64_t(t) * dim]);
      });
    }
    if (snap.queries > 0) {
      const uint32_t total = visible + n, group = s.n_heads / s.n_kv_heads;
      const float scale = 1.0f / std::sqrt(float(hd));
      for (uint32_t l = 0; l < s.n_layers; ++l)
        for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
          uint16_t* keys = keys_.data() + l * per_layer + uint64_t(h) * cap_ * hd;
          uint16_t* values = values_.data() + l * per_layer + uint64_t(h) * cap_ * hd;
          timed(DfOp::KvCompact, [&] { std::fill(sums_.begin(), sums_.begin() + total, 0.0f); });
          for (uint32_t i = 0; i < snap.queries; ++i)
            for (uint32_t g = 0; g < group; ++g) {
              const float* q = &q_[uint64_t(i % n) * q_dim_ + uint64_t(h * group + g) * hd];
              timed(DfOp::KvPolicy, [&] {
                if (prefix > 0) be_.scores(KvType::F16, q, keys, prefix, hd, scale, rows_.data());
                be_.scores(KvType::F16, q, keys + uint64_t(prefix) * hd, total - prefix, hd, scale,
                           rows_.data() + prefix);
                be_.softmax(0, rows_.data(), total);
              });
              timed(DfOp::KvCompact, [&] {
                for (uint32_t p = 0; p < total; ++p) sums_[p] += rows_[p];
              });
            }
          timed(DfOp::KvCompact, [&] { compact(snap, keys, values); });
        }
    }
    const float* onorm = reinterpret_cast<const float*>(output_norm_.data);
    timed(DfOp::Norm, [&] { be_.rmsnorm(&x_[uint64_t(n - 1) * dim], onorm, dim, 1e-5f, xb_.data()); });
    timed(DfOp::LmHead,
          [&] { be_.matmul(output_, xb_.data(), dim, xq_.data(), false, 1, logits_.data(), s.vocab_size); });
    return us;
  }

 private:
  // One (layer, KV head)'s selection and compaction, as KvManager::snap_head and
  // KvCache::compact_head run them: the best candidates by their pooled summed scores, then
  // every kept key and value gathered (the candidates chosen, then the sinks' and the tail's
  // rows, which lie behind them here) and written back, the first `rotated` keys re-rotated from
  // their old index to their new one, one set of angles per run of equal distance.
  void compact(const SnapCompression& c, uint16_t* keys, uint16_t* values) {
    const uint32_t hd = m_.shape().head_dim, pairs = hd / 2;
    const uint32_t fixed = c.total - c.candidates;
    const uint32_t want = c.kept > fixed ? c.kept - fixed : 0;
    uint32_t kept =
        snapkv_select(sums_.data(), c.candidates, want, c.pool_kernel, pooled_.data(), order_.data(), keep_.data());
    for (uint32_t i = 0; i < fixed; ++i) keep_[kept++] = c.candidates + i;
    for (uint32_t i = 0; i < kept; ++i) {
      memcpy(&gathered_keys_[uint64_t(i) * hd], keys + uint64_t(keep_[i]) * hd, hd * 2);
      memcpy(&gathered_values_[uint64_t(i) * hd], values + uint64_t(keep_[i]) * hd, hd * 2);
    }
    const uint32_t rotated = c.rotated < kept ? c.rotated : kept;
    for (uint32_t i = 0; i < rotated;) {
      const int64_t by = int64_t(i) - keep_[i];
      uint32_t end = i + 1;
      while (end < rotated && int64_t(end) - keep_[end] == by) ++end;
      if (by != 0) {
        rope_angles(double(by), inv_freq_.data(), pairs, cos_.data(), sin_.data());
        be_.rotate_keys(KvType::F16, &gathered_keys_[uint64_t(i) * hd], end - i, hd, pairs, true, cos_.data(),
                        sin_.data());
      }
      i = end;
    }
    memcpy(keys, gathered_keys_.data(), uint64_t(kept) * hd * 2);
    memcpy(values, gathered_values_.data(), uint64_t(kept) * hd * 2);
  }

  const Model& m_;
  Backend& be_;
  uint32_t cap_, q_dim_ = 0, kv_dim_ = 0, group_ = 1;
  std::vector<float> x_, xb_, q_, k_, v_, att_, hb_, hb2_, logits_, rows_, qrot_, shift_cos_, shift_sin_;
  // SnapKV selection and compaction (one KV head at a time): summed and pooled scores, the
  // selection's order and kept indices, the gathered rows, RoPE angles (the frequencies of base
  // 10000: what a rotation costs does not depend on them).
  std::vector<float> sums_, pooled_, cos_, sin_;
  std::vector<double> inv_freq_;
  std::vector<uint32_t> order_, keep_;
  std::vector<uint16_t> gathered_keys_, gathered_values_;
  std::vector<ActBlock> xq_;
  std::vector<int32_t> positions_;
  std::vector<uint16_t> keys_, values_;
  TensorView output_norm_, output_;
};

// The sessions of the points: one for every full point (one sequence filled deeper in turn), one
// per snapstream point; session_of[i] is point i's.
struct PointSessions {
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<uint32_t> session_of;
};

bool start_sessions(const SessionOptions& so, const std::vector<ValidatePoint>& points, PointSessions& out,
                    std::string& error) {
  const uint32_t full_budget = validate_full_budget(points);
  for (const ValidatePoint& p : points) {
    if (!p.snapstream && !out.sessions.empty() && !points[0].snapstream) {
      out.session_of.push_back(0);
      continue;
    }
    SessionOptions o = so;
    o.kv_policy = p.snapstream ? "snapstream" : "full";
    auto s = std::make_unique<Session>();
    if (!s->load(o, error) || !s->resolve_policy(nullptr, error) ||
        !s->start(p.snapstream ? p.budget : full_budget, error))
      return false;
    out.session_of.push_back(uint32_t(out.sessions.size()));
    out.sessions.push_back(std::move(s));
  }
  return true;
}

SessionOptions measuring_options(const SessionOptions& base) {
  SessionOptions so = base;
  so.backend = "native";
  so.threads = 1;
  so.chunk = kChunk;
  so.hw.clear();  // --hw and --sram-bytes name the description fitted, not what the sessions run
  so.sram_bytes = 0;
  return so;
}

}  // namespace

int run_validate(const SessionOptions& base, const std::string& start_hw, uint32_t reps, uint32_t snap_depth,
                 bool as_json) {
  ValidateRun run;
  std::string error;
  if (!hw::load_hw(start_hw, run.start, error)) return fail("emulate", error);
  // The fit moves the cache's capacity and bandwidth in the cache / footprint model; a measured
  // share curve (--calibrate's) would make its capacity inert.
  run.start.cache_share_points = 0;
  if (run.start.tier_count != 1) return fail("emulate", "--validate fits a one-tier description (the host's)");
  if (base.sram_bytes) run.start.sram_bytes = base.sram_bytes;
  run.start_name = start_hw;
  run.reps = reps;
  run.snap_depth = snap_depth;
  const std::vector<ValidatePoint> points = validate_points(snap_depth);
  const uint32_t full_budget = validate_full_budget(points);

  const SessionOptions so = measuring_options(base);
  Session probe;
  if (!probe.load(so, error)) return fail("emulate", error);
  const Model& model = probe.model();
  const DfModel dm = df_model(model);
  if (dm.local_layers() > 0)
    return fail("emulate", "--validate measures models whose every layer sees the whole sequence; this one has " +
                               std::to_string(dm.local_layers()) + " sliding-window layers (Gemma 3)");
  run.model_fingerprint = validate_fingerprint(dm);
  BackendStorage storage;
  Result<Backend*> be = make_backend(BackendKind::Native, nullptr, storage);
  if (!be.ok()) return fail("emulate", be.error().message());
  OpBench bench(model, *be.value(), full_budget + kChunk);

  // One session for the full points, one per snapstream point; each kept for every repetition.
  PointSessions ps;
  if (!start_sessions(so, points, ps, error)) return fail("emulate", error);
  // Refused now, not after the measurement: a description whose SRAM cannot hold the schedule
  // of every point's KV capacity.
  for (uint32_t i = 0; i < points.size(); ++i) {
    DfScheduleInput in;
    in.model = dm;
    in.memory = df_memory(run.start);
    in.kv_capacity_tokens = ps.sessions[ps.session_of[i]]->runtime().kv_cache(0).shape().capacity;
    in.chunk_tokens = kChunk;
    const DfSchedule sc = df_schedule(in);
    if (!sc.fits)
      return fail("emulate",
                  "'" + start_hw + "' cannot hold the host schedule (give more with --sram-bytes): " + sc.refusal);
  }
  std::vector<ValidateTest>& tests = run.tests;
  for (const ValidatePoint& p : points)
    for (const bool prefill : {false, true}) {
      tests.emplace_back();
      tests.back().point = p, tests.back().prefill = prefill;
    }

  const uint32_t vocab = model.shape().vocab_size;
  std::vector<int32_t> ids(snap_depth + kDecodeRun + kChunk);
  for (uint32_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((uint64_t(i) * 7919 + 13) % vocab);
  auto check = [&](const Error& e) {
    if (!e.ok()) fprintf(stderr, "keel emulate: %s: %s\n", to_string(e.status()), e.message());
    return e.ok();
  };
  bench.forward(kChunk, 0, 0);  // warm up
  for (uint32_t r = 0; r < reps; ++r) {
    for (uint32_t i = 0; i < points.size(); ++i) {
      const ValidatePoint& p = points[i];
      Runtime& rt = ps.sessions[ps.session_of[i]]->runtime();
      // Full: a fresh sequence every repetition, filled up to each depth in turn (the points are
      // in increasing depth, each more than one test's tokens above the last). Snapstream past
      // its budget holds the same number of entries after every token (tested): filled once.
      const uint64_t at = rt.sequence_length(0);
      if (p.snapstream ? r == 0 : p.depth == 0) {
        if (!check(rt.reset(0))) return 1;
        if (p.depth > 0 && !check(rt.prefill(0, Span<const int32_t>(ids.data(), p.depth)))) return 1;
      } else if (!p.snapstream) {
        if (!check(rt.prefill(0, Span<const int32_t>(ids.data() + at, p.depth - at)))) return 1;
      }
      fprintf(stderr, "repetition %u: %s at %u\n", r + 1, p.snapstream ? "snapstream" : "full", p.depth);
      for (ValidateTest* t : {&tests[2 * i], &tests[2 * i + 1]}) {
        const KvCache& kv = rt.kv_cache(0);
        t->visible = kv.visible();
        t->prefix = kv.index_rotated();
        t->capacity = kv.shape().capacity;
        const uint32_t n = t->tokens();
        t->snap = t->prefill ? emu_snap_compression(rt, n) : SnapCompression();
        if (t->prefill) {
          const double t0 = now_s();
          if (!check(rt.prefill(0, Span<const int32_t>(ids.data() + p.depth, n)))) return 1;
          t->e2e_us.push_back((now_s() - t0) / n * 1e6);
          t->ops_us.push_back(bench.forward(n, t->visible, t->prefix, t->snap));
        } else {
          for (uint32_t k = 0; k < kDecodeRun; ++k) {
            const double t0 = now_s();
            if (!check(rt.decode(0, ids[p.depth + k]))) return 1;
            t->e2e_us.push_back((now_s() - t0) * 1e6);
          }
          for (uint32_t k = 0; k < kDecodeRun; ++k) t->ops_us.push_back(bench.forward(n, t->visible, t->prefix));
        }
      }
    }
  }
  return validate_report(run, dm, as_json);
}

int run_validate_measured(const SessionOptions& base, const std::string& start_hw, const std::string& path,
                          bool as_json) {
  const SessionOptions so = measuring_options(base);
  std::string error;
  Session probe;
  if (!probe.load(so, error)) return fail("emulate", error);
  const DfModel dm = df_model(probe.model());
  if (dm.local_layers() > 0)
    return fail("emulate", "--validate measures models whose every layer sees the whole sequence; this one has " +
                               std::to_string(dm.local_layers()) + " sliding-window layers (Gemma 3)");
  ValidateRun run;
  run.start_name = start_hw;
  if (!start_hw.empty() && !hw::load_hw(start_hw, run.start, error)) return fail("emulate", error);
  // What an older file does not record, from the sessions its run had (planned, not run).
  ValidateSessionFacts facts;
  PointSessions ps;
  const std::vector<ValidatePoint> points = validate_points(8192);
  if (!start_sessions(so, points, ps, error)) return fail("emulate", error);
  for (uint32_t i = 0; i < points.size(); ++i) {
    Runtime& rt = ps.sessions[ps.session_of[i]]->runtime();
    if (points[i].snapstream) {
      facts.snap_capacity.push_back(rt.kv_cache(0).shape().capacity);
      facts.sinks = rt.config().kv.sinks, facts.window = rt.config().kv.window;
      facts.obs_window = rt.config().kv.obs_window, facts.planned_obs_window = rt.kv_cache(0).shape().obs_window;
      facts.snap_kernel = snap_kernel_of(rt.config().kv);
    } else {
      facts.full_capacity = rt.kv_cache(0).shape().capacity;
    }
  }
  if (base.sram_bytes) run.start.sram_bytes = base.sram_bytes;
  if (!read_measured(path, dm, facts, run, error)) return fail("emulate", error);
  if (base.sram_bytes) run.start.sram_bytes = base.sram_bytes;
  if (run.start.tier_count != 1) return fail("emulate", "--validate fits a one-tier description (the host's)");
  return validate_report(run, dm, as_json);
}

}  // namespace keel::cli
