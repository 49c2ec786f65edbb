// Dequantization of GGML element encodings, following the GGML block definitions (ggml-common.h
// layouts, QK_K = 256). Every value is computed with the same float operations in the same order
// as the reference dequantizers, so a format kept by the converter (Q8_0, Q4_0, Q4_1) yields
// bit-identical floats, and the others match the reference bit for bit as well.
#include <bit>
#include <cstring>
#include <limits>

#include "convert/source_model.h"
#include "core/f16.h"

// A fused multiply-add would round once where the reference rounds twice (d * q - m).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace keel::convert {
namespace {

// F32 tensors are copied as bytes; GGUF data is little-endian.
static_assert(std::endian::native == std::endian::little, "little-endian host required");

constexpr uint32_t kQK = 32;     // elements per block of the legacy formats
constexpr uint32_t kQK_K = 256;  // elements per super-block of the K formats

// Bytes per block: Q4_0 {f16 d; u8 qs[16]}, Q4_1 {f16 d, m; u8 qs[16]},
// Q5_0 {f16 d; u8 qh[4]; u8 qs[16]}, Q5_1 {f16 d, m; u8 qh[4]; u8 qs[16]},
// Q8_0 {f16 d; i8 qs[32]}, Q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]},
// Q5_K {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]},
// Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}.
uint32_t block_bytes(SrcType t) {
  switch (t) {
    case SrcType::F32: return 4;
    case SrcType::F16: return 2;
    case SrcType::BF16: return 2;
    case SrcType::Q8_0: return 2 + kQK;
    case SrcType::Q4_0: return 2 + kQK / 2;
    case SrcType::Q4_1: return 4 + kQK / 2;
    case SrcType::Q5_0: return 2 + 4 + kQK / 2;
    case SrcType::Q5_1: return 4 + 4 + kQK / 2;
    case SrcType::Q4_K: return 4 + 12 + kQK_K / 2;
    case SrcType::Q5_K: return 4 + 12 + kQK_K / 8 + kQK_K / 2;
    case SrcType::Q6_K: return kQK_K / 2 + kQK_K / 4 + kQK_K / 16 + 2;
  }
  return 0;
}

inline uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
inline float load_f16(const uint8_t* p) { return f16_to_f32(load_u16(p)); }

void dq_q8_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  for (uint32_t j = 0; j < kQK; ++j) y[j] = float(int8_t(b[2 + j])) * d;
}

void dq_q4_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (uint32_t j = 0; j < kQK / 2; ++j) {
    y[j] = float(int(qs[j] & 0x0f) - 8) * d;
    y[j + kQK / 2] = float(int(qs[j] >> 4) - 8) * d;
  }
}

void dq_q4_1(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float m = load_f16(b + 2);
  const uint8_t* qs = b + 4;
  for (uint32_t j = 0; j < kQK / 2; ++j) {
    y[j] = float(qs[j] & 0x0f) * d + m;
    y[j + kQK / 2] = float(qs[j] >> 4) * d + m;
  }
}

// Bit j of qh is the fifth bit of element j (elements 0..15 low nibbles, 16..31 high nibbles).
void dq_q5_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint32_t qh = load_u32(b + 2);
  const uint8_t* qs = b + 6;
  for (uint32_t j = 0; j < kQK / 2; ++j) {
    const uint32_t h0 = ((qh >> j) << 4) & 0x10;
    const uint32_t h1 = (qh >> (j + 12)) & 0x10;
    y[j] = float(int((qs[j] & 0x0f) | h0) - 16) * d;
    y[j + kQK / 2] = float(int((qs[j] >> 4) | h1) - 16) * d;
  }
}

void dq_q5_1(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float m = load_f16(b + 2);
  const uint32_t qh = load_u32(b + 4);
  const uint8_t* qs = b + 8;
  for (uint32_t j = 0; j < kQK / 2; ++j) {
    const uint32_t h0 = ((qh >> j) << 4) & 0x10;
    const uint32_t h1 = (qh >> (j + 12)) & 0x10;
    y[j] = float((qs[j] & 0x0f) | h0) * d + m;
    y[j + kQK / 2] = float((qs[j] >> 4) | h1) * d + m;
  }
}

