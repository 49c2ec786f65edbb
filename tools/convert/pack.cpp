#include "convert/pack.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/f16.h"
#include "model/weight_format.h"

namespace keel::convert {

namespace {

using keel::fb::DType;

constexpr uint16_t kF16MaxFinite = 0x7bff;

uint8_t zero_point(DType t) { return t == DType::Q8 ? 128 : t == DType::Q4 ? 8 : 0; }

// Writes the quantized representation of one (row, block) into a packed tensor.
struct PanelWriter {
  DType dtype;
  uint64_t cols;
  uint8_t* out;
  uint64_t nb = ceil_div(cols, kQuantBlock);
  uint64_t pbytes = panel_bytes(dtype, cols);
  uint64_t qoff = panel_quants_offset(dtype, cols);

  // Zero scales and mins, zero-point quants: padding rows then contribute exactly 0.
  void init(uint64_t rows) const {
    const uint64_t n_panels = ceil_div(rows, kPanelRows);
    memset(out, 0, n_panels * pbytes);
    const uint8_t z = zero_point(dtype);
    const uint8_t fill = dtype == DType::Q8 ? z : uint8_t(z | (z << 4));
    for (uint64_t p = 0; p < n_panels; ++p) memset(out + p * pbytes + qoff, fill, pbytes - qoff);
  }

  void put(uint64_t row, uint64_t b, uint16_t d_bits, uint16_t m_bits, const uint8_t u[32]) const {
    uint8_t* panel = out + (row / kPanelRows) * pbytes;
    const uint64_t lane = row % kPanelRows;
    memcpy(panel + (b * kPanelRows + lane) * 2, &d_bits, 2);
    if (dtype == DType::Q4M) memcpy(panel + nb * kPanelRows * 2 + (b * kPanelRows + lane) * 2, &m_bits, 2);
    uint8_t* quants = panel + qoff;
    if (dtype == DType::Q8) {
      // byte [b][g][r][j] = u(col 32b + 4g + j)
      for (uint64_t g = 0; g < 8; ++g)
        for (uint64_t j = 0; j < 4; ++j) quants[b * 512 + g * 64 + lane * 4 + j] = u[4 * g + j];
    } else {
      // byte [b][c][r][j] = u(col 32b + 8c + j) | u(col 32b + 8c + 4 + j) << 4
      for (uint64_t c = 0; c < 4; ++c)
        for (uint64_t j = 0; j < 4; ++j)
          quants[b * 256 + c * 64 + lane * 4 + j] = uint8_t((u[8 * c + j] & 15) | ((u[8 * c + 4 + j] & 15) << 4));
    }
  }
};

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

uint16_t f16_clamped(float v) {
  uint16_t h = f32_to_f16(v);
  if ((h & 0x7fff) == 0x7c00) h = uint16_t((h & 0x8000) | kF16MaxFinite);
  return h;
}

// NaN maps to lo, so a broken weight never reaches an undefined float-to-int conversion.
uint8_t clamp_u(float v, float lo, float hi) {
  if (!(v >= lo)) return uint8_t(lo);
  return uint8_t(v > hi ? hi : v);
}

}  // namespace

bool check_ggml_pack(SrcType src, DType expected, DType dst, uint64_t src_len, uint64_t rows, uint64_t cols,
                     uint64_t block_elems, uint64_t block_bytes, uint64_t out_len, std::string& error) {
  if (dst != expected) {
    error = std::string("lossless packing of ") + src_type_name(src) + " writes " + keel::fb::EnumNameDType(expected) +
            ", asked for " + keel::fb::EnumNameDType(dst);
    return false;
  }
  if (rows == 0 || cols == 0 || cols % block_elems != 0) {
    error = "packing " + std::string(src_type_name(src)) + " needs rows > 0 and cols a multiple of " +
            std::to_string(block_elems) + ", found [" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
    return false;
  }
  const uint64_t n_src = cols / block_elems;
  if (rows > UINT64_MAX / n_src / block_bytes || src_len != rows * n_src * block_bytes) {
    error = "source tensor of " + std::string(src_type_name(src)) + " [" + std::to_string(rows) + ", " +
            std::to_string(cols) + "] should be " + std::to_string(rows * n_src * block_bytes) + " bytes, found " +
            std::to_string(src_len);
    return false;
  }
  const uint64_t need = tensor_bytes(dst, rows, cols);
  if (out_len != need) {
    error = "packed " + std::string(keel::fb::EnumNameDType(dst)) + " [" + std::to_string(rows) + ", " +
            std::to_string(cols) + "] is " + std::to_string(need) + " bytes, output buffer is " +
            std::to_string(out_len);
    return false;
  }
  return true;
}

bool pack_from_ggml_blocks(SrcType src, const uint8_t* src_bytes, uint64_t src_len, uint64_t rows, uint64_t cols,
                           DType dst, uint8_t* out, uint64_t out_len, std::string& error) {
  uint64_t block_bytes = 0;
  DType expected = DType::Q8;
  switch (src) {
    case SrcType::Q8_0:
      block_bytes = 34;
      expected = DType::Q8;
      break;
    case SrcType::Q4_0:
      block_bytes = 18;
      expected = DType::Q4;
      break;
    case SrcType::Q4_1:
      block_bytes = 20;
      expected = DType::Q4M;
      break;
    default: return pack_wide_from_ggml_blocks(src, src_bytes, src_len, rows, cols, dst, out, out_len, error);
  }
  if (!check_ggml_pack(src, expected, dst, src_len, rows, cols, kQuantBlock, block_bytes, out_len, error)) return false;
  const uint64_t nb = cols / kQuantBlock;

  const PanelWriter pw{dst, cols, out};
  pw.init(rows);
  uint8_t u[kQuantBlock];
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = src_bytes + (r * nb + b) * block_bytes;
      const uint16_t d_bits = load_u16(blk);
      uint16_t m_bits = 0;
      if (src == SrcType::Q8_0) {
        // int8 q -> q + 128 (the same as flipping the sign bit)
        for (uint32_t i = 0; i < kQuantBlock; ++i) u[i] = uint8_t(blk[2 + i] ^ 0x80);
      } else {
        const uint8_t* qs = blk + (src == SrcType::Q4_1 ? 4 : 2);
        if (src == SrcType::Q4_1) m_bits = load_u16(blk + 2);
        // GGUF: element i < 16 in the low nibble of qs[i], element i + 16 in its high nibble.
        for (uint32_t i = 0; i < 16; ++i) {
          u[i] = qs[i] & 15;
          u[i + 16] = qs[i] >> 4;
        }
      }
      pw.put(r, b, d_bits, m_bits, u);
    }
  }
  return true;
}

