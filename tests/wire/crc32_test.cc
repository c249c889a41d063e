// wire/crc32_fold against zlib's crc32 at every dispatch level this CPU supports (each forced through the
// crc32_fold_at / crc32_fold2_at hooks): every length 0..4200 from several alignments, long buffers, running
// values, chaining at every split, the two-segment form, plus the CrcImpl::fold backend and wire::crc32.
// Buffers are exactly sized heap vectors so the ASan build reports any read past the end (the tail path loads
// overlapping 16 bytes).
#include <gtest/gtest.h>
#include <zlib.h>

#include <random>
#include <vector>

#include "tests/bench/crc_backends.h"
#include "wire/crc32_fold.h"
#include "wire/icrc.h"

using namespace urxe::wire;
using urxe::bench::CrcImpl;

namespace {

using Bytes = std::vector<uint8_t>;

uint32_t zlib_crc(uint32_t crc, const uint8_t* p, size_t n) {
  return static_cast<uint32_t>(::crc32(crc, p, static_cast<uInt>(n)));
}

Bytes random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

const CrcFoldLevel kLevels[] = {CrcFoldLevel::vpclmul_avx2, CrcFoldLevel::pclmul, CrcFoldLevel::isal};

class CrcFold : public ::testing::TestWithParam<CrcFoldLevel> {
 protected:
  void SetUp() override {
    if (!crc_fold_level_supported(GetParam()))
      GTEST_SKIP() << "CPU lacks " << crc_fold_level_name(GetParam());
  }
  uint32_t crc(uint32_t c, const uint8_t* p, size_t n) const { return crc32_fold_at(GetParam(), c, p, n); }
};

TEST_P(CrcFold, CheckValue) {
  const uint8_t check[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
  EXPECT_EQ(crc(0, check, sizeof check), 0xCBF43926u);
  EXPECT_EQ(crc(0x12345678, nullptr, 0), 0x12345678u);
}

// Every length through several accumulator rounds and every tail length, each at 4 alignments: the data is
// copied into an exactly sized buffer at the chosen offset from a 64-byte-aligned base.
TEST_P(CrcFold, EveryLengthEveryTailAgainstZlib) {
  const Bytes src = random_bytes(4200 + 64, 1);
  for (size_t off : {0u, 1u, 7u, 33u}) {
    for (size_t n = 0; n <= 4200; ++n) {
      Bytes buf(src.begin() + static_cast<ptrdiff_t>(off), src.begin() + static_cast<ptrdiff_t>(off + n));
      ASSERT_EQ(crc(0, buf.data(), n), zlib_crc(0, buf.data(), n)) << "len " << n << " off " << off;
    }
  }
}

// Random lengths (up to 64 KiB), random start offsets and random running values.
TEST_P(CrcFold, RandomAlignmentsAndRunningValues) {
  const Bytes src = random_bytes(65536 + 64, 2);
  std::mt19937 rng(3);
  for (int i = 0; i < 3000; ++i) {
    const size_t off = rng() % 64;
    const size_t n = (i % 3 == 0) ? rng() % 65537 : rng() % 1025;
    const uint32_t init = static_cast<uint32_t>(rng());
    ASSERT_EQ(crc(init, src.data() + off, n), zlib_crc(init, src.data() + off, n))
        << "len " << n << " off " << off << " init " << init;
  }
}

// crc(crc(0, a), b) == crc(0, a ++ b) at every split of a 1500-byte message (what compute_icrc relies on).
TEST_P(CrcFold, ChainingAtEverySplit) {
  const Bytes m = random_bytes(1500, 4);
  const uint32_t whole = zlib_crc(0, m.data(), m.size());
  for (size_t split = 0; split <= m.size(); ++split) {
    const uint32_t a = crc(0, m.data(), split);
    ASSERT_EQ(crc(a, m.data() + split, m.size() - split), whole) << "split " << split;
  }
}

// The two-segment form (one pass when the head is whole registers, as the ICRC's 48-byte IPv4 pseudo-header)
// equals zlib over the concatenation, for every head length 0..96 and data lengths around every path.
TEST_P(CrcFold, TwoSegmentsEqualConcatenation) {
  const Bytes m = random_bytes(96 + 4200, 6);
  std::mt19937 rng(7);
  for (size_t hn = 0; hn <= 96; ++hn) {
    for (size_t n : {0u, 1u, 4u, 15u, 16u, 17u, 63u, 64u, 65u, 130u, 255u, 256u, 257u, 1000u, 4096u, 4200u}) {
      const uint32_t init = static_cast<uint32_t>(rng());
      const Bytes head(m.begin(), m.begin() + static_cast<ptrdiff_t>(hn));
      const Bytes data(m.begin() + static_cast<ptrdiff_t>(hn), m.begin() + static_cast<ptrdiff_t>(hn + n));
      ASSERT_EQ(crc32_fold2_at(GetParam(), init, head.data(), hn, data.data(), n),
                zlib_crc(init, m.data(), hn + n))
          << "head " << hn << " data " << n;
    }
  }
}

// All-zero and all-ones data (no accidental cancellation hidden by random data).
TEST_P(CrcFold, ConstantData) {
  for (uint8_t v : {uint8_t{0}, uint8_t{0xff}}) {
    const Bytes b(5000, v);
    for (size_t n : {16u, 17u, 255u, 256u, 257u, 512u, 4096u, 5000u})
      ASSERT_EQ(crc(0, b.data(), n), zlib_crc(0, b.data(), n)) << int{v} << " len " << n;
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, CrcFold, ::testing::ValuesIn(kLevels),
                         [](const auto& level) { return std::string(crc_fold_level_name(level.param)); });

TEST(CrcFoldDispatch, BestLevelIsSupportedAndUsed) {
  // The measured choice is a level this CPU has, for either size class.
  const CrcFoldLevel best = crc_fold_best_level(3000), small = crc_fold_best_level(64);
  EXPECT_TRUE(crc_fold_level_supported(best));
  EXPECT_TRUE(crc_fold_level_supported(small));
  EXPECT_TRUE(crc_fold_level_supported(CrcFoldLevel::isal));
  EXPECT_EQ(crc_fold_best_level(0), small);
  EXPECT_EQ(crc_fold_best_level(255), small);
  EXPECT_EQ(crc_fold_best_level(256), best);
  // Every length on both sides of the size classes' boundary, through the dispatch, with and without a head.
  const Bytes m = random_bytes(3000, 5);
  for (size_t n : {0u, 1u, 15u, 16u, 63u, 64u, 200u, 239u, 240u, 241u, 255u, 256u, 257u, 1024u, 3000u}) {
    EXPECT_EQ(crc32_fold(3, m.data(), n), zlib_crc(3, m.data(), n)) << n;
    if (n >= 48) {
      EXPECT_EQ(crc32_fold2(1, m.data(), 48, m.data() + 48, n - 48), zlib_crc(1, m.data(), n)) << n;
    }
  }
  EXPECT_EQ(crc32(0, m.data(), m.size()), zlib_crc(0, m.data(), m.size()));
  EXPECT_EQ(crc32_with(CrcImpl::fold, 7, m.data(), m.size()), zlib_crc(7, m.data(), m.size()));
  EXPECT_STREQ(crc_impl_name(CrcImpl::fold), "fold");
  std::printf("crc32_fold levels on this CPU (measured): %s below 256 bytes, %s from 256\n",
              crc_fold_level_name(small), crc_fold_level_name(best));
}

}  // namespace
