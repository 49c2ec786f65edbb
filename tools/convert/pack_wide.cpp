// Lossless repacking of GGUF's 5-bit and K-quant blocks (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) into the
// panels of docs/format.md: every f16 scale, 6-bit scale and min, and every integer quant is
// copied, only their places change.
#include <cstring>
#include <string>

#include "convert/pack.h"
#include "model/weight_format.h"

namespace keel::convert {

namespace {

using keel::fb::DType;

constexpr uint32_t kBlocksPerSuper = kSuperBlock / kQuantBlock;

inline uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

// One superblock (K-quants) or block (Q5_0, Q5_1) of a source row, decoded to integers.
struct SrcBlock {
  uint16_t d_bits = 0, m_bits = 0;  // d and (Q5_1) m or (Q4_K, Q5_K) dmin, as f16 bits
  uint8_t sc[16] = {};              // Q4_K/Q5_K: 8 six-bit scales; Q6_K: 16 int8 scales
  uint8_t mn[8] = {};               // Q4_K/Q5_K: 8 six-bit mins
  uint8_t u[kSuperBlock] = {};      // unsigned quants in element order
};

// Q4_K/Q5_K scale bytes: 8 six-bit scales and mins packed in 12 bytes. j < 4: low 6 bits of
// bytes j (scale) and j + 4 (min); j >= 4: low / high nibble of byte j + 4 with the top two
// bits of bytes j - 4 (scale) and j (min) above them.
void unpack_scales_k(const uint8_t* q, uint8_t sc[8], uint8_t mn[8]) {
  for (uint32_t j = 0; j < 8; ++j) {
    if (j < 4) {
      sc[j] = q[j] & 63;
      mn[j] = q[j + 4] & 63;
    } else {
      sc[j] = uint8_t((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
      mn[j] = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
  }
}

void decode(SrcType src, const uint8_t* b, SrcBlock& o) {
  switch (src) {
    case SrcType::Q5_0:
    case SrcType::Q5_1: {
      // {f16 d; [f16 m;] u32 qh; u8 qs[16]}: element j < 16 low nibble of qs[j], j >= 16 high
      // nibble of qs[j - 16]; bit j of qh is the fifth bit of element j.
      const uint32_t off = src == SrcType::Q5_1 ? 4 : 2;
      o.d_bits = load_u16(b);
      if (src == SrcType::Q5_1) o.m_bits = load_u16(b + 2);
      const uint32_t qh = load_u32(b + off);
      const uint8_t* qs = b + off + 4;
      for (uint32_t j = 0; j < 16; ++j) {
        o.u[j] = uint8_t((qs[j] & 15) | (((qh >> j) & 1) << 4));
        o.u[j + 16] = uint8_t((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
      }
      return;
    }
    case SrcType::Q4_K:
    case SrcType::Q5_K: {
      // {f16 d, dmin; u8 scales[12]; [u8 qh[32];] u8 qs[128]}: 4 groups of 64 elements share
      // 32 qs bytes (sub-block 2g in low nibbles, 2g + 1 in high); bit s of qh[l] is the fifth
      // bit of element l of sub-block s.
      o.d_bits = load_u16(b);
      o.m_bits = load_u16(b + 2);
      unpack_scales_k(b + 4, o.sc, o.mn);
      const bool five = src == SrcType::Q5_K;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (five ? 48 : 16);
      for (uint32_t s = 0; s < 8; ++s)
        for (uint32_t l = 0; l < 32; ++l) {
          const uint8_t byte = qs[32 * (s / 2) + l];
          uint8_t v = (s % 2) ? byte >> 4 : byte & 15;
          if (five) v = uint8_t(v | (((qh[l] >> s) & 1) << 4));
          o.u[32 * s + l] = v;
        }
      return;
    }
    case SrcType::Q6_K: {
      // {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: two halves of 128; in half h, element
      // 32k + l (k < 4, l < 32) has low bits in ql[64h + l + 32 (k % 2)] (low nibble for k < 2,
      // high for k >= 2) and high bits 2k, 2k + 1 of qh[32h + l]; scale of element e: e / 16.
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      memcpy(o.sc, b + 192, 16);
      o.d_bits = load_u16(b + 208);
      for (uint32_t h = 0; h < 2; ++h)
        for (uint32_t k = 0; k < 4; ++k)
          for (uint32_t l = 0; l < 32; ++l) {
            const uint8_t lo = ql[64 * h + l + 32 * (k % 2)];
            const uint8_t low = k < 2 ? lo & 15 : lo >> 4;
            o.u[128 * h + 32 * k + l] = uint8_t(low | (((qh[32 * h + l] >> (2 * k)) & 3) << 4));
          }
      return;
    }
    default: return;
  }
}

// Writes (row, block b)'s 32 quants u into the nibble and high-bit planes of its panel.
void put_quants(DType dt, uint8_t* quants, uint64_t b, uint64_t lane, const uint8_t* u) {
  uint8_t* qb = quants + b * quant_block_bytes(dt);
  for (uint64_t c = 0; c < 4; ++c)
    for (uint64_t j = 0; j < 4; ++j)
      qb[c * 64 + lane * 4 + j] = uint8_t((u[8 * c + j] & 15) | ((u[8 * c + 4 + j] & 15) << 4));
  if (high_bits(dt) == 0) return;  // Q4K: nibbles only, no high-bit plane behind them
  uint8_t* hp = qb + 256;
  for (uint64_t c = 0; c < 4; ++c)
    for (uint64_t h = 0; h < 2; ++h)
      for (uint64_t j = 0; j < 4; ++j) {
        const uint8_t top = u[8 * c + 4 * h + j] >> 4;
        if (high_bits(dt) == 1) {
          hp[lane * 4 + j] |= uint8_t((top & 1) << (2 * c + h));
        } else {
          hp[(c / 2) * 64 + lane * 4 + j] |= uint8_t((top & 3) << (2 * (2 * (c % 2) + h)));
        }
      }
}

}  // namespace

bool pack_wide_from_ggml_blocks(SrcType src, const uint8_t* src_bytes, uint64_t src_len, uint64_t rows, uint64_t cols,
                                DType dst, uint8_t* out, uint64_t out_len, std::string& error) {
  uint64_t block_bytes = 0, block_elems = kQuantBlock;
  DType expected = DType::Q5;
  switch (src) {
    case SrcType::Q5_0: block_bytes = 22, expected = DType::Q5; break;
    case SrcType::Q5_1: block_bytes = 24, expected = DType::Q5M; break;
    case SrcType::Q4_K: block_bytes = 144, block_elems = kSuperBlock, expected = DType::Q4K; break;
    case SrcType::Q5_K: block_bytes = 176, block_elems = kSuperBlock, expected = DType::Q5K; break;
    case SrcType::Q6_K: block_bytes = 210, block_elems = kSuperBlock, expected = DType::Q6K; break;
    default:
      error = std::string("lossless packing needs Q5_0, Q5_1, Q4_K, Q5_K or Q6_K blocks, found ") + src_type_name(src);
      return false;
  }
  if (!check_ggml_pack(src, expected, dst, src_len, rows, cols, block_elems, block_bytes, out_len, error)) return false;
  const uint64_t need = tensor_bytes(dst, rows, cols), n_src = cols / block_elems;

  // Padding rows keep zero scales: they contribute exactly 0 whatever their quants.
  memset(out, 0, need);
  const uint64_t nb = cols / kQuantBlock, ns = cols / kSuperBlock;
  const uint64_t pbytes = panel_bytes(dst, cols), qoff = panel_quants_offset(dst, cols);
  SrcBlock sb;
  for (uint64_t r = 0; r < rows; ++r) {
    uint8_t* panel = out + (r / kPanelRows) * pbytes;
    const uint64_t lane = r % kPanelRows;
    for (uint64_t k = 0; k < n_src; ++k) {
      decode(src, src_bytes + (r * n_src + k) * block_bytes, sb);
      if (!is_kquant(dst)) {
        memcpy(panel + (k * kPanelRows + lane) * 2, &sb.d_bits, 2);
        if (dst == DType::Q5M) memcpy(panel + (nb + k) * kPanelRows * 2 + lane * 2, &sb.m_bits, 2);
        put_quants(dst, panel + qoff, k, lane, sb.u);
        continue;
      }
      memcpy(panel + (k * kPanelRows + lane) * 2, &sb.d_bits, 2);
      if (dst == DType::Q6K) {
        uint8_t* sc = panel + ns * kPanelRows * 2;  // [nb][2][16]
        for (uint64_t i = 0; i < 2 * kBlocksPerSuper; ++i)
          sc[(k * 2 * kBlocksPerSuper + i) * kPanelRows + lane] = sb.sc[i];
      } else {
        memcpy(panel + (ns + k) * kPanelRows * 2 + lane * 2, &sb.m_bits, 2);
        uint8_t* sc = panel + ns * kPanelRows * 4;  // [nb][16] scales, then [nb][16] mins
        for (uint64_t i = 0; i < kBlocksPerSuper; ++i) {
          sc[(k * kBlocksPerSuper + i) * kPanelRows + lane] = sb.sc[i];
          sc[(nb + k * kBlocksPerSuper + i) * kPanelRows + lane] = sb.mn[i];
        }
      }
      for (uint64_t i = 0; i < kBlocksPerSuper; ++i)
        put_quants(dst, panel + qoff, k * kBlocksPerSuper + i, lane, sb.u + i * kQuantBlock);
    }
  }
  return true;
}

}  // namespace keel::convert
