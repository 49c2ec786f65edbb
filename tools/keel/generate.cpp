#include "keel/generate.h"

#include <algorithm>

#include "keel/session.h"
#include "text/stream_decoder.h"

namespace keel::cli {

bool generate(Runtime& rt, uint32_t max_tokens, const std::vector<int32_t>& stop_ids, bool feed_last, FILE* out,
              Generation& g, std::string& error) {
  text::StreamDecoder dec(rt.tokenizer());
  std::vector<char> buf(dec.max_push_bytes() + 8);
  // Only the full policy ends at the budget; the others evict or compress and go on.
  const bool bounded_by_budget = rt.config().kv.kind == KvPolicyKind::Full;
  const uint64_t budget = rt.config().plan.kv_budget_tokens;
  auto emit = [&](size_t n) {
    g.text.append(buf.data(), n);
    if (out) {
      fwrite(buf.data(), 1, n, out);
      fflush(out);
    }
  };
  for (uint32_t i = 0; i < max_tokens; ++i) {
    Result<int32_t> tok = rt.sample(0);
    if (!tok.ok()) {
      error = tok.error().message();
      return false;
    }
    const int32_t id = tok.value();
    const bool stop = std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
    if (stop) g.stop_token = id;
    if (!stop) {
      g.ids.push_back(id);
      size_t n = 0;
      if (dec.push(id, Span<char>(buf.data(), buf.size()), &n).ok()) emit(n);
    }
    const bool last = stop || i + 1 == max_tokens;
    if (last && !feed_last) break;
    if (bounded_by_budget && rt.sequence_length(0) >= budget) {
      g.budget_reached = true;
      break;
    }
    const double t0 = now_seconds();
    const Error e = rt.decode(0, id);
    g.decode_seconds += now_seconds() - t0;
    if (!e.ok()) {
      error = std::string(to_string(e.status())) + ": " + e.message();
      return false;
    }
    ++g.decoded;
    if (last) break;
  }
  emit(dec.flush(Span<char>(buf.data(), buf.size())));
  return true;
}

}  // namespace keel::cli
