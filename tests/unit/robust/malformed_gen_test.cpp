// A deterministic generator of malformed models over the converted stories260K .keel (Q8),
// beyond the handcrafted cases of tests/unit/model/loader_test.cpp and the fuzz corpus:
//  - byte flips in the header (exhaustive single-bit), in the FlatBuffer metadata and in the
//    tensor data;
//  - truncations at random points and extensions by random bytes;
//  - structured lies written with the generated mutable API (keel_generated.h, --gen-mutable):
//    duplicated tensors, overlapping ranges, sizes/offsets/shapes that lie (past the file,
//    wrapping 64-bit arithmetic, zero), wrong dtypes and layouts, layer counts that disagree
//    with the tensors; and lies the mutable API cannot express (a tensor listed twice or not
//    at all, a layer count the tensors contradict) written by the real converter from an
//    edited source model.
//
// What loading detects without the checksums (docs/format.md "What the loader checks"; with
// them every flipped byte is caught and named: checksum_test.cpp):
//  - header flips, truncations, extensions and every structured lie: always a non-OK Status
//    of kind BadModel (Unsupported for an unknown architecture family), with a message;
//  - metadata flips: mostly (structure, offsets, sizes, shapes, hyper-parameters, ids, enums),
//    not all (about 18% load): the bytes of strings (token texts, chat template, source),
//    float scores, numbers moved inside their valid range (RoPE theta, norm epsilon, special
//    token ids, the default KV budget), fields the engine only reports (generation defaults,
//    memory plan) and padding carry no redundancy;
//  - tensor data flips: never (loading reads no tensor bytes), so such a file loads and must
//    run; checked, each is a ModelChecksumMismatch.
// Whatever loads is then run (init, tokenize, prefill, greedy decode): every call returns a
// Status, none crashes or hangs. A crash or a hang prints the case being run (seed and index)
// so it can be replayed.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "model/file_checksums.h"
#include "model/weight_format.h"
#include "unit/robust/robust_util.h"

namespace keel {
namespace {

using robust::describe;
using robust::Image;

constexpr uint64_t kSeed = 0x6b65656c5eedull;  // change to explore; every case prints its index

// The case being run, printed if the process dies (async-signal-safe write only).
char g_case[200] = "none";
void on_fatal(int sig) {
  const char head[] = "\n[malformed-gen] died while running case: ";
  (void)!write(2, head, sizeof head - 1);
  (void)!write(2, g_case, strnlen(g_case, sizeof g_case));
  (void)!write(2, "\n", 1);
  signal(sig, SIG_DFL);
  raise(sig);
}
// A hang shows up as this alarm (generous: the whole test runs in seconds), not as a CTest
// timeout that would not say which case hung.
struct Guard {
  Guard() {
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM}) signal(sig, on_fatal);
    alarm(600);
  }
  ~Guard() {
    alarm(0);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM}) signal(sig, SIG_DFL);
  }
};
void set_case(const std::string& s) { snprintf(g_case, sizeof g_case, "%s (seed 0x%" PRIx64 ")", s.c_str(), kSeed); }

// xorshift64*: deterministic on every platform.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed ? seed : 1) {}
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545f4914f6cdd1dull;
  }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
  uint64_t range(uint64_t lo, uint64_t hi) { return lo + below(hi - lo); }  // [lo, hi)
};

const std::vector<uint8_t>& base() { return robust::stories_keel_bytes(); }

uint64_t data_offset_of(const std::vector<uint8_t>& bytes) { return fb::GetModel(bytes.data())->data_offset(); }

// What a run of a loaded (possibly corrupted) model did; every step returns a Status.
struct RunOutcome {
  Status init = Status::Ok, prefill = Status::Ok, decode = Status::Ok;
  bool ran_all = false;
};

