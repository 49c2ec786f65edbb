// Per-op comparison of the ref, native (x86) and XNNPACK kernels on the shapes of stories260K
// (F32) and SmolLM2-135M: fully-connected with F32 and Q8 weights, softmax, add, rmsnorm, and
// what an XNNPACK call costs besides its arithmetic (xnn_setup_*).
//
// Weight-reading ops are timed per call, median of many calls. Weight sets that exceed the LLC
// are DRAM-cold: calls rotate over copies of the matrix spanning >= kColdBytes (XNNPACK gets one
// operator, hence one packed copy, per copy). Smaller weight sets (stories260K: the whole model
// is ~1 MB) are timed hot, as they run. The plain-read row is the bandwidth ceiling of the same
// buffers (256-bit sequential loads, no compute). Vector ops are timed hot, in batches.
//
// Build by hand (after building keel_engine and keel_convert in build-xnn), one command:
//   g++ -O2 -march=native -std=c++20 -I engine -I tools -I build-xnn/schema/generated
//       tools/bench_kernels/xnnpack_bench.cpp build-xnn/tools/libkeel_convert.a
//       build-xnn/engine/libkeel_engine.a -lXNNPACK -lpthreadpool -lpthread -o build-xnn/xnnpack_bench
// Usage: xnnpack_bench [--quick] [--section fc|qc8|overhead|vector|model]
//                      [--stories DIR]   (stories260K.bin + tok512.bin; default ../shared/models/stories260K)
// The `model` section times whole forward passes of stories260K per backend.
#include <immintrin.h>
#include <pthreadpool.h>
#include <unistd.h>
#include <xnnpack.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "convert/keel_writer.h"
#include "convert/pack.h"
#include "convert/source_model.h"
#include "core/threads.h"
#include "kernels/kernels.h"
#include "kernels/xnnpack/xnn_memory.h"
#include "kernels/xnnpack/xnn_ops.h"
#include "llm/runtime.h"
#include "llm/transformer.h"
#include "model/weight_format.h"

