#include <cstdio>

#include "keel/commands.h"

namespace keel::cli {
int cmd_convert(int, char**) { fprintf(stderr, "keel convert: not built yet\n"); return 1; }
int cmd_info(int, char**) { fprintf(stderr, "keel info: not built yet\n"); return 1; }
}  // namespace keel::cli
