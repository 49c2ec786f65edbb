// Checked files: CRC-32C against published vectors (and the SSE4.2 instruction against the
// table), the converter's per-tensor sums and checksum trailer, every byte of a file flipped and
// reported by the part or tensor it lies in (Model::load with verify_sums), the C API
// (keel_config.verify_weights), `keel verify` and `keel run` (which checks unless --no-verify),
// and files of versions 1 and 2, which load with what they carry.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "keel.h"
#include "model/file_checksums.h"
#include "model/model.h"
#include "support/test_support.h"

namespace keel {
namespace {

struct Image {
  std::unique_ptr<uint8_t[], void (*)(void*)> mem{nullptr, free};
  size_t size = 0;
  explicit Image(const std::vector<uint8_t>& bytes)
      : mem(static_cast<uint8_t*>(aligned_alloc(64, (bytes.size() + 64) / 64 * 64 + 64)), free), size(bytes.size()) {
    memcpy(mem.get(), bytes.data(), bytes.size());
  }
  Span<const uint8_t> span() const { return Span<const uint8_t>(mem.get(), size); }
  fb::Model* meta() { return fb::GetMutableModel(mem.get()); }
};

const std::vector<uint8_t>& stories_bytes() {
  static const std::vector<uint8_t> bytes = test::read_bytes(test::stories260k_keel());
  return bytes;
}

TEST(Crc32c, PublishedVectors) {
  // RFC 3720 appendix B.4 and the common "123456789" check value.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::vector<uint8_t> zeros(32, 0), ones(32, 0xff);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::vector<uint8_t> inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = uint8_t(i);
  EXPECT_EQ(crc32c(inc.data(), inc.size()), 0x46DD794Eu);
}

TEST(Crc32c, ContinuesAcrossSplits) {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 131 + 7);
  const uint32_t whole = crc32c(data.data(), data.size());
  for (size_t cut : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(333), size_t(999), size_t(1000)}) {
    EXPECT_EQ(crc32c(data.data() + cut, data.size() - cut, crc32c(data.data(), cut)), whole) << "cut " << cut;
  }
}

TEST(Crc32c, InstructionAndTableAgree) {
  // crc32c uses SSE4.2's crc32 where the CPU has it; the table-driven code is the reference.
  std::vector<uint8_t> data(70000);
  uint32_t x = 12345;
  for (auto& b : data) b = uint8_t((x = x * 1664525u + 1013904223u) >> 24);
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(9), size_t(4095), size_t(70000)}) {
    for (size_t off : {size_t(0), size_t(1), size_t(5)}) {
      if (off + n > data.size()) continue;
      EXPECT_EQ(crc32c(data.data() + off, n, 0x1234u), crc32c_portable(data.data() + off, n, 0x1234u)) << n;
    }
  }
}

TEST(Checksums, ConverterWritesEveryTensorsSum) {
  ASSERT_FALSE(stories_bytes().empty());
  Image img(stories_bytes());
  Model m;
  ASSERT_TRUE(m.load(img.span()).ok());
  EXPECT_EQ(m.meta()->format_version(), kFormatVersion);
  EXPECT_TRUE(m.has_checksums());
  const uint8_t* data = img.mem.get() + m.meta()->data_offset();
  for (const fb::Tensor* t : *m.meta()->tensors()) {
    EXPECT_EQ(t->crc32c(), crc32c(data + t->offset(), t->size())) << t->name()->c_str();
  }
  const Error e = m.verify_checksums();
  EXPECT_TRUE(e.ok()) << e.message();
}

