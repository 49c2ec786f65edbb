// Firmware-shaped use of the engine on a Cortex-M33: the model is linked into flash, every
// byte of RAM the engine uses is one static object whose size the linker map shows, and the
// program runs a prompt and a few greedy decode steps on the ref backend. Output goes to the
// board's UART; the results also stay in globals for a debugger. Generation is the engine's
// (keel::generate): the text reaches the UART in UTF-8-complete pieces, as `keel run` prints it.
#include <cstddef>
#include <cstdint>

#include "keel.hpp"
#include "llm/generate.h"
#include "stories260k_shape.h"  // generated at build time by `keel convert --header`

// Placed in flash by the linker script around the .keel image (model.S).
extern "C" const uint8_t keel_model_start[];
extern "C" const uint8_t keel_model_end[];

namespace {

constexpr uint32_t kKvBudget = 256;
constexpr uint32_t kDecodeSteps = 24;

// All of the engine's RAM, in .bss: KV cache, logits, tokenizer tables, activations.
static keel::Engine<stories260k::Shape, kKvBudget> engine;
using StoriesEngine = decltype(engine);

// The converter computed the same plan for the same budget and chunk (`keel convert
// --kv-budget 256 --chunk 16`); a difference means tool and engine disagree on the plan.
static_assert(stories260k::kKvBudgetTokens == kKvBudget && stories260k::kChunkTokens == 16,
              "convert the model with --kv-budget 256 --chunk 16 (this Engine's budget and chunk)");
static_assert(StoriesEngine::kPersistentBytes == stories260k::kPersistentBytes,
              "persistent arena: the engine's plan differs from the one keel convert wrote");
static_assert(StoriesEngine::kScratchBytes == stories260k::kScratchBytes,
              "scratch arena: the engine's plan differs from the one keel convert wrote");

// CMSDK APB UART0 of the Arm MPS2+ AN505 image (also what QEMU's mps2-an505 emulates).
struct CmsdkUart {
  volatile uint32_t data;
  volatile uint32_t state;  // bit 0: transmit buffer full
  volatile uint32_t ctrl;   // bit 0: transmit enable
  volatile uint32_t intstatus;
  volatile uint32_t bauddiv;
};
CmsdkUart* const uart0 = reinterpret_cast<CmsdkUart*>(0x40200000u);

void uart_init() {
  uart0->bauddiv = 16;  // the smallest divider the UART accepts; the FPGA's clock sets the rate
  uart0->ctrl = 1;
}
void put_char(char c) {
  while (uart0->state & 1u) {
  }
  uart0->data = uint8_t(c);
}
void put_text(const char* s) {
  for (; *s; ++s) put_char(*s);
}

}  // namespace

// What a debugger reads after the run: 0 while running, 1 done, 2 failed (see keel_error).
extern "C" {
volatile uint32_t keel_run_state = 0;
int32_t keel_tokens[kDecodeSteps];
char keel_error[keel::Error::kMessageCapacity];
}

namespace {

void fail(const keel::Error& e) {
  const char* m = e.message();
  size_t i = 0;
  for (; m[i] && i + 1 < sizeof keel_error; ++i) keel_error[i] = m[i];
  keel_error[i] = '\0';
  put_text("keel: ");
  put_text(keel::to_string(e.status()));
  put_text(": ");
  put_text(keel_error);
  put_text("\n");
  keel_run_state = 2;
}

uint32_t n_tokens = 0;

// keel::generate's callback: one token and the text it completes.
bool on_token(void*, int32_t id, const char* text, size_t len) {
  if (id >= 0 && n_tokens < kDecodeSteps) keel_tokens[n_tokens++] = id;
  for (size_t i = 0; i < len; ++i) put_char(text[i]);
  return true;
}

bool run() {
  const size_t model_bytes = size_t(keel_model_end - keel_model_start);
  keel::Error e = engine.init(keel_model_start, model_bytes, keel::BackendKind::Ref);
  if (!e.ok()) {
    fail(e);
    return false;
  }
  keel::Runtime& rt = engine.runtime();

  static const char kPrompt[] = "Once upon a time";
  int32_t prompt[32];
  size_t n_prompt = 0;
  e = rt.tokenize(kPrompt, sizeof kPrompt - 1, keel::text::EncodeOptions{},
                  keel::Span<int32_t>(prompt, sizeof prompt / sizeof prompt[0]), &n_prompt);
  if (!e.ok()) {
    fail(e);
    return false;
  }
  put_text(kPrompt);

  // Greedy: the sampler is greedy until set_sampler() says otherwise. Stops early at EOS.
  keel::GenerateOptions options;
  options.max_tokens = kDecodeSteps;
  e = keel::generate(rt, 0, keel::Span<const int32_t>(prompt, n_prompt), options, &on_token, nullptr, nullptr);
  if (!e.ok()) {
    fail(e);
    return false;
  }
  put_text("\n");
  return true;
}

}  // namespace

int main() {
  uart_init();
  if (run()) {
    put_text("keel: done\n");
    keel_run_state = 1;
  }
  for (;;) {
    __asm volatile("wfi");
  }
}
