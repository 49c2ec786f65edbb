// Subcommands of the `keel` CLI. Each takes argv starting at the subcommand name and returns
// the process exit code (0 success, 1 failure, 2 usage error).
#pragma once

namespace keel::cli {

int cmd_convert(int argc, char** argv);
int cmd_info(int argc, char** argv);
int cmd_verify(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_ppl(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_passkey(int argc, char** argv);
int cmd_memcheck(int argc, char** argv);
int cmd_batch(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_emulate(int argc, char** argv);

}  // namespace keel::cli
