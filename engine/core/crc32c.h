// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum every tensor of a .keel
// file carries (docs/format.md "Checksums"). Table-driven, eight bytes a step; no allocation,
// no CPU dispatch, so firmware and host compute the same value with the same code.
#pragma once

#include <cstddef>
#include <cstdint>

namespace keel {

// Continues a CRC over p[0..n): crc32c(b, crc32c(a)) == crc32c(a ++ b). Start from 0.
uint32_t crc32c(const void* p, size_t n, uint32_t crc = 0);

}  // namespace keel
