#include "keel/cli/option_spec.h"

namespace keel::cli {

std::string render_option_help(const char* long_name, const char* short_name, const char* metavar, const char* help) {
  std::string out = "  ";
  if (short_name) out += std::string(short_name) + ", ";
  out += long_name;
  if (metavar) out += std::string(" ") + metavar;
  // A name as wide as the column has its help on the next line, at the column.
  if (out.size() < kHelpColumn)
    out.append(kHelpColumn - out.size(), ' ');
  else
    out += "\n" + std::string(kHelpColumn, ' ');
  for (const char* p = help; *p; ++p) {
    out += *p;
    if (*p == '\n') out.append(kHelpColumn, ' ');
  }
  return out + "\n";
}

std::string printf_literal(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '%' ? std::string("%%") : std::string(1, c);
  return out;
}

namespace option_detail {

void first_error(std::string& error, std::string message) {
  if (error.empty()) error = std::move(message);
}

std::string expects_error(const char* name, const std::string& expects, const std::string& got) {
  return std::string(name) + " expects " + expects + ", got '" + got + "'";
}

}  // namespace option_detail

}  // namespace keel::cli
