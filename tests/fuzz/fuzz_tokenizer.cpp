// libFuzzer target: any byte string is encoded by each real tokenizer the tests use (SmolLM2's
// byte-level BPE; the SentencePiece vocabularies of stories260K and Llama 2), the ids decoded
// back, and the text compared with the input where the vocabulary can spell it:
//  - byte-level BPE: the input's bytes come back, but for those whose alphabet character the
//    vocabulary lacks (encode drops them; found at startup by encoding each byte alone);
//  - SentencePiece: well-formed UTF-8 comes back behind the space prefix the model adds, and
//    StreamDecoder, which drops that space, gives the input itself; but for U+2581, the
//    character SentencePiece writes spaces as, which comes back as a space.
// Encode keeps its contract on every input: ids within the vocabulary, PromptTooLong with the
// first ids when the output is short, no write past the output span or the scratch it was given
// (guard words behind both), and the scratch handed back.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "support/tokenizer_fixtures.h"
#include "text/stream_decoder.h"
#include "text/utf8.h"

namespace {

using keel::Arena;
using keel::Span;
using keel::Status;
using keel::test::LoadedTokenizer;

constexpr size_t kGuard = 64;
constexpr uint8_t kGuardByte = 0xA5;
constexpr int32_t kGuardId = 0x5A5A5A5A;

[[noreturn]] void fail(const char* tokenizer, const char* what, std::string_view detail = {}) {
  fprintf(stderr, "fuzz_tokenizer (%s): %s%s%.*s\n", tokenizer, what, detail.empty() ? "" : ": ", int(detail.size()),
          detail.data());
  abort();
}

struct Subject {
  const char* name;
  std::unique_ptr<LoadedTokenizer> loaded;
  // Scratch of exactly scratch_bytes(), guard bytes behind it.
  std::vector<uint8_t> scratch_memory;
  Arena scratch;
  bool dropped[256] = {};  // byte-level: bytes the vocabulary cannot spell

  const keel::text::Tokenizer& tok() const { return loaded->tok; }

  bool guard_intact() const {
    for (size_t i = scratch_memory.size() - kGuard; i < scratch_memory.size(); ++i)
      if (scratch_memory[i] != kGuardByte) return false;
    return true;
  }

  // Encodes three ways (counting, into an exact span, into a short one) and checks they agree.
  std::vector<int32_t> encode(std::string_view text, const keel::text::EncodeOptions& opt, bool short_span) {
    size_t n = 0;
    keel::Error e = tok().encode(text.data(), text.size(), opt, Span<int32_t>(), &n, scratch);
    if (n > 0 ? e.status() != Status::PromptTooLong : !e.ok()) fail(name, "counting encode", e.message());
    std::vector<int32_t> ids(n + kGuard, kGuardId);
    size_t n2 = 0;
    e = tok().encode(text.data(), text.size(), opt, Span<int32_t>(ids.data(), n), &n2, scratch);
    if (!e.ok() || n2 != n) fail(name, "encode into an exact span", e.message());
    for (size_t i = n; i < ids.size(); ++i)
      if (ids[i] != kGuardId) fail(name, "encode wrote past its output span");
    ids.resize(n);
    for (int32_t id : ids)
      if (id < 0 || uint32_t(id) >= tok().vocab_size()) fail(name, "an id outside the vocabulary");
    if (short_span && n > 1) {
      const size_t m = n / 2;
      std::vector<int32_t> part(m + kGuard, kGuardId);
      size_t n3 = 0;
      e = tok().encode(text.data(), text.size(), opt, Span<int32_t>(part.data(), m), &n3, scratch);
      if (e.status() != Status::PromptTooLong || n3 != n) fail(name, "encode into a short span", e.message());
      for (size_t i = 0; i < m; ++i)
        if (part[i] != ids[i]) fail(name, "a short span holds other ids than the first");
      for (size_t i = m; i < part.size(); ++i)
        if (part[i] != kGuardId) fail(name, "encode wrote past a short output span");
    }
    if (scratch.used() != 0) fail(name, "encode kept scratch");
    if (!guard_intact()) fail(name, "encode wrote past its scratch");
    return ids;
  }

  std::string token_bytes(const std::vector<int32_t>& ids) const {
    std::string out;
    for (int32_t id : ids) tok().for_each_token_byte(id, [&](uint8_t b) { out += char(b); });
    return out;
  }

