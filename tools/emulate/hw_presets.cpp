// The hardware presets. Each states where its numbers come from; docs/emulator.md repeats it.
#include "emulate/hw_json.h"

namespace keel::hw {

namespace {

// One SambaNova SN40L socket. Public figures (SambaNova's SN40L paper, arXiv 2405.07518, and
// product pages): 520 MB on-chip SRAM (PMUs), 64 GB HBM, 1.5 TB DDR, 638 BF16 TFLOPS. A
// 16-socket rack is quoted at 25.6 TB/s of HBM bandwidth: 1.6 TB/s per socket (derived).
// Guessed: the clock (1.6 GHz), which with 638 TFLOPS gives 199,375 BF16 MACs/cycle; int8 at the
// BF16 rate (no public int8 figure); f32 at a quarter; the vector rate (1040 PCUs x 32 lanes);
// SRAM bandwidth (1040 PMUs x 64 B/cycle); DDR bandwidth 200 GB/s; latencies; 16 DMA engines.
const char kSn40l[] = R"({
  "name": "sn40l",
  "clock_hz": 1.6e9,
  "compute": {"macs_per_cycle": {"int8": 199375, "bf16": 199375, "f32": 49844}, "vector_elems_per_cycle": 33280},
  "sram": {"bytes": 545259520, "bytes_per_cycle": 66560},
  "offchip": [
    {"name": "hbm", "capacity_bytes": 68719476736, "bandwidth_bytes_per_s": 1.6e12, "latency_ns": 500},
    {"name": "ddr", "capacity_bytes": 1649267441664, "bandwidth_bytes_per_s": 2.0e11, "latency_ns": 1000}
  ],
  "dma_engines": 16,
  "sources": "SN40L socket: 520 MB SRAM, 64 GB HBM, 1.5 TB DDR, 638 BF16 TFLOPS (public); HBM 1.6 TB/s = 25.6 TB/s per 16-socket rack / 16 (derived); clock 1.6 GHz, int8/f32/vector rates, SRAM bandwidth, DDR 200 GB/s, latencies and DMA engines guessed"
})";

// An edge NPU class: 2 MiB of SRAM, LPDDR4X at 16 GB/s, 2 int8 TOPS (1 TMAC/s at 1 GHz), as in
// phone and microcontroller-attached NPUs of 0.5-4 TOPS. Assumed: bf16 at a quarter of the
// int8 rate, f32 at a sixteenth, 64 vector lanes, 128 B/cycle SRAM, 150 ns DRAM latency, 2 DMA
// engines, 4 GiB of LPDDR.
const char kEdgeNpu[] = R"({
  "name": "edge-npu-2mib",
  "clock_hz": 1.0e9,
  "compute": {"macs_per_cycle": {"int8": 1000, "bf16": 250, "f32": 62.5}, "vector_elems_per_cycle": 64},
  "sram": {"bytes": 2097152, "bytes_per_cycle": 128},
  "offchip": [
    {"name": "lpddr", "capacity_bytes": 4294967296, "bandwidth_bytes_per_s": 1.6e10, "latency_ns": 150}
  ],
  "dma_engines": 2,
  "sources": "edge NPU class: 2 MiB SRAM, LPDDR4X 16 GB/s, 2 int8 TOPS at 1 GHz; bf16 1/4 and f32 1/16 of int8, 64 vector lanes, 128 B/cycle SRAM, 150 ns latency, 2 DMA engines assumed"
})";

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"sn40l", "one SambaNova SN40L socket: 520 MB SRAM, 64 GB HBM at 1.6 TB/s, 1.5 TB DDR, 638 BF16 TFLOPS", kSn40l},
      {"edge-npu-2mib", "edge NPU class: 2 MiB SRAM, LPDDR 16 GB/s, 2 int8 TOPS", kEdgeNpu},
  };
  return p;
}

}  // namespace keel::hw