// Runs a loaded model: init (native kernels, full policy), tokenize, prefill, 4 greedy steps.
RunOutcome run_loaded(const Model& model) {
  RunOutcome o;
  const RuntimeConfig rc = robust::stories_config(KvPolicyKind::Full, 64);
  robust::Arenas a(model, rc);
  Runtime rt;
  Error e = rt.init(model, rc, a.persistent.span(), a.scratch.span(), nullptr);
  o.init = e.status();
  if (!e.ok()) return o;
  int32_t ids[64];
  size_t n = 0;
  static const char kText[] = "Once upon a time, there was a little dog.";
  e = rt.tokenize(kText, sizeof kText - 1, text::EncodeOptions{}, Span<int32_t>(ids, 64), &n);
  // A corrupted vocabulary may encode to other ids, never to out-of-range ones.
  for (size_t i = 0; e.ok() && i < n; ++i) EXPECT_LT(uint32_t(ids[i]), model.shape().vocab_size) << g_case;
  if (!e.ok() || n == 0) {
    ids[0] = 1;
    n = 1;
  }
  e = rt.prefill(0, Span<const int32_t>(ids, n));
  o.prefill = e.status();
  if (!e.ok()) return o;
  for (int i = 0; i < 4; ++i) {
    const Result<int32_t> t = rt.sample(0);
    if (!t.ok()) {
      o.decode = t.error().status();
      return o;
    }
    EXPECT_LT(uint32_t(t.value()), model.shape().vocab_size) << g_case;
    e = rt.decode(0, t.value());
    o.decode = e.status();
    if (!e.ok()) return o;
  }
  o.ran_all = true;
  return o;
}

// Loads `img`; a rejection must be a BadModel-kind status (or Unsupported: an enum value this
// engine does not know may be a newer format's, e.g. an architecture family) with a message.
Status load_checked(const Image& img, Model& m) {
  const Error e = m.load(img.span());
  if (!e.ok()) {
    EXPECT_TRUE(status_kind(e.status()) == StatusKind::BadModel || status_kind(e.status()) == StatusKind::Unsupported)
        << g_case << ": " << describe(e);
    EXPECT_GT(strlen(e.message()), 0u) << g_case;
    EXPECT_FALSE(m.loaded()) << g_case << ": a refused model must be left empty";
  }
  return e.status();
}

// A flip of `count` random bytes (each XORed with a random non-zero value) inside [lo, hi).
void flip_bytes(Image& img, Rng& rng, uint64_t lo, uint64_t hi, int count) {
  for (int k = 0; k < count; ++k) img.bytes()[rng.range(lo, hi)] ^= uint8_t(1 + rng.below(255));
}

TEST(MalformedGen, HeaderBitFlipsAreAllRejected) {
  Guard guard;
  ASSERT_FALSE(base().empty());
  // Bytes 0..3 (root table offset) and 4..7 (identifier "KEEL"): every single-bit flip.
  for (int byte = 0; byte < 8; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      set_case("header byte " + std::to_string(byte) + " bit " + std::to_string(bit));
      Image img(base());
      img.bytes()[byte] ^= uint8_t(1u << bit);
      Model m;
      const Status s = load_checked(img, m);
      EXPECT_NE(s, Status::Ok) << g_case;
      if (byte >= 4) {
        EXPECT_EQ(s, Status::ModelBadIdentifier) << g_case;
      }
    }
  }
}

TEST(MalformedGen, MetadataByteFlipsAreRejectedOrRun) {
  Guard guard;
  ASSERT_FALSE(base().empty());
  const uint64_t doff = data_offset_of(base());
  Rng rng(kSeed);
  int rejected = 0, loaded = 0, ran = 0;
  constexpr int kCases = 20000;
  for (int i = 0; i < kCases; ++i) {
    set_case("metadata flip " + std::to_string(i));
    Image img(base());
    flip_bytes(img, rng, 8, doff, 1 + int(rng.below(4)));
    Model m;
    if (load_checked(img, m) != Status::Ok) {
      ++rejected;
      continue;
    }
    ++loaded;
    const RunOutcome o = run_loaded(m);
    if (o.ran_all) ++ran;
  }
  std::printf("[malformed-gen] metadata flips: %d cases, %d rejected, %d loaded (%d of them ran to the end)\n", kCases,
              rejected, loaded, ran);
  // Most flips hit structure, offsets or checked fields; the rest hit unchecked bytes.
  EXPECT_GT(rejected, kCases / 4);
  EXPECT_GT(loaded, 0) << "some metadata bytes carry no redundancy; the generator should reach them";
}