  std::string stream_decode(const std::vector<int32_t>& ids, const keel::text::DecodeOptions& opt) const {
    keel::text::StreamDecoder dec(tok(), opt);
    std::vector<char> buf(dec.max_push_bytes() + kGuard, char(kGuardByte));
    const size_t cap = dec.max_push_bytes();
    std::string out;
    for (int32_t id : ids) {
      size_t n = 0;
      const keel::Error e = dec.push(id, Span<char>(buf.data(), cap), &n);
      if (!e.ok() || n > cap) fail(name, "StreamDecoder::push", e.message());
      out.append(buf.data(), n);
    }
    out.append(buf.data(), dec.flush(Span<char>(buf.data(), cap)));
    for (size_t i = cap; i < buf.size(); ++i)
      if (buf[i] != char(kGuardByte)) fail(name, "StreamDecoder wrote past its output span");
    if (!keel::text::utf8_valid(reinterpret_cast<const uint8_t*>(out.data()), out.size()))
      fail(name, "StreamDecoder gave ill-formed UTF-8");
    return out;
  }
};

std::unique_ptr<LoadedTokenizer> load(const char* name, const keel::convert::SourceTokenizer& src, bool ok,
                                      const std::string& error) {
  if (!ok) fail(name, "cannot load the vocabulary", error);
  auto t = keel::test::make_tokenizer_as_converted(src);
  if (!t) fail(name, "cannot build the tokenizer");
  return t;
}

std::vector<Subject>& subjects() {
  static std::vector<Subject>* all = [] {
    const std::string shared = KEEL_SHARED_DIR;
    auto* v = new std::vector<Subject>(3);
    std::string error;
    keel::convert::SourceTokenizer src;
    (*v)[0].name = "SmolLM2 byte-level BPE";
    (*v)[0].loaded =
        load((*v)[0].name, src,
             keel::test::load_hf_tokenizer_json(shared + "/fixtures/smollm2-135m-tokenizer", src, error), error);
    (*v)[1].name = "stories260K SentencePiece";
    (*v)[1].loaded =
        load((*v)[1].name, src,
             keel::test::load_llama2c_tokenizer(shared + "/models/stories260K/tok512.bin", src, error), error);
    (*v)[2].name = "Llama 2 SentencePiece";
    (*v)[2].loaded =
        load((*v)[2].name, src, keel::test::load_gguf_vocab(shared + "/fixtures/ggml-vocab-llama-spm.gguf", src, error),
             error);
    for (Subject& s : *v) {
      const size_t bytes = keel::text::Tokenizer::scratch_bytes();
      s.scratch_memory.assign(bytes + kGuard, kGuardByte);
      s.scratch.reset(s.scratch_memory.data(), bytes);
      if (s.tok().kind() != keel::fb::TokenizerKind::ByteLevelBpe) continue;
      keel::text::EncodeOptions plain;
      plain.add_bos = false;
      for (int b = 0; b < 256; ++b) {
        const char c = char(b);
        s.dropped[b] = s.encode(std::string_view(&c, 1), plain, false).empty();
      }
    }
    return v;
  }();
  return *all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool well_formed = keel::text::utf8_valid(data, size);
  for (Subject& s : subjects()) {
    keel::text::EncodeOptions plain;
    plain.add_bos = false;
    const std::vector<int32_t> ids = s.encode(text, plain, true);
    const std::string bytes = s.token_bytes(ids);
    const std::string decoded = s.stream_decode(ids, {});
    if (s.tok().kind() == keel::fb::TokenizerKind::ByteLevelBpe) {
      std::string want;
      for (uint8_t b : text)
        if (!s.dropped[b]) want += char(b);
      if (bytes != want) fail(s.name, "the token bytes are not the input's");
      if (keel::text::utf8_valid(reinterpret_cast<const uint8_t*>(want.data()), want.size()) && decoded != want)
        fail(s.name, "StreamDecoder does not give the input back");
    } else if (well_formed) {
      std::string want;
      for (size_t i = 0; i < text.size(); ++i) {
        if (text.substr(i, 3) == "\xE2\x96\x81") {
          want += ' ';
          i += 2;
        } else {
          want += text[i];
        }
      }
      const std::string prefix = s.tok().adds_space_prefix() && !text.empty() ? " " : "";
      if (bytes != prefix + want) fail(s.name, "the token bytes are not the input's");
      if (decoded != want) fail(s.name, "StreamDecoder does not give the input back");
    }
    // Special tokens parsed and BOS added: the contract only (the texts between special tokens
    // are encoded each on its own, so no single expectation of the whole).
    keel::text::EncodeOptions special;
    special.parse_special = true;
    const std::vector<int32_t> with_special = s.encode(text, special, false);
    keel::text::DecodeOptions print;
    print.print_special = true;
    s.stream_decode(with_special, print);
  }
  return 0;
}
