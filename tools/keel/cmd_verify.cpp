// keel verify: the whole-file check, structure and every tensor's checksum.
#include <cinttypes>
#include <cstdio>
#include <string>

#include "keel/cli_util.h"
#include "keel/command.h"
#include "keel/commands.h"
#include "keel/session.h"
#include "model/model.h"
#include "ports/linux/mapped_file.h"

namespace keel::cli {
namespace {

const char kHelp[] =
    "usage: keel verify MODEL.keel\n"
    "\n"
    "Verifies a .keel file as loading does (structure, shapes, offsets, tokenizer), then\n"
    "recomputes the CRC-32C of every tensor's bytes and compares it with the one the converter\n"
    "wrote. A mismatch names the tensor and both sums. Files of format version 1 carry no\n"
    "checksums: they load and run, but verify reports that it cannot check them.\n"
    "\n"
    "Exit status 0 when every tensor matches, 1 with a one-line error otherwise.\n";

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
  Error err = model.load(Span<const uint8_t>(file.data(), file.size()));
  if (!err.ok()) return fail("verify", path + ": " + to_string(err.status()) + ": " + err.message());
  const double t0 = now_seconds();
  err = model.verify_checksums();
  if (!err.ok()) return fail("verify", path + ": " + to_string(err.status()) + ": " + err.message());
  printf("%s: %" PRIu32 " tensors, %s, CRC-32C ok (%.2f s)\n", path.c_str(), model.meta()->tensors()->size(),
         human_bytes(model.weights_bytes()).c_str(), now_seconds() - t0);
  return 0;
}

}  // namespace keel::cli
