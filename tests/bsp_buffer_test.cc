// BSP's held-back pushes: combined per key and clock, handed out oldest
// clock first once the server clock passes them.
#include "consistency/bsp_buffer.h"

#include <vector>

#include "gtest/gtest.h"

namespace ductile {
namespace {

using Floats = std::vector<float>;

TEST(BspBuffer, StartsEmpty) {
  BspBuffer buffer;
  EXPECT_TRUE(buffer.empty());
  EXPECT_EQ(buffer.pending_clocks(), 0u);
  EXPECT_TRUE(buffer.TakeBefore(100).empty());
}

TEST(BspBuffer, SumsAKeysPushesWithinAClockAndCountsThem) {
  BspBuffer buffer;
  buffer.Add(3, 7, Floats{1.0f, 2.0f}, /*replace=*/false);
  buffer.Add(3, 7, Floats{10.0f, 20.0f}, /*replace=*/false);
  buffer.Add(3, 7, Floats{100.0f, 200.0f}, /*replace=*/false);
  buffer.Add(3, 8, Floats{0.5f, 0.25f}, /*replace=*/false, /*batches=*/4);
  EXPECT_FALSE(buffer.empty());
  EXPECT_EQ(buffer.pending_clocks(), 1u);
  auto taken = buffer.TakeBefore(4);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].first, 3);
  const BspBuffer::Clock& keys = taken[0].second;
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys.at(7).values, (Floats{111.0f, 222.0f}));
  EXPECT_EQ(keys.at(7).pushes, 3);
  EXPECT_EQ(keys.at(7).batches, 3);  // one worker batch each by default
  EXPECT_EQ(keys.at(8).values, (Floats{0.5f, 0.25f}));
  EXPECT_EQ(keys.at(8).pushes, 1);
  EXPECT_EQ(keys.at(8).batches, 4);
}

// For a mean, each push counts as many times as the batches it stands
// for: one of 3 batches and one of 1 make a mean over 4 batches, (3a + b)
// / 4, not (a + b) / 2.
TEST(BspBuffer, AMeansPushesAreWeighedByTheirBatches) {
  BspBuffer buffer;
  buffer.Add(1, 7, Floats{1.0f, 2.0f}, /*replace=*/false, /*batches=*/3,
             /*weigh=*/true);
  buffer.Add(1, 7, Floats{10.0f, 20.0f}, /*replace=*/false, /*batches=*/1,
             /*weigh=*/true);
  buffer.Add(1, 8, Floats{10.0f}, /*replace=*/false, /*batches=*/2,
             /*weigh=*/true);
  buffer.Add(1, 8, Floats{1.0f}, /*replace=*/false, /*batches=*/2,
             /*weigh=*/true);
  // Replacing (assign tables) weighs nothing.
  buffer.Add(1, 9, Floats{4.0f}, /*replace=*/true, /*batches=*/5,
             /*weigh=*/true);
  auto taken = buffer.TakeBefore(2);
  ASSERT_EQ(taken.size(), 1u);
  const BspBuffer::Clock& keys = taken[0].second;
  EXPECT_EQ(keys.at(7).values, (Floats{13.0f, 26.0f}));
  EXPECT_EQ(keys.at(7).pushes, 2);
  EXPECT_EQ(keys.at(7).batches, 4);
  EXPECT_EQ(keys.at(8).values, (Floats{22.0f}));
  EXPECT_EQ(keys.at(8).batches, 4);
  EXPECT_EQ(keys.at(9).values, (Floats{4.0f}));
  EXPECT_EQ(keys.at(9).batches, 5);
}

// A clock's learning-rate factor is its pushes' mean, weighted by their
// batches: 0.5 for one batch and 2 for three give (0.5 + 6) / 4.
TEST(BspBuffer, TheRateFactorIsThePushesMeanWeighedByTheirBatches) {
  BspBuffer buffer;
  buffer.Add(1, 7, Floats{1.0f}, /*replace=*/false, /*batches=*/1,
             /*weigh=*/true, /*rate_factor=*/0.5f);
  buffer.Add(1, 7, Floats{1.0f}, /*replace=*/false, /*batches=*/3,
             /*weigh=*/true, /*rate_factor=*/2.0f);
  buffer.Add(1, 8, Floats{1.0f}, /*replace=*/false);  // no factor: 1
  auto taken = buffer.TakeBefore(2);
  ASSERT_EQ(taken.size(), 1u);
  const BspBuffer::Clock& keys = taken[0].second;
  EXPECT_FLOAT_EQ(keys.at(7).rate_sum / keys.at(7).batches, 6.5f / 4.0f);
  EXPECT_FLOAT_EQ(keys.at(8).rate_sum / keys.at(8).batches, 1.0f);
}

