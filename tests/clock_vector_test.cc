// Per-worker clocks of a table and their minimum (the server clock).
#include "consistency/clock_vector.h"

#include "gtest/gtest.h"

namespace ductile {
namespace {

TEST(ClockVector, StartsEmptyWithMinimumZero) {
  ClockVector clocks;
  EXPECT_EQ(clocks.size(), 0u);
  EXPECT_EQ(clocks.min_clock(), 0);
  EXPECT_EQ(clocks.clock_of(3), -1);
}

TEST(ClockVector, MinimumIsTheSlowestWorkersClock) {
  ClockVector clocks;
  clocks.Advance(0, 5);
  clocks.Advance(1, 3);
  clocks.Advance(2, 8);
  EXPECT_EQ(clocks.size(), 3u);
  EXPECT_EQ(clocks.min_clock(), 3);
  EXPECT_EQ(clocks.clock_of(0), 5);
  EXPECT_EQ(clocks.clock_of(1), 3);
  EXPECT_EQ(clocks.clock_of(2), 8);
}

TEST(ClockVector, AdvanceReportsWhetherTheMinimumMoved) {
  ClockVector clocks;
  EXPECT_TRUE(clocks.Advance(0, 2));   // 0 -> 2
  EXPECT_FALSE(clocks.Advance(1, 4));  // min stays 2
  EXPECT_FALSE(clocks.Advance(1, 6));  // a fast worker: min stays 2
  EXPECT_TRUE(clocks.Advance(0, 3));   // the slowest moves: 2 -> 3
  EXPECT_EQ(clocks.min_clock(), 3);
  EXPECT_TRUE(clocks.Advance(0, 9));  // 3 -> 6 (worker 1 is now slowest)
  EXPECT_EQ(clocks.min_clock(), 6);
}

TEST(ClockVector, IgnoresAClockThatMovesBackwardsOrStays) {
  ClockVector clocks;
  clocks.Advance(0, 5);
  clocks.Advance(1, 7);
  EXPECT_FALSE(clocks.Advance(0, 3));
  EXPECT_EQ(clocks.clock_of(0), 5);
  EXPECT_EQ(clocks.min_clock(), 5);
  EXPECT_FALSE(clocks.Advance(0, 5));
  EXPECT_EQ(clocks.clock_of(0), 5);
}

TEST(ClockVector, AJoiningWorkerBehindTheOthersLowersTheMinimum) {
  ClockVector clocks;
  clocks.Advance(0, 5);
  EXPECT_TRUE(clocks.Advance(1, 2));
  EXPECT_EQ(clocks.min_clock(), 2);
}

TEST(ClockVector, RemovingTheSlowestWorkerRaisesTheMinimum) {
  ClockVector clocks;
  clocks.Advance(0, 5);
  clocks.Advance(1, 3);
  clocks.Advance(2, 8);
  EXPECT_FALSE(clocks.Remove(2));  // not the slowest
  EXPECT_EQ(clocks.min_clock(), 3);
  EXPECT_TRUE(clocks.Remove(1));
  EXPECT_EQ(clocks.min_clock(), 5);
  EXPECT_EQ(clocks.size(), 1u);
  EXPECT_EQ(clocks.clock_of(1), -1);
}

TEST(ClockVector, RemovingAnUnknownWorkerChangesNothing) {
  ClockVector clocks;
  clocks.Advance(0, 4);
  EXPECT_FALSE(clocks.Remove(9));
  EXPECT_EQ(clocks.size(), 1u);
  EXPECT_EQ(clocks.min_clock(), 4);
}

TEST(ClockVector, RemovingTheLastWorkerResetsTheMinimumToZero) {
  ClockVector clocks;
  clocks.Advance(0, 4);
  EXPECT_TRUE(clocks.Remove(0));
  EXPECT_EQ(clocks.size(), 0u);
  EXPECT_EQ(clocks.min_clock(), 0);
}

TEST(ClockVector, ARemovedWorkerCanRejoinAtAnyClock) {
  ClockVector clocks;
  clocks.Advance(0, 10);
  clocks.Advance(1, 10);
  clocks.Remove(1);
  clocks.Advance(1, 4);
  EXPECT_EQ(clocks.clock_of(1), 4);
  EXPECT_EQ(clocks.min_clock(), 4);
}

}  // namespace
}  // namespace ductile
