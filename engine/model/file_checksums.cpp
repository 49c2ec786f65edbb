#include "model/file_checksums.h"

#include <cinttypes>
#include <cstring>

#include "core/check.h"
#include "core/crc32c.h"

namespace keel {
namespace {

uint32_t read_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint64_t read_u64(const uint8_t* p) { return uint64_t(read_u32(p)) | uint64_t(read_u32(p + 4)) << 32; }
void write_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
void write_u64(uint8_t* p, uint64_t v) {
  write_u32(p, uint32_t(v));
  write_u32(p + 4, uint32_t(v >> 32));
}

}  // namespace

const char* file_part_name(uint32_t kind) {
  switch (FilePart(kind)) {
    case FilePart::Header: return "header";
    case FilePart::Metadata: return "metadata";
    case FilePart::Tokenizer: return "tokenizer";
    case FilePart::TensorTable: return "tensor table";
    case FilePart::Padding: return "padding";
  }
  return "unknown part";
}

uint32_t trailer_part_count(Span<const uint8_t> image) {
  return image.size() < kTrailerFixedBytes ? 0 : read_u32(image.data() + image.size() - kTrailerFixedBytes);
}

size_t trailer_bytes(Span<const uint8_t> image) {
  const size_t n = image.size();
  if (n < kTrailerFixedBytes || memcmp(image.data() + n - 8, kTrailerMagic, 8) != 0) return 0;
  const uint32_t count = trailer_part_count(image);
  if (count == 0 || count > kMaxTrailerParts) return 0;
  const size_t bytes = kTrailerFixedBytes + count * kTrailerPartBytes;
  return bytes <= n ? bytes : 0;
}

size_t trailer_bytes_at(Span<const uint8_t> image, size_t start) {
  const size_t n = image.size();
  for (uint32_t count = 1; count <= kMaxTrailerParts; ++count) {
    const size_t at = start + count * kTrailerPartBytes;  // the count field
    if (start > n || n - start < count * kTrailerPartBytes + kTrailerFixedBytes) break;
    if (read_u32(image.data() + at) == count && memcmp(image.data() + at + 8, kTrailerMagic, 8) == 0) {
      return count * kTrailerPartBytes + kTrailerFixedBytes;
    }
  }
  return 0;
}

TrailerPart trailer_part(Span<const uint8_t> image, uint32_t i) {
  const uint8_t* p = image.data() + image.size() - trailer_bytes(image) + size_t(i) * kTrailerPartBytes;
  return TrailerPart{read_u64(p), read_u64(p + 8), read_u32(p + 16), read_u32(p + 20)};
}

Error verify_trailer(Span<const uint8_t> image) {
  const size_t tb = trailer_bytes(image), n = image.size();
  KEEL_ENSURE(tb > 0, Status::ModelNoChecksums, "file ends without a checksum trailer ('KEELSUMS')");
  const uint8_t* trailer = image.data() + n - tb;
  const uint32_t stored = read_u32(image.data() + n - 12);
  const uint32_t actual = crc32c(trailer, tb - 12);
  KEEL_ENSURE(actual == stored, Status::ModelChecksumMismatch,
              "checksum trailer (bytes %zu..%zu): CRC-32C is %08" PRIx32 "; the trailer says %08" PRIx32, n - tb, n - 1,
              actual, stored);
  const uint32_t count = trailer_part_count(image);
  for (uint32_t i = 0; i < count; ++i) {
    const TrailerPart part = trailer_part(image, i);
    const char* name = file_part_name(part.kind);
    KEEL_ENSURE(part.offset <= n - tb && part.size <= n - tb - part.offset, Status::ModelBadOffset,
                "%s: bytes [%llu, +%llu) lie outside the %zu bytes before the checksum trailer", name,
                (unsigned long long)part.offset, (unsigned long long)part.size, n - tb);
    const uint32_t sum = crc32c(image.data() + part.offset, size_t(part.size));
    KEEL_ENSURE(sum == part.crc32c, Status::ModelChecksumMismatch,
                "%s (bytes %llu..%llu): CRC-32C is %08" PRIx32 "; the trailer says %08" PRIx32, name,
                (unsigned long long)part.offset, (unsigned long long)(part.offset + part.size - 1), sum, part.crc32c);
  }
  return Error();
}

size_t write_trailer(const TrailerPart* parts, uint32_t count, uint8_t* out) {
  uint8_t* p = out;
  for (uint32_t i = 0; i < count; ++i, p += kTrailerPartBytes) {
    write_u64(p, parts[i].offset);
    write_u64(p + 8, parts[i].size);
    write_u32(p + 16, parts[i].crc32c);
    write_u32(p + 20, parts[i].kind);
  }
  write_u32(p, count);
  write_u32(p + 4, crc32c(out, size_t(p + 4 - out)));
  memcpy(p + 8, kTrailerMagic, 8);
  return size_t(p + 16 - out);
}

}  // namespace keel
