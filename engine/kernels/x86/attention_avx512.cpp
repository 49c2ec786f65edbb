// AVX-512 VNNI attention over quantized rows whose heads are 64 to 256 numbers, a multiple of
// 64 (SmolLM2's 64, 128, Gemma 3's 256). A row is taken as chunks of 64 numbers, two groups of
// 32, one 512-bit vector each. The single-query f16 entries and other head sizes are the AVX2
// table's functions, and the grouped-query f16 entries (at the end) repeat their arithmetic, so
// f16 results are the same bits whichever table runs.
//
// Scores: the query is quantized to int8 per group exactly as the AVX2 kernels do (scale
// max|q|/127), and vpdpbusd sums a key row's products with it in int32, four bytes per lane.
// Each four keys' dwords are first transposed within the 128-bit lanes (two unpack levels,
// shared by every query of the call), so that four vpdpbusd against the query's dwords spread
// over the lanes leave each key's sum per lane in its own element; three lane shuffles then give
// 16 keys' group sums. vpdpbusd multiplies unsigned by signed bytes: q4's nibbles are unsigned
// already, q8's keys are read as k + 128 and 128 * sum(q) is taken back per group.
//
// Weighted sums: out = sum_j p_j (d_j v_j + m_j). Per block of 16 rows and chunk, the
// coefficients c_j = p_j d_j of its two groups are quantized to 16 bits against their largest,
// c_j ~ (S / 65535) u_j, u_j = round(65535 c_j / S), and split into two bytes; four rows' bytes
// are interleaved (two unpack levels) so that vpdpbusd sums u_j v_j over four rows per output
// lane, for the high byte, then (the sums shifted by 8) the low byte. The int32 sums are exact,
// so any order of them gives the same bits; the block's scale is applied
// once per block in f32. The only added error is the rounding of u_j: at most S / 131070 per
// coefficient, for each row times |v_j| (kv_quant_test states the bound). q4's minima are summed
// in f32 (sum_j p_j m_j per group). Rows past the last whole block are summed in f32.

#include <cmath>
#include <cstdint>

#include "core/f16.h"
#include "kernels/attention.h"
#include "kernels/unrolled.h"
#include "kernels/x86/avx512_intrin.h"
#include "kernels/x86/f16_group_kernels.h"
#include "kernels/x86/f16_lane_sums.h"
#include "kernels/x86/query_q8.h"

namespace keel {

const AttentionKernels* attention_kernels_x86_avx2_table();

namespace {

constexpr uint32_t kChunk = 64, kBlock = 16, kPrefetchBlocks = 8;

// Where the parts of a row are (core/kv_type.h), for `groups` groups of 32: byte offsets of the
// scales (f16, one per group), q4's minima, and the numbers.
struct Layout {
  uint32_t row_bytes, chunks, min_offset, numbers_offset;
};

// A chunk's 64 numbers as one vector of bytes in four 128-bit lanes of 16. pos(L, t) is the
// number of the chunk that lane L's byte t holds; kGroup1Lanes marks the 32-bit elements of the
// lanes holding the chunk's second group.
//
// q8: [groups scales][hd int8]; a chunk's lane L holds its numbers 16L..16L+15.
struct Q8Rows {
  static constexpr KvType kType = KvType::Q8;
  static constexpr bool kSigned = true, kHasMin = false;
  static constexpr uint32_t kChunkBytes = 64;
  static constexpr Layout layout(uint32_t hd) { return {hd + 2 * (hd / 32), hd / kChunk, 0, 2 * (hd / 32)}; }
  static __m512i numbers(const uint8_t* chunk) { return _mm512_loadu_si512(chunk); }
  static uint32_t pos(uint32_t lane, uint32_t t) { return 16 * lane + t; }
  static constexpr __mmask16 kGroup1Lanes = 0xff00;  // lanes 2 and 3
  // Number i of the row (in head order) from the row's numbers.
  static int32_t number(const uint8_t* numbers, uint32_t i) { return int8_t(numbers[i]); }
};

// q4: [groups scales][groups minima][hd / 2 bytes]; group g's byte b holds number b (low nibble)
// and b + 16 (high nibble). A chunk's lanes: [g0 0..15 | g1 0..15 | g0 16..31 | g1 16..31], the
// low nibbles of its 32 bytes, then the high ones.
struct Q4Rows {
  static constexpr KvType kType = KvType::Q4;
  static constexpr bool kSigned = false, kHasMin = true;
  static constexpr uint32_t kChunkBytes = 32;
  static constexpr Layout layout(uint32_t hd) {
    return {hd / 2 + 4 * (hd / 32), hd / kChunk, 2 * (hd / 32), 4 * (hd / 32)};
  }
  static __m512i numbers(const uint8_t* chunk) {
    const __m512i x = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk)));
    return _mm512_and_si512(_mm512_srlv_epi64(x, _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4)), _mm512_set1_epi8(15));
  }
  static uint32_t pos(uint32_t lane, uint32_t t) { return 32 * (lane & 1) + 16 * (lane >> 1) + t; }
  static constexpr __mmask16 kGroup1Lanes = 0xf0f0;  // lanes 1 and 3
  static int32_t number(const uint8_t* numbers, uint32_t i) {
    const uint8_t b = numbers[16 * (i / 32) + i % 16];
    return i % 32 < 16 ? b & 15 : b >> 4;
  }
};

