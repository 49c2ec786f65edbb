#include "keel/emulate/validate_fit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "emulate/hw_json.h"
#include "keel/cli/cli_util.h"
#include "keel/emulate/emulate_model.h"
#include "kv/kv_policy.h"
#include "model/weight_format.h"

namespace keel::cli {
namespace {

using nlohmann::json;

constexpr int kFormat = 2;  // 1: no "format" field, no model, prefix, capacity or start description

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// An op class the emulator counts for this test (it is in the prediction of the whole pass).
bool modelled(const ValidateTest& t, uint32_t op) {
  return t.counters.op[op].calls + t.counters.op[op].vector_elems > 0;
}
// One it counts and that was measured on its own: the fit and the per-class report use these.
bool judged(const ValidateTest& t, uint32_t op) { return modelled(t, op) && t.op_s(op) > 0; }

DfReuse reuse(const ValidateTest& t, const HwDesc& hw, const DfModel& m) {
  DfReuse r;
  r.cached = df_cached_fraction(hw, t.footprint_bytes);
  r.kv_policy_reread = df_snap_reread_fraction(hw, m, t.snap);
  return r;
}

double predicted_s(const ValidateTest& t, const HwDesc& hw, uint32_t op) {
  return df_cost(t.counters.op[op], hw, t.double_buffered, DfOp(op), reuse(t, hw, *t.model)).total_cycles /
         hw.clock_hz / t.tokens();
}

// Fits the rates of `hw` to the calibration tests' op classes: coordinate descent on the sum of
// squared log errors, each rate scaled by factors that shrink round by round. An op class's
// error weighs by its share of its test's time, plus a floor: the classes that make up a token
// decide the rates, and one a few microseconds long (at the timer's and the scheduler's
// resolution) cannot pull a rate that the large ones share away from them.
void fit(HwDesc& hw, const std::vector<ValidateTest>& tests) {
  double cache_bytes = double(hw.cache_bytes);
  double* rates[] = {&hw.macs_per_cycle_int8,    &hw.macs_per_cycle_bf16,         &hw.macs_per_cycle_f32,
                     &hw.vector_elems_per_cycle, &hw.sram_bytes_per_cycle,        &hw.tiers[0].bandwidth_bytes_per_s,
                     &hw.tiers[0].latency_ns,    &hw.cache_bandwidth_bytes_per_s, &cache_bytes,
                     &hw.call_overhead_ns,       &hw.weight_elems_per_cycle};
  struct Term {
    const ValidateTest* test;
    uint32_t op;
    double measured_s, weight;
  };
  std::vector<Term> terms;
  for (const ValidateTest& t : tests) {
    if (!t.point.calibration) continue;
    double total = 0;
    for (uint32_t i = 0; i < kDfOps; ++i)
      if (judged(t, i)) total += t.op_s(i);
    for (uint32_t i = 0; i < kDfOps; ++i)
      if (judged(t, i)) terms.push_back({&t, i, t.op_s(i) / t.tokens(), t.op_s(i) / total + 0.02});
  }
  auto loss = [&] {
    hw.cache_bytes = uint64_t(cache_bytes);
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
      if (*r <= 0) continue;  // a term the description does not have stays out
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
  hw.cache_bytes = uint64_t(cache_bytes);
}

double err(double predicted, double measured) { return measured > 0 ? (predicted - measured) / measured : 0; }

bool count_tests(ValidateRun& run, const DfModel& m, std::string& error) {
  for (ValidateTest& t : run.tests) {
    DfScheduleInput in;
    in.model = m;
    in.memory = df_memory(run.start);
    in.kv_capacity_tokens = t.capacity;
    in.chunk_tokens = kValidateChunk;
    const DfSchedule s = df_schedule(in);
    if (!s.fits) {
      error = std::string("the host schedule does not fit: ") + s.refusal;
      return false;
    }
    t.double_buffered = s.double_buffered;
    t.counters = DfCounterSet();
    // --validate runs models with no local layers (run_validate refuses the others).
    df_count_forward(s, m, DfPass{.n = t.tokens(), .visible = t.visible, .prefix = t.prefix, .n_logits = 1},
                     t.counters);
    t.model = &m;
    if (t.snap.queries > 0) df_count_snap_compression(s, m, t.snap, t.counters);
    t.footprint_bytes = df_pass_footprint_bytes(s, m, t.visible + t.tokens(), 0);
  }
  return true;
}

json hw_rates_json(const HwDesc& hw) {
  return {{"macs_per_ns_int8", hw.macs_per_cycle_int8},
          {"macs_per_ns_bf16", hw.macs_per_cycle_bf16},
          {"macs_per_ns_f32", hw.macs_per_cycle_f32},
          {"vector_elems_per_ns", hw.vector_elems_per_cycle},
          {"sram_bytes_per_ns", hw.sram_bytes_per_cycle},
          {"dram_bytes_per_s", hw.tiers[0].bandwidth_bytes_per_s},
          {"latency_ns", hw.tiers[0].latency_ns},
          {"cache_bytes", hw.cache_bytes},
          {"cache_bytes_per_s", hw.cache_bandwidth_bytes_per_s},
          {"call_overhead_ns", hw.call_overhead_ns},
          {"weight_elems_per_ns", hw.weight_elems_per_cycle}};
}

void print_report(const ValidateRun& run, const HwDesc& hw, const json& rows) {
  printf(
      "fitted on the calibration half (1 thread, %s): int8 %.1f, bf16 %.1f, f32 %.1f MACs/ns; vector %.2f "
      "elements/ns; weights %.1f elements/ns; SRAM %.2f B/ns; DRAM %.2f GB/s, latency %.0f ns; cache %.1f MiB at "
      "%.2f GB/s; %.0f ns per call\n",
      hw.serial ? "serial: compute plus transfer" : "overlapped: the larger of compute and transfer",
      hw.macs_per_cycle_int8, hw.macs_per_cycle_bf16, hw.macs_per_cycle_f32, hw.vector_elems_per_cycle,
      hw.weight_elems_per_cycle, hw.sram_bytes_per_cycle, hw.tiers[0].bandwidth_bytes_per_s / 1e9,
      hw.tiers[0].latency_ns, double(hw.cache_bytes) / (1 << 20), hw.cache_bandwidth_bytes_per_s / 1e9,
      hw.call_overhead_ns);
  printf(
      "\nend to end, microseconds per token (native measured by Runtime; medians over %u repetitions of\n"
      "each decode token and each prefill chunk):\n",
      run.reps);
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
  printf("\nper op class on the reported half, microseconds per token (unmeasured: predicted only):\n");
  printf("  %-22s %-8s %-13s %10s %10s %8s  %s\n", "policy", "test", "op", "measured", "predicted", "error", "bound");
  for (const json& r : rows) {
    if (r["half"] == "calibration") continue;
    const std::string pol = r["policy"].get<std::string>() + " d" + std::to_string(r["depth"].get<uint32_t>());
    for (const json& o : r["ops"]) {
      const double m = o["measured_us"].get<double>();
      char measured[32] = "-", error[32] = "-";
      if (m > 0) {
        snprintf(measured, sizeof measured, "%.1f", m);
        snprintf(error, sizeof error, "%+.1f%%", 100 * o["error"].get<double>());
      }
      printf("  %-22s %-8s %-13s %10s %10.1f %8s  %s\n", pol.c_str(), r["test"].get<std::string>().c_str(),
             o["op"].get<std::string>().c_str(), measured, o["predicted_us"].get<double>(), error,
             o["bound"].get<std::string>().c_str());
    }
  }
}

}  // namespace

std::vector<ValidatePoint> validate_points(uint32_t snap_depth) {
  return {
      {false, 0, 0, false},    {false, 512, 0, true},  {false, 1024, 0, false},  {false, 2048, 0, true},
      {false, 4096, 0, false}, {false, 6144, 0, true}, {true, 4096, 1024, true}, {true, snap_depth, 4096, false},
  };
}

uint32_t validate_full_budget(const std::vector<ValidatePoint>& points) {
  uint32_t budget = 0;
  for (const ValidatePoint& p : points)
    if (!p.snapstream) budget = std::max(budget, p.depth + kValidateDecodeRun + 2 * kValidateChunk);
  return budget;
}

double ValidateTest::e2e_s() const { return median(e2e_us) * 1e-6; }

double ValidateTest::op_us_per_token(uint32_t op) const {
  std::vector<double> v;
  for (const OpMicros& o : ops_us) v.push_back(o[op]);
  return median(v) / tokens();
}

double ValidateTest::op_s(uint32_t op) const { return op_us_per_token(op) * tokens() * 1e-6; }

std::string validate_fingerprint(const DfModel& m) {
  const ModelShape& s = m.shape;
  char b[256];
  snprintf(b, sizeof b, "dim %u ffn %u layers %u heads %u kv_heads %u head_dim %u vocab %u weights %s/%s/%s%s", s.dim,
           s.ffn_dim, s.n_layers, s.n_heads, s.n_kv_heads, s.head_dim, s.vocab_size,
           fb::EnumNameDType(m.dtype(0, DfMat::Wq)), fb::EnumNameDType(m.dtype(0, DfMat::Gate)),
           fb::EnumNameDType(m.lm_head_dtype), m.qkv_bias ? " qkv_bias" : "");
  return b;
}

int validate_report(ValidateRun& run, const DfModel& m, bool as_json) {
  std::string error;
  if (!count_tests(run, m, error)) return fail("emulate", error);
  HwDesc hw = run.start;
  // Terms the start description lacks start from fixed values the fit then moves (so that a
  // re-fit gives the same numbers on any machine): 32 MiB of cache at twice the DRAM rate, 10 ns
  // per call, 64 weight elements per ns.
  if (hw.cache_bytes == 0 || hw.cache_bandwidth_bytes_per_s <= 0) {
    hw.cache_bytes = 32ull << 20;
    hw.cache_bandwidth_bytes_per_s = 2 * hw.tiers[0].bandwidth_bytes_per_s;
  }
  if (hw.call_overhead_ns <= 0) hw.call_overhead_ns = 10;
  if (hw.weight_elems_per_cycle <= 0) hw.weight_elems_per_cycle = 64;
  fit(hw, run.tests);

  json rows = json::array();
  for (const ValidateTest& t : run.tests) {
    double pred = 0, op_sum = 0, pred_start = 0;
    json ops = json::array(), measured = json::object();
    for (uint32_t i = 0; i < kDfOps; ++i) {
      if (t.op_us_per_token(i) > 0) measured[df_op_name(DfOp(i))] = t.op_us_per_token(i);
      if (!modelled(t, i)) continue;
      const double p = predicted_s(t, hw, i), mi = t.op_s(i) / t.tokens();
      pred += p, op_sum += mi, pred_start += predicted_s(t, run.start, i);
      const DfCost k = df_cost(t.counters.op[i], hw, t.double_buffered, DfOp(i), reuse(t, hw, m));
      ops.push_back({{"op", df_op_name(DfOp(i))},
                     {"measured_us", t.op_us_per_token(i)},
                     {"predicted_us", p * 1e6},
                     {"error", err(p, mi)},
                     {"bound", df_bound_name(k.bound)}});
    }
    rows.push_back({{"policy", t.point.snapstream ? "snapstream" : "full"},
                    {"budget", t.point.snapstream ? t.point.budget : 0},
                    {"depth", t.point.depth},
                    {"test", t.prefill ? "prefill" : "decode"},
                    {"half", t.point.calibration ? "calibration" : "reported"},
                    {"visible", t.visible},
                    {"prefix", t.prefix},
                    {"capacity", t.capacity},
                    {"snap_queries", t.snap.queries},
                    {"snap_candidates", t.snap.candidates},
                    {"snap_pool_kernel", t.snap.pool_kernel},
                    {"snap_kept", t.snap.kept},
                    {"snap_rotated", t.snap.rotated},
                    {"e2e_measured_us", median(t.e2e_us)},
                    {"ops_measured_us", op_sum * 1e6},
                    {"measured_op_us", measured},
                    {"predicted_us", pred * 1e6},
                    {"error", err(pred, t.e2e_s())},
                    {"ops_error", err(pred, op_sum)},
                    {"unfitted_predicted_us", pred_start * 1e6},
                    {"unfitted_error", err(pred_start, t.e2e_s())},
                    {"ops", ops}});
  }
  if (!as_json) {
    print_report(run, hw, rows);
    return 0;
  }
  json out;
  out["format"] = kFormat;
  out["model"] = run.model_fingerprint;
  out["threads"] = 1;
  out["serial"] = hw.serial;
  out["repetitions"] = run.reps;
  out["snap_depth"] = run.snap_depth;
  out["chunk"] = kValidateChunk;
  out["decode_run"] = kValidateDecodeRun;
  out["start_hw"] = run.start_name;
  out["start_description"] = json::parse(hw::hw_to_json(run.start, "the description the fit started from"));
  out["fitted"] = hw_rates_json(hw);
  out["fitted_description"] = json::parse(hw::hw_to_json(hw, "fitted by keel emulate --validate"));
  out["tests"] = rows;
  printf("%s\n", out.dump().c_str());
  return 0;
}

namespace {

// The selection and compaction of a snapstream test's compression, for a file written before
// they were recorded: as the KV manager plans it past its budget, with the ring full.
void derive_compaction(const ValidatePoint& p, const ValidateSessionFacts& f, ValidateTest& t) {
  t.snap = emu_compression_past_budget(t.visible + t.tokens(), t.prefix, t.snap.queries, p.budget,
                                       snapstream_window(f.window, p.budget), f.sinks, f.snap_kernel);
}

}  // namespace

bool read_measured(const std::string& path, const DfModel& m, const ValidateSessionFacts& facts, ValidateRun& run,
                   std::string& error) {
  std::ifstream f(path);
  if (!f) return error = "cannot read " + path, false;
  std::stringstream ss;
  ss << f.rdbuf();
  const json j = json::parse(ss.str(), nullptr, false);
  auto bad = [&](const std::string& what, const std::string& expected, const json* found) {
    error = path + ": " + what + ": expected " + expected + ", found " + (found ? found->dump() : "nothing");
    return false;
  };
  if (j.is_discarded() || !j.is_object()) return error = path + ": not a JSON object", false;
  auto number = [&](const json& o, const char* key, const std::string& at, double& out) {
    auto it = o.find(key);
    if (it == o.end() || !it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0)
      return bad(at + "." + key, "a number >= 0", it == o.end() ? nullptr : &*it);
    out = it->get<double>();
    return true;
  };
  auto whole = [&](const json& o, const char* key, const std::string& at, uint32_t& out) {
    double d = 0;
    if (!number(o, key, at, d)) return false;
    if (d != std::floor(d) || d > 4e9) return bad(at + "." + key, "a whole number", &o[key]);
    out = uint32_t(d);
    return true;
  };
  const int format = j.contains("format") && j["format"].is_number_integer() ? j["format"].get<int>() : 1;
  if (format > kFormat) return bad("format", "1.." + std::to_string(kFormat), &j["format"]);
  const std::string fp = validate_fingerprint(m);
  if (format >= 2) {
    if (!j.contains("model") || !j["model"].is_string()) return bad("model", "the model's fingerprint", nullptr);
    if (j["model"].get<std::string>() != fp)
      return error = path + ": measured on another model ('" + j["model"].get<std::string>() + "'); -m is '" + fp + "'",
             false;
    std::string herr;
    if (!j.contains("start_description") ||
        !hw::parse_hw_json(j["start_description"].dump(), path + ": start_description", run.start, herr))
      return error = herr.empty() ? path + ": start_description: expected a hardware description, found nothing" : herr,
             false;
    run.start_name = j.value("start_hw", std::string("host"));
  }
  if (format < 2) {
    // The description it started from: --hw, else the one it names.
    if (run.start_name.empty()) run.start_name = j.value("start_hw", std::string("host"));
    std::string herr;
    if (!hw::load_hw(run.start_name, run.start, herr)) return error = path + ": start_hw: " + herr, false;
  }
  run.model_fingerprint = fp;
  if (!whole(j, "repetitions", "", run.reps)) return false;
  if (!j.contains("tests") || !j["tests"].is_array()) return bad("tests", "an array", nullptr);
  const json& rows = j["tests"];

  // The shape set: the points' policies, depths and budgets, decode then prefill each, in order.
  uint32_t snap_depth = 0;
  if (format >= 2) {
    if (!whole(j, "snap_depth", "", snap_depth)) return false;
  } else {
    for (const json& r : rows)
      if (r.is_object() && r.value("policy", "") == "snapstream" && r.value("budget", 0u) == 4096)
        snap_depth = r.value("depth", 0u);
  }
  run.snap_depth = snap_depth;
  const std::vector<ValidatePoint> points = validate_points(snap_depth);
  if (rows.size() != 2 * points.size())
    return bad("tests",
               std::to_string(2 * points.size()) + " tests (decode and prefill at each of --validate's " +
                   std::to_string(points.size()) + " points)",
               nullptr);
  run.tests.clear();
  uint32_t snap_index = 0;
  for (uint32_t i = 0; i < rows.size(); ++i) {
    const json& r = rows[i];
    const std::string at = "tests[" + std::to_string(i) + "]";
    const ValidatePoint& p = points[i / 2];
    ValidateTest t;
    t.point = p;
    t.prefill = i % 2 == 1;
    const std::string want = std::string(p.snapstream ? "snapstream" : "full") + " d" + std::to_string(p.depth) +
                             (p.snapstream ? " b" + std::to_string(p.budget) : "") +
                             (t.prefill ? " prefill" : " decode");
    if (!r.is_object() || !r.contains("policy") || !r.contains("depth") || !r.contains("budget") ||
        !r.contains("test") || !r.contains("half"))
      return bad(at, "a test (" + want + ")", &r);
    const std::string got = r["policy"].dump() + " d" + r["depth"].dump() + " b" + r["budget"].dump() + " " +
                            r["test"].dump() + " " + r["half"].dump();
    const bool same = r["policy"] == (p.snapstream ? "snapstream" : "full") && r["depth"] == p.depth &&
                      r["budget"] == (p.snapstream ? p.budget : 0) && r["test"] == (t.prefill ? "prefill" : "decode") &&
                      r["half"] == (p.calibration ? "calibration" : "reported");
    if (!same) return bad(at, want + " (the shape set of this --validate)", &r);
    double e2e_us = 0;
    if (!whole(r, "visible", at, t.visible) || !number(r, "e2e_measured_us", at, e2e_us)) return false;
    if (!(e2e_us > 0)) return bad(at + ".e2e_measured_us", "a positive time", &r["e2e_measured_us"]);
    t.e2e_us.push_back(e2e_us);
    OpMicros ops{};
    if (r.contains("measured_op_us")) {
      if (!r["measured_op_us"].is_object()) return bad(at + ".measured_op_us", "an object", &r["measured_op_us"]);
      for (uint32_t op = 0; op < kDfOps; ++op) {
        double us = 0;
        if (r["measured_op_us"].contains(df_op_name(DfOp(op))) &&
            !number(r["measured_op_us"], df_op_name(DfOp(op)), at + ".measured_op_us", us))
          return false;
        ops[op] = us * t.tokens();
      }
    } else {
      if (!r.contains("ops") || !r["ops"].is_array()) return bad(at + ".ops", "an array", nullptr);
      for (const json& o : r["ops"]) {
        uint32_t op = 0;
        while (op < kDfOps && !(o.is_object() && o.value("op", "") == df_op_name(DfOp(op)))) ++op;
        if (op == kDfOps) return bad(at + ".ops[]", "an op class of the emulator", &o);
        double us = 0;
        if (!number(o, "measured_us", at + ".ops[]", us)) return false;
        ops[op] = us * t.tokens();
      }
    }
    t.ops_us.push_back(ops);
    if (format >= 2) {
      if (!whole(r, "prefix", at, t.prefix) || !whole(r, "capacity", at, t.capacity) ||
          !whole(r, "snap_queries", at, t.snap.queries))
        return false;
      t.snap.total = t.visible + t.tokens(), t.snap.prefix = t.prefix;
      if (t.snap.queries > 0 && r.contains("snap_kept")) {
        if (!whole(r, "snap_candidates", at, t.snap.candidates) ||
            !whole(r, "snap_pool_kernel", at, t.snap.pool_kernel) || !whole(r, "snap_kept", at, t.snap.kept) ||
            !whole(r, "snap_rotated", at, t.snap.rotated))
          return false;
      } else if (t.snap.queries > 0) {
        derive_compaction(p, facts, t);
      }
    } else {
      // What the runtime held, as the measuring run's sessions hold it: full from 0 with one
      // budget for every depth; snapstream past its budget with sinks + SnapKV-kept prefix + a
      // ring of window (budget / 4 by default) that decode tokens cycle through.
      if (p.snapstream) {
        if (snap_index / 2 >= facts.snap_capacity.size()) return bad(at, "no more snapstream points", &r);
        t.capacity = facts.snap_capacity[snap_index / 2];
        ++snap_index;
        const bool past = t.visible >= p.budget;
        t.prefix = past ? p.budget - snapstream_window(facts.window, p.budget) : 0;
        if (t.prefill && t.visible + kValidateChunk > p.budget) {
          t.snap.queries = std::min(facts.obs_window, facts.planned_obs_window);
          derive_compaction(p, facts, t);
        }
      } else {
        t.capacity = facts.full_capacity;
      }
    }
    run.tests.push_back(std::move(t));
  }
  if (format >= 2) return true;

  // An older file names neither its model nor its start description: each op class's fitted
  // prediction it recorded, recomputed from this model's counters and its fitted rates on the
  // structure of the description given (--hw), must be what it recorded.
  if (!count_tests(run, m, error)) return false;
  HwDesc fitted = run.start;
  const json* fr = j.contains("fitted") && j["fitted"].is_object() ? &j["fitted"] : nullptr;
  if (!fr) return bad("fitted", "the fitted rates", nullptr);
  const struct {
    const char* key;
    double* rate;
  } keys[] = {
      {"macs_per_ns_int8", &fitted.macs_per_cycle_int8},   {"macs_per_ns_bf16", &fitted.macs_per_cycle_bf16},
      {"macs_per_ns_f32", &fitted.macs_per_cycle_f32},     {"vector_elems_per_ns", &fitted.vector_elems_per_cycle},
      {"sram_bytes_per_ns", &fitted.sram_bytes_per_cycle}, {"dram_bytes_per_s", &fitted.tiers[0].bandwidth_bytes_per_s},
      {"latency_ns", &fitted.tiers[0].latency_ns}};
  for (const auto& k : keys)
    if (!number(*fr, k.key, "fitted", *k.rate)) return false;
  double cache_bytes = 0;
  if (fr->contains("cache_bytes") && (!number(*fr, "cache_bytes", "fitted", cache_bytes) ||
                                      !number(*fr, "cache_bytes_per_s", "fitted", fitted.cache_bandwidth_bytes_per_s) ||
                                      !number(*fr, "call_overhead_ns", "fitted", fitted.call_overhead_ns)))
    return false;
  fitted.cache_bytes = uint64_t(cache_bytes);
  if (fr->contains("weight_elems_per_ns") &&
      !number(*fr, "weight_elems_per_ns", "fitted", fitted.weight_elems_per_cycle))
    return false;
  for (uint32_t i = 0; i < run.tests.size(); ++i) {
    const ValidateTest& t = run.tests[i];
    for (const json& o : rows[i]["ops"]) {
      if (!o.is_object()) return bad("tests[" + std::to_string(i) + "].ops[]", "an object", &o);
      uint32_t op = 0;
      while (op < kDfOps && o.value("op", "") != df_op_name(DfOp(op))) ++op;
      if (op == kDfOps) return bad("tests[" + std::to_string(i) + "].ops[].op", "an op class", &o);
      double recorded = 0;
      if (!number(o, "predicted_us", "tests[" + std::to_string(i) + "].ops[]", recorded)) return false;
      const double p = predicted_s(t, fitted, op) * 1e6;
      if (std::fabs(p - recorded) > 1e-9 * std::max(recorded, 1e-3)) {
        char b[480];
        snprintf(b, sizeof b,
                 "%s: tests[%u] %s: predicted_us: expected %.6f (this model's counters, the file's fitted rates, "
                 "--hw %s), found %.6f: measured on another model, or fitted on another description (give its start "
                 "description with --hw)",
                 path.c_str(), i, df_op_name(DfOp(op)), p, run.start_name.c_str(), recorded);
        return error = b, false;
      }
    }
  }
  return true;
}

}  // namespace keel::cli
