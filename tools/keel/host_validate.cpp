#include "keel/host_validate.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "backend/dataflow_schedule.h"
#include "backend/registry.h"
#include "convert/hw_json.h"
#include "keel/cli_util.h"
#include "llm/transformer.h"

namespace keel::cli {
namespace {

using nlohmann::json;
using OpSeconds = std::array<double, kDfOps>;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

constexpr uint32_t kChunk = 64;     // prefill test: one chunk of this many tokens
constexpr uint32_t kDecodeRun = 8;  // decode test: this many tokens one at a time, each a sample

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
    rows_.resize(cap_), qrot_.resize(s.head_dim);
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
    output_norm_ = m.tensor(fb::TensorRole::OutputNorm);
    output_ =
        m.meta()->arch()->tied_output() ? m.tensor(fb::TensorRole::TokenEmbedding) : m.tensor(fb::TensorRole::Output);
  }

  // Seconds per op class of a pass of n tokens after `visible` cached entries, one logit row.
  OpSeconds forward(uint32_t n, uint32_t visible, uint32_t prefix) {
    OpSeconds sec{};
    auto timed = [&](DfOp op, auto&& fn) {
      const double t0 = now_s();
      fn();
      sec[uint32_t(op)] += now_s() - t0;
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
      a.rows = rows_.data(), a.qrot = qrot_.data(), a.row_capacity = cap_;
      timed(DfOp::Attention, [&] { be_.attention(a); });
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
    const float* onorm = reinterpret_cast<const float*>(output_norm_.data);
    timed(DfOp::Norm, [&] { be_.rmsnorm(&x_[uint64_t(n - 1) * dim], onorm, dim, 1e-5f, xb_.data()); });
    timed(DfOp::LmHead,
          [&] { be_.matmul(output_, xb_.data(), dim, xq_.data(), false, 1, logits_.data(), s.vocab_size); });
    return sec;
  }

 private:
  const Model& m_;
  Backend& be_;
  uint32_t cap_, q_dim_ = 0, kv_dim_ = 0;
  std::vector<float> x_, xb_, q_, k_, v_, att_, hb_, hb2_, logits_, rows_, qrot_, shift_cos_, shift_sin_;
  std::vector<ActBlock> xq_;
  std::vector<int32_t> positions_;
  std::vector<uint16_t> keys_, values_;
  TensorView output_norm_, output_;
};

// A measured configuration: KV policy and depth, one half of the shapes or the other.
struct Point {
  bool snapstream;
  uint32_t depth, budget;
  bool calibration;
};

// One test (decode or prefill) at one point: what was measured and what the emulator counts.
struct Test {
  const Point* point = nullptr;
  bool prefill = false;
  uint32_t visible = 0, prefix = 0, capacity = 0;
  // Samples of seconds per token (decode: one per token; prefill: one per chunk) and of the op
  // classes' seconds per pass (decode: kDecodeRun passes per repetition), over every repetition.
  // A neighbour's burst lands in a few samples; the medians skip it.
  std::vector<double> e2e;
  std::vector<OpSeconds> ops;
  DfCounterSet counters;
  bool double_buffered = false;
  double e2e_s() const { return median(e2e); }
  double op_s(uint32_t i) const {
    std::vector<double> v;
    for (const OpSeconds& o : ops) v.push_back(o[i]);
    return median(v);
  }
};

uint32_t tokens_of(const Test& t) { return t.prefill ? kChunk : 1; }

double predicted_s(const Test& t, const HwDesc& hw, uint32_t op) {
  return df_cost(t.counters.op[op], hw, t.double_buffered, DfOp(op)).total_cycles / hw.clock_hz / tokens_of(t);
}

// The op classes the prediction is judged on: every one the emulator models and the pass runs.
bool judged(const Test& t, uint32_t op) {
  return DfOp(op) != DfOp::KvPolicy && t.counters.op[op].calls + t.counters.op[op].vector_elems > 0 && t.op_s(op) > 0;
}

// Fits the rates of `hw` to the calibration tests' op classes: coordinate descent on the sum of
// squared log errors, each rate scaled by factors that shrink round by round. An op class's
// error weighs by its share of its test's time, plus a floor: the classes that make up a token
// decide the rates, and one a few microseconds long (at the timer's and the scheduler's
// resolution) cannot pull a rate that the large ones share away from them.
void fit(HwDesc& hw, const std::vector<Test>& tests) {
  double* rates[] = {&hw.macs_per_cycle_int8,    &hw.macs_per_cycle_bf16,  &hw.macs_per_cycle_f32,
                     &hw.vector_elems_per_cycle, &hw.sram_bytes_per_cycle, &hw.tiers[0].bandwidth_bytes_per_s,
                     &hw.tiers[0].latency_ns};
  struct Term {
    const Test* test;
    uint32_t op;
    double measured_s, weight;
  };
  std::vector<Term> terms;
  for (const Test& t : tests) {
    if (!t.point->calibration) continue;
    double total = 0;
    for (uint32_t i = 0; i < kDfOps; ++i)
      if (judged(t, i)) total += t.op_s(i);
    for (uint32_t i = 0; i < kDfOps; ++i)
      if (judged(t, i)) terms.push_back({&t, i, t.op_s(i) / tokens_of(t), t.op_s(i) / total + 0.02});
  }
  auto loss = [&] {
    double sum = 0;
    for (const Term& term : terms) {
      const double e = std::log(predicted_s(*term.test, hw, term.op) / term.measured_s);
      sum += term.weight * e * e;
    }
    return sum;
  };
  double span = 16;  // the first round tries 1/16x..16x
  for (int round = 0; round < 14; ++round, span = std::sqrt(span) * 0.9 + 0.1) {
    for (double* r : rates) {
      const double base = *r;
      double best = base, best_loss = loss();
      for (int k = -10; k <= 10; ++k) {
        *r = base * std::pow(span, k / 10.0);
        const double l = loss();
        if (l < best_loss) best_loss = l, best = *r;
      }
      *r = best;
    }
  }
}

double err(double predicted, double measured) { return measured > 0 ? (predicted - measured) / measured : 0; }

}  // namespace