// Byte offsets of 16 consecutive rows.
__m512i row_offsets(uint32_t row_bytes) {
  return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                            _mm512_set1_epi32(int32_t(row_bytes)));
}

// Rows a few blocks ahead toward L1: a call streams a KV head's rows once from L3 or DRAM, and
// the hardware prefetchers stop at each 4 KiB page.
void prefetch_ahead(const uint8_t* rows, const uint8_t* end, uint32_t row_bytes) {
  const uint8_t* ahead = rows + kPrefetchBlocks * kBlock * row_bytes;
  for (uint32_t b = 0; b < kBlock * row_bytes; b += 64) {
    if (ahead + b < end) _mm_prefetch(reinterpret_cast<const char*>(ahead + b), _MM_HINT_T0);
  }
}

// The two f16 numbers at byte `offset` of 16 rows (a chunk's two scales or minima), as f32.
void load_pairs(const __m512i offsets, const uint8_t* rows, uint32_t offset, __m512& first, __m512& second) {
  const __m512i x = _mm512_i32gather_epi32(offsets, rows + offset, 1);
  first = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(x));
  second = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(x, 16)));
}

// Four rows' dwords transposed within each 128-bit lane: on return r[m]'s lane L holds dword
// 4L + m of rows 0..3 (row e in element e). Two unpack levels, 8 shuffles for 4 rows.
inline void transpose_lanes4(__m512i r[4]) {
  const __m512i t0 = _mm512_unpacklo_epi32(r[0], r[1]), t1 = _mm512_unpackhi_epi32(r[0], r[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(r[2], r[3]), t3 = _mm512_unpackhi_epi32(r[2], r[3]);
  r[0] = _mm512_unpacklo_epi64(t0, t2);
  r[1] = _mm512_unpackhi_epi64(t0, t2);
  r[2] = _mm512_unpacklo_epi64(t1, t3);
  r[3] = _mm512_unpackhi_epi64(t1, t3);
}

// v[k]'s lane L element e: key 4k + e's sum over lane L's numbers. Returns each key's sum per
// group, keys in order: g0[j] over the lanes of the chunk's first group, g1[j] over its second.
template <class Rows>
inline void group_sums16(const __m512i v[4], __m512i& g0, __m512i& g1) {
  // x[h] = [keys 8h..8h+3 g0 | the same g1 | keys 8h+4..8h+7 g0 | the same g1].
  __m512i x[2];
  for (int h = 0; h < 2; ++h) {
    const __m512i a = v[2 * h], b = v[2 * h + 1];
    if (Rows::kGroup1Lanes == 0xff00) {  // groups are lanes {0, 1} and {2, 3}
      x[h] = _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
    } else {  // {0, 2} and {1, 3}
      x[h] = _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    }
  }
  g0 = _mm512_shuffle_i64x2(x[0], x[1], _MM_SHUFFLE(2, 0, 2, 0));
  g1 = _mm512_shuffle_i64x2(x[0], x[1], _MM_SHUFFLE(3, 1, 3, 1));
}

// Chunks and the number of queries G are template arguments so that row strides and loops are
// constants. The G queries (query i at q + i * head_dim, its scores at s + i * s_stride) share
// each row's loads, the flip of its bytes and its scales; every query's own arithmetic is the
// single-query kernel's (G = 1), in its order, so its scores are the same bits for any G.
template <class Rows, uint32_t kChunks, uint32_t G>
void scores_chunked(const float* q, const uint16_t* k, uint32_t n, float scale, float* s, uint64_t s_stride) {
  constexpr Layout lay = Rows::layout(kChunk * kChunks);
  constexpr uint32_t groups = 2 * kChunks;
  // The query per group: int8 numbers (the AVX2 kernels' rounding), their scale and sums; per
  // chunk the numbers in the rows' lane order.
  x86::QueryQ8 qq[G];
  __m512i qv[G][kChunks];
  // qm[i][c][m]'s lane L: the query's dword 4L + m (of qv[i][c]) in all four elements, against
  // rows transposed by transpose_lanes4.
  __m512i qm[G][kChunks][4];
  for (uint32_t i = 0; i < G; ++i) {
    x86::quantize_query(q + uint64_t(i) * kChunk * kChunks, groups, qq[i]);
    for (uint32_t c = 0; c < kChunks; ++c) {
      alignas(64) int8_t q_lanes[kChunk];
      for (uint32_t lane = 0; lane < 4; ++lane) {
        for (uint32_t t = 0; t < 16; ++t) q_lanes[16 * lane + t] = qq[i].q[kChunk * c + Rows::pos(lane, t)];
      }
      qv[i][c] = _mm512_load_si512(q_lanes);
      for (int32_t m = 0; m < 4; ++m) {
        const __m512i pick = _mm512_setr_epi32(m, m, m, m, 4 + m, 4 + m, 4 + m, 4 + m, 8 + m, 8 + m, 8 + m, 8 + m,
                                               12 + m, 12 + m, 12 + m, 12 + m);
        qm[i][c][m] = _mm512_permutexvar_epi32(pick, qv[i][c]);
      }
    }
  }
  // vpdpbusd takes q8's keys as k + 128 (unsigned); 128 * sum(q) per group is taken back.
  const __m512i flip = _mm512_set1_epi8(Rows::kSigned ? char(0x80) : 0);
  const int32_t bias = Rows::kSigned ? 128 : 0;
  const __m512i offsets = row_offsets(lay.row_bytes);
  const uint8_t* base = reinterpret_cast<const uint8_t*>(k);
  const uint8_t* end = base + uint64_t(n) * lay.row_bytes;
  uint32_t j = 0;
  for (; j + kBlock <= n; j += kBlock) {
    const uint8_t* rows = base + uint64_t(j) * lay.row_bytes;
    prefetch_ahead(rows, end, lay.row_bytes);
    __m512 acc[G];
    for (__m512& a : acc) a = _mm512_setzero_ps();
    for (uint32_t c = 0; c < kChunks; ++c) {
      const uint8_t* chunk = rows + lay.numbers_offset + c * Rows::kChunkBytes;
      __m512 d0, d1, m0, m1;
      load_pairs(offsets, rows, 4 * c, d0, d1);
      if (Rows::kHasMin) load_pairs(offsets, rows, lay.min_offset + 4 * c, m0, m1);
      // Rows in fours, their dwords transposed once for the G queries; v[i][quad] as
      // group_sums16 takes it. The int32 sums are exact, so they are the bits of any other order.
      __m512i v[G][4];
      for (uint32_t quad = 0; quad < 4; ++quad) {
        __m512i r[4];
        for (uint32_t e = 0; e < 4; ++e)
          r[e] = _mm512_xor_si512(Rows::numbers(chunk + (4 * quad + e) * lay.row_bytes), flip);
        transpose_lanes4(r);
        for (uint32_t i = 0; i < G; ++i) {
          __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), r[0], qm[i][c][0]);
          for (uint32_t m = 1; m < 4; ++m) sum = _mm512_dpbusd_epi32(sum, r[m], qm[i][c][m]);
          v[i][quad] = sum;
        }
      }
      for (uint32_t i = 0; i < G; ++i) {
        __m512i g0, g1;
        group_sums16<Rows>(v[i], g0, g1);
        g0 = _mm512_sub_epi32(g0, _mm512_set1_epi32(bias * qq[i].sum_q[2 * c]));
        g1 = _mm512_sub_epi32(g1, _mm512_set1_epi32(bias * qq[i].sum_q[2 * c + 1]));
        acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(d0, _mm512_set1_ps(qq[i].d[2 * c])), _mm512_cvtepi32_ps(g0), acc[i]);
        acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(d1, _mm512_set1_ps(qq[i].d[2 * c + 1])), _mm512_cvtepi32_ps(g1), acc[i]);
        if (Rows::kHasMin) {
          acc[i] = _mm512_fmadd_ps(m0, _mm512_set1_ps(qq[i].sum[2 * c]), acc[i]);
          acc[i] = _mm512_fmadd_ps(m1, _mm512_set1_ps(qq[i].sum[2 * c + 1]), acc[i]);
        }
      }
    }
    for (uint32_t i = 0; i < G; ++i)
      _mm512_storeu_ps(s + i * s_stride + j, _mm512_mul_ps(acc[i], _mm512_set1_ps(scale)));
  }
  for (; j < n; ++j) {
    const uint8_t* row = base + uint64_t(j) * lay.row_bytes;
    const uint16_t* halves = reinterpret_cast<const uint16_t*>(row);
    float acc[G] = {};
    for (uint32_t c = 0; c < kChunks; ++c) {
      const __m512i kv = _mm512_xor_si512(Rows::numbers(row + lay.numbers_offset + c * Rows::kChunkBytes), flip);
      for (uint32_t i = 0; i < G; ++i) {
        const __m512i dots = _mm512_dpbusd_epi32(_mm512_setzero_si512(), kv, qv[i][c]);
        for (uint32_t h = 0; h < 2; ++h) {
          const uint32_t g = 2 * c + h;
          const __mmask16 lanes = h == 0 ? __mmask16(~Rows::kGroup1Lanes) : Rows::kGroup1Lanes;
          const int32_t dot = _mm512_mask_reduce_add_epi32(lanes, dots) - bias * qq[i].sum_q[g];
          acc[i] += f16_to_f32(halves[g]) * qq[i].d[g] * float(dot);
          if (Rows::kHasMin) acc[i] += f16_to_f32(halves[lay.min_offset / 2 + g]) * qq[i].sum[g];
        }
      }
    }
    for (uint32_t i = 0; i < G; ++i) s[i * s_stride + j] = acc[i] * scale;
  }
}