// The 12 scale bytes of Q4_K/Q5_K hold 8 six-bit scales and 8 six-bit mins:
// bytes 0..3 low 6 bits = scales 0..3, bytes 4..7 low 6 bits = mins 0..3; scales/mins 4..7
// take their low 4 bits from bytes 8..11 (low/high nibble) and their top 2 bits from the top
// 2 bits of bytes 0..3 (scales) and 4..7 (mins).
inline void scale_min_k4(uint32_t j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = uint8_t((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// 256 elements in 4 groups of 64; each group is two sub-blocks of 32 sharing 32 qs bytes
// (low nibbles first sub-block, high nibbles second).
void dq_q4_k(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (uint32_t is = 0; is < 8; is += 2) {
    uint8_t sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * float(sc), m1 = dmin * float(m);
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * float(sc), m2 = dmin * float(m);
    for (uint32_t l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0x0f) - m1;
    for (uint32_t l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    q += 32;
  }
}

// As Q4_K plus a fifth bit per element: bit (2g) of qh[l] for element l of the first sub-block
// of group g, bit (2g + 1) for the second.
void dq_q5_k(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint32_t u1 = 1, u2 = 2;
  for (uint32_t is = 0; is < 8; is += 2) {
    uint8_t sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * float(sc), m1 = dmin * float(m);
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * float(sc), m2 = dmin * float(m);
    for (uint32_t l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0x0f) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (uint32_t l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    ql += 32;
    u1 <<= 2;
    u2 <<= 2;
  }
}

// Two halves of 128 elements; each half uses 64 ql bytes, 32 qh bytes and 8 int8 scales
// (one per 16 elements). Element value = d * scale * (6-bit q - 32).
void dq_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_f16(b + 208);
  for (uint32_t half = 0; half < 2; ++half) {
    for (uint32_t l = 0; l < 32; ++l) {
      const uint32_t is = l / 16;
      const int q1 = int((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = int((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * float(sc[is + 0]) * float(q1);
      y[l + 32] = d * float(sc[is + 2]) * float(q2);
      y[l + 64] = d * float(sc[is + 4]) * float(q3);
      y[l + 96] = d * float(sc[is + 6]) * float(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

}  // namespace

uint32_t block_elems(SrcType t) {
  switch (t) {
    case SrcType::F32:
    case SrcType::F16:
    case SrcType::BF16: return 1;
    case SrcType::Q8_0:
    case SrcType::Q4_0:
    case SrcType::Q4_1:
    case SrcType::Q5_0:
    case SrcType::Q5_1: return kQK;
    case SrcType::Q4_K:
    case SrcType::Q5_K:
    case SrcType::Q6_K: return kQK_K;
  }
  return 0;
}

// 0 also when the byte count would not fit in 64 bits (only hostile shapes get there).
uint64_t encoded_bytes(SrcType t, uint64_t n) {
  const uint32_t be = block_elems(t);
  const uint32_t bb = block_bytes(t);
  if (be == 0 || bb == 0 || n % be != 0) return 0;
  const uint64_t blocks = n / be;
  if (blocks > std::numeric_limits<uint64_t>::max() / bb) return 0;
  return blocks * bb;
}

bool dequantize(SrcType t, const uint8_t* src, size_t src_bytes, float* dst, size_t n) {
  if (n == 0) return src_bytes == 0;
  const uint64_t need = encoded_bytes(t, n);
  if (need == 0 || need != src_bytes || src == nullptr || dst == nullptr) return false;
  const uint32_t be = block_elems(t);
  const uint32_t bb = block_bytes(t);
  const size_t blocks = n / be;
  switch (t) {
    case SrcType::F32: memcpy(dst, src, n * sizeof(float)); return true;
    case SrcType::F16:
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(src + 2 * i));
      return true;
    case SrcType::BF16:
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(src + 2 * i));
      return true;
    default: break;
  }
  void (*block_fn)(const uint8_t*, float*) = nullptr;
  switch (t) {
    case SrcType::Q8_0: block_fn = dq_q8_0; break;
    case SrcType::Q4_0: block_fn = dq_q4_0; break;
    case SrcType::Q4_1: block_fn = dq_q4_1; break;
    case SrcType::Q5_0: block_fn = dq_q5_0; break;
    case SrcType::Q5_1: block_fn = dq_q5_1; break;
    case SrcType::Q4_K: block_fn = dq_q4_k; break;
    case SrcType::Q5_K: block_fn = dq_q5_k; break;
    case SrcType::Q6_K: block_fn = dq_q6_k; break;
    default: return false;
  }
  for (size_t i = 0; i < blocks; ++i) block_fn(src + i * bb, dst + i * be);
  return true;
}

}  // namespace keel::convert
