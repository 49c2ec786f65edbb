/* Keel public C API.
 *
 * The caller owns every byte: the model image (mapped or in flash), one block for the engine
 * object and its arenas. keel_plan() says how many bytes; keel_init() lays everything out in
 * them and verifies the model; after it returns nothing allocates. Every call returns a
 * keel_status; keel_last_error() holds a one-line message naming what was expected and found.
 */
#ifndef KEEL_H_
#define KEEL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum keel_status {
  KEEL_OK = 0,
  KEEL_ERR_BAD_ARGUMENT = 1,  /* caller's input: ids, slots, sizes, options (a KV budget the policy cannot use) */
  KEEL_ERR_BAD_MODEL = 2,     /* the model image failed verification */
  KEEL_ERR_OUT_OF_MEMORY = 3, /* the memory block is too small, or a sequence outgrew a `full` KV budget */
  KEEL_ERR_UNSUPPORTED = 4,   /* dtype, architecture or backend not available */
  KEEL_ERR_INTERNAL = 5,
  KEEL_ERR_QUEUE_FULL = 6 /* keel_submit: every slot busy and the request queue full; try again after a step */
} keel_status;

typedef enum keel_backend {
  KEEL_BACKEND_AUTO = 0,
  KEEL_BACKEND_REF = 1,
  KEEL_BACKEND_NATIVE = 2,
  KEEL_BACKEND_XNNPACK = 3
} keel_backend;

/* What a slot's KV cache keeps when a sequence outgrows its budget (docs/kv.md). */
typedef enum keel_kv_policy {
  KEEL_KV_MODEL_DEFAULT = 0, /* the policy the model file names (converted models: snapstream) */
  KEEL_KV_FULL = 1,          /* everything; a longer sequence fails with KEEL_ERR_OUT_OF_MEMORY */
  KEEL_KV_WINDOW = 2,        /* the last budget tokens */
  KEEL_KV_STREAMING = 3,     /* attention sinks + the recent tokens */
  KEEL_KV_SNAPKV = 4,        /* tokens chosen by observation-window attention + the window */
  KEEL_KV_SNAPSTREAM = 5,    /* sinks + SnapKV-chosen prompt + a recent ring */
  KEEL_KV_ROCKETKV = 6       /* snapstream's cache (kernel 63), each decode step reading the
                                top-k tokens by a bound of q.k (sparse_budget) */
} keel_kv_policy;

/* How a slot's KV cache stores keys and values (docs/kv.md, "Quantized cache"). */
typedef enum keel_kv_type {
  KEEL_KV_TYPE_F16 = 0, /* IEEE half: 2 bytes a number */
  KEEL_KV_TYPE_Q8 = 1,  /* int8 with a half scale per 32 numbers of a token's head: 1.06 bytes */
  KEEL_KV_TYPE_Q4 = 2   /* 4 bits with a half scale and minimum per 32 numbers: 0.63 bytes */
} keel_kv_type;

/* Where the prefix a policy compresses into keeps its keys for RoPE (docs/kv.md, "Positions"). */
typedef enum keel_kv_positions {
  KEEL_KV_POSITIONS_DEFAULT = 0, /* cache */
  KEEL_KV_POSITIONS_CACHE = 1,   /* at their cache index (StreamingLLM): distances stay within the budget */
  KEEL_KV_POSITIONS_ORIGINAL = 2 /* at their positions in the text, as one-shot SnapKV keeps them */
} keel_kv_positions;

/* How sparse decode attention ranks pages (docs/kv.md, "Sparse decode attention"). */
typedef enum keel_rocket_select {
  KEEL_ROCKET_SELECT_DEFAULT = 0, /* the model architecture's: head for Gemma 3, group otherwise */
  KEEL_ROCKET_SELECT_GROUP = 1,   /* RocketKV's: dimensions by |q|, the group's summed bound */
  KEEL_ROCKET_SELECT_HEAD = 2     /* dimensions weighed by the keys' spread, each head's own estimate */
} keel_rocket_select;

