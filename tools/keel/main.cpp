// `keel`: one binary, git-like subcommands.
#include <cstdio>
#include <cstring>

#include "keel/commands/commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int argc, char** argv);
  const char* summary;
};

const Command kCommands[] = {
    {"convert", keel::cli::cmd_convert, "convert a GGUF, Hugging Face or llama2.c model to .keel"},
    {"info", keel::cli::cmd_info, "show a .keel model's shape, tensors, tokenizer and memory plan"},
    {"verify", keel::cli::cmd_verify, "check every byte of a .keel file against its checksums"},
    {"run", keel::cli::cmd_run, "generate text from a prompt"},
    {"chat", keel::cli::cmd_chat, "chat with a ChatML model"},
    {"ppl", keel::cli::cmd_ppl, "perplexity of a text"},
    {"bench", keel::cli::cmd_bench, "prefill and decode throughput (llama-bench style)"},
    {"passkey", keel::cli::cmd_passkey, "retrieval of a key hidden in long text, per KV policy"},
    {"memcheck", keel::cli::cmd_memcheck, "prove bounded memory: no allocation after init, flat RSS"},
    {"batch", keel::cli::cmd_batch, "run a file of OpenAI-style requests, several slots at once"},
    {"serve", keel::cli::cmd_serve, "HTTP server for the OpenAI API (completions, chat, streaming)"},
    {"emulate", keel::cli::cmd_emulate, "a model on an emulated dataflow accelerator: schedule, cycles, SRAM"},
};

void usage(FILE* f) {
  fprintf(f, "usage: keel <command> [options]\n\ncommands:\n");
  for (const Command& c : kCommands) fprintf(f, "  %-10s %s\n", c.name, c.summary);
  fprintf(f, "\n'keel <command> --help' describes a command.\n");
  fprintf(f,
          "\nenvironment:\n"
          "  KEEL_CACHE_DIR     where emulate --calibrate keeps hw/host.json (default ~/.cache/keel)\n"
          "  KEEL_THREAD_WAIT   spin|sleep: how idle worker threads wait between calls (default:\n"
          "                     spin, sleep with more threads than the process may use at once:\n"
          "                     its CPU affinity or cgroup quota; sleep on busy hosts)\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const Command& c : kCommands) {
    if (!strcmp(argv[1], c.name)) return c.run(argc - 1, argv + 1);
  }
  fprintf(stderr, "keel: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
