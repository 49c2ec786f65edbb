#include "keel/cli/command.h"

#include <cstdio>

#include "keel/cli/cli_util.h"

namespace keel::cli {

CommandLine::CommandLine(const char* name, int argc, char** argv, const char* help, SessionOptions* session,
                         const char* session_help)
    : args(argc, argv), name_(name), session_(session) {
  if (!args.flag("--help", "-h")) return;
  help_shown_ = true;
  if (session)
    printf(help, session_help ? session_help : cli::session_help().c_str());
  else
    fputs(help, stdout);
}

bool CommandLine::finish(size_t count, const char* what) {
  if (session_) parse_session_options(args, *session_);
  if (!args.finish(positionals)) {
    usage_error(name_, args.error());
    return false;
  }
  if (positionals.size() == count) return true;
  if (count == 0)
    usage_error(name_, "unexpected argument '" + positionals[0] + "'");
  else
    usage_error(name_, std::string("expected ") + what + ", got " + std::to_string(positionals.size()));
  return false;
}

}  // namespace keel::cli
