// libFuzzer target: any byte string given to the loader is either rejected with a status or
// yields tensor views that lie inside the image.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "model/model.h"
#include "model/weight_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The loader requires an 8-byte aligned image (mmap and flash placement give that).
  uint8_t* img = static_cast<uint8_t*>(aligned_alloc(64, (size + 64) / 64 * 64 + 64));
  if (!img) return 0;
  if (size) memcpy(img, data, size);
  keel::Model m;
  const keel::Error e = m.load(keel::Span<const uint8_t>(img, size));
  if (e.ok()) {
    volatile uint8_t sink = 0;
    for (int layer = -1; layer < int(m.shape().n_layers); ++layer) {
      for (unsigned r = 0; r < keel::kRoleCount; ++r) {
        const keel::TensorView v = m.tensor(static_cast<keel::fb::TensorRole>(r), layer);
        if (!v.present() || v.bytes == 0) continue;
        if (v.data < img || v.data + v.bytes > img + size) __builtin_trap();
        sink = sink ^ v.data[0] ^ v.data[v.bytes - 1];
      }
    }
    (void)sink;
  } else if (e.message()[0] == '\0') {
    __builtin_trap();  // every rejection explains itself
  }
  free(img);
  return 0;
}