TEST(BspBuffer, ReplaceKeepsTheLastPushAndStillCountsEveryPush) {
  BspBuffer buffer;
  buffer.Add(0, 1, Floats{1.0f}, /*replace=*/true);
  buffer.Add(0, 1, Floats{5.0f}, /*replace=*/true);
  buffer.Add(0, 1, Floats{3.0f}, /*replace=*/true);
  auto taken = buffer.TakeBefore(1);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].second.at(1).values, (Floats{3.0f}));
  EXPECT_EQ(taken[0].second.at(1).pushes, 3);
}

TEST(BspBuffer, ClocksAreCombinedSeparately) {
  BspBuffer buffer;
  buffer.Add(1, 9, Floats{1.0f}, false);
  buffer.Add(2, 9, Floats{2.0f}, false);
  buffer.Add(1, 9, Floats{4.0f}, false);
  buffer.Add(2, 9, Floats{8.0f}, false);
  EXPECT_EQ(buffer.pending_clocks(), 2u);
  auto taken = buffer.TakeBefore(3);
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].first, 1);
  EXPECT_EQ(taken[0].second.at(9).values, (Floats{5.0f}));
  EXPECT_EQ(taken[0].second.at(9).pushes, 2);
  EXPECT_EQ(taken[1].first, 2);
  EXPECT_EQ(taken[1].second.at(9).values, (Floats{10.0f}));
  EXPECT_EQ(taken[1].second.at(9).pushes, 2);
}

TEST(BspBuffer, CheckRefusesAnotherWidthForAKeyInTheSameClock) {
  BspBuffer buffer;
  buffer.Add(4, 11, Floats{1.0f, 2.0f, 3.0f}, false);
  EXPECT_TRUE(buffer.Check(4, 11, 3).ok());
  Status s = buffer.Check(4, 11, 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("11"), std::string::npos) << s;
  EXPECT_EQ(buffer.Check(4, 11, 4).code(), StatusCode::kInvalidArgument);
  // Other keys, other clocks, and clocks with nothing held are free.
  EXPECT_TRUE(buffer.Check(4, 12, 2).ok());
  EXPECT_TRUE(buffer.Check(5, 11, 2).ok());
  EXPECT_TRUE(buffer.Check(3, 11, 1).ok());
}

TEST(BspBuffer, CheckAllowsAnyWidthAgainOnceTheClockIsTaken) {
  BspBuffer buffer;
  buffer.Add(4, 11, Floats{1.0f, 2.0f}, false);
  ASSERT_EQ(buffer.TakeBefore(5).size(), 1u);
  EXPECT_TRUE(buffer.Check(4, 11, 3).ok());
}

TEST(BspBuffer, TakeBeforeHandsOutOlderClocksOldestFirstAndKeepsTheRest) {
  BspBuffer buffer;
  // Added out of order on purpose.
  for (int64_t clock : {7, 2, 5, 3, 9}) {
    buffer.Add(clock, 1, Floats{static_cast<float>(clock)}, false);
  }
  EXPECT_EQ(buffer.pending_clocks(), 5u);
  auto taken = buffer.TakeBefore(6);  // clocks 2, 3, 5
  ASSERT_EQ(taken.size(), 3u);
  EXPECT_EQ(taken[0].first, 2);
  EXPECT_EQ(taken[1].first, 3);
  EXPECT_EQ(taken[2].first, 5);
  for (const auto& [clock, keys] : taken) {
    EXPECT_EQ(keys.at(1).values, (Floats{static_cast<float>(clock)}));
  }
  EXPECT_EQ(buffer.pending_clocks(), 2u);
  // Taken clocks are gone; the bound is exclusive.
  EXPECT_TRUE(buffer.TakeBefore(6).empty());
  EXPECT_TRUE(buffer.TakeBefore(7).empty());
  taken = buffer.TakeBefore(8);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].first, 7);
  taken = buffer.TakeBefore(100);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].first, 9);
  EXPECT_TRUE(buffer.empty());
}

TEST(BspBuffer, APushAfterATakeStartsAFreshCombination) {
  BspBuffer buffer;
  buffer.Add(2, 1, Floats{1.0f}, false);
  ASSERT_EQ(buffer.TakeBefore(3).size(), 1u);
  // A clock that was taken and is added again (a late push) starts from
  // zero: nothing of the earlier combination remains.
  buffer.Add(2, 1, Floats{4.0f}, false);
  auto taken = buffer.TakeBefore(3);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].second.at(1).values, (Floats{4.0f}));
  EXPECT_EQ(taken[0].second.at(1).pushes, 1);
}

}  // namespace
}  // namespace ductile