// Tensor data flips, over the Q8 image (quants and f16 scales) and the F32 one (where a
// flipped exponent bit makes an Inf or NaN weight).
void data_flips(const std::vector<uint8_t>& bytes, const char* name, uint64_t seed) {
  ASSERT_FALSE(bytes.empty());
  const uint64_t doff = data_offset_of(bytes);
  Rng rng(seed);
  int ran = 0, no_valid_logit = 0;
  constexpr int kCases = 1500;
  for (int i = 0; i < kCases; ++i) {
    set_case(std::string(name) + " data flip " + std::to_string(i));
    Image img(bytes);
    flip_bytes(img, rng, doff, img.size() - trailer_bytes(img.span()), 1 + int(rng.below(64)));
    Model m;
    // Loading never reads tensor bytes, so only the checksums see the flip; unchecked, the
    // engine must still load and run without harm.
    EXPECT_EQ(Model().load(img.span(), /*verify_sums=*/true).status(), Status::ModelChecksumMismatch) << g_case;
    ASSERT_EQ(load_checked(img, m), Status::Ok) << g_case;
    const RunOutcome o = run_loaded(m);
    EXPECT_EQ(o.init, Status::Ok) << g_case;
    EXPECT_EQ(o.prefill, Status::Ok) << g_case;
    if (o.ran_all) {
      ++ran;
    } else {
      // The one failure corrupted weights may cause: logits all NaN, which the sampler refuses
      // (Runtime::sample reports it as Internal, "sampler found no valid logit").
      EXPECT_EQ(o.decode, Status::Internal) << g_case;
      ++no_valid_logit;
    }
  }
  std::printf("[malformed-gen] %s data flips: %d cases loaded, %d ran to the end, %d stopped at all-NaN logits\n", name,
              kCases, ran, no_valid_logit);
}

TEST(MalformedGen, DataByteFlipsLoadAndRun) {
  Guard guard;
  data_flips(robust::stories_keel_bytes(), "Q8", kSeed ^ 0xda7a);
  data_flips(robust::stories_f32_keel_bytes(), "F32", kSeed ^ 0xf32);
}

TEST(MalformedGen, TruncationsAndExtensionsAreRejected) {
  Guard guard;
  ASSERT_FALSE(base().empty());
  const std::vector<uint8_t>& bytes = base();
  const uint64_t doff = data_offset_of(bytes);
  Rng rng(kSeed ^ 0x7c);
  for (int i = 0; i < 4000; ++i) {
    // Half anywhere, half in the metadata where the verifier has to catch it.
    const size_t cut = size_t(i % 2 ? rng.below(bytes.size()) : rng.below(doff + 1));
    set_case("truncation at " + std::to_string(cut));
    Image img(std::vector<uint8_t>(bytes.begin(), bytes.begin() + cut));
    Model m;
    const Status s = load_checked(img, m);
    EXPECT_TRUE(s == Status::ModelTruncated || s == Status::ModelVerifyFailed || s == Status::ModelBadIdentifier)
        << g_case << ": " << to_string(s);
  }
  for (int i = 0; i < 200; ++i) {
    std::vector<uint8_t> longer = bytes;
    const size_t extra = 1 + size_t(rng.below(i % 2 ? 64 : 100000));
    for (size_t k = 0; k < extra; ++k) longer.push_back(uint8_t(rng.next()));
    set_case("extension by " + std::to_string(extra));
    Image img(longer);
    Model m;
    EXPECT_EQ(load_checked(img, m), Status::ModelBadOffset) << g_case;
  }
}

// One structured lie: a name, what it does to the image, and the statuses that correctly
// describe it (the first listed is the one the loader's check order gives; alternatives are
// listed where an earlier check may legitimately see the lie first).
struct Lie {
  std::string what;
  std::vector<Status> allowed;
};

