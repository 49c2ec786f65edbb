// Bring-up after start.S: the MMU with an identity map, the C++ constructors, main, and the
// report of any exception. Runs at EL1 with FP/SIMD enabled and .bss zeroed.
#include <cstdint>

#include "board.h"

extern "C" {
// virt.ld
extern char keel_ram_base[];
extern char keel_ram_end[];
extern char keel_model_base[];
extern char keel_uart_base[];
extern char __image_end[];
extern uint64_t __stack_bottom[];
extern uint64_t __stack_top[];
extern void (*__init_array_start[])();
extern void (*__init_array_end[])();
int main();
void keel_boot(uint64_t entry_el);
void keel_exception(uint64_t kind);
void keel_unsupported_el(uint64_t el);
uint64_t keel_stack_used();
// The exception level the image was entered at; main's banner prints it.
uint64_t keel_entry_el = 0;
}

namespace {

// Stage 1 translation, 4 KiB granule, 39-bit virtual addresses (TCR_EL1.T0SZ = 25): the walk
// starts at level 1 (1 GiB per entry); level 2 entries are 2 MiB blocks. Only what the program
// uses is mapped, so a stray pointer faults (and is reported) instead of reading garbage.
constexpr uint64_t kBlock2M = 2ull << 20;
alignas(4096) uint64_t level1[512];
alignas(4096) uint64_t level2_io[512];   // 0x00000000 .. 0x3fffffff: peripherals
alignas(4096) uint64_t level2_ram[512];  // 0x40000000 .. 0x7fffffff: RAM

// MAIR_EL1 attribute indices.
constexpr uint64_t kAttrNormal = 0;  // 0xff: Normal, inner and outer write-back, read/write-allocate
constexpr uint64_t kAttrDevice = 1;  // 0x04: Device-nGnRE
constexpr uint64_t kMair = 0xffull | (0x04ull << 8);

// Descriptor fields (Arm ARM D8.3).
constexpr uint64_t kTable = 3, kBlock = 1;
constexpr uint64_t kAttrIndx(uint64_t i) { return i << 2; }
constexpr uint64_t kApReadOnly = 2ull << 6;  // AP[2:1] = 10: EL1 read-only (00: read/write)
constexpr uint64_t kInnerShareable = 3ull << 8;
constexpr uint64_t kAccessFlag = 1ull << 10;  // set, or the first access faults
constexpr uint64_t kPxn = 1ull << 53, kUxn = 1ull << 54;

constexpr uint64_t kNormal = kBlock | kAttrIndx(kAttrNormal) | kInnerShareable | kAccessFlag | kUxn;
constexpr uint64_t kDevice = kBlock | kAttrIndx(kAttrDevice) | kAccessFlag | kPxn | kUxn;

uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// Runs with the MMU off, where every data access is Device-nGnRnE and must be aligned: the
// tables are 4 KiB aligned and written a whole descriptor at a time.
void mmu_enable() {
  const uint64_t ram = addr(keel_ram_base), ram_end = addr(keel_ram_end), model = addr(keel_model_base);
  const uint64_t uart = addr(keel_uart_base);
  level1[0] = addr(level2_io) | kTable;
  level1[ram >> 30] = addr(level2_ram) | kTable;

  // The UART as Device-nGnRE: no gathering or reordering of its register accesses, and no
  // speculative reads (a read of the data register pops the receive FIFO). Device memory
  // also forbids unaligned accesses: real cores (a Cortex-A76 among them) fault on an
  // unaligned or SIMD load from it even where QEMU lets it pass, which is why RAM must be
  // Normal before the engine runs (its kernels load unaligned rows) and why no build flag
  // such as -mstrict-align is needed once it is.
  level2_io[(uart >> 21) & 511] = (uart & ~(kBlock2M - 1)) | kDevice;

  // RAM as Normal write-back cacheable. The first 2 MiB block stays unmapped: QEMU's device
  // tree is there, and it is the guard below the stack. The model's blocks are read-only and
  // never executable: it stands for flash, and the engine reads it in place.
  for (uint64_t a = ram + kBlock2M; a < ram_end; a += kBlock2M) {
    uint64_t d = a | kNormal;
    if (a >= model) d |= kApReadOnly | kPxn;
    level2_ram[(a >> 21) & 511] = d;
  }

  // TCR_EL1: T0SZ 25 (39-bit VA), TTBR0 walks inner/outer write-back cacheable and inner
  // shareable, 4 KiB granule, TTBR1 walks disabled (EPD1), 36-bit physical addresses.
  constexpr uint64_t kTcr =
      25ull | (1ull << 8) | (1ull << 10) | (3ull << 12) | (0ull << 14) | (1ull << 23) | (1ull << 32);
  __asm__ volatile(
      "msr mair_el1, %0\n\t"
      "msr tcr_el1, %1\n\t"
      "msr ttbr0_el1, %2\n\t"
      "dsb ish\n\t"  // the tables are in memory before the first walk
      "isb\n\t"
      "tlbi vmalle1\n\t"
      "dsb ish\n\t"
      "isb" ::"r"(kMair),
      "r"(kTcr), "r"(addr(level1))
      : "memory");

  // SCTLR_EL1: M (MMU), C (data cache), I (instruction cache) on; A (alignment check) off, so
  // unaligned accesses to Normal memory are allowed. The caches need no invalidation first:
  // the Cortex-A76 invalidates them at reset, and QEMU models none.
  uint64_t sctlr;
  __asm__ volatile("mrs %0, sctlr_el1" : "=r"(sctlr));
  sctlr |= (1ull << 0) | (1ull << 2) | (1ull << 12);
  sctlr &= ~(1ull << 1);
  __asm__ volatile("msr sctlr_el1, %0\n\tisb" ::"r"(sctlr) : "memory");
}

const char* exception_class(uint64_t ec) {
  switch (ec) {
    case 0x00: return "unknown reason (undefined instruction; HLT without semihosting)";
    case 0x07: return "FP/SIMD access trapped";
    case 0x0e: return "illegal execution state";
    case 0x15: return "SVC";
    case 0x18: return "system register access trapped";
    case 0x20: return "instruction abort from a lower level";
    case 0x21: return "instruction abort";
    case 0x22: return "PC alignment fault";
    case 0x24: return "data abort from a lower level";
    case 0x25: return "data abort";
    case 0x26: return "SP alignment fault";
    case 0x2c: return "floating-point exception";
    case 0x2f: return "SError";
    case 0x3c: return "BRK";
  }
  return "see the Arm ARM, ESR_EL1.EC";
}

const char* const kVectorNames[16] = {"synchronous, current EL, SP_EL0",
                                      "IRQ, current EL, SP_EL0",
                                      "FIQ, current EL, SP_EL0",
                                      "SError, current EL, SP_EL0",
                                      "synchronous",
                                      "IRQ",
                                      "FIQ",
                                      "SError",
                                      "synchronous, lower EL (AArch64)",
                                      "IRQ, lower EL (AArch64)",
                                      "FIQ, lower EL (AArch64)",
                                      "SError, lower EL (AArch64)",
                                      "synchronous, lower EL (AArch32)",
                                      "IRQ, lower EL (AArch32)",
                                      "FIQ, lower EL (AArch32)",
                                      "SError, lower EL (AArch32)"};

volatile bool in_exception = false;

// The stack below the running frame is painted at boot; the deepest word overwritten since
// tells how much of it the program has used.
constexpr uint64_t kStackPaint = 0x6b65656c5374616bull;

void paint_stack() {
  uint64_t sp;
  __asm__ volatile("mov %0, sp" : "=r"(sp));
  // stops 256 bytes short of the stack pointer; nothing below it is live (AArch64 has no red
  // zone), the margin is only caution
  for (volatile uint64_t* p = __stack_bottom; uint64_t(p) + 256 < sp; ++p) *p = kStackPaint;
}

}  // namespace

