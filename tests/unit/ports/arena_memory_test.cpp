// The host tools' arena memory (ports/linux/arena_memory.h): large arenas start on a huge-page
// boundary with the huge-page advice taken where the kernel offers transparent huge pages,
// every arena is zero-filled and writable end to end, and a size the system cannot map is an
// error naming it.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "ports/linux/arena_memory.h"

namespace keel::port {
namespace {

// Whether the kernel offers transparent huge pages to a mapping that asks (mode "always" or
// "madvise"); false when the setting is "never" or absent.
bool kernel_offers_huge_pages() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(f, mode);
  return mode.find("[always]") != std::string::npos || mode.find("[madvise]") != std::string::npos;
}

void expect_zero_and_writable(const ArenaMemory& a) {
  for (uint64_t i = 0; i < a.size(); i += 4096) ASSERT_EQ(a.data()[i], 0) << "byte " << i;
  ASSERT_EQ(a.data()[a.size() - 1], 0);
  for (uint64_t i = 0; i < a.size(); i += 4096) a.data()[i] = uint8_t(i >> 12);
  a.data()[a.size() - 1] = 0x5a;
  EXPECT_EQ(a.data()[a.size() - 1], 0x5a);
}

TEST(ArenaMemory, LargeArenasStartOnAHugePageAndTakeTheAdvice) {
  ArenaMemory a;
  std::string error;
  const uint64_t bytes = (uint64_t(5) << 20) + 123;
  ASSERT_TRUE(a.reserve(bytes, error)) << error;
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(a.size(), bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % (uint64_t(2) << 20), 0u);
  EXPECT_EQ(a.huge_page_advice(), kernel_offers_huge_pages());
  expect_zero_and_writable(a);
}

TEST(ArenaMemory, SmallArenasAreAlignedAndNotAdvised) {
  ArenaMemory a;
  std::string error;
  ASSERT_TRUE(a.reserve(1000, error)) << error;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
  EXPECT_FALSE(a.huge_page_advice());
  expect_zero_and_writable(a);
  ASSERT_TRUE(a.reserve(0, error)) << error;  // releases the previous mapping
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
}

TEST(ArenaMemory, ReservingAgainReplacesTheMappingZeroFilled) {
  ArenaMemory a;
  std::string error;
  ASSERT_TRUE(a.reserve(uint64_t(3) << 20, error)) << error;
  a.data()[0] = 1;
  ASSERT_TRUE(a.reserve(uint64_t(3) << 20, error)) << error;
  expect_zero_and_writable(a);
}

TEST(ArenaMemory, AnUnmappableSizeIsAnErrorNamingIt) {
  ArenaMemory a;
  std::string error;
  EXPECT_FALSE(a.reserve(uint64_t(1) << 60, error));
  EXPECT_NE(error.find(std::to_string(uint64_t(1) << 60)), std::string::npos) << error;
  EXPECT_EQ(a.data(), nullptr);
}

}  // namespace
}  // namespace keel::port