fb::Tensor* tensor_at(Image& img, uint32_t i) { return img.meta()->mutable_tensors()->GetMutableObject(i); }
uint32_t tensor_count(Image& img) { return img.meta()->tensors()->size(); }

// Index of the tensor (role, layer), or -1.
int find_tensor(Image& img, fb::TensorRole role, int layer) {
  for (uint32_t i = 0; i < tensor_count(img); ++i) {
    const fb::Tensor* t = img.meta()->tensors()->Get(i);
    if (t->role() == role && t->layer() == layer) return int(i);
  }
  return -1;
}

// Rewrites a tensor's name in place (same length only: the mutable API cannot resize).
bool rename(fb::Tensor* t, const std::string& name) {
  if (t->name()->size() != name.size()) return false;
  for (size_t k = 0; k < name.size(); ++k) t->mutable_name()->Mutate(k, name[k]);
  return true;
}

// Applies a random structured lie of kind `kind` to `img`; returns what it claims.
Lie apply_lie(Image& img, Rng& rng, int kind) {
  fb::Model* m = img.meta();
  const uint32_t nt = tensor_count(img);
  const uint32_t i = 1 + uint32_t(rng.below(nt - 1));  // never the first: it has no predecessor
  fb::Tensor* t = tensor_at(img, i);
  const fb::Tensor* prev = img.meta()->tensors()->Get(i - 1);
  const uint64_t dsize = m->data_size();
  const std::string name = t->name()->str();
  using S = Status;
  switch (kind) {
    case 0: {
      // Duplicated tensor: a per-layer tensor of layer L >= 1 claims to be the same role of
      // layer L - 1 (name, role and layer consistent, its own bytes).
      const int at = find_tensor(img, static_cast<fb::TensorRole>(1 + rng.below(12)), 1 + int(rng.below(4)));
      if (at < 0) return apply_lie(img, rng, 1);
      fb::Tensor* d = tensor_at(img, uint32_t(at));
      const int layer = d->layer() - 1;
      char want[64];
      canonical_tensor_name(d->role(), layer, want, sizeof want);
      EXPECT_TRUE(rename(d, want));
      d->mutate_layer(layer);
      return {"tensor " + std::to_string(at) + " duplicates " + want, {S::ModelDuplicateTensor}};
    }
    case 1: {
      // Duplicated entry: a tensor points at the previous tensor's bytes.
      t->mutate_offset(prev->offset());
      return {name + " at the previous tensor's offset", {S::ModelDuplicateTensor}};
    }
    case 2: {
      // Overlap: starts inside the previous tensor (any 64-byte step of it).
      const uint64_t steps = prev->size() / 64;
      if (steps == 0) return apply_lie(img, rng, 1);
      t->mutate_offset(prev->offset() + 64 * rng.below(steps));
      return {name + " overlaps the previous tensor", {S::ModelDuplicateTensor}};
    }
    case 3: {
      // Size past the end of the data section, or wrapping offset + size around 2^64.
      const uint64_t lies[] = {dsize + 1, dsize - t->offset() + 64, ~uint64_t(0), ~uint64_t(0) - t->offset() + 1,
                               uint64_t(1) << 63};
      const uint64_t v = lies[rng.below(5)];
      t->mutate_size(v);
      return {name + " size " + std::to_string(v), {S::ModelBadOffset}};
    }
    case 4: {
      // Size that fits the section but not the dtype and shape (zero, off by one, doubled).
      const uint64_t want = t->size();
      const uint64_t lies[] = {0, want - 1, want + 1, want / 2, want + 64};
      uint64_t v = lies[rng.below(5)];
      if (v == want) v = 0;
      const bool past_end = t->offset() + v > dsize;
      t->mutate_size(v);
      return {name + " size " + std::to_string(v) + " (real " + std::to_string(want) + ")",
              {past_end ? S::ModelBadOffset : S::ModelBadSize}};
    }
    case 5: {
      // Offset past the section, near 2^64 (wrapping), or misaligned.
      const uint64_t lies[] = {dsize, align64(dsize) + 64, uint64_t(1) << 63, ~uint64_t(63), ~uint64_t(0) - 63 - 640};
      if (rng.below(4) == 0) {
        const uint64_t v = t->offset() + 1 + rng.below(63);
        t->mutate_offset(v);
        return {name + " offset " + std::to_string(v), {S::ModelMisaligned}};
      }
      const uint64_t v = lies[rng.below(5)];
      t->mutate_offset(v);
      return {name + " offset " + std::to_string(v), {S::ModelBadOffset, S::ModelMisaligned}};
    }
    case 6: {
      // Offset 0 for a later tensor (inside the first one).
      t->mutate_offset(0);
      return {name + " offset 0", {S::ModelDuplicateTensor}};
    }
    case 7: {
      // A shape dimension that lies: zero, one off, or huge.
      const uint32_t rank = t->shape()->size();
      const uint32_t d = uint32_t(rng.below(rank));
      const uint32_t cur = t->shape()->Get(d);
      const uint32_t lies[] = {0, cur + 1, cur - 1, 0xffffffffu, cur * 2, 1u << 31};
      uint32_t v = lies[rng.below(6)];
      if (v == cur) v = 0;
      t->mutable_shape()->Mutate(d, v);
      return {name + " shape[" + std::to_string(d) + "] = " + std::to_string(v), {S::ModelShapeMismatch}};
    }
    case 8: {
      // Another known dtype: with its own layout the size no longer matches (Q4 vs Q8 panels,
      // F16 vs F32 rows) or a K-quant's columns are not whole superblocks; with the old layout
      // the pair is not allowed; a norm must stay F32.
      const fb::DType cur = t->dtype();
      fb::DType v = static_cast<fb::DType>(rng.below(uint32_t(fb::DType::MAX) + 1));
      if (v == cur) v = cur == fb::DType::F32 ? fb::DType::F16 : fb::DType::F32;
      const bool keep_layout = rng.below(2) == 0;
      t->mutate_dtype(v);
      if (!keep_layout) t->mutate_layout(layout_for(v));
      if (is_quantized(v)) t->mutate_block_size(kQuantBlock);
      return {name + " dtype " + fb::EnumNameDType(v) + (keep_layout ? " (old layout)" : ""),
              {S::ModelBadDType, S::ModelBadSize}};
    }
    case 9: {
      // Unknown dtype or layout values, or a wrong block size for a quantized tensor.
      const int which = int(rng.below(3));
      if (which == 0) {
        constexpr uint32_t kFirstUnknown = uint32_t(fb::DType::MAX) + 1;
        t->mutate_dtype(static_cast<fb::DType>(kFirstUnknown + rng.below(256 - kFirstUnknown)));
        return {name + " unknown dtype", {S::ModelBadDType}};
      }
      if (which == 1) {
        t->mutate_layout(static_cast<fb::Layout>(2 + rng.below(254)));
        return {name + " unknown layout", {S::ModelBadDType}};
      }
      const int q = find_tensor(img, fb::TensorRole::Wq, int(rng.below(5)));
      const uint32_t bs[] = {0, 16, 31, 33, 64, 0xffffffffu};
      tensor_at(img, uint32_t(q))->mutate_block_size(bs[rng.below(6)]);
      return {"Wq block size", {S::ModelBadDType}};
    }
    case 10: {
      // Layer counts that disagree with the tensors: fewer layers than the tensors use, more
      // than they provide, none, or past the engine's limit.
      const uint32_t lies[] = {4, 1, 6, 7, 0, kMaxLayers + 1, 0xffffffffu};
      const uint32_t v = lies[rng.below(7)];
      m->mutable_hyper()->mutate_n_layers(v);
      const Status s = v == 0 || v > kMaxLayers ? S::ModelBadHyper
                       : v < 5                  ? S::ModelShapeMismatch
                                                : S::ModelMissingTensor;
      return {"n_layers " + std::to_string(v) + " (tensors have 5)", {s}};
    }
    case 11: {
      // A tensor's own layer that lies: past the last layer, negative, or -1 for a block tensor
      // (name fixed up where the length allows, so the layer check itself is reached).
      const int lies[] = {5, 9, -1, -2, INT32_MIN, INT32_MAX};
      const int v = lies[rng.below(6)];
      const int at = find_tensor(img, fb::TensorRole::Wk, int(rng.below(5)));
      fb::Tensor* k = tensor_at(img, uint32_t(at));
      char want[64];
      if (v >= 0 && v < 10) {
        canonical_tensor_name(k->role(), v, want, sizeof want);
        rename(k, want);
      }
      k->mutate_layer(v);
      return {"Wk layer " + std::to_string(v), {S::ModelShapeMismatch}};
    }
    case 12: {
      // Hyper-parameters the tensors contradict.
      fb::Hyper* h = m->mutable_hyper();
      switch (rng.below(6)) {
        case 0: h->mutate_dim(h->dim() + 8); return {"dim + 8", {S::ModelShapeMismatch}};
        case 1: h->mutate_ffn_dim(h->ffn_dim() * 2); return {"ffn_dim x 2", {S::ModelShapeMismatch}};
        case 2: h->mutate_n_kv_heads(8); return {"n_kv_heads 8", {S::ModelShapeMismatch}};
        case 3: h->mutate_head_dim(16); return {"head_dim 16", {S::ModelShapeMismatch}};
        case 4: h->mutate_vocab_size(513); return {"vocab_size 513", {S::ModelBadTokenizer}};
        default: h->mutate_head_dim(7); return {"head_dim 7 (odd)", {S::ModelBadHyper}};
      }
    }
    case 13: {
      // The data section itself lies.
      const uint64_t doff = m->data_offset();
      switch (rng.below(5)) {
        case 0: m->mutate_data_offset(0); return {"data_offset 0", {S::ModelMisaligned}};
        case 1:  // past the end of a file with a short trailer, else onto the trailer
          m->mutate_data_offset(doff + 64);
          return {"data_offset + 64", {S::ModelTruncated, S::ModelBadOffset}};
        case 2: m->mutate_data_offset(~uint64_t(63)); return {"data_offset near 2^64", {S::ModelTruncated}};
        case 3: m->mutate_data_size(~uint64_t(0)); return {"data_size 2^64 - 1", {S::ModelTruncated}};
        default: m->mutate_data_size(0); return {"data_size 0", {S::ModelBadOffset}};
      }
    }
    default: {
      // Architecture flags the tensors contradict.
      if (rng.below(2) == 0) {
        m->mutable_arch()->mutate_qkv_bias(true);
        return {"qkv_bias without bias tensors", {S::ModelMissingTensor}};
      }
      m->mutable_arch()->mutate_tied_output(false);
      return {"untied output without output.weight", {S::ModelMissingTensor}};
    }
  }
}

