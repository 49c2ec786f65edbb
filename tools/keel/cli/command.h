// The opening every `keel` command shares: the arguments, --help, the session options of the
// model commands and, once the command has taken its own options, the check that nothing
// unknown is left and that the positionals are the ones it expects.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "keel/cli/args.h"
#include "keel/cli/session.h"

namespace keel::cli {

class CommandLine {
 public:
  // `help` is printed for --help / -h: as a printf format whose one %s is `session_help` (null:
  // the session table's, session_help()) when `session` is given, as it is otherwise. `session`
  // receives -m, -t, --backend, --kv-policy ... in finish(), after the command's own options (a
  // command may take some of them itself first, as bench takes lists, and then describes the
  // rest with its own `session_help`).
  CommandLine(const char* name, int argc, char** argv, const char* help, SessionOptions* session = nullptr,
              const char* session_help = nullptr);

  // True when --help was given: the help is printed and the command returns 0.
  bool help_shown() const { return help_shown_; }
  // After the command's own options: parses the session options, then fails with a usage
  // error on stderr for a malformed value, an unknown option, or a number of positionals other
  // than `count` (`what` names them, e.g. "one MODEL.keel"). The command then returns 2.
  bool finish(size_t count = 0, const char* what = nullptr);

  Args args;
  std::vector<std::string> positionals;

 private:
  const char* name_;
  SessionOptions* session_;
  bool help_shown_ = false;
};

}  // namespace keel::cli
