#include "keel/serve/completion_text.h"

#include <algorithm>

namespace keel::cli {

CompletionText::CompletionText(const text::Tokenizer& tok, std::vector<std::string> stops)
    : decoder_(tok), stops_(std::move(stops)) {
  piece_.resize(decoder_.max_push_bytes());
}

bool CompletionText::release(std::string& out, bool final) {
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    out.append(held_, 0, first);
    held_.clear();
    stopped_ = true;
    return true;
  }
  // Hold back the longest end of the text that a stop string begins with.
  size_t keep = 0;
  if (!final) {
    for (const std::string& s : stops_) {
      for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
        if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
          keep = n;
          break;
        }
      }
    }
  }
  out.append(held_, 0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return false;
}

bool CompletionText::push(int32_t token, std::string& out) {
  if (stopped_) return true;
  size_t n = 0;
  const Error e = decoder_.push(token, Span<char>(piece_.data(), piece_.size()), &n);
  if (e.ok()) held_.append(piece_.data(), n);
  return release(out, false);
}

bool CompletionText::finish(std::string& out) {
  if (stopped_) return true;
  const size_t n = decoder_.flush(Span<char>(piece_.data(), piece_.size()));
  held_.append(piece_.data(), n);
  return release(out, true);
}

}  // namespace keel::cli