TEST(MalformedGen, StructuredLiesAreRejectedWithTheirStatus) {
  Guard guard;
  ASSERT_FALSE(base().empty());
  {
    // The untouched image loads, so every rejection below is the lie's.
    Image img(base());
    Model m;
    ASSERT_EQ(load_checked(img, m), Status::Ok);
  }
  Rng rng(kSeed ^ 0x11e5);
  constexpr int kKinds = 15, kPerKind = 200;
  int wrong = 0;
  for (int kind = 0; kind < kKinds; ++kind) {
    for (int j = 0; j < kPerKind; ++j) {
      Image img(base());
      const Lie lie = apply_lie(img, rng, kind);
      set_case("lie kind " + std::to_string(kind) + " #" + std::to_string(j) + ": " + lie.what);
      Model m;
      const Status s = load_checked(img, m);
      bool ok = false;
      for (Status a : lie.allowed) ok = ok || s == a;
      if (!ok && wrong++ < 20) {
        ADD_FAILURE() << g_case << ": got " << to_string(s) << ", expected " << to_string(lie.allowed[0]);
      }
    }
  }
  EXPECT_EQ(wrong, 0);
}

// The default KV policy is an enum the CLI applies when no --kv-policy is given; like every
// enum of the format (docs/format.md, "Evolution rules"), a value the engine does not know is
// refused at load. (Before the loader checked it, `keel run` read such a file and then failed
// with a usage error about a --kv-policy the user never gave.)
TEST(MalformedGen, UnknownDefaultKvPolicyIsRejected) {
  Guard guard;
  ASSERT_FALSE(base().empty());
  for (unsigned v = 5; v < 256; v += 25) {
    set_case("kv_defaults.policy " + std::to_string(v));
    Image img(base());
    img.meta()->mutable_kv_defaults()->mutate_policy(static_cast<fb::KvPolicy>(v));
    Model m;
    const Error e = m.load(img.span());
    EXPECT_EQ(e.status(), Status::ModelBadHyper) << g_case << ": " << describe(e);
    EXPECT_NE(std::string(e.message()).find("kv_defaults.policy = " + std::to_string(v)), std::string::npos)
        << e.message();
  }
  // Every known policy loads.
  for (unsigned v = 0; v <= 4; ++v) {
    Image img(base());
    img.meta()->mutable_kv_defaults()->mutate_policy(static_cast<fb::KvPolicy>(v));
    Model m;
    EXPECT_TRUE(m.load(img.span()).ok()) << "policy " << v;
  }
}

