#include "text/pretokenize.h"

#include "text/unicode_tables.h"
#include "text/utf8.h"

namespace keel::text {
namespace {

struct Char {
  uint32_t len;
  CharClass cls;
};

Char char_at(const uint8_t* s, size_t n, size_t i) {
  const DecodedChar d = utf8_decode(s + i, n - i);
  return {d.len, char_class(d.cp)};
}

// End of the run of characters of class `cls` starting at i.
size_t run_of(const uint8_t* s, size_t n, size_t i, CharClass cls) {
  while (i < n) {
    const Char c = char_at(s, n, i);
    if (c.cls != cls) break;
    i += c.len;
  }
  return i;
}

uint8_t lower_ascii(uint8_t b) { return (b >= 'A' && b <= 'Z') ? uint8_t(b + 32) : b; }

// Length of 's|'t|'re|'ve|'m|'ll|'d at s[0] == '\'' (0 if none).
size_t contraction(const uint8_t* s, size_t n, bool ignore_case) {
  if (n < 2) return 0;
  auto at = [&](size_t i) { return ignore_case ? lower_ascii(s[i]) : s[i]; };
  const uint8_t c1 = at(1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (n < 3) return 0;
  const uint8_t c2 = at(2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// \s+(?!\S) then \s+, for a whitespace run starting at 0 and ending at `run_end`: the whole
// run when it ends the text, otherwise all but its last character (which then leads the next
// piece), or the single character when the run has only one.
size_t whitespace_run_piece(const uint8_t* s, size_t n, size_t run_end) {
  if (run_end == n) return run_end;
  size_t last = 0;  // start of the last character of the run
  size_t i = 0;
  while (i < run_end) {
    last = i;
    i += char_at(s, n, i).len;
  }
  return last > 0 ? last : run_end;
}

bool is_cr_or_lf(uint8_t b) { return b == '\r' || b == '\n'; }

}  // namespace

size_t match_gpt2(const uint8_t* s, size_t n) {
  if (s[0] == '\'') {
    const size_t k = contraction(s, n, false);
    if (k) return k;
  }
  //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+ : with the leading space first.
  if (s[0] == ' ' && n > 1) {
    const Char c1 = char_at(s, n, 1);
    if (c1.cls != CharClass::Space) return run_of(s, n, 1, c1.cls);
  }
  const Char c0 = char_at(s, n, 0);
  if (c0.cls != CharClass::Space) return run_of(s, n, 0, c0.cls);
  return whitespace_run_piece(s, n, run_of(s, n, 0, CharClass::Space));
}

size_t match_llama3(const uint8_t* s, size_t n, uint32_t max_digits) {
  if (s[0] == '\'') {
    const size_t k = contraction(s, n, true);
    if (k) return k;
  }
  const Char c0 = char_at(s, n, 0);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c0.cls == CharClass::Letter) return run_of(s, n, 0, CharClass::Letter);
  if (c0.cls != CharClass::Number && !is_cr_or_lf(s[0]) && c0.len < n &&
      char_at(s, n, c0.len).cls == CharClass::Letter) {
    return run_of(s, n, c0.len, CharClass::Letter);
  }
  // \p{N}{1,max_digits}
  if (c0.cls == CharClass::Number) {
    size_t i = 0;
    for (uint32_t d = 0; d < max_digits && i < n; ++d) {
      const Char c = char_at(s, n, i);
      if (c.cls != CharClass::Number) break;
      i += c.len;
    }
    return i;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t other_start = n;
  if (c0.cls == CharClass::Other) {
    other_start = 0;
  } else if (s[0] == ' ' && n > 1 && char_at(s, n, 1).cls == CharClass::Other) {
    other_start = 1;
  }
  if (other_start < n) {
    size_t i = run_of(s, n, other_start, CharClass::Other);
    while (i < n && is_cr_or_lf(s[i])) ++i;
    return i;
  }
  // c0 is whitespace. \s*[\r\n]+ : up to and including the last CR/LF of the run.
  const size_t run_end = run_of(s, n, 0, CharClass::Space);
  for (size_t i = run_end; i > 0; --i) {
    if (is_cr_or_lf(s[i - 1])) return i;
  }
  return whitespace_run_piece(s, n, run_end);
}

bool PreTokenIterator::next(size_t* begin, size_t* len) {
  if (pos_ >= n_) return false;
  const uint8_t* s = s_ + pos_;
  const size_t rest = n_ - pos_;
  size_t k = rest;
  switch (kind_) {
    case fb::PreTokenizer::Gpt2: k = match_gpt2(s, rest); break;
    case fb::PreTokenizer::Llama3: k = match_llama3(s, rest, 3); break;
    case fb::PreTokenizer::Qwen2: k = match_llama3(s, rest, 1); break;
    case fb::PreTokenizer::SmolLM: {
      const Char c0 = char_at(s_, n_, pos_);
      if (c0.cls == CharClass::Number) {
        k = c0.len;
        break;
      }
      if (run_end_ <= pos_) {
        run_end_ = pos_;
        while (run_end_ < n_) {
          const Char c = char_at(s_, n_, run_end_);
          if (c.cls == CharClass::Number) break;
          run_end_ += c.len;
        }
      }
      k = match_gpt2(s, run_end_ - pos_);
      break;
    }
    default: break;
  }
  *begin = pos_;
  *len = k;
  pos_ += k;
  return true;
}

}  // namespace keel::text
