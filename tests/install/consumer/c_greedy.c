/* The C API from an installed Keel: reads a model into memory, plans, initializes the engine in
 * one malloc'd block and decodes greedily, printing what `keel run --temp 0` prints on stdout
 * (the generated text, without the prompt, and a newline).
 *
 *   c_greedy MODEL.keel PROMPT N      exit 0 on success, 1 on an error (message on stderr)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel.h"

enum { kBudgetTokens = 256, kChunkTokens = 16, kMaxPrompt = 256 };

static int fail(const char* what, const char* detail) {
  fprintf(stderr, "c_greedy: %s: %s\n", what, detail);
  return 1;
}

static void* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  void* data = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    const long n = ftell(f);
    if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)n)) != NULL) {
      if (fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
      } else {
        *size = (size_t)n;
      }
    }
  }
  fclose(f);
  return data;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: c_greedy MODEL.keel PROMPT N\n");
    return 2;
  }
  const char* prompt = argv[2];
  const long n_predict = strtol(argv[3], NULL, 10);
  size_t model_bytes = 0;
  void* model = read_file(argv[1], &model_bytes);
  if (!model) return fail("cannot read the model", argv[1]);

  keel_config config;
  memset(&config, 0, sizeof config);
  config.kv_budget_tokens = kBudgetTokens;
  config.chunk_tokens = kChunkTokens;
  config.threads = 1;
  config.backend = KEEL_BACKEND_NATIVE;

  keel_plan_info plan;
  keel_status s = keel_plan(model, model_bytes, &config, &plan);
  if (s != KEEL_OK) return fail("keel_plan", keel_status_string(s));
  void* block = malloc((size_t)plan.total_bytes);
  if (!block) return fail("malloc", "no memory for the engine");
  keel_engine* e = NULL;
  char error[256];
  s = keel_init(block, (size_t)plan.total_bytes, model, model_bytes, &config, &e, error, sizeof error);
  if (s != KEEL_OK) return fail("keel_init", error);

  int32_t ids[kMaxPrompt];
  size_t n_ids = 0;
  s = keel_tokenize(e, prompt, strlen(prompt), 1, 1, ids, kMaxPrompt, &n_ids);
  if (s != KEEL_OK) return fail("keel_tokenize", keel_last_error(e));
  s = keel_prefill(e, 0, ids, n_ids);
  if (s != KEEL_OK) return fail("keel_prefill", keel_last_error(e));

  keel_sampling greedy;
  memset(&greedy, 0, sizeof greedy);
  greedy.temperature = 0.0f;
  greedy.top_p = 1.0f;
  greedy.repetition_penalty = 1.0f;
  s = keel_set_sampling(e, 0, &greedy);
  if (s != KEEL_OK) return fail("keel_set_sampling", keel_last_error(e));

  /* As keel run: stop at end of sequence (not printed) or after N tokens; the last token is
   * not fed back. */
  const int32_t eos = keel_eos_token(e);
  for (long i = 0; i < n_predict; ++i) {
    int32_t token = -1;
    s = keel_sample(e, 0, &token);
    if (s != KEEL_OK) return fail("keel_sample", keel_last_error(e));
    if (token == eos) break;
    char piece[64];
    size_t n = 0;
    s = keel_token_bytes(e, token, piece, sizeof piece, &n);
    if (s != KEEL_OK) return fail("keel_token_bytes", keel_last_error(e));
    fwrite(piece, 1, n, stdout);
    if (i + 1 == n_predict) break;
    s = keel_decode(e, 0, token);
    if (s != KEEL_OK) return fail("keel_decode", keel_last_error(e));
  }
  fputc('\n', stdout);
  free(block);
  free(model);
  return 0;
}
