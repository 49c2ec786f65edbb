// The loader/verifier against a real converted model and handcrafted malformed variants:
// each corruption is rejected with the expected Status and never crashes.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>

#include "convert/keel_writer.h"
#include "convert/source_model.h"
#include "model/file_checksums.h"
#include "model/model.h"
#include "model/weight_format.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"

namespace keel {
namespace {

// An aligned copy of a file image (the loader requires 8-byte alignment; mmap gives pages).
struct Image {
  std::unique_ptr<uint8_t[], void (*)(void*)> mem{nullptr, free};
  size_t size = 0;
  explicit Image(const std::vector<uint8_t>& bytes)
      : mem(static_cast<uint8_t*>(aligned_alloc(64, (bytes.size() + 64) / 64 * 64 + 64)), free), size(bytes.size()) {
    if (!bytes.empty()) memcpy(mem.get(), bytes.data(), bytes.size());
  }
  Span<const uint8_t> span() const { return Span<const uint8_t>(mem.get(), size); }
  fb::Model* meta() { return fb::GetMutableModel(mem.get()); }
};

const std::vector<uint8_t>& stories_keel() {
  static std::vector<uint8_t> bytes = [] {
    const convert::SourceModel* src = test::stories260k_source();
    if (!src) return std::vector<uint8_t>();
    convert::WriteOptions opts;
    opts.quant = convert::QuantMode::Q8;  // quantized tensors exercise the packed-size checks
    const std::string path = test::convert_to_file(*src, opts, "loader_stories_q8.keel");
    return path.empty() ? std::vector<uint8_t>() : test::read_bytes(path);
  }();
  return bytes;
}

Error load(const Image& img) {
  Model m;
  return m.load(img.span());
}

TEST(Loader, AcceptsConvertedStories) {
  const auto& bytes = stories_keel();
  ASSERT_FALSE(bytes.empty());
  Image img(bytes);
  Model m;
  const Error e = m.load(img.span());
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_EQ(m.shape().n_layers, 5u);
  EXPECT_EQ(m.shape().n_heads, 8u);
  EXPECT_EQ(m.shape().n_kv_heads, 4u);
  EXPECT_EQ(m.shape().dim, 64u);
  EXPECT_EQ(m.shape().vocab_size, 512u);
  const TensorView wq = m.tensor(fb::TensorRole::Wq, 3);
  ASSERT_TRUE(wq.present());
  EXPECT_EQ(wq.dtype, fb::DType::Q8);
  EXPECT_EQ(wq.rows, 64u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(wq.data) % 64, 0u);
  EXPECT_FALSE(m.tensor(fb::TensorRole::Output).present());  // tied
  EXPECT_FALSE(m.tensor(fb::TensorRole::Wq, 5).present());   // past the last layer
}

TEST(Loader, TruncatedAtEverySectionBoundaryIsRejected) {
  const auto& bytes = stories_keel();
  ASSERT_FALSE(bytes.empty());
  Image whole(bytes);
  const fb::Model* meta = whole.meta();
  const uint64_t doff = meta->data_offset();
  std::vector<size_t> cuts = {
      0, 1, 4, 7, 8, 12, 64, size_t(doff / 2), size_t(doff - 1), size_t(doff), size_t(doff + 1), bytes.size() - 1};
  for (const fb::Tensor* t : *meta->tensors()) {
    cuts.push_back(size_t(doff + t->offset()));
    cuts.push_back(size_t(doff + t->offset() + t->size() / 2));
  }
  for (size_t cut : cuts) {
    ASSERT_LT(cut, bytes.size());
    Image img(std::vector<uint8_t>(bytes.begin(), bytes.begin() + cut));
    const Error e = load(img);
    EXPECT_FALSE(e.ok()) << "cut at " << cut;
    if (cut >= 8 && cut < doff) {
      EXPECT_TRUE(e.status() == Status::ModelVerifyFailed || e.status() == Status::ModelTruncated)
          << "cut at " << cut << ": " << to_string(e.status()) << ": " << e.message();
    } else if (cut >= doff) {
      EXPECT_EQ(e.status(), Status::ModelTruncated) << "cut at " << cut << ": " << e.message();
    } else {
      EXPECT_TRUE(e.status() == Status::ModelTruncated || e.status() == Status::ModelBadIdentifier)
          << "cut at " << cut << ": " << e.message();
    }
  }
}

struct Corruption {
  const char* what;
  std::function<void(Image&)> apply;
  Status expected;
  const char* message_part;
};

TEST(Loader, HandcraftedCorruptionsGetSpecificStatus) {
  const auto& bytes = stories_keel();
  ASSERT_FALSE(bytes.empty());
  auto tensor = [](Image& img, size_t i) { return img.meta()->mutable_tensors()->GetMutableObject(i); };
  const std::vector<Corruption> cases = {
      {"wrong identifier", [](Image& img) { memcpy(img.mem.get() + 4, "GGUF", 4); }, Status::ModelBadIdentifier,
       "expected 'KEEL'"},
      {"format version", [](Image& img) { img.meta()->mutate_format_version(99); }, Status::ModelBadVersion,
       "format version 99"},
      {"data offset misaligned", [](Image& img) { img.meta()->mutate_data_offset(img.meta()->data_offset() + 8); },
       Status::ModelMisaligned, "multiple of 64"},
      {"data section too long",
       [](Image& img) { img.meta()->mutate_data_size(img.meta()->data_size() + trailer_bytes(img.span()) + 64); },
       Status::ModelTruncated, "past the end"},
      {"data section too short", [](Image& img) { img.meta()->mutate_data_size(img.meta()->data_size() - 64); },
       Status::ModelBadOffset, "checksum trailer starts at"},
      {"tensor offset out of range", [&](Image& img) { tensor(img, 3)->mutate_offset(uint64_t(1) << 40); },
       Status::ModelBadOffset, "data section has"},
      {"tensor offset overflow", [&](Image& img) { tensor(img, 3)->mutate_offset(~uint64_t(63)); },
       Status::ModelBadOffset, "data section has"},
      {"tensor misaligned", [&](Image& img) { tensor(img, 3)->mutate_offset(tensor(img, 3)->offset() + 4); },
       Status::ModelMisaligned, "multiple of 64"},
      {"tensor overlaps previous", [&](Image& img) { tensor(img, 2)->mutate_offset(tensor(img, 1)->offset()); },
       Status::ModelDuplicateTensor, "inside the previous tensor"},
      {"tensor size lies", [&](Image& img) { tensor(img, 2)->mutate_size(tensor(img, 2)->size() - 1); },
       Status::ModelBadSize, "takes"},
      {"unknown dtype", [&](Image& img) { tensor(img, 2)->mutate_dtype(static_cast<fb::DType>(77)); },
       Status::ModelBadDType, "unknown dtype 77"},
      {"wrong layout", [&](Image& img) { tensor(img, 2)->mutate_layout(fb::Layout::RowMajor); }, Status::ModelBadDType,
       "requires layout"},
      {"block size", [&](Image& img) { tensor(img, 2)->mutate_block_size(64); }, Status::ModelBadDType,
       "block size 64"},
      {"unknown role", [&](Image& img) { tensor(img, 2)->mutate_role(static_cast<fb::TensorRole>(200)); },
       Status::ModelBadDType, "unknown role"},
      {"layer out of range", [&](Image& img) { tensor(img, 2)->mutate_layer(7); }, Status::ModelShapeMismatch,
       "expected 0..4"},
      {"shape mismatch", [&](Image& img) { tensor(img, 2)->mutable_shape()->Mutate(0, 63); },
       Status::ModelShapeMismatch, "hyper-parameters require"},
      {"hyper dim mismatch", [](Image& img) { img.meta()->mutable_hyper()->mutate_dim(128); },
       Status::ModelShapeMismatch, "hyper-parameters require"},
      {"ffn dim mismatch", [](Image& img) { img.meta()->mutable_hyper()->mutate_ffn_dim(173); },
       Status::ModelShapeMismatch, "hyper-parameters require"},
      {"absurd layer count", [](Image& img) { img.meta()->mutable_hyper()->mutate_n_layers(1000000000); },
       Status::ModelBadHyper, "n_layers = 1000000000"},
      {"zero vocab", [](Image& img) { img.meta()->mutable_hyper()->mutate_vocab_size(0); }, Status::ModelBadHyper,
       "vocab_size = 0"},
      {"heads not multiple of kv heads", [](Image& img) { img.meta()->mutable_hyper()->mutate_n_kv_heads(3); },
       Status::ModelBadHyper, "not a multiple"},
      {"bos out of range", [](Image& img) { img.meta()->mutable_tokenizer()->mutate_bos_id(512); },
       Status::ModelBadTokenizer, "bos_id = 512"},
      {"unknown token type",
       [](Image& img) {
         img.meta()->mutable_tokenizer()->mutable_token_types()->Mutate(5, static_cast<fb::TokenType>(9));
       },
       Status::ModelBadTokenizer, "unknown type 9"},
      {"renamed tensor", [&](Image& img) { tensor(img, 2)->mutable_name()->Mutate(0, 'x'); },
       Status::ModelShapeMismatch, "role and layer make it"},
  };
  for (const Corruption& c : cases) {
    Image img(bytes);
    c.apply(img);
    const Error e = load(img);
    EXPECT_EQ(e.status(), c.expected) << c.what << ": got " << to_string(e.status()) << ": " << e.message();
    EXPECT_NE(std::string(e.message()).find(c.message_part), std::string::npos)
        << c.what << ": message '" << e.message() << "' lacks '" << c.message_part << "'";
  }
}

TEST(Loader, MissingAndDuplicatedTensorsAreReported) {
  const auto& bytes = stories_keel();
  ASSERT_FALSE(bytes.empty());
  {
    // stories260K shares its classifier; claiming a separate one leaves output.weight missing.
    Image img(bytes);
    img.meta()->mutable_arch()->mutate_tied_output(false);
    const Error e = load(img);
    EXPECT_EQ(e.status(), Status::ModelMissingTensor) << e.message();
    EXPECT_NE(std::string(e.message()).find("output.weight is missing"), std::string::npos) << e.message();
  }
  {
    // "blk.4.ffn_up.weight" -> "blk.4.attn_q.weight" (same length): layer 4 has two Wq.
    Image img(bytes);
    auto* tensors = img.meta()->mutable_tensors();
    bool renamed = false;
    for (size_t i = 0; i < tensors->size(); ++i) {
      fb::Tensor* t = tensors->GetMutableObject(i);
      if (t->role() == fb::TensorRole::FfnUp && t->layer() == 4) {
        const char* want = "blk.4.attn_q.weight";
        for (size_t k = 0; k < strlen(want); ++k) t->mutable_name()->Mutate(k, want[k]);
        t->mutate_role(fb::TensorRole::Wq);
        renamed = true;
      }
    }
    ASSERT_TRUE(renamed);
    const Error e = load(img);
    EXPECT_TRUE(e.status() == Status::ModelDuplicateTensor || e.status() == Status::ModelShapeMismatch)
        << to_string(e.status()) << ": " << e.message();
  }
}

TEST(Loader, RandomByteFlipsNeverCrash) {
  const auto& bytes = stories_keel();
  ASSERT_FALSE(bytes.empty());
  Image whole(bytes);
  const size_t meta_len = whole.meta()->data_offset();
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  int rejected = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    Image img(bytes);
    for (int k = 0; k < 4; ++k) {
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      img.mem.get()[rng % meta_len] ^= uint8_t(1u << (rng >> 60 & 7));
    }
    const Error e = load(img);
    if (!e.ok()) {
      ++rejected;
      EXPECT_NE(status_kind(e.status()), StatusKind::Internal);
      EXPECT_GT(strlen(e.message()), 0u);
    }
  }
  EXPECT_GT(rejected, 100);  // most metadata flips are caught
}

}  // namespace
}  // namespace keel
