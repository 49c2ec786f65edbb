#include "keel/cli/generate.h"

#include "keel/cli/session.h"

namespace keel::cli {

namespace {

struct Sink {
  Generation* g;
  FILE* out;
  static bool on_token(void* ctx, int32_t token, const char* text, size_t len) {
    Sink* s = static_cast<Sink*>(ctx);
    if (token >= 0) s->g->ids.push_back(token);
    s->g->text.append(text, len);
    if (s->out) {
      fwrite(text, 1, len, s->out);
      fflush(s->out);
    }
    return true;
  }
};

}  // namespace

bool generate(Runtime& rt, const std::vector<int32_t>& prompt, GenerateOptions options, FILE* out, Generation& g,
              std::string& error) {
  options.now = &now_seconds;
  Sink sink{&g, out};
  const Error e = keel::generate(rt, 0, Span<const int32_t>(prompt.data(), prompt.size()), options, &Sink::on_token,
                                 &sink, &g.result);
  if (!e.ok()) {
    error = std::string(to_string(e.status())) + ": " + e.message();
    return false;
  }
  return true;
}

}  // namespace keel::cli