// Lies about the tensor list itself, which the mutable API cannot write (it cannot add or drop
// vector elements): the converter writes them from an edited source model, so the file is
// otherwise perfectly formed.
TEST(MalformedGen, TensorListLiesWrittenByTheConverter) {
  Guard guard;
  const convert::SourceModel* src = test::stories260k_source();
  ASSERT_NE(src, nullptr);
  struct ListLie {
    const char* what;
    std::function<void(convert::SourceModel&)> edit;
    Status expected;
  };
  auto index_of = [](const convert::SourceModel& m, const std::string& name) {
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      if (m.tensors[i].name == name) return i;
    }
    ADD_FAILURE() << "no tensor " << name;
    return size_t(0);
  };
  const std::vector<ListLie> lies = {
      {"a tensor listed twice (its own bytes twice)",
       [&](convert::SourceModel& m) { m.tensors.push_back(m.tensors[index_of(m, "blk.2.attn_q.weight")]); },
       Status::ModelDuplicateTensor},
      {"the embedding listed twice, first and last",
       [&](convert::SourceModel& m) { m.tensors.push_back(m.tensors[index_of(m, "token_embd.weight")]); },
       Status::ModelDuplicateTensor},
      {"a tensor missing",
       [&](convert::SourceModel& m) {
         m.tensors.erase(m.tensors.begin() + long(index_of(m, "blk.3.ffn_down.weight")));
       },
       Status::ModelMissingTensor},
      {"a whole layer missing",
       [](convert::SourceModel& m) {
         std::vector<convert::SourceTensor> kept;
         for (auto& t : m.tensors) {
           if (t.layer != 4) kept.push_back(t);
         }
         m.tensors = kept;
       },
       Status::ModelMissingTensor},
      {"n_layers 4 while the tensors have 5", [](convert::SourceModel& m) { m.hyper.n_layers = 4; },
       Status::ModelShapeMismatch},
      {"n_layers 6 while the tensors have 5", [](convert::SourceModel& m) { m.hyper.n_layers = 6; },
       Status::ModelMissingTensor},
      {"no tensors at all", [](convert::SourceModel& m) { m.tensors.clear(); }, Status::ModelMissingTensor},
  };
  for (size_t i = 0; i < lies.size(); ++i) {
    set_case(std::string("list lie: ") + lies[i].what);
    convert::SourceModel m = *src;
    lies[i].edit(m);
    const std::vector<uint8_t> bytes =
        robust::write_model(m, convert::QuantMode::Q8, "robust_list_lie_" + std::to_string(i) + ".keel");
    ASSERT_FALSE(bytes.empty()) << g_case;
    Image img(bytes);
    Model model;
    const Error e = model.load(img.span());
    EXPECT_EQ(e.status(), lies[i].expected) << g_case << ": " << describe(e);
  }
}

}  // namespace
}  // namespace keel