// The G queries' probabilities at p + i * p_stride, outputs at out + i * head_dim. Rows are
// loaded and their bytes interleaved once per block for all of them; each query quantizes its
// own coefficients and keeps its own sums, as the single-query kernel (G = 1) does.
template <class Rows, uint32_t kChunks, uint32_t G>
void weighted_sum_chunked(const float* p, uint64_t p_stride, const uint16_t* v, uint32_t n, float* out) {
  constexpr Layout lay = Rows::layout(kChunk * kChunks);
  constexpr uint32_t hd = kChunk * kChunks;
  const uint8_t* base = reinterpret_cast<const uint8_t*>(v);
  const uint8_t* end = base + uint64_t(n) * lay.row_bytes;
  // acc[i][c][k]'s 32-bit element 4L + s is the sum of chunk c's lane L, byte 4k + s (the
  // unpacks' order), for query i.
  __m512 acc[G][kChunks][4];
  __m512 mins[G][2 * kChunks];
  for (uint32_t i = 0; i < G; ++i) {
    for (uint32_t c = 0; c < kChunks; ++c) {
      for (__m512& a : acc[i][c]) a = _mm512_setzero_ps();
      mins[i][2 * c] = mins[i][2 * c + 1] = _mm512_setzero_ps();
    }
  }
  // Which coefficient dword each lane takes at step k (the packed layout below): the high bytes
  // of the first group at 4k, of the second at 4k + 1, the low bytes 2 further.
  __m512i pick_high[4], pick_low[4];
  for (int32_t step = 0; step < 4; ++step) {
    pick_high[step] =
        _mm512_mask_mov_epi32(_mm512_set1_epi32(4 * step), Rows::kGroup1Lanes, _mm512_set1_epi32(4 * step + 1));
    pick_low[step] = _mm512_add_epi32(pick_high[step], _mm512_set1_epi32(2));
  }
  // Within each lane of 16-bit [u0 of 4 rows, u1 of 4 rows]: dwords [high bytes of u0, of u1, low
  // bytes of u0, of u1], rows in order.
  const __m512i split_bytes =
      _mm512_broadcast_i32x4(_mm_setr_epi8(1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14));
  const __m512i u_max = _mm512_set1_epi32(65535);
  const __m512i offsets = row_offsets(lay.row_bytes);
  uint32_t j = 0;
  for (; j + kBlock <= n; j += kBlock) {
    const uint8_t* rows = base + uint64_t(j) * lay.row_bytes;
    prefetch_ahead(rows, end, lay.row_bytes);
    __m512 pj[G];
    for (uint32_t i = 0; i < G; ++i) pj[i] = _mm512_loadu_ps(p + i * p_stride + j);
    for (uint32_t c = 0; c < kChunks; ++c) {
      __m512 d0, d1;
      load_pairs(offsets, rows, 4 * c, d0, d1);
      if (Rows::kHasMin) {
        __m512 m0, m1;
        load_pairs(offsets, rows, lay.min_offset + 4 * c, m0, m1);
        for (uint32_t i = 0; i < G; ++i) {
          mins[i][2 * c] = _mm512_fmadd_ps(pj[i], m0, mins[i][2 * c]);
          mins[i][2 * c + 1] = _mm512_fmadd_ps(pj[i], m1, mins[i][2 * c + 1]);
        }
      }
      // x[step][i]'s 32-bit element 4L + s: rows 4 step..4 step + 3's byte 4i + s of lane L.
      __m512i x[4][4];
      const uint8_t* chunk = rows + lay.numbers_offset + c * Rows::kChunkBytes;
      for (uint32_t step = 0; step < 4; ++step) {
        const uint8_t* r = chunk + 4 * step * lay.row_bytes;
        const __m512i v0 = Rows::numbers(r), v1 = Rows::numbers(r + lay.row_bytes);
        const __m512i v2 = Rows::numbers(r + 2 * lay.row_bytes), v3 = Rows::numbers(r + 3 * lay.row_bytes);
        const __m512i v01l = _mm512_unpacklo_epi8(v0, v1), v01h = _mm512_unpackhi_epi8(v0, v1);
        const __m512i v23l = _mm512_unpacklo_epi8(v2, v3), v23h = _mm512_unpackhi_epi8(v2, v3);
        x[step][0] = _mm512_unpacklo_epi16(v01l, v23l);
        x[step][1] = _mm512_unpackhi_epi16(v01l, v23l);
        x[step][2] = _mm512_unpacklo_epi16(v01h, v23h);
        x[step][3] = _mm512_unpackhi_epi16(v01h, v23h);
      }
      for (uint32_t i = 0; i < G; ++i) {
        const __m512 c0 = _mm512_mul_ps(pj[i], d0), c1 = _mm512_mul_ps(pj[i], d1);
        // One scale for the chunk's two groups: probabilities and scales are >= 0.
        const float largest = _mm512_reduce_max_ps(_mm512_max_ps(c0, c1));
        const __m512 to_u = _mm512_set1_ps(largest > 0.0f ? 65535.0f / largest : 0.0f);
        const __m512i u0 = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(c0, to_u)), u_max);
        const __m512i u1 = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(c1, to_u)), u_max);
        const __m512i coef = _mm512_shuffle_epi8(_mm512_packus_epi32(u0, u1), split_bytes);
        // 256 * sum over the high bytes, then the low bytes added to the same sums: |256 sum_high|
        // <= 256 * 16 * 255 * 127 and the total stay inside int32.
        __m512i sum[4];
        for (int k = 0; k < 4; ++k) sum[k] = _mm512_setzero_si512();
        for (uint32_t step = 0; step < 4; ++step) {
          const __m512i ch = _mm512_permutexvar_epi32(pick_high[step], coef);
          for (int k = 0; k < 4; ++k) sum[k] = _mm512_dpbusd_epi32(sum[k], ch, x[step][k]);
        }
        for (int k = 0; k < 4; ++k) sum[k] = _mm512_slli_epi32(sum[k], 8);
        for (uint32_t step = 0; step < 4; ++step) {
          const __m512i cl = _mm512_permutexvar_epi32(pick_low[step], coef);
          for (int k = 0; k < 4; ++k) sum[k] = _mm512_dpbusd_epi32(sum[k], cl, x[step][k]);
        }
        const __m512 step_scale = _mm512_set1_ps(largest / 65535.0f);
        for (int k = 0; k < 4; ++k)
          acc[i][c][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[k]), step_scale, acc[i][c][k]);
      }
    }
  }
  for (uint32_t i = 0; i < G; ++i) {
    float* oi = out + uint64_t(i) * hd;
    for (uint32_t c = 0; c < kChunks; ++c) {
      alignas(64) float lanes[kChunk];
      for (int k = 0; k < 4; ++k) _mm512_store_ps(lanes + 16 * k, acc[i][c][k]);
      const float min0 = _mm512_reduce_add_ps(mins[i][2 * c]), min1 = _mm512_reduce_add_ps(mins[i][2 * c + 1]);
      for (uint32_t lane = 0; lane < 4; ++lane) {
        for (uint32_t t = 0; t < 16; ++t) {
          const uint32_t e = Rows::pos(lane, t);
          oi[kChunk * c + e] = lanes[16 * (t / 4) + 4 * lane + t % 4] + (e < 32 ? min0 : min1);
        }
      }
    }
  }
  for (; j < n; ++j) {
    const uint8_t* row = base + uint64_t(j) * lay.row_bytes;
    const uint16_t* halves = reinterpret_cast<const uint16_t*>(row);
    for (uint32_t i = 0; i < G; ++i) {
      const float pij = p[i * p_stride + j];
      float* oi = out + uint64_t(i) * hd;
      for (uint32_t g = 0; g < 2 * kChunks; ++g) {
        const float c = pij * f16_to_f32(halves[g]);
        const float m = Rows::kHasMin ? pij * f16_to_f32(halves[lay.min_offset / 2 + g]) : 0.0f;
        for (uint32_t e = 32 * g; e < 32 * g + 32; ++e) {
          oi[e] += c * float(Rows::number(row + lay.numbers_offset, e)) + m;
        }
      }
    }
  }
}