/* A zeroed keel_config means: what the model file asks for (its KV defaults and the chunk of its
 * memory plan; `keel info` prints them under "run defaults"), else the engine's defaults, one
 * slot, the caller's thread. Every zero field below takes that default. */
typedef struct keel_config {
  uint32_t kv_budget_tokens; /* per slot; 0 = the model's (else 1024) */
  uint32_t slots;            /* concurrent sequences; 0 = 1 */
  uint32_t chunk_tokens;     /* prefill chunk; 0 = the model's (else 64) */
  uint32_t threads;          /* workers of `thread_pool`; 0 or 1 = the caller's thread only */
  keel_backend backend;
  const void* thread_pool; /* a keel::ThreadPool (core/threads.h) or NULL */
  uint32_t kv_policy;      /* a keel_kv_policy (a fixed-size field: any value is checked) */
  uint32_t kv_sinks;       /* streaming, snapstream: attention sinks; 0 = the model's (else 4) */
  uint32_t kv_window;      /* snapstream: recent ring; 0 = the model's (else budget / 4) */
  uint32_t obs_window;     /* snapkv, snapstream: observation window; 0 = the model's (else 32) */
  int32_t snap_kernel;     /* max-pool kernel (odd); 0 = the model's for its own policy, else the
                              policy's (7 snapkv, 31 snapstream); -1 = adaptive */
  uint32_t queue_capacity; /* keel_submit: requests that may wait for a slot; 0 = none */
  uint32_t kv_type;        /* a keel_kv_type; 0 = f16 */
  uint32_t verify_weights; /* non-zero: keel_init checks every checksum the file carries first
                              (format 3: each part of the metadata, then every tensor; reads the
                              whole file once; KEEL_ERR_BAD_MODEL naming the part or tensor on a
                              mismatch, also for a format-1 file, which has no checksums) */
  uint32_t sparse_budget;  /* tokens a decode step attends to (docs/kv.md, "Sparse decode
                              attention"); 0 = all (rocketkv: budget / 4) */
  uint32_t kv_positions;   /* a keel_kv_positions; 0 = cache */
  uint32_t rocket_select;  /* a keel_rocket_select; 0 = the model's */
} keel_config;

typedef struct keel_plan_info {
  uint64_t weights_bytes;    /* the model image (read-only, not part of the block) */
  uint64_t persistent_bytes; /* KV caches, tokenizer tables, logits */
  uint64_t scratch_bytes;    /* activations of one chunk */
  uint64_t engine_bytes;     /* the engine object */
  uint64_t total_bytes;      /* what keel_init needs: engine + persistent + scratch + alignment */
} keel_plan_info;

typedef struct keel_sampling {
  float temperature;        /* 0 = greedy */
  uint32_t top_k;           /* 0 = off */
  float top_p;              /* 1 = off */
  float min_p;              /* 0 = off */
  float repetition_penalty; /* 1 = off */
  uint64_t seed;
} keel_sampling;

typedef struct keel_stats {
  uint64_t persistent_used_bytes, persistent_planned_bytes;
  uint64_t scratch_used_bytes, scratch_planned_bytes;
  uint64_t tokens_prefilled, tokens_decoded;
} keel_stats;

typedef struct keel_engine keel_engine;

/* Generation (keel_generate). */
#define KEEL_MAX_STOP_TOKENS 8

/* Why keel_generate stopped. The reasons are keel_finish's (below), numbered in keel_generate's
 * own older order, which programs already depend on: END_TOKEN is KEEL_FINISH_STOP_TOKEN, BUDGET
 * is KEEL_FINISH_KV_FULL, CALLBACK is KEEL_FINISH_CANCELLED. */
typedef enum keel_stop_reason {
  KEEL_STOP_NONE = 0,       /* not stopped: an error ended it */
  KEEL_STOP_END_TOKEN = 1,  /* sampled a stop token (stop_token) */
  KEEL_STOP_MAX_TOKENS = 2, /* generated max_tokens tokens */
  KEEL_STOP_BUDGET = 3,     /* policy full: the sequence filled the KV budget */
  KEEL_STOP_CALLBACK = 4    /* the callback returned 0 */
} keel_stop_reason;

