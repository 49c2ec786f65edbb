// keel::Engine<Shape, Budget> from an installed Keel: the shape header comes from
// `keel convert --header`, the arenas are a static object, and the prompt and the greedy
// decode run inside a window where the allocation probe (linked by keel_add_memory_check)
// must count no allocator call. Prints what `keel run --temp 0` prints on stdout.
//
//   engine_greedy MODEL.keel PROMPT N      exit 0 on success, 1 on an error or an allocation
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "alloc_probe/alloc_probe.h"
#include "keel.hpp"
#include "stories260k_shape.h"  // keel convert --header (tests/install/install_test.sh)
#include "text/stream_decoder.h"

namespace {

constexpr uint32_t kKvBudget = 256;
static keel::Engine<stories260k::Shape, kKvBudget> engine;  // default chunk: 16
using StoriesEngine = decltype(engine);
static_assert(stories260k::kKvBudgetTokens == kKvBudget && stories260k::kChunkTokens == 16,
              "convert the model with --kv-budget 256 --chunk 16");
static_assert(StoriesEngine::kPersistentBytes == stories260k::kPersistentBytes &&
                  StoriesEngine::kScratchBytes == stories260k::kScratchBytes,
              "the installed engine plans other arenas than the installed keel tool");

constexpr size_t kMaxPrompt = 256;
constexpr size_t kMaxText = 1 << 16;
int32_t prompt_ids[kMaxPrompt];
char text[kMaxText];  // the window writes here; stdout's buffer would be an allocation

int fail(const char* what, const char* detail) {
  fprintf(stderr, "engine_greedy: %s: %s\n", what, detail);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: engine_greedy MODEL.keel PROMPT N\n");
    return 2;
  }
  const char* prompt = argv[2];
  const long n_predict = strtol(argv[3], nullptr, 10);
  std::ifstream f(argv[1], std::ios::binary);
  const std::vector<char> model((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (!f.good() && !f.eof()) return fail("cannot read the model", argv[1]);
  if (model.empty()) return fail("empty or missing model", argv[1]);

  keel::Error e = engine.init(model.data(), model.size(), keel::BackendKind::Native);
  if (!e.ok()) return fail(keel::to_string(e.status()), e.message());
  keel::Runtime& rt = engine.runtime();
  keel::text::StreamDecoder decoder(rt.tokenizer());
  char piece[256];
  if (decoder.max_push_bytes() > sizeof piece) return fail("token text", "longer than the buffer");

  const keel::probe::Counts before = keel::probe::counts();
  keel::text::EncodeOptions options;
  options.add_bos = true;
  options.parse_special = true;
  size_t n_prompt = 0;
  e = rt.tokenize(prompt, strlen(prompt), options, keel::Span<int32_t>(prompt_ids, kMaxPrompt), &n_prompt);
  if (!e.ok()) return fail("tokenize", e.message());
  e = rt.prefill(0, keel::Span<const int32_t>(prompt_ids, n_prompt));
  if (!e.ok()) return fail("prefill", e.message());
  // The sampler is greedy until set_sampler() says otherwise.
  size_t n_text = 0;
  for (long i = 0; i < n_predict; ++i) {
    const keel::Result<int32_t> t = rt.sample(0);
    if (!t.ok()) return fail("sample", t.error().message());
    if (t.value() == rt.tokenizer().eos_id()) break;
    size_t n = 0;
    e = decoder.push(t.value(), keel::Span<char>(piece, sizeof piece), &n);
    if (!e.ok()) return fail("decode text", e.message());
    if (n_text + n > kMaxText) return fail("output", "more text than the buffer holds");
    memcpy(text + n_text, piece, n);
    n_text += n;
    if (i + 1 == n_predict) break;
    e = rt.decode(0, t.value());
    if (!e.ok()) return fail("decode", e.message());
  }
  n_text += decoder.flush(keel::Span<char>(text + n_text, kMaxText - n_text));
  const keel::probe::Counts window = keel::probe::since(before);

  fwrite(text, 1, n_text, stdout);
  fputc('\n', stdout);
  if (window.calls() != 0) {
    fprintf(stderr,
            "engine_greedy: %llu allocations and %llu frees between tokenize and the last token; "
            "expected none\n",
            (unsigned long long)window.allocations, (unsigned long long)window.frees);
    return 1;
  }
  return 0;
}