namespace {

using keel::fb::DType;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kColdBytes = 256ull << 20;
constexpr uint64_t kLlcBytes = 32ull << 20;

struct Buffer {
  explicit Buffer(uint64_t n) : size(n) {
    ptr = static_cast<uint8_t*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096 + 4096));
    if (ptr == nullptr) {
      std::fprintf(stderr, "out of memory allocating %llu bytes\n", (unsigned long long)n);
      std::exit(1);
    }
  }
  ~Buffer() { std::free(ptr); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint64_t size;
  uint8_t* ptr;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

volatile uint64_t g_sink;

uint64_t sum_bytes(const uint8_t* p, uint64_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (uint64_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t l[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l), s);
  return l[0] + l[1] + l[2] + l[3];
}

struct Timing {
  double us = 0;
  double gbs = 0;
};

// fn(copy) per call over rotating copies; median seconds per call.
template <typename F>
Timing time_calls(uint64_t bytes_per_call, uint32_t n_copies, double min_seconds, uint32_t min_calls, F&& fn) {
  std::vector<double> t;
  for (uint32_t c = 0; c < n_copies; ++c) fn(c);  // faults in, evicts what was cached before
  const auto start = Clock::now();
  for (uint32_t i = 0; t.size() < min_calls || seconds_since(start) < min_seconds; ++i) {
    const auto t0 = Clock::now();
    fn(i % n_copies);
    t.push_back(seconds_since(t0));
    if (t.size() > 200000) break;
  }
  const double s = median(t);
  return Timing{s * 1e6, double(bytes_per_call) / s / 1e9};
}

// Several kernels timed call by call in turn, so a noisy neighbour slows them alike; each
// call takes the next copy in the rotation, so no kernel finds the previous one's weights in
// the cache. Median per kernel.
std::vector<Timing> time_interleaved(uint64_t bytes_per_call, uint32_t n_copies, double min_seconds, uint32_t min_calls,
                                     const std::vector<std::function<void(uint32_t)>>& fns) {
  std::vector<std::vector<double>> t(fns.size());
  uint64_t g = 0;
  for (uint32_t c = 0; c < n_copies; ++c)
    for (const auto& fn : fns) fn(uint32_t(g++ % n_copies));
  const auto start = Clock::now();
  while (t[0].size() < min_calls || seconds_since(start) < min_seconds) {
    for (size_t k = 0; k < fns.size(); ++k) {
      const auto t0 = Clock::now();
      fns[k](uint32_t(g++ % n_copies));
      t[k].push_back(seconds_since(t0));
    }
    if (t[0].size() > 100000) break;
  }
  std::vector<Timing> r;
  for (auto& v : t) {
    const double s = median(v);
    r.push_back(Timing{s * 1e6, double(bytes_per_call) / s / 1e9});
  }
  return r;
}

// Hot op: median over repetitions of a batch of `inner` calls.
template <typename F>
double time_hot_us(double min_seconds, uint32_t inner, F&& fn) {
  for (uint32_t i = 0; i < inner; ++i) fn();
  std::vector<double> t;
  const auto start = Clock::now();
  while (t.size() < 15 || seconds_since(start) < min_seconds) {
    const auto t0 = Clock::now();
    for (uint32_t i = 0; i < inner; ++i) fn();
    t.push_back(seconds_since(t0) / inner);
    if (t.size() > 100000) break;
  }
  return median(t) * 1e6;
}

// keel::ThreadPool over a pthreadpool, as ports/linux does.
struct Call {
  void (*fn)(void*, size_t);
  void* ctx;
};
void trampoline(void* call, size_t i) {
  const Call* c = static_cast<const Call*>(call);
  c->fn(c->ctx, i);
}
void run_on(void* state, void (*fn)(void*, size_t), void* ctx, size_t n) {
  Call c{fn, ctx};
  pthreadpool_parallelize_1d(static_cast<pthreadpool_t>(state), trampoline, &c, n, 0);
}

// The transformer's split of a matrix: contiguous panel ranges, one per worker.
struct MatmulJob {
  const keel::MatmulKernels* k;
  keel::WeightView w;
  const keel::ActBlock* xq;
  const float* x;
  uint32_t n;
  float* y;
  uint32_t panels, tasks;
};
void matmul_task(void* ctx, size_t i) {
  const MatmulJob& j = *static_cast<const MatmulJob*>(ctx);
  const uint32_t b = uint32_t(uint64_t(j.panels) * i / j.tasks), e = uint32_t(uint64_t(j.panels) * (i + 1) / j.tasks);
  if (b == e) return;
  if (j.xq) {
    j.k->matmul(j.w, j.xq, j.n, j.y, j.w.rows, b, e);
  } else {
    j.k->matmul_f(j.w, j.x, j.n, j.w.cols, j.y, j.w.rows, b, e);
  }
}

void native_matmul(const keel::MatmulKernels* k, const keel::WeightView& w, const float* x, keel::ActBlock* xq,
                   uint32_t n, float* y, const keel::ThreadPool* pool) {
  MatmulJob j{k, w, nullptr, x, n, y, keel::panel_count(w.rows), 1};
  if (keel::is_quantized(w.dtype)) {
    const uint32_t nb = keel::act_blocks(w.cols);
    for (uint32_t t = 0; t < n; ++t) k->quantize_act(x + uint64_t(t) * w.cols, w.cols, xq + uint64_t(t) * nb);
    j.xq = xq;
  }
  // As the transformer splits: a few items per thread.
  const uint32_t threads = pool ? uint32_t(pool->threads) : 1;
  j.tasks = std::min(j.panels, threads > 1 ? threads * 4 : 1u);
  keel::parallel_for(pool, j.tasks, matmul_task, &j);
}

struct Shape {
  uint32_t rows, cols;
  const char* what;
};

void check(const keel::Error& e) {
  if (!e.ok()) {
    std::fprintf(stderr, "error: %s\n", e.message());
    std::exit(1);
  }
}

struct Ctx {
  bool quick = false;
  double min_s = 0.4;
  const keel::MatmulKernels* ref = nullptr;
  const keel::MatmulKernels* nat = nullptr;
  const keel::VectorKernels* vref = nullptr;
  const keel::VectorKernels* vnat = nullptr;
  pthreadpool_t tp2 = nullptr;
  keel::ThreadPool pool2;
  std::mt19937 rng{1};
  std::normal_distribution<float> nd{0.0f, 1.0f};
};

// ---- fully-connected, F32 and Q8 ----
void bench_fc(Ctx& cx) {
  std::printf("## Fully-connected y[n][rows] = x[n][cols] W^T\n\n");
  std::printf("| model | shape (rows x cols) | W | n | kernel | threads | us/call | GB/s (W bytes) |\n");
  std::printf("|---|---|---|---:|---|---:|---:|---:|\n");
  const Shape stories[] = {
      {64, 64, "wq/wo"}, {32, 64, "wk/wv"}, {172, 64, "gate/up"}, {64, 172, "down"}, {512, 64, "output"}};
  const Shape smollm[] = {
      {576, 576, "q/o"}, {192, 576, "k/v"}, {1536, 576, "gate/up"}, {576, 1536, "down"}, {49152, 576, "output"}};
  struct Case {
    const char* model;
    const Shape* shapes;
    size_t count;
    bool model_fits_llc;
  };
  const Case cases[] = {{"stories260K", stories, std::size(stories), true},
                        {"SmolLM2-135M", smollm, std::size(smollm), false}};
  for (const Case& cs : cases) {
    for (size_t si = 0; si < cs.count; ++si) {
      const Shape& s = cs.shapes[si];
      std::vector<float> wf(uint64_t(s.rows) * s.cols);
      for (float& v : wf) v = cx.nd(cx.rng) * 0.05f;
      for (DType dt : {DType::F32, DType::Q8}) {
        if (dt == DType::Q8 && cs.model_fits_llc) continue;  // stories260K is a float model
        const uint64_t bytes = keel::tensor_bytes(dt, s.rows, s.cols);
        const uint32_t copies =
            cs.model_fits_llc ? 1u : uint32_t(std::max<uint64_t>(2, (kColdBytes + bytes - 1) / bytes));
        const uint64_t stride = (bytes + 4095) / 4096 * 4096;
        Buffer w(stride * copies);
        if (dt == DType::Q8) {
          keel::convert::quantize_pack(wf.data(), s.rows, s.cols, dt, w.ptr);
        } else {
          keel::convert::convert_float(wf.data(), wf.size(), dt, w.ptr);
        }
        for (uint32_t c = 1; c < copies; ++c) memcpy(w.ptr + c * stride, w.ptr, bytes);

        // XNNPACK: one operator per copy, in one host region (F32 only).
        std::unique_ptr<Buffer> region_mem;
        std::vector<keel::xnn::FullyConnectedF32> ops;
        if (dt == DType::F32) {
          const uint64_t per_op = (uint64_t(s.rows) + 63) / 64 * 64 * ((s.cols + 15) / 16 * 16 + 1) * 4 + 8192;
          region_mem = std::make_unique<Buffer>(per_op * copies);
          keel::xnn::Region region;
          region.reset(region_mem->ptr, region_mem->size);
          keel::xnn::open_region(&region, false);
          ops.resize(copies);
          for (uint32_t c = 0; c < copies; ++c)
            check(ops[c].create(keel::WeightView{dt, s.rows, s.cols, w.ptr + c * stride}));
          keel::xnn::close_region();
        }

        for (uint32_t n : {1u, 64u}) {
          std::vector<float> x(uint64_t(n) * s.cols + 64), y(uint64_t(n) * s.rows + 64);
          for (float& v : x) v = cx.nd(cx.rng);
          std::vector<keel::ActBlock> xq(uint64_t(n) * keel::act_blocks(s.cols));
          auto row = [&](const char* kernel, int threads, const Timing& t) {
            std::printf("| %s | %u x %u (%s) | %s | %u | %s | %d | %.2f | %.1f |\n", cs.model, s.rows, s.cols, s.what,
                        keel::fb::EnumNameDType(dt), n, kernel, threads, t.us, t.gbs);
            std::fflush(stdout);
          };
          auto wv = [&](uint32_t c) { return keel::WeightView{dt, s.rows, s.cols, w.ptr + c * stride}; };
          if (!cs.model_fits_llc && n == 1) {
            row("plain read (ceiling)", 1, time_calls(bytes, copies, cx.min_s, 20, [&](uint32_t c) {
                  g_sink = sum_bytes(w.ptr + c * stride, bytes / 128 * 128);
                }));
          }
          // ref is left out where one call would take seconds (the LM head over a 64-token chunk).
          const uint64_t macs = uint64_t(n) * s.rows * s.cols;
          if (macs <= (512ull << 20)) {
            const bool slow = macs > (64ull << 20);
            row("ref", 1, time_calls(bytes, copies, slow ? 0.05 : cx.min_s / 2, slow ? 3 : 10, [&](uint32_t c) {
                  native_matmul(cx.ref, wv(c), x.data(), xq.data(), n, y.data(), nullptr);
                }));
          }
          for (int threads : {1, 2}) {
            const keel::ThreadPool* pool = threads == 1 ? nullptr : &cx.pool2;
            pthreadpool_t tp = threads == 1 ? nullptr : cx.tp2;
            std::vector<std::function<void(uint32_t)>> fns;
            fns.push_back([&](uint32_t c) { native_matmul(cx.nat, wv(c), x.data(), xq.data(), n, y.data(), pool); });
            if (dt == DType::F32) fns.push_back([&](uint32_t c) { ops[c].run(x.data(), n, y.data(), tp); });
            const std::vector<Timing> t = time_interleaved(bytes, copies, cx.min_s, 20, fns);
            row(cx.nat->name, threads, t[0]);
            if (dt == DType::F32) row("xnnpack f32 FC", threads, t[1]);
          }
        }
      }
    }
  }
}

// ---- Q8 through XNNPACK's per-channel int8 path, for reference only ----
// qc8 = 1x1 convolution with int8 activations and outputs whose scales and zero points are
// fixed when the operator is created, and one weight scale per output row. Keel's Q8 has a
// scale per 32 weights and quantizes activations per token at run time, so this path would
// change the model's numbers; it is timed here only to show what the int8 kernel could reach.
void bench_qc8(Ctx& cx) {
  std::printf("\n## XNNPACK qc8 (static int8, per-row scales), timing only: not usable for Keel's Q8\n\n");
  std::printf("| shape (rows x cols) | n | threads | us/call | GB/s (int8 W bytes) |\n|---|---:|---:|---:|---:|\n");
  const Shape smollm[] = {
      {576, 576, "q/o"}, {192, 576, "k/v"}, {1536, 576, "gate/up"}, {576, 1536, "down"}, {49152, 576, "output"}};
  for (const Shape& s : smollm) {
    const uint64_t bytes = uint64_t(s.rows) * s.cols;
    const uint32_t copies = uint32_t(std::max<uint64_t>(2, (kColdBytes + bytes - 1) / bytes));
    std::vector<int8_t> wq(bytes);
    std::uniform_int_distribution<int> q(-127, 127);
    for (int8_t& v : wq) v = int8_t(q(cx.rng));
    std::vector<float> scales(s.rows, 0.01f);
    std::vector<int8_t> x(uint64_t(64) * s.cols + 64), y(uint64_t(64) * s.rows + 64);
    for (int8_t& v : x) v = int8_t(q(cx.rng) / 4);
    // XNNPACK packs the weights (with an int32 bias and a float scale per row) into its memory.
    const uint64_t per_op = uint64_t(s.rows + 64) * (s.cols + 16 + 8) + 8192;
    Buffer region_mem(per_op * copies);
    keel::xnn::Region region;
    region.reset(region_mem.ptr, region_mem.size);
    keel::xnn::open_region(&region, false);
    std::vector<xnn_operator_t> ops(copies);
    for (uint32_t c = 0; c < copies; ++c) {
      if (xnn_create_convolution2d_nhwc_qc8(0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, s.cols, s.rows, s.cols, s.rows, 0, 0.05f,
                                            scales.data(), wq.data(), nullptr, 0, 0.1f, -127, 127, 0,
                                            &ops[c]) != xnn_status_success) {
        std::fprintf(stderr, "qc8 create failed\n");
        std::exit(1);
      }
    }
    keel::xnn::close_region();
    for (uint32_t n : {1u, 64u}) {
      for (int threads : {1, 2}) {
        pthreadpool_t tp = threads == 1 ? nullptr : cx.tp2;
        for (uint32_t c = 0; c < copies; ++c) xnn_setup_convolution2d_nhwc_qc8(ops[c], n, 1, 1, x.data(), y.data(), tp);
        const Timing t = time_calls(bytes, copies, cx.min_s, 20, [&](uint32_t c) { xnn_run_operator(ops[c], tp); });
        std::printf("| %u x %u (%s) | %u | %d | %.2f | %.1f |\n", s.rows, s.cols, s.what, n, threads, t.us, t.gbs);
        std::fflush(stdout);
      }
    }
  }
}

// ---- what an XNNPACK call costs besides the arithmetic ----
void bench_overhead(Ctx& cx) {
  std::printf("\n## XNNPACK call overhead (hot)\n\n| what | us/call |\n|---|---:|\n");
  const uint32_t rows = 576, cols = 576;
  std::vector<float> wf(uint64_t(rows) * cols), x(64 * cols + 64), y(64 * rows + 64);
  for (float& v : wf) v = cx.nd(cx.rng) * 0.05f;
  Buffer region_mem(uint64_t(rows + 64) * (cols + 17) * 4 + 8192);
  keel::xnn::Region region;
  region.reset(region_mem.ptr, region_mem.size);
  keel::xnn::open_region(&region, false);
  xnn_operator_t op = nullptr;
  xnn_create_fully_connected_nc_f32(cols, rows, cols, rows, wf.data(), nullptr, -INFINITY, INFINITY, 0, &op);
  keel::xnn::close_region();
  for (uint32_t n : {1u, 64u}) {
    for (int threads : {1, 2}) {
      pthreadpool_t tp = threads == 1 ? nullptr : cx.tp2;
      const double us =
          time_hot_us(cx.min_s, 1000, [&] { xnn_setup_fully_connected_nc_f32(op, n, x.data(), y.data(), tp); });
      std::printf("| xnn_setup_fully_connected_nc_f32, n = %u, %d thread(s) | %.3f |\n", n, threads, us);
    }
  }
  // Dispatch to the pool with nothing to do: the floor of any 2-thread call.
  const double us = time_hot_us(cx.min_s, 1000, [&] {
    keel::parallel_for(
        &cx.pool2, 2, [](void*, size_t) {}, nullptr);
  });
  std::printf("| empty parallel_for over 2 threads (pthreadpool) | %.3f |\n", us);
}

// ---- vector ops (hot) ----
void bench_vector(Ctx& cx) {
  std::printf(
      "\n## Vector ops (hot, 1 thread)\n\n| op | n | ref us | native us | xnnpack us (run) | xnnpack us (setup + run) "
      "|\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  Buffer region_mem(1 << 20);
  keel::xnn::Region region;
  region.reset(region_mem.ptr, region_mem.size);
  for (uint32_t n : {1024u, 8192u}) {
    std::vector<float> src(n), x(n + 64);
    for (float& v : src) v = cx.nd(cx.rng) * 3.0f;
    auto fresh = [&] { memcpy(x.data(), src.data(), n * 4); };
    const double base = time_hot_us(cx.min_s, 200, fresh);
    const double r = time_hot_us(cx.min_s, 200,
                                 [&] {
                                   fresh();
                                   cx.vref->softmax(x.data(), n);
                                 }) -
                     base;
    const double v = time_hot_us(cx.min_s, 200,
                                 [&] {
                                   fresh();
                                   cx.vnat->softmax(x.data(), n);
                                 }) -
                     base;
    keel::xnn::open_region(&region, false);
    keel::xnn::SoftmaxF32 sm;
    check(sm.create(n));
    xnn_operator_t raw = nullptr;
    xnn_create_softmax_nc_f32(n, n, n, 0, &raw);
    keel::xnn::close_region();
    const double xr = time_hot_us(cx.min_s, 200,
                                  [&] {
                                    fresh();
                                    sm.run(x.data());
                                  }) -
                      base;
    const double xs = time_hot_us(cx.min_s, 200,
                                  [&] {
                                    fresh();
                                    xnn_setup_softmax_nc_f32(raw, 1, x.data(), x.data(), nullptr);
                                    xnn_run_operator(raw, nullptr);
                                  }) -
                      base;
    std::printf("| softmax | %u | %.3f | %.3f | %.3f | %.3f |\n", n, r, v, xr, xs);
    std::fflush(stdout);
  }
  for (uint32_t n : {576u, 64u * 576u}) {
    std::vector<float> a(n + 64), b(n + 64), o(n + 64);
    for (float& v : a) v = cx.nd(cx.rng);
    for (float& v : b) v = cx.nd(cx.rng);
    const double r = time_hot_us(cx.min_s, 200, [&] { cx.vref->add(a.data(), b.data(), n, o.data()); });
    const double v = time_hot_us(cx.min_s, 200, [&] { cx.vnat->add(a.data(), b.data(), n, o.data()); });
    keel::xnn::open_region(&region, false);
    xnn_operator_t add = nullptr;
    xnn_create_add_nd_f32(-INFINITY, INFINITY, 0, &add);
    keel::xnn::close_region();
    const size_t shape[1] = {n};
    xnn_setup_add_nd_f32(add, 1, shape, 1, shape, a.data(), b.data(), o.data(), nullptr);
    const double xr = time_hot_us(cx.min_s, 200, [&] { xnn_run_operator(add, nullptr); });
    const double xs = time_hot_us(cx.min_s, 200, [&] {
      xnn_setup_add_nd_f32(add, 1, shape, 1, shape, a.data(), b.data(), o.data(), nullptr);
      xnn_run_operator(add, nullptr);
    });
    std::printf("| add | %u | %.3f | %.3f | %.3f | %.3f |\n", n, r, v, xr, xs);
    std::fflush(stdout);
  }
  for (uint32_t n : {64u, 576u}) {
    std::vector<float> a(n), w(n, 1.0f), o(n);
    for (float& v : a) v = cx.nd(cx.rng);
    const double r = time_hot_us(cx.min_s, 200, [&] { cx.vref->rmsnorm(a.data(), w.data(), n, 1e-5f, o.data()); });
    const double v = time_hot_us(cx.min_s, 200, [&] { cx.vnat->rmsnorm(a.data(), w.data(), n, 1e-5f, o.data()); });
    std::printf("| rmsnorm | %u | %.3f | %.3f | n/a | n/a |\n", n, r, v);
  }
}

// ---- whole forward passes of stories260K (F32) ----
void bench_model(Ctx& cx, const std::string& dir) {
  std::string err;
  std::optional<keel::convert::SourceModel> src =
      keel::convert::read_llama2c(dir + "/stories260K.bin", dir + "/tok512.bin", err);
  if (!src) {
    std::fprintf(stderr, "stories260K: %s\n", err.c_str());
    return;
  }
  keel::convert::WriteOptions wo;
  wo.quant = keel::convert::QuantMode::Keep;
  keel::convert::WriteStats ws;
  const std::string path = "/tmp/xnnpack_bench_stories260K_" + std::to_string(getpid()) + ".keel";
  if (!keel::convert::write_keel(*src, wo, path, ws, err)) {
    std::fprintf(stderr, "stories260K: %s\n", err.c_str());
    return;
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  std::fseek(f, 0, SEEK_END);
  const long size = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  Buffer image{uint64_t(size)};
  if (std::fread(image.ptr, 1, size_t(size), f) != size_t(size)) std::exit(1);
  std::fclose(f);
  std::remove(path.c_str());
  keel::Model model;
  check(model.load(keel::Span<const uint8_t>(image.ptr, size_t(size))));

  std::printf("\n## stories260K (F32) forward passes: prefill of one 64-token chunk, then 64 greedy decode steps\n\n");
  std::printf("| backend | threads | XNNPACK block MB | prefill tok/s | decode tok/s |\n|---|---:|---:|---:|---:|\n");
  struct Engine {
    keel::BackendKind kind;
    std::unique_ptr<Buffer> persistent, scratch;
    keel::Runtime rt;
    std::vector<double> prefill_s, decode_s;
  };
  std::vector<int32_t> prompt(64);
  for (uint32_t i = 0; i < 64; ++i) prompt[i] = int32_t(1 + (i * 37) % 511);
  for (int threads : {1, 2}) {
    std::vector<std::unique_ptr<Engine>> engines;
    for (keel::BackendKind kind : {keel::BackendKind::Native, keel::BackendKind::Xnnpack, keel::BackendKind::Auto}) {
      auto e = std::make_unique<Engine>();
      e->kind = kind;
      keel::RuntimeConfig rc;
      rc.backend = kind;
      rc.plan.kv_budget_tokens = 256;
      rc.plan.chunk_tokens = 64;
      rc.plan.threads = uint32_t(threads);
      const uint64_t work_bytes = keel::xnnpack_work_bytes(model, rc.plan, kind);
      Buffer work(work_bytes);
      keel::Result<uint64_t> bytes =
          keel::xnnpack_persistent_bytes(model, rc.plan, kind, keel::Span<uint8_t>(work.ptr, work_bytes));
      if (!bytes.ok()) check(bytes.error());
      rc.plan.backend_bytes = bytes.value();
      const keel::MemoryPlan p = keel::Runtime::plan(model, rc);
      e->persistent = std::make_unique<Buffer>(p.persistent_bytes);
      e->scratch = std::make_unique<Buffer>(p.scratch_bytes);
      check(e->rt.init(model, rc, keel::Span<uint8_t>(e->persistent->ptr, p.persistent_bytes),
                       keel::Span<uint8_t>(e->scratch->ptr, p.scratch_bytes), threads > 1 ? &cx.pool2 : nullptr));
      engines.push_back(std::move(e));
    }
    // Interleaved repetitions: every engine runs once per round.
    const auto start = Clock::now();
    for (int round = 0; round < 5 || seconds_since(start) < cx.min_s * 5; ++round) {
      for (auto& e : engines) {
        check(e->rt.reset(0));
        auto t0 = Clock::now();
        check(e->rt.prefill(0, keel::Span<const int32_t>(prompt.data(), prompt.size())));
        e->prefill_s.push_back(seconds_since(t0));
        t0 = Clock::now();
        for (int step = 0; step < 64; ++step) {
          const keel::Span<const float> l = e->rt.logits(0);
          int32_t best = 0;
          for (size_t i = 1; i < l.size(); ++i)
            if (l[i] > l[best]) best = int32_t(i);
          check(e->rt.decode(0, best));
        }
        e->decode_s.push_back(seconds_since(t0));
      }
      if (round > 2000) break;
    }
    for (auto& e : engines) {
      std::printf("| %s | %d | %.2f | %.0f | %.0f |\n", keel::backend_name(e->kind), threads,
                  double(e->rt.memory_plan().backend_bytes) / 1e6, 64.0 / median(e->prefill_s),
                  64.0 / median(e->decode_s));
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Ctx cx;
  std::string section, stories_dir = "../shared/models/stories260K";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      cx.quick = true;
    } else if (a == "--section" && i + 1 < argc) {
      section = argv[++i];
    } else if (a == "--stories" && i + 1 < argc) {
      stories_dir = argv[++i];
    } else {
      std::fprintf(stderr, "usage: xnnpack_bench [--quick] [--section fc|qc8|overhead|vector|model] [--stories DIR]\n");
      return 2;
    }
  }
  cx.min_s = cx.quick ? 0.1 : 0.4;
  check(keel::xnn::initialize());
  cx.ref = &keel::kernels_ref();
  cx.nat = keel::kernels_x86();
  cx.vref = &keel::vector_kernels_ref();
  cx.vnat = keel::vector_kernels_x86();
  if (!cx.nat || !cx.vnat) {
    std::fprintf(stderr, "this benchmark needs the x86 kernels\n");
    return 1;
  }
  cx.tp2 = pthreadpool_create(2);
  cx.pool2.parallel_for = run_on;
  cx.pool2.state = cx.tp2;
  cx.pool2.threads = pthreadpool_get_threads_count(cx.tp2);
  cx.pool2.native = cx.tp2;

  std::printf("# xnnpack_bench: native = %s matmul + avx2 vector kernels; XNNPACK 0.0~git20220216 (Debian)\n",
              cx.nat->name);
  std::printf(
      "# median per call; weights DRAM-cold (rotating over >= %llu MB) when the set exceeds the %llu MB "
      "LLC, else hot; kernels compared side by side are timed call by call in turn\n\n",
      (unsigned long long)(kColdBytes >> 20), (unsigned long long)(kLlcBytes >> 20));
  auto want = [&](const char* name) { return section.empty() || section == name; };
  if (want("fc")) bench_fc(cx);
  if (want("qc8")) bench_qc8(cx);
  if (want("overhead")) bench_overhead(cx);
  if (want("vector")) bench_vector(cx);
  if (want("model")) bench_model(cx, stories_dir);
  std::printf("\n# XNNPACK allocator: %llu requests served from regions, %llu refused\n",
              (unsigned long long)keel::xnn::allocator_counters().served,
              (unsigned long long)keel::xnn::allocator_counters().refused);
  pthreadpool_destroy(cx.tp2);
  return 0;
}