// Queries go through in blocks of at most kQuantGroupBlock (plan_query_rows' limit).
constexpr uint32_t kQuantGroupBlock = 4;

template <class Rows, uint32_t kChunks>
void scores_group_chunked(const float* q, uint32_t g, const uint16_t* k, uint32_t n, uint32_t, float scale, float* s,
                          uint64_t s_stride) {
  for_query_blocks<kQuantGroupBlock>(g, [&](uint32_t i, auto size) {
    scores_chunked<Rows, kChunks, size>(q + uint64_t(i) * kChunk * kChunks, k, n, scale, s + i * s_stride, s_stride);
  });
}

template <class Rows, uint32_t kChunks>
void weighted_sum_group_chunked(const float* p, uint64_t p_stride, uint32_t g, const uint16_t* v, uint32_t n, uint32_t,
                                float* out) {
  for_query_blocks<kQuantGroupBlock>(g, [&](uint32_t i, auto size) {
    weighted_sum_chunked<Rows, kChunks, size>(p + i * p_stride, p_stride, v, n, out + uint64_t(i) * kChunk * kChunks);
  });
}

template <class Rows, uint32_t kChunks>
void scores_one(const float* q, const uint16_t* k, uint32_t n, uint32_t, float scale, float* s) {
  scores_chunked<Rows, kChunks, 1>(q, k, n, scale, s, 0);
}