void quantize_pack(const float* src, uint64_t rows, uint64_t cols, DType dst, uint8_t* out) {
  const PanelWriter pw{dst, cols, out};
  pw.init(rows);
  const uint64_t nb = ceil_div(cols, kQuantBlock);
  const uint8_t z = zero_point(dst);
  uint8_t u[kQuantBlock];
  for (uint64_t r = 0; r < rows; ++r) {
    const float* row = src + r * cols;
    for (uint64_t b = 0; b < nb; ++b) {
      const float* x = row + b * kQuantBlock;
      const uint32_t n = uint32_t(std::min<uint64_t>(kQuantBlock, cols - b * kQuantBlock));
      std::fill(u, u + kQuantBlock, z);
      uint16_t d_bits = 0, m_bits = 0;
      if (dst == DType::Q8) {
        float amax = 0.0f;
        for (uint32_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
        d_bits = f16_clamped(amax / 127.0f);
        const float d = f16_to_f32(d_bits);
        if (d != 0.0f)
          for (uint32_t i = 0; i < n; ++i) u[i] = clamp_u(std::round(x[i] / d) + 128.0f, 1.0f, 255.0f);
      } else if (dst == DType::Q4) {
        float amax = 0.0f, mx = 0.0f;
        for (uint32_t i = 0; i < n; ++i)
          if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            mx = x[i];
          }
        d_bits = f16_clamped(mx / -8.0f);
        const float d = f16_to_f32(d_bits);
        if (d != 0.0f)
          for (uint32_t i = 0; i < n; ++i) u[i] = clamp_u(std::floor(x[i] / d + 8.5f), 0.0f, 15.0f);
      } else {
        float mn = x[0], mx = x[0];
        for (uint32_t i = 1; i < n; ++i) {
          mn = std::min(mn, x[i]);
          mx = std::max(mx, x[i]);
        }
        d_bits = f16_clamped((mx - mn) / 15.0f);
        m_bits = f16_clamped(mn);
        const float d = f16_to_f32(d_bits);
        const float m = f16_to_f32(m_bits);
        if (d != 0.0f)
          for (uint32_t i = 0; i < n; ++i) u[i] = clamp_u(std::round((x[i] - m) / d), 0.0f, 15.0f);
      }
      pw.put(r, b, d_bits, m_bits, u);
    }
  }
}

void convert_float(const float* src, uint64_t n, DType dst, uint8_t* out) {
  switch (dst) {
    case DType::F32: memcpy(out, src, n * sizeof(float)); return;
    case DType::F16:
      for (uint64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        memcpy(out + 2 * i, &h, 2);
      }
      return;
    case DType::BF16:
      for (uint64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        memcpy(out + 2 * i, &h, 2);
      }
      return;
    default: return;
  }
}

}  // namespace keel::convert
