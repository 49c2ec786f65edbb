// The checksum trailer of a version 3 .keel file (docs/format.md "Checksums"): the CRC-32C of
// each part of the metadata, so that every byte before the data section is covered as the
// tensors are by their own sums. It sits after the data section, outside the FlatBuffer, so that
// the sums can be checked before a byte of the metadata is trusted and so that no sum covers
// itself:
//
//   parts[count]   24 bytes each: u64 offset, u64 size, u32 crc32c, u32 kind (FilePart)
//   u32 count      1..kMaxTrailerParts
//   u32 crc32c     of parts[] and count
//   8 bytes        "KEELSUMS"
//
// All little-endian. The parts tile [0, data_offset) in order (Model::load checks that).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/result.h"
#include "core/span.h"

namespace keel {

enum class FilePart : uint32_t {
  Header = 1,       // root offset, file identifier and the Model table
  Metadata = 2,     // architecture, hyper-parameters, run defaults, memory plan, strings
  Tokenizer = 3,    // the tokenizer table with its strings, scores, types and merges
  TensorTable = 4,  // every Tensor entry: name, shape, dtype, offset, size, checksum
  Padding = 5,      // the zero bytes between the FlatBuffer and the data section
};
const char* file_part_name(uint32_t kind);

struct TrailerPart {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t crc32c = 0;
  uint32_t kind = 0;
};

inline constexpr char kTrailerMagic[8] = {'K', 'E', 'E', 'L', 'S', 'U', 'M', 'S'};
inline constexpr size_t kTrailerPartBytes = 24;
inline constexpr size_t kTrailerFixedBytes = 16;  // count, crc32c, magic
inline constexpr uint32_t kMaxTrailerParts = 16;

// Bytes of the trailer that ends `image`, or 0 when it ends with none (no magic, or a count of
// parts outside 1..kMaxTrailerParts or longer than the image).
size_t trailer_bytes(Span<const uint8_t> image);
// Bytes of the trailer that starts at image[start] (where the data section ends), or 0 when none
// does: no count of 1..kMaxTrailerParts followed by a sum and the magic where that count puts them.
// The trailer may be followed by other bytes; trailer_bytes() then finds none at the end.
size_t trailer_bytes_at(Span<const uint8_t> image, size_t start);
// Part i of the trailer that ends `image` (i < its count; trailer_bytes(image) > 0).
TrailerPart trailer_part(Span<const uint8_t> image, uint32_t i);
uint32_t trailer_part_count(Span<const uint8_t> image);

// The trailer's own sum, then each part's: ModelChecksumMismatch naming the first part whose bytes
// differ (or "checksum trailer" for the trailer itself), ModelBadOffset for a part outside the
// file. Reads only the metadata, never the tensors. The image must end with a trailer.
Error verify_trailer(Span<const uint8_t> image);

// Writes the trailer of `parts` to out[0, kTrailerFixedBytes + count * kTrailerPartBytes).
size_t write_trailer(const TrailerPart* parts, uint32_t count, uint8_t* out);

}  // namespace keel