template <class Rows, uint32_t kChunks>
void weighted_sum_one(const float* p, const uint16_t* v, uint32_t n, uint32_t, float* out) {
  weighted_sum_chunked<Rows, kChunks, 1>(p, 0, v, n, out);
}

template <class Rows>
KvScoresFn scores_for(uint32_t hd) {
  switch (hd) {
    case 64: return scores_one<Rows, 1>;
    case 128: return scores_one<Rows, 2>;
    case 192: return scores_one<Rows, 3>;
    case 256: return scores_one<Rows, 4>;
  }
  const AttentionKernels* avx2 = attention_kernels_x86_avx2_table();
  return Rows::kType == KvType::Q8 ? avx2->scores_q8 : avx2->scores_q4;
}

template <class Rows>
KvWeightedSumFn weighted_sum_for(uint32_t hd) {
  switch (hd) {
    case 64: return weighted_sum_one<Rows, 1>;
    case 128: return weighted_sum_one<Rows, 2>;
    case 192: return weighted_sum_one<Rows, 3>;
    case 256: return weighted_sum_one<Rows, 4>;
  }
  const AttentionKernels* avx2 = attention_kernels_x86_avx2_table();
  return Rows::kType == KvType::Q8 ? avx2->weighted_sum_q8 : avx2->weighted_sum_q4;
}

