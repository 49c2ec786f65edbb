#include "board.h"

namespace board {
namespace {

// PL011 registers (Arm PrimeCell UART, DDI 0183), at 0x09000000 on virt (its device tree).
struct Pl011 {
  volatile uint32_t dr;  // 0x00 data
  uint32_t reserved0[5];
  volatile uint32_t fr;  // 0x18 flags: bit 5 TXFF, transmit FIFO full
  uint32_t reserved1[2];
  volatile uint32_t ibrd;   // 0x24 integer baud divisor
  volatile uint32_t fbrd;   // 0x28 fractional baud divisor
  volatile uint32_t lcr_h;  // 0x2c line control
  volatile uint32_t cr;     // 0x30 control
};
static_assert(sizeof(Pl011) == 0x34, "PL011 register layout");

extern "C" char keel_uart_base[];  // virt.ld
Pl011* uart() { return reinterpret_cast<Pl011*>(keel_uart_base); }

constexpr uint32_t kFrTxff = 1u << 5;

}  // namespace

void uart_init() {
  Pl011* u = uart();
  u->cr = 0;  // disabled while it is programmed
  // 115200 baud from the 24 MHz UARTCLK of virt's device tree: 24e6 / (16 * 115200) = 13.02,
  // the fraction in 64ths is 1. QEMU ignores the rate; a board needs it.
  u->ibrd = 13;
  u->fbrd = 1;
  u->lcr_h = (3u << 5) | (1u << 4);  // 8 data bits, no parity, one stop bit, FIFOs on
  u->cr = (1u << 0) | (1u << 8);     // UARTEN, TXE
}

void put_char(char c) {
  Pl011* u = uart();
  while (u->fr & kFrTxff) {
  }
  u->dr = uint8_t(c);
}

void put_text(const char* s) {
  for (; *s; ++s) put_char(*s);
}

void put_hex(uint64_t v) {
  put_text("0x");
  for (int shift = 60; shift >= 0; shift -= 4) put_char("0123456789abcdef"[(v >> shift) & 0xf]);
}

void put_dec(uint64_t v) {
  char digits[20];
  int n = 0;
  do {
    digits[n++] = char('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0) put_char(digits[--n]);
}

void exit(uint32_t status) {
  // AArch64 SYS_EXIT takes a parameter block: the reason and, for an application exit, the
  // status QEMU exits with.
  constexpr uint64_t kSysExit = 0x18;
  constexpr uint64_t kAdpStoppedApplicationExit = 0x20026;
  const uint64_t block[2] = {kAdpStoppedApplicationExit, status};
  register uint64_t op __asm__("x0") = kSysExit;
  register const uint64_t* arg __asm__("x1") = block;
  __asm__ volatile("hlt #0xf000" : "+r"(op) : "r"(arg) : "memory");
  for (;;) {
    __asm__ volatile("wfe");
  }
}

uint64_t counter() {
  uint64_t v;
  __asm__ volatile("isb\n\tmrs %0, cntvct_el0" : "=r"(v));
  return v;
}

uint64_t counter_hz() {
  uint64_t v;
  __asm__ volatile("mrs %0, cntfrq_el0" : "=r"(v));
  return v;
}

}  // namespace board