typedef struct keel_generate_options {
  uint32_t max_tokens;                       /* tokens to generate at most; 0 = prefill only */
  int32_t stop_tokens[KEEL_MAX_STOP_TOKENS]; /* more tokens that end the generation */
  uint32_t n_stop_tokens;                    /* entries of stop_tokens in use (at most KEEL_MAX_STOP_TOKENS) */
  int no_default_stops;                      /* 0: the model's EOS and <|im_end|> stop too */
  int feed_last;                             /* feed the stop token (or the last token) back into the cache, as a
                                                chat does before its next turn */
  const keel_sampling* sampling;             /* set the slot's sampling first; NULL keeps it (and its random
                                               state) */
  double (*now)(void);                       /* monotonic seconds, for the timings of the result; NULL = none */
} keel_generate_options;

typedef struct keel_generate_result {
  uint32_t tokens_generated; /* tokens streamed (stop tokens are not) */
  uint32_t tokens_decoded;   /* tokens fed back into the cache */
  uint32_t prompt_tokens;
  uint32_t stop_reason;                   /* a keel_stop_reason */
  int32_t stop_token;                     /* the stop token sampled, -1 if none */
  double prefill_seconds, decode_seconds; /* 0 without options->now */
} keel_generate_result;

/* Receives each generated token and the text it completes: well-formed UTF-8, ready to print
 * (len may be 0 while a character is incomplete, or for a control token); at the end, token -1
 * with the bytes the stream flushes, if any. Return 0 to stop generating. */
typedef int (*keel_token_callback)(void* user, int32_t token, const char* text, size_t len);

/* Verifies the model and computes the memory needed for `config` (NULL = defaults). */
keel_status keel_plan(const void* model, size_t model_bytes, const keel_config* config, keel_plan_info* out);

/* Lays the engine out in memory[0..memory_bytes) (any alignment) and verifies the model, which
 * must stay valid until the engine is no longer used. On failure *out is NULL and, when
 * error is non-NULL, a one-line message is copied into error[0..error_capacity). */
keel_status keel_init(void* memory, size_t memory_bytes, const void* model, size_t model_bytes,
                      const keel_config* config, keel_engine** out, char* error, size_t error_capacity);

/* Text -> ids. add_bos: prepend BOS when the model asks for it; parse_special: recognize
 * special-token texts such as <|im_start|>. *n_tokens is the count the text needs, also when
 * it is more than `capacity` (then KEEL_ERR_BAD_ARGUMENT and the first `capacity` ids). */
keel_status keel_tokenize(keel_engine* e, const char* text, size_t len, int add_bos, int parse_special, int32_t* tokens,
                          size_t capacity, size_t* n_tokens);

keel_status keel_prefill(keel_engine* e, uint32_t slot, const int32_t* tokens, size_t n);
keel_status keel_decode(keel_engine* e, uint32_t slot, int32_t token);
/* The slot's logits after prefill or decode ([vocab] floats); NULL on a bad slot. */
const float* keel_logits(keel_engine* e, uint32_t slot, size_t* vocab_size);
keel_status keel_set_sampling(keel_engine* e, uint32_t slot, const keel_sampling* s);
keel_status keel_sample(keel_engine* e, uint32_t slot, int32_t* token);
/* The bytes token `token` stands for (raw piece; for streaming UTF-8 use keel::text::StreamDecoder
 * from C++). *n is the length, also when larger than capacity. */
keel_status keel_token_bytes(keel_engine* e, int32_t token, char* out, size_t capacity, size_t* n);
/* Prefills prompt[0..n_prompt) on `slot` (n_prompt 0: continue from the slot's logits), then
 * samples, streams and feeds tokens back until a stop token, max_tokens, the KV budget (policy
 * full) or the callback returning 0. options NULL = 128 tokens, the default stops, the slot's
 * sampling; callback and out may be NULL. No allocation: the text goes through a fixed buffer
 * (512 bytes a token). On an error, *out holds what was done before it. */