// Head dims outside the chunked paths take the queries one by one through scores_for's kernel.
template <class Rows>
void scores_group_quant(const float* q, uint32_t g, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s,
                        uint64_t s_stride) {
  switch (hd) {
    case 64: return scores_group_chunked<Rows, 1>(q, g, k, n, hd, scale, s, s_stride);
    case 128: return scores_group_chunked<Rows, 2>(q, g, k, n, hd, scale, s, s_stride);
    case 192: return scores_group_chunked<Rows, 3>(q, g, k, n, hd, scale, s, s_stride);
    case 256: return scores_group_chunked<Rows, 4>(q, g, k, n, hd, scale, s, s_stride);
  }
  const KvScoresFn one = scores_for<Rows>(hd);
  for (uint32_t i = 0; i < g; ++i) one(q + uint64_t(i) * hd, k, n, hd, scale, s + i * s_stride);
}

template <class Rows>
void weighted_sum_group_quant(const float* p, uint64_t p_stride, uint32_t g, const uint16_t* v, uint32_t n, uint32_t hd,
                              float* out) {
  switch (hd) {
    case 64: return weighted_sum_group_chunked<Rows, 1>(p, p_stride, g, v, n, hd, out);
    case 128: return weighted_sum_group_chunked<Rows, 2>(p, p_stride, g, v, n, hd, out);
    case 192: return weighted_sum_group_chunked<Rows, 3>(p, p_stride, g, v, n, hd, out);
    case 256: return weighted_sum_group_chunked<Rows, 4>(p, p_stride, g, v, n, hd, out);
  }
  const KvWeightedSumFn one = weighted_sum_for<Rows>(hd);
  for (uint32_t i = 0; i < g; ++i) one(p + i * p_stride, v, n, hd, out + uint64_t(i) * hd);
}

