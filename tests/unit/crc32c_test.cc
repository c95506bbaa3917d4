// CRC-32C: the standard check value, and the hardware path equal to the table on every length,
// alignment and continuation.
#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace fp8rt {
namespace {

TEST(Crc32c, CheckValueAndEmpty) {
  // RFC 3720 (iSCSI), appendix B.4: CRC-32C of "123456789".
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32cPortable("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  std::vector<uint8_t> zeros(32, 0);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720: 32 bytes of zeros
}

TEST(Crc32c, HardwareEqualsTableOnEveryLengthAlignmentAndSplit) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(4096 + 64);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t offset = 0; offset < 9; ++offset) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{63}, size_t{64},
                     size_t{1000}, size_t{4096}}) {
      const uint8_t* p = buf.data() + offset;
      const uint32_t whole = Crc32cPortable(p, n);
      EXPECT_EQ(Crc32c(p, n), whole) << "offset " << offset << " n " << n;
      // In two parts, as a writer checksums a file chunk by chunk.
      const size_t cut = n / 3;
      EXPECT_EQ(Crc32c(p + cut, n - cut, Crc32c(p, cut)), whole);
      EXPECT_EQ(Crc32cPortable(p + cut, n - cut, Crc32cPortable(p, cut)), whole);
    }
  }
  const std::string impl = Crc32cImplementation();
  EXPECT_TRUE(impl == "sse4.2" || impl == "table") << impl;
}

}  // namespace
}  // namespace fp8rt
