// keel verify: the whole-file check: every part's and every tensor's checksum, and the structure.
#include <cinttypes>
#include <cstdio>
#include <string>

#include "keel/cli/cli_util.h"
#include "keel/cli/command.h"
#include "keel/commands/commands.h"
#include "keel/cli/session.h"
#include "model/model.h"
#include "ports/linux/mapped_file.h"

namespace keel::cli {
namespace {

const char kHelp[] =
    "usage: keel verify MODEL.keel\n"
    "\n"
    "Recomputes every checksum of a .keel file and compares it with the one the converter wrote:\n"
    "first each part of the metadata (header, metadata, tokenizer, tensor table, padding; format\n"
    "version 3), then the structure as loading checks it (shapes, offsets, tokenizer), the zero\n"
    "padding between tensors and the CRC-32C of every tensor. A mismatch names the part or tensor\n"
    "and both sums. Version 2 files carry tensor checksums only; version 1 files none: they load\n"
    "and run, but verify reports that it cannot check them. Every command that runs a model\n"
    "(run, chat, serve, ppl, bench, passkey, memcheck, batch, emulate) does the same check on\n"
    "load unless given --no-verify.\n"
    "\n"
    "Exit status 0 when every checksum matches, 1 with a one-line error otherwise.\n";

}  // namespace

int cmd_verify(int argc, char** argv) {
  CommandLine cl("verify", argc, argv, kHelp);
  if (cl.help_shown()) return 0;
  if (!cl.finish(1, "one MODEL.keel")) return 2;
  const std::string& path = cl.positionals[0];
  port::MappedFile file;
  std::string error;
  if (!file.open(path, error)) return fail("verify", error);
  Model model;
  const double t0 = now_seconds();
  const Error err = model.load(Span<const uint8_t>(file.data(), file.size()), /*verify_sums=*/true);
  if (!err.ok()) return fail("verify", path + ": " + to_string(err.status()) + ": " + err.message());
  const double ms = (now_seconds() - t0) * 1e3;
  printf("%s: format version %" PRIu32 ", %s%" PRIu32 " tensors (%s), CRC-32C ok (%.1f ms)\n", path.c_str(),
         model.meta()->format_version(), model.has_whole_file_checksums() ? "metadata and " : "",
         model.meta()->tensors()->size(), human_bytes(model.weights_bytes()).c_str(), ms);
  if (!model.has_whole_file_checksums()) {
    fprintf(stderr,
            "keel verify: %s: format version 2 has no metadata checksums; convert it again to check every byte\n",
            path.c_str());
  }
  return 0;
}

}  // namespace keel::cli