int run_validate(const SessionOptions& base, const std::string& start_hw, uint32_t reps, uint32_t snap_depth,
                 bool as_json) {
  HwDesc hw;
  std::string error;
  if (!hw::load_hw(start_hw, hw, error)) return fail("emulate", error);
  if (hw.tier_count != 1) return fail("emulate", "--validate fits a one-tier description (the host's)");
  // Reported on depths 0, 1k, 4k (full) and snap_depth (snapstream, budget 4096); calibrated on
  // the depths between them and on snapstream with another budget, so no reported shape is seen.
  const std::vector<Point> points = {
      {false, 0, 0, false},    {false, 512, 0, true},  {false, 1024, 0, false},  {false, 2048, 0, true},
      {false, 4096, 0, false}, {false, 6144, 0, true}, {true, 4096, 1024, true}, {true, snap_depth, 4096, false},
  };
  uint32_t full_budget = 0;
  for (const Point& p : points)
    if (!p.snapstream) full_budget = std::max(full_budget, p.depth + kDecodeRun + kChunk + kChunk);

  SessionOptions so = base;
  so.backend = "native";
  so.hw.clear();  // --hw names the description to fit, not a backend: the runs are native
  so.threads = 1;
  so.chunk = kChunk;
  Session probe;
  if (!probe.load(so, error)) return fail("emulate", error);
  const Model& model = probe.model();
  const DfModel dm = df_model(model);
  BackendStorage storage;
  Result<Backend*> be = make_backend(BackendKind::Native, nullptr, storage);
  if (!be.ok()) return fail("emulate", be.error().message());
  OpBench bench(model, *be.value(), full_budget + kChunk);

  // One session per KV configuration, each kept for every repetition.
  // One session for the full points, one per snapstream point; each kept for every repetition.
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<uint32_t> session_of;
  for (const Point& p : points) {
    if (!p.snapstream && !sessions.empty() && !points[0].snapstream) {
      session_of.push_back(0);
      continue;
    }
    SessionOptions o = so;
    o.kv_policy = p.snapstream ? "snapstream" : "full";
    auto s = std::make_unique<Session>();
    if (!s->load(o, error) || !s->resolve_policy(nullptr, error) ||
        !s->start(p.snapstream ? p.budget : full_budget, error))
      return fail("emulate", error);
    session_of.push_back(uint32_t(sessions.size()));
    sessions.push_back(std::move(s));
  }
  std::vector<Test> tests;
  for (const Point& p : points)
    for (const bool prefill : {false, true}) {
      tests.emplace_back();
      tests.back().point = &p, tests.back().prefill = prefill;
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
      const Point& p = points[i];
      Runtime& rt = sessions[session_of[i]]->runtime();
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
      for (Test* t : {&tests[2 * i], &tests[2 * i + 1]}) {
        t->visible = rt.kv_cache(0).visible();
        t->prefix = rt.kv_cache(0).prefix();
        t->capacity = rt.kv_cache(0).shape().capacity;
        const uint32_t n = tokens_of(*t);
        if (t->prefill) {
          const double t0 = now_s();
          if (!check(rt.prefill(0, Span<const int32_t>(ids.data() + p.depth, n)))) return 1;
          t->e2e.push_back((now_s() - t0) / n);
          t->ops.push_back(bench.forward(n, t->visible, t->prefix));
        } else {
          for (uint32_t k = 0; k < kDecodeRun; ++k) {
            const double t0 = now_s();
            if (!check(rt.decode(0, ids[p.depth + k]))) return 1;
            t->e2e.push_back(now_s() - t0);
          }
          for (uint32_t k = 0; k < kDecodeRun; ++k) t->ops.push_back(bench.forward(n, t->visible, t->prefix));
        }
      }
    }
  }

  for (Test& t : tests) {
    DfScheduleInput in;
    in.model = dm;
    in.hw = hw;
    in.kv_capacity_tokens = t.capacity;
    in.chunk_tokens = kChunk;
    const DfSchedule s = df_schedule(in);
    if (!s.fits) return fail("emulate", std::string("the host schedule does not fit: ") + s.refusal);
    t.double_buffered = s.double_buffered;
    df_count_forward(s, dm, tokens_of(t), t.visible, t.prefix, 1, t.counters);
  }
  const HwDesc start = hw;
  fit(hw, tests);

  json out;
  out["threads"] = 1;
  out["serial"] = hw.serial;
  out["repetitions"] = reps;
  out["start_hw"] = start_hw;
  out["fitted"] = {
      {"macs_per_ns_int8", hw.macs_per_cycle_int8},   {"macs_per_ns_bf16", hw.macs_per_cycle_bf16},
      {"macs_per_ns_f32", hw.macs_per_cycle_f32},     {"vector_elems_per_ns", hw.vector_elems_per_cycle},
      {"sram_bytes_per_ns", hw.sram_bytes_per_cycle}, {"dram_bytes_per_s", hw.tiers[0].bandwidth_bytes_per_s},
      {"latency_ns", hw.tiers[0].latency_ns}};
  json rows = json::array();
  for (const Test& t : tests) {
    double pred = 0, op_sum = 0, pred_start = 0;
    json ops = json::array();
    for (uint32_t i = 0; i < kDfOps; ++i) {
      if (!judged(t, i)) continue;
      const double p = predicted_s(t, hw, i), m = t.op_s(i) / tokens_of(t);
      pred += p, op_sum += m, pred_start += predicted_s(t, start, i);
      ops.push_back({{"op", df_op_name(DfOp(i))},
                     {"measured_us", m * 1e6},
                     {"predicted_us", p * 1e6},
                     {"error", err(p, m)},
                     {"bound", df_bound_name(df_cost(t.counters.op[i], hw, t.double_buffered, DfOp(i)).bound)}});
    }
    rows.push_back({{"policy", t.point->snapstream ? "snapstream" : "full"},
                    {"budget", t.point->snapstream ? t.point->budget : 0},
                    {"depth", t.point->depth},
                    {"test", t.prefill ? "prefill" : "decode"},
                    {"half", t.point->calibration ? "calibration" : "reported"},
                    {"visible", t.visible},
                    {"e2e_measured_us", t.e2e_s() * 1e6},
                    {"ops_measured_us", op_sum * 1e6},
                    {"predicted_us", pred * 1e6},
                    {"error", err(pred, t.e2e_s())},
                    {"ops_error", err(pred, op_sum)},
                    {"unfitted_predicted_us", pred_start * 1e6},
                    {"unfitted_error", err(pred_start, t.e2e_s())},
                    {"ops", ops}});
  }
  out["tests"] = rows;
  if (as_json) {
    printf("%s\n", out.dump().c_str());
    return 0;
  }
  printf(
      "fitted on the calibration half (1 thread, %s): int8 %.1f, bf16 %.1f, f32 %.1f MACs/ns; vector %.2f "
      "elements/ns; SRAM %.2f B/ns; DRAM %.2f GB/s, latency %.0f ns\n",
      hw.serial ? "serial: compute plus transfer" : "overlapped: the larger of compute and transfer",
      hw.macs_per_cycle_int8, hw.macs_per_cycle_bf16, hw.macs_per_cycle_f32, hw.vector_elems_per_cycle,
      hw.sram_bytes_per_cycle, hw.tiers[0].bandwidth_bytes_per_s / 1e9, hw.tiers[0].latency_ns);
  printf(
      "\nend to end, microseconds per token (native measured by Runtime; medians over %u repetitions of\n"
      "each decode token and each prefill chunk):\n",
      reps);
  printf("  %-6s %-22s %-8s %7s %10s %10s %10s %8s %8s %10s\n", "half", "policy", "test", "visible", "measured",
         "op sum", "predicted", "error", "vs ops", "unfitted");
  for (const json& r : rows) {
    const std::string pol = r["policy"].get<std::string>() + " d" + std::to_string(r["depth"].get<uint32_t>()) +
                            (r["budget"].get<uint32_t>() ? " b" + std::to_string(r["budget"].get<uint32_t>()) : "");
    printf("  %-6s %-22s %-8s %7u %10.1f %10.1f %10.1f %+7.1f%% %+7.1f%% %+9.1f%%\n",
           r["half"] == "calibration" ? "calib" : "REPORT", pol.c_str(), r["test"].get<std::string>().c_str(),
           r["visible"].get<uint32_t>(), r["e2e_measured_us"].get<double>(), r["ops_measured_us"].get<double>(),
           r["predicted_us"].get<double>(), 100 * r["error"].get<double>(), 100 * r["ops_error"].get<double>(),
           100 * r["unfitted_error"].get<double>());
  }
  printf("\nper op class on the reported half, microseconds per token:\n");
  printf("  %-22s %-8s %-13s %10s %10s %8s  %s\n", "policy", "test", "op", "measured", "predicted", "error", "bound");
  for (const json& r : rows) {
    if (r["half"] == "calibration") continue;
    const std::string pol = r["policy"].get<std::string>() + " d" + std::to_string(r["depth"].get<uint32_t>());
    for (const json& o : r["ops"])
      printf("  %-22s %-8s %-13s %10.1f %10.1f %+7.1f%%  %s\n", pol.c_str(), r["test"].get<std::string>().c_str(),
             o["op"].get<std::string>().c_str(), o["measured_us"].get<double>(), o["predicted_us"].get<double>(),
             100 * o["error"].get<double>(), o["bound"].get<std::string>().c_str());
  }
  return 0;
}

}  // namespace keel::cli
