// Minimal Cortex-M33 startup: the vector table, a reset handler that turns the FPU on and sets
// up C++ static storage before main(), and fault handlers that stop where a debugger sees them.
// Symbols come from the linker script (an505.ld).
#include <cstdint>

extern "C" {
// Declared as functions so that the vector table is an array of one type, without casts.
void __stack_top();
extern uint32_t __stack_limit[];
extern uint32_t __data_load[];
extern uint32_t __data_start[];
extern uint32_t __data_end[];
extern uint32_t __bss_start[];
extern uint32_t __bss_end[];
extern void (*__init_array_start[])();
extern void (*__init_array_end[])();
int main();
void Reset_Handler();
void Fault_Handler();
void Default_Handler();
}

namespace {

using Handler = void (*)();

// ARMv8-M system exceptions; the board's interrupts are never enabled, so none follow.
__attribute__((used, section(".isr_vector"))) const Handler kVectors[16] = {
    __stack_top,      // initial main stack pointer
    Reset_Handler,    //
    Fault_Handler,    // NMI
    Fault_Handler,    // HardFault
    Fault_Handler,    // MemManage
    Fault_Handler,    // BusFault
    Fault_Handler,    // UsageFault
    Fault_Handler,    // SecureFault
    nullptr,          //
    nullptr,          //
    nullptr,          //
    Default_Handler,  // SVCall
    Default_Handler,  // DebugMonitor
    nullptr,          //
    Default_Handler,  // PendSV
    Default_Handler,  // SysTick
};

volatile uint32_t* const kCpacr = reinterpret_cast<volatile uint32_t*>(0xE000ED88u);

}  // namespace

extern "C" void Reset_Handler() {
  // The FPU is off at reset and the code is built for the hard-float ABI: enable CP10/CP11
  // before anything touches a float register.
  *kCpacr |= 0xFu << 20;
  __asm volatile("dsb\n\tisb" ::: "memory");
  // A stack overflow faults (UsageFault STKOF) instead of running into the engine's arenas.
  __asm volatile("msr msplim, %0" : : "r"(__stack_limit));
  for (uint32_t *src = __data_load, *dst = __data_start; dst < __data_end;) *dst++ = *src++;
  for (uint32_t* dst = __bss_start; dst < __bss_end;) *dst++ = 0;
  for (void (**ctor)() = __init_array_start; ctor < __init_array_end; ++ctor) (*ctor)();
  main();
  for (;;) {
  }
}

extern "C" void Fault_Handler() {
  for (;;) {
    __asm volatile("bkpt #0");
  }
}

extern "C" void Default_Handler() {
  for (;;) {
  }
}
