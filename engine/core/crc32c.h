// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum every part of a .keel
// file carries (docs/format.md "Checksums"). x86-64 with SSE4.2: its crc32 instruction;
// elsewhere table-driven, eight bytes a step (crc32c_portable, which the tests hold the
// instruction's results to). No allocation.
#pragma once

#include <cstddef>
#include <cstdint>

namespace keel {

// Continues a CRC over p[0..n): crc32c(b, crc32c(a)) == crc32c(a ++ b). Start from 0.
uint32_t crc32c(const void* p, size_t n, uint32_t crc = 0);
uint32_t crc32c_portable(const void* p, size_t n, uint32_t crc = 0);

}  // namespace keel