void scores_q8_avx512(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s) {
  scores_for<Q8Rows>(hd)(q, k, n, hd, scale, s);
}

void weighted_sum_q8_avx512(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  weighted_sum_for<Q8Rows>(hd)(p, v, n, hd, out);
}

void scores_q4_avx512(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s) {
  scores_for<Q4Rows>(hd)(q, k, n, hd, scale, s);
}

void weighted_sum_q4_avx512(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  weighted_sum_for<Q4Rows>(hd)(p, v, n, hd, out);
}

// ---- f16 rows, the queries of one KV head together ----
//
// The AVX2 f16 kernels take one query and convert every key and value number from f16 for it;
// with grouped-query attention (SmolLM2: 9 query heads over 3 KV heads; Gemma 3: 4 over 1) the
// same rows would be converted and read once per query. f16_group_kernels.h's kernels convert a
// row once for up to four queries: AVX-512VL's 32 vector registers hold four queries'
// accumulators, so Gemma 3's group reads each row once (three, on AVX2, would read it twice).
// Per query every operation is the AVX2 kernel's, on 256-bit vectors, in the same order, so the
// results are its bits.
constexpr uint32_t kF16GroupBlock = 4;

void scores_f16_group(const float* q, uint32_t g, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s,
                      uint64_t s_stride) {
  scores_f16_group_of<kF16GroupBlock>(q, g, k, n, hd, scale, s, s_stride, attention_kernels_x86_avx2_table()->scores);
}

void weighted_sum_f16_group(const float* p, uint64_t p_stride, uint32_t g, const uint16_t* v, uint32_t n, uint32_t hd,
                            float* out) {
  weighted_sum_f16_group_of<kF16GroupBlock>(p, p_stride, g, v, n, hd, out,
                                            attention_kernels_x86_avx2_table()->weighted_sum);
}

}  // namespace

const AttentionKernels* attention_kernels_x86_avx512_table() {
  const AttentionKernels& a = *attention_kernels_x86_avx2_table();
  static const AttentionKernels k{"avx512vnni",
                                  a.scores,
                                  a.weighted_sum,
                                  a.to_half,
                                  a.weighted_sum_more,
                                  scores_q8_avx512,
                                  weighted_sum_q8_avx512,
                                  scores_q4_avx512,
                                  weighted_sum_q4_avx512,
                                  scores_f16_group,
                                  weighted_sum_f16_group,
                                  scores_group_quant<Q8Rows>,
                                  weighted_sum_group_quant<Q8Rows>,
                                  scores_group_quant<Q4Rows>,
                                  weighted_sum_group_quant<Q4Rows>,
                                  a.rotate_rows};
  return &k;
}

}  // namespace keel
