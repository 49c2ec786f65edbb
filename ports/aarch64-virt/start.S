/* Entry of the bare-metal image and its exception vectors. QEMU's virt machine (no -bios, no
   virtualization=on, no secure=on) enters the ELF's entry point at EL1 with the MMU and caches
   off; with virtualization=on it enters at EL2, and a boot loader on a board may do either, so
   the entry level is read and EL2 drops to EL1. Nothing compiled runs before FP/SIMD is
   enabled: with -mcpu=cortex-a76 the compiler uses SIMD registers anywhere (copies, zeroing),
   and a SIMD instruction with CPACR_EL1.FPEN clear traps. */

  .section .text.boot, "ax"
  .global _start
  .type _start, %function
_start:
  mrs x19, CurrentEL
  ubfx x19, x19, #2, #2          /* x19 = entry exception level, kept for the banner */
  cmp x19, #1
  b.eq el1_entry
  cmp x19, #2
  b.eq el2_entry

  /* EL3 (or anything else): not handled. Say so with FP/SIMD off, from the entry stack. */
  ldr x0, =__stack_top
  mov sp, x0
  mov x0, x19
  bl keel_unsupported_el
1:
  wfe
  b 1b

el2_entry:
  mov x0, #(1 << 31)             /* HCR_EL2.RW: EL1 is AArch64; no other EL2 traps */
  msr hcr_el2, x0
  mov x0, #0x33ff                /* CPTR_EL2: RES1 bits only, TFP clear: FP/SIMD not trapped */
  msr cptr_el2, x0
  mov x0, #3                     /* CNTHCTL_EL2: EL1 reads the physical counter and timer */
  msr cnthctl_el2, x0
  msr cntvoff_el2, xzr           /* the virtual counter equals the physical one */
  ldr x0, =0x30d00800            /* SCTLR_EL1: its RES1 bits; MMU, caches and checks off */
  msr sctlr_el1, x0
  mov x0, #0x3c5                 /* SPSR_EL2: return to EL1h (SP_EL1), D, A, I, F masked */
  msr spsr_el2, x0
  adr x0, el1_entry
  msr elr_el2, x0
  eret

el1_entry:
  ldr x0, =__stack_top
  mov sp, x0
  mov x0, #(3 << 20)             /* CPACR_EL1.FPEN = 0b11: FP/SIMD at EL1 and EL0 untrapped */
  msr cpacr_el1, x0
  ldr x0, =keel_vectors
  msr vbar_el1, x0
  isb

  /* .bss, 16-byte aligned at both ends (virt.ld). The MMU is still off, so data accesses are
     Device-nGnRnE here: only aligned stores (an unaligned one would fault). */
  ldr x0, =__bss_start
  ldr x1, =__bss_end
2:
  cmp x0, x1
  b.hs 3f
  stp xzr, xzr, [x0], #16
  b 2b
3:
  mov x0, x19
  bl keel_boot                   /* MMU on, constructors, main; never returns */
4:
  wfe
  b 4b
  .size _start, . - _start
  .ltorg

/* VBAR_EL1: 16 entries of 128 bytes (current EL with SP_EL0, current EL with SP_ELx, lower EL
   AArch64, lower EL AArch32; each synchronous, IRQ, FIQ, SError). Every exception is fatal here
   (no interrupt is ever enabled): the entry switches to the exception stack, since the fault
   may be a stack overflow into the unmapped guard, and reports. keel_exception never returns. */
  .section .text.vectors, "ax"
  .balign 2048
  .global keel_vectors
keel_vectors:
  .irp kind, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
  .balign 128
  adrp x1, __exception_stack_top
  add x1, x1, :lo12:__exception_stack_top
  mov sp, x1
  mov x0, #\kind
  b keel_exception
  .endr