keel_status keel_generate(keel_engine* e, uint32_t slot, const int32_t* prompt, size_t n_prompt,
                          const keel_generate_options* options, keel_token_callback callback, void* user,
                          keel_generate_result* out);
keel_status keel_reset(keel_engine* e, uint32_t slot);

/* Continuous batching (keel::Scheduler, llm/scheduler.h). Requests go into a free slot or wait in
 * a queue of config->queue_capacity; each keel_step is one forward pass over every active slot
 * (every decoding slot's next token plus whole prompt chunks, oldest request first, within
 * chunk + slots - 1 rows) and reports the tokens it produced. The scheduler owns every slot:
 * do not mix it with keel_prefill/keel_decode/keel_generate/keel_reset on the same engine. */
/* Why a request ended: the engine's one list of finish reasons (keel::FinishReason, llm/finish.h,
 * has these numbers). */
typedef enum keel_finish {
  KEEL_FINISH_NONE = 0,       /* the request goes on */
  KEEL_FINISH_MAX_TOKENS = 1, /* max_new_tokens sampled */
  KEEL_FINISH_STOP_TOKEN = 2, /* a stop token sampled (the event's token) */
  KEEL_FINISH_CANCELLED = 3,  /* keel_cancel */
  KEEL_FINISH_KV_FULL = 4,    /* policy full: the prompt or the next token does not fit the budget */
  KEEL_FINISH_ERROR = 5
} keel_finish;

typedef enum keel_slot_phase { KEEL_SLOT_FREE = 0, KEEL_SLOT_PREFILLING = 1, KEEL_SLOT_DECODING = 2 } keel_slot_phase;

typedef struct keel_request {
  const int32_t* prompt;  /* caller-owned: valid and unchanged until the first token (or the end) is reported */
  size_t n_prompt;        /* >= 1 */
  keel_sampling sampling; /* as keel_set_sampling takes it: top_p 1 and repetition_penalty 1 are off */
  int32_t stop_tokens[KEEL_MAX_STOP_TOKENS]; /* copied at submit */
  uint32_t n_stop_tokens;
  int no_default_stops;    /* 0: the model's EOS and <|im_end|> stop too */
  uint32_t max_new_tokens; /* >= 1 */
} keel_request;

typedef struct keel_token_event {
  uint64_t request; /* the id keel_submit gave */
  uint32_t slot;    /* UINT32_MAX: the request ended while queued */
  int32_t token;    /* -1: no token (cancelled, KV full, error) */
  uint32_t finish;  /* a keel_finish; KEEL_FINISH_NONE while the request goes on */
} keel_token_event;

typedef struct keel_slot_state {
  uint32_t phase; /* a keel_slot_phase */
  uint64_t request;
  uint64_t prompt_tokens, prompt_done;
  uint32_t generated;
  uint32_t kv_tokens, kv_budget;
} keel_slot_state;

/* *id (>= 1) identifies the request in events. KEEL_ERR_QUEUE_FULL when every slot is busy and
 * the queue is full (nothing changes); KEEL_ERR_BAD_ARGUMENT for an empty prompt, an invalid
 * token, max_new_tokens 0 or a bad sampling setting. */
keel_status keel_submit(keel_engine* e, const keel_request* request, uint64_t* id);
/* One pass. events must hold keel_max_events(e) entries; *n_events is how many were written. */
keel_status keel_step(keel_engine* e, keel_token_event* events, size_t capacity, size_t* n_events);
/* The next keel_step frees the request's slot (or queue place) and reports KEEL_FINISH_CANCELLED. */
keel_status keel_cancel(keel_engine* e, uint64_t id);
keel_status keel_get_slot_state(const keel_engine* e, uint32_t slot, keel_slot_state* out);
/* slots + queue capacity: the most events one keel_step reports. */
size_t keel_max_events(const keel_engine* e);
/* Requests waiting for a slot. */
uint32_t keel_queued(const keel_engine* e);

keel_status keel_get_stats(const keel_engine* e, keel_stats* out);
int32_t keel_eos_token(const keel_engine* e);
const char* keel_last_error(const keel_engine* e);
const char* keel_status_string(keel_status s);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_H_ */