TEST(Checksums, FlippedBitInAnyTensorIsNamed) {
  ASSERT_FALSE(stories_bytes().empty());
  Image clean(stories_bytes());
  const fb::Model* meta = clean.meta();
  const uint64_t doff = meta->data_offset();
  for (const fb::Tensor* t : *meta->tensors()) {
    for (uint64_t at : {uint64_t(0), t->size() / 2, t->size() - 1}) {
      Image img(stories_bytes());
      img.mem[doff + t->offset() + at] ^= uint8_t(1u << (at % 8));
      Model m;
      // Data bytes are not structure: the file still loads, and only the check sees the flip.
      ASSERT_TRUE(m.load(img.span()).ok());
      const Error e = m.verify_checksums();
      EXPECT_EQ(e.status(), Status::ModelChecksumMismatch) << t->name()->c_str() << " +" << at;
      const std::string want = std::string("tensor ") + t->name()->c_str() + ":";
      EXPECT_NE(std::string(e.message()).find(want), std::string::npos) << e.message();
    }
  }
}

TEST(Checksums, VersionsOneAndTwoLoadWithWhatTheyCarry) {
  // Files written before the trailer existed: the same bytes without it, and an older version.
  ASSERT_FALSE(stories_bytes().empty());
  Image img(stories_bytes());
  img.size -= trailer_bytes(img.span());
  img.meta()->mutate_format_version(2);
  Model m;
  Error e = m.load(img.span(), /*verify_sums=*/true);
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_TRUE(m.has_checksums());
  EXPECT_FALSE(m.has_whole_file_checksums());
  img.meta()->mutate_format_version(1);
  e = m.load(img.span());
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_FALSE(m.has_checksums());
  const Error v = m.verify_checksums();
  EXPECT_EQ(v.status(), Status::ModelNoChecksums);
  EXPECT_NE(std::string(v.message()).find("format version 1"), std::string::npos) << v.message();
  EXPECT_EQ(m.load(img.span(), true).status(), Status::ModelNoChecksums);
  img.meta()->mutate_format_version(kFormatVersion + 1);
  EXPECT_EQ(m.load(img.span()).status(), Status::ModelBadVersion);
}

// Every byte of the file, flipped, is caught by load(verify) and reported as a mismatch of the
// part (or tensor) it lies in: each byte of every part of the metadata, of the padding between
// tensors and of the trailer, and three bytes of every tensor.
TEST(Checksums, EveryFlippedByteIsCaughtAndNamed) {
  ASSERT_FALSE(stories_bytes().empty());
  const std::vector<uint8_t>& clean = stories_bytes();
  Image probe(clean);
  Model good;
  ASSERT_TRUE(good.load(probe.span(), true).ok());
  const size_t n = clean.size(), tb = trailer_bytes(probe.span());
  ASSERT_GT(tb, 0u);
  ASSERT_EQ(trailer_part_count(probe.span()), 5u);
  const uint64_t doff = probe.meta()->data_offset();

  struct Flip {
    size_t at;
    std::string part;  // what the message must name
  };
  std::vector<Flip> flips;
  for (uint32_t i = 0; i < trailer_part_count(probe.span()); ++i) {
    const TrailerPart part = trailer_part(probe.span(), i);
    EXPECT_GT(part.size, 0u) << file_part_name(part.kind);
    for (uint64_t at = part.offset; at < part.offset + part.size; ++at)
      flips.push_back({size_t(at), file_part_name(part.kind)});
  }
  uint64_t prev_end = 0;
  for (const fb::Tensor* t : *probe.meta()->tensors()) {
    for (uint64_t at = prev_end; at < t->offset(); ++at) flips.push_back({size_t(doff + at), "padding before tensor"});
    for (uint64_t at : {uint64_t(0), t->size() / 2, t->size() - 1}) {
      flips.push_back({size_t(doff + t->offset() + at), std::string("tensor ") + t->name()->c_str() + ":"});
    }
    prev_end = t->offset() + t->size();
  }
  ASSERT_EQ(doff + prev_end, n - tb);
  for (size_t at = n - tb; at < n; ++at) flips.push_back({at, "trailer"});

  size_t caught = 0;
  for (const Flip& f : flips) {
    Image img(clean);
    img.mem[f.at] ^= uint8_t(1u << (f.at % 8));
    Model m;
    const Error e = m.load(img.span(), true);
    EXPECT_FALSE(e.ok()) << "byte " << f.at << " (" << f.part << ") flipped went unnoticed";
    if (e.ok()) continue;
    ++caught;
    EXPECT_FALSE(m.loaded());
    EXPECT_NE(std::string(e.message()).find(f.part), std::string::npos)
        << "byte " << f.at << ": " << to_string(e.status()) << ": " << e.message();
  }
  EXPECT_EQ(caught, flips.size());
  EXPECT_GT(flips.size(), size_t(doff));  // every metadata byte at least
}

