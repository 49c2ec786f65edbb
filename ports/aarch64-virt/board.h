// What the program needs of QEMU's virt board: the PL011 UART, semihosting's exit, and the
// generic timer's counter for timings. All of it works with the MMU off as well as on, and
// nothing here touches FP/SIMD registers, so the fault handler may use it in any state.
#pragma once

#include <cstdint>

namespace board {

#define KEEL_GENERAL_REGS __attribute__((target("general-regs-only")))

KEEL_GENERAL_REGS void uart_init();
KEEL_GENERAL_REGS void put_char(char c);
KEEL_GENERAL_REGS void put_text(const char* s);
KEEL_GENERAL_REGS void put_hex(uint64_t v);  // 0x and 16 digits
KEEL_GENERAL_REGS void put_dec(uint64_t v);

// Semihosting SYS_EXIT with ADP_Stopped_ApplicationExit: QEMU
// (-semihosting-config enable=on,target=native) exits with `status`. Without semihosting the
// HLT instruction traps (EC 0x00 or a debug exception), and the fault handler reports that.
[[noreturn]] KEEL_GENERAL_REGS void exit(uint32_t status);

// The generic timer's virtual counter (CNTVCT_EL0) and its frequency (CNTFRQ_EL0, set by
// QEMU to 62.5 MHz): guest time, which under TCG follows the host's clock.
KEEL_GENERAL_REGS uint64_t counter();
KEEL_GENERAL_REGS uint64_t counter_hz();

}  // namespace board