extern "C" void keel_boot(uint64_t entry_el) {
  keel_entry_el = entry_el;
  board::uart_init();  // first, so that a fault from here on is reported
  mmu_enable();
  paint_stack();
  // The static keel::Engine and the program's other statics with constructors.
  for (void (**ctor)() = __init_array_start; ctor < __init_array_end; ++ctor) (*ctor)();
  const int status = main();
  board::exit(uint32_t(status));
}

extern "C" uint64_t keel_stack_used() {
  const uint64_t* p = __stack_bottom;
  while (p < __stack_top && *p == kStackPaint) ++p;
  return uint64_t(reinterpret_cast<const char*>(__stack_top) - reinterpret_cast<const char*>(p));
}

// Every exception is fatal: the syndrome goes to the UART and the run ends with status 3, so
// that a fault is never a silent hang. General registers only, so that a trapped FP/SIMD
// access cannot recur here.
extern "C" KEEL_GENERAL_REGS void keel_exception(uint64_t kind) {
  uint64_t esr, far, elr, spsr;
  __asm__ volatile("mrs %0, esr_el1" : "=r"(esr));
  __asm__ volatile("mrs %0, far_el1" : "=r"(far));
  __asm__ volatile("mrs %0, elr_el1" : "=r"(elr));
  __asm__ volatile("mrs %0, spsr_el1" : "=r"(spsr));
  const bool nested = in_exception;
  in_exception = true;
  board::put_text(nested ? "\nkeel: exception while reporting an exception: " : "\nkeel: exception: ");
  board::put_text(kind < 16 ? kVectorNames[kind] : "?");
  board::put_text(", ");
  board::put_text(exception_class(esr >> 26));
  board::put_text("\nkeel:   ESR_EL1 ");
  board::put_hex(esr);
  board::put_text(" FAR_EL1 ");
  board::put_hex(far);
  board::put_text(" ELR_EL1 ");
  board::put_hex(elr);
  board::put_text(" SPSR_EL1 ");
  board::put_hex(spsr);
  board::put_text("\n");
  if (!nested) board::exit(3);
  for (;;) {
    __asm__ volatile("wfe");
  }
}

extern "C" KEEL_GENERAL_REGS void keel_unsupported_el(uint64_t el) {
  board::uart_init();
  board::put_text("keel: entered at EL");
  board::put_dec(el);
  board::put_text("; this image starts at EL1 or EL2 (QEMU virt without secure=on enters at EL1)\n");
  board::exit(4);
}