TEST(Checksums, CApiChecksWhenAsked) {
  ASSERT_FALSE(stories_bytes().empty());
  Image img(stories_bytes());
  const fb::Tensor* t = img.meta()->tensors()->Get(3);
  const std::string name = t->name()->c_str();
  img.mem[img.meta()->data_offset() + t->offset() + 5] ^= 0x10;
  keel_config cfg{};
  keel_plan_info plan{};
  ASSERT_EQ(keel_plan(img.mem.get(), img.size, &cfg, &plan), KEEL_OK);
  std::vector<uint8_t> block(plan.total_bytes + 64);
  keel_engine* e = nullptr;
  char msg[256] = {};
  // Without the flag the flip goes unnoticed, as before checksums existed.
  ASSERT_EQ(keel_init(block.data(), block.size(), img.mem.get(), img.size, &cfg, &e, msg, sizeof msg), KEEL_OK) << msg;
  cfg.verify_weights = 1;
  EXPECT_EQ(keel_init(block.data(), block.size(), img.mem.get(), img.size, &cfg, &e, msg, sizeof msg),
            KEEL_ERR_BAD_MODEL);
  EXPECT_EQ(e, nullptr);
  EXPECT_NE(std::string(msg).find("tensor " + name + ":"), std::string::npos) << msg;
}

TEST(Checksums, CliVerifiesOnLoadUnlessAskedNotTo) {
  const std::string& good = test::stories260k_keel();
  ASSERT_FALSE(good.empty());
  const auto ok = test::run_cli("verify '" + good + "'");
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_NE(ok.out.find("CRC-32C ok"), std::string::npos) << ok.out;

  std::vector<uint8_t> bytes = stories_bytes();
  Image probe(bytes);
  const fb::Tensor* t = probe.meta()->tensors()->Get(probe.meta()->tensors()->size() - 2);
  bytes[probe.meta()->data_offset() + t->offset() + t->size() / 3] ^= 0x01;
  const std::string bad = test::tmp_path("checksum_flipped.keel");
  test::write_bytes(bad, bytes);
  const std::string want = std::string("tensor ") + t->name()->c_str() + ":";
  const auto v = test::run_cli("verify '" + bad + "'");
  EXPECT_EQ(v.exit_code, 1) << v.out;
  EXPECT_NE(v.out.find(want), std::string::npos) << v.out;
  const auto r = test::run_cli("run -m '" + bad + "' -p Once -n 2");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find(want), std::string::npos) << r.out;
  const auto unchecked = test::run_cli("run -m '" + bad + "' -p Once -n 2 --no-verify");
  EXPECT_EQ(unchecked.exit_code, 0) << unchecked.out;

  // A flipped tokenizer byte stops the run too, naming the part.
  bytes = stories_bytes();
  TrailerPart tok;
  for (uint32_t i = 0; i < trailer_part_count(probe.span()); ++i) {
    if (trailer_part(probe.span(), i).kind == uint32_t(FilePart::Tokenizer)) tok = trailer_part(probe.span(), i);
  }
  ASSERT_GT(tok.size, 0u);
  bytes[tok.offset + tok.size / 2] ^= 0x20;
  test::write_bytes(bad, bytes);
  const auto t2 = test::run_cli("run -m '" + bad + "' -p Once -n 2");
  EXPECT_EQ(t2.exit_code, 1) << t2.out;
  EXPECT_NE(t2.out.find("tokenizer (bytes"), std::string::npos) << t2.out;
}

}  // namespace
}  // namespace keel
