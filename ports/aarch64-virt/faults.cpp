// A second image without the engine that faults on purpose, so that the script can check that
// each kind of fault is reported (syndrome on the UART, exit status 3) rather than hanging. The
// first word at keel_model_base picks the fault (QEMU's loader writes it there:
// -device loader,addr=0x50000000,data=N,data-len=4):
//   1  stack overflow into the unmapped guard below the stack (translation fault)
//   2  a write to the model's read-only blocks (permission fault)
//   3  an undefined instruction
#include <cstdint>

#include "board.h"

extern "C" char keel_model_base[];  // virt.ld

namespace {

// Each level keeps 1 KiB live on the stack, so 1,000 levels overrun the 256 KiB stack.
__attribute__((noinline)) uint64_t recurse(uint64_t n) {
  volatile char frame[1024];
  frame[0] = char(n);
  return n == 0 ? uint64_t(frame[0]) : recurse(n - 1) + uint64_t(frame[0]);
}

}  // namespace

int main() {
  const uint32_t which = *reinterpret_cast<volatile uint32_t*>(keel_model_base);
  board::put_text("faults: case ");
  board::put_dec(which);
  board::put_text("\n");
  switch (which) {
    case 1: return int(recurse(1000));
    case 2: *reinterpret_cast<volatile uint32_t*>(keel_model_base) = 0; break;
    case 3: __asm__ volatile("udf #0"); break;
    default: board::put_text("faults: expected case 1, 2 or 3 at keel_model_base\n"); return 2;
  }
  board::put_text("faults: the fault did not happen\n");
  return 1;
}
