#include "core/crc32c.h"

#include <cstring>

namespace keel {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;

// Slicing-by-8: table[k][b] is the CRC of byte b followed by k zero bytes.
struct Tables {
  uint32_t t[8][256];
  constexpr Tables() : t{} {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c >> 1) ^ (kPoly & (0u - (c & 1u)));
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b) {
      for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xffu];
    }
  }
};

constexpr Tables kTables;

#if defined(__x86_64__) && defined(__GNUC__)
// SSE4.2's crc32 instruction computes this very polynomial, eight bytes in three cycles: about
// 8 GB/s at 3 GHz in one stream, as fast as one core reads DRAM, so streams interleaved to hide
// its latency would buy nothing for a model file.
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42_stream(const uint8_t* p, size_t n, uint32_t c) {
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c = uint32_t(__builtin_ia32_crc32di(c, v));
    p += 8;
    n -= 8;
  }
  while (n--) c = __builtin_ia32_crc32qi(c, *p++);
  return c;
}

bool cpu_has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  const auto& t = kTables.t;
  uint32_t c = ~crc;
  while (n >= 8) {
    uint32_t lo, hi;
    memcpy(&lo, p, 4);
    memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][hi & 0xff] ^
        t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xffu];
  return ~c;
}

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpu_has_sse42()) return ~crc32c_sse42_stream(static_cast<const uint8_t*>(data), n, ~crc);
#endif
  return crc32c_portable(data, n, crc);
}

}  // namespace keel
