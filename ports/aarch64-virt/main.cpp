// SmolLM2-135M on bare-metal aarch64 (QEMU virt, Cortex-A76): the model in RAM where QEMU's
// loader device put it (a board's flash or DRAM), every byte of RAM the engine uses in one
// static object, a chat prompt prefilled and N tokens generated greedily by keel::generate on
// the native backend (the arm64 kernels, dotprod tier, chosen at compile time) or, built with
// KEEL_VIRT_BACKEND=ref, the reference kernels. The text goes
// to the PL011 UART; the run ends through semihosting with status 0 on success, 1 when the
// engine reports an error (its message on the UART), 3 on a CPU exception (startup.cpp).
#include <cstddef>
#include <cstdint>

#include "board.h"
#include "keel.hpp"
#include "llm/generate.h"
#include "model_size.h"     // generated at build time: the size of the converted file
#include "smollm2_shape.h"  // generated at build time by `keel convert --header`

extern "C" char keel_model_base[];  // virt.ld; the script loads the .keel file there
extern "C" uint64_t keel_entry_el;  // startup.cpp
extern "C" uint64_t keel_stack_used();

namespace {

constexpr uint32_t kKvBudget = 256;
constexpr uint32_t kChunk = 16;
// scripts/aarch64_virt.sh gives the host tool the same prompt and token count.
constexpr uint32_t kDecodeSteps = KEEL_VIRT_TOKENS;
constexpr keel::BackendKind kBackend = KEEL_VIRT_BACKEND_REF ? keel::BackendKind::Ref : keel::BackendKind::Native;
constexpr char kPrompt[] = "<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n<|im_start|>assistant\n";

// All of the engine's RAM, in .bss: KV cache, logits, tokenizer tables, activations.
keel::Engine<smollm2::Shape, kKvBudget, 1, kChunk> engine;
using SmolEngine = decltype(engine);

// The converter computed the same plan for the same budget and chunk; a difference means tool
// and engine disagree on the plan.
static_assert(smollm2::kKvBudgetTokens == kKvBudget && smollm2::kChunkTokens == kChunk,
              "convert the model with --kv-budget 256 --chunk 16 (this Engine's budget and chunk)");
static_assert(SmolEngine::kPersistentBytes == smollm2::kPersistentBytes,
              "persistent arena: the engine's plan differs from the one keel convert wrote");
static_assert(SmolEngine::kScratchBytes == smollm2::kScratchBytes,
              "scratch arena: the engine's plan differs from the one keel convert wrote");

uint64_t ms_since(uint64_t start) { return (board::counter() - start) * 1000 / board::counter_hz(); }

double now_seconds() { return double(board::counter()) / double(board::counter_hz()); }

bool fail(const char* what, const keel::Error& e) {
  board::put_text("keel: ");
  board::put_text(what);
  board::put_text(": ");
  board::put_text(keel::to_string(e.status()));
  board::put_text(": ");
  board::put_text(e.message());
  board::put_text("\n");
  return false;
}

// The prompt on one line, its newlines escaped, so that the UART's text lines are the output.
void put_escaped(const char* s) {
  for (; *s; ++s) {
    if (*s == '\n') {
      board::put_text("\\n");
    } else {
      board::put_char(*s);
    }
  }
}

// keel::generate's callback: the text of one token, UTF-8 complete.
bool on_token(void*, int32_t, const char* text, size_t len) {
  for (size_t i = 0; i < len; ++i) board::put_char(text[i]);
  return true;
}

bool run() {
  const uint8_t* model = reinterpret_cast<const uint8_t*>(keel_model_base);
  board::put_text("keel: aarch64 virt, entered at EL");
  board::put_dec(keel_entry_el);
  board::put_text(", running at EL1 with the MMU on; model at ");
  board::put_hex(uint64_t(model));
  board::put_text(", ");
  board::put_dec(kModelBytes);
  board::put_text(" bytes; engine ");
  board::put_dec(sizeof engine);
  board::put_text(" bytes; backend ");
  board::put_text(keel::backend_name(kBackend));
  board::put_text("\n");

  // Every checksum of the file is checked: what the loader (or a board's flashing) put there
  // is the converter's file, byte for byte.
  uint64_t t0 = board::counter();
  keel::Error e = engine.init(model, kModelBytes, kBackend, true);
  if (!e.ok()) return fail("init", e);
  board::put_text("keel: model verified and loaded in ");
  board::put_dec(ms_since(t0));
  board::put_text(" ms\n");

  keel::Runtime& rt = engine.runtime();
  int32_t prompt[64];
  size_t n_prompt = 0;
  keel::text::EncodeOptions eo;
  eo.parse_special = true;  // as `keel run -p` reads <|im_start|>
  e = rt.tokenize(kPrompt, sizeof kPrompt - 1, eo, keel::Span<int32_t>(prompt, sizeof prompt / sizeof prompt[0]),
                  &n_prompt);
  if (!e.ok()) return fail("tokenize", e);
  board::put_text("keel: prompt \"");
  put_escaped(kPrompt);
  board::put_text("\", ");
  board::put_dec(n_prompt);
  board::put_text(" tokens\n");

  // Greedy: the sampler is greedy until set_sampler() says otherwise. Stops early at the end
  // of the answer (<|im_end|>), as the host tool does.
  keel::GenerateOptions options;
  options.max_tokens = kDecodeSteps;
  options.now = &now_seconds;
  keel::GenerateResult result;
  e = keel::generate(rt, 0, keel::Span<const int32_t>(prompt, n_prompt), options, &on_token, nullptr, &result);
  board::put_text("\n");
  if (!e.ok()) return fail("generate", e);
  board::put_text("keel: done: prompt ");
  board::put_dec(result.prompt_tokens);
  board::put_text(" tokens in ");
  board::put_dec(uint64_t(result.prefill_seconds * 1000));
  board::put_text(" ms, ");
  board::put_dec(result.tokens_generated);
  board::put_text(" tokens generated in ");
  board::put_dec(uint64_t(result.decode_seconds * 1000));
  board::put_text(" ms (guest time under emulation, not a speed); stack used ");
  board::put_dec(keel_stack_used());
  board::put_text(" bytes\n");
  return true;
}

}  // namespace

int main() { return run() ? 0 : 1; }
