// Which consistency model governs each clock of a table: the initial one,
// runtime changes from a boundary clock on, and forgetting old entries.
#include "consistency/consistency_schedule.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace ductile {
namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

Consistency Ssp(int32_t staleness) {
  return {ConsistencyMode::kSsp, staleness, BspCombine::kMean};
}
Consistency Bsp(BspCombine combine = BspCombine::kSum) {
  return {ConsistencyMode::kBsp, 0, combine};
}
Consistency Async() { return {ConsistencyMode::kAsync, 0, BspCombine::kMean}; }

// Consistency has no operator==; compare every field.
::testing::AssertionResult Same(const Consistency& got,
                                const Consistency& want) {
  if (got.mode == want.mode && got.staleness == want.staleness &&
      got.combine == want.combine) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "got mode " << static_cast<int>(got.mode) << " staleness "
         << got.staleness << " combine " << static_cast<int>(got.combine)
         << ", want mode " << static_cast<int>(want.mode) << " staleness "
         << want.staleness << " combine " << static_cast<int>(want.combine);
}

TEST(ConsistencySchedule, TheInitialModelGovernsEveryClock) {
  ConsistencySchedule schedule(Ssp(3));
  for (int64_t clock : {kMin, int64_t{-1}, int64_t{0}, int64_t{7}, kMax}) {
    EXPECT_TRUE(Same(schedule.At(clock), Ssp(3))) << "clock " << clock;
  }
  EXPECT_TRUE(Same(schedule.latest(), Ssp(3)));
}

TEST(ConsistencySchedule, SspPullAtClockCNeedsServerClockCMinusS) {
  for (int32_t s : {0, 1, 3, 1000000}) {
    ConsistencySchedule schedule(Ssp(s));
    for (int64_t c : {0, 1, 5, 100}) {
      EXPECT_EQ(schedule.RequiredServerClock(c), c - s)
          << "SSP(" << s << ") at clock " << c;
    }
    EXPECT_FALSE(schedule.Buffers(5)) << "SSP(" << s << ") holds pushes back";
  }
}

TEST(ConsistencySchedule, BspPullAtClockCNeedsServerClockCAndPushesWait) {
  for (BspCombine combine : {BspCombine::kMean, BspCombine::kSum}) {
    ConsistencySchedule schedule(Bsp(combine));
    for (int64_t c : {0, 1, 5, 100}) {
      EXPECT_EQ(schedule.RequiredServerClock(c), c) << "clock " << c;
      EXPECT_TRUE(schedule.Buffers(c)) << "clock " << c;
    }
  }
}

TEST(ConsistencySchedule, AsyncPullsNeverWaitAndPushesApplyOnArrival) {
  ConsistencySchedule schedule(Async());
  for (int64_t c : {0, 1, 5, 100}) {
    EXPECT_EQ(schedule.RequiredServerClock(c), ConsistencySchedule::kNoWait);
    EXPECT_FALSE(schedule.Buffers(c));
  }
  // kNoWait is below every server clock, so the gate lets the pull through.
  EXPECT_LT(ConsistencySchedule::kNoWait, int64_t{0});
}

TEST(ConsistencySchedule, AChangeGovernsItsBoundaryClockAndLaterOnly) {
  ConsistencySchedule schedule(Ssp(0));
  schedule.Set(5, Bsp());
  EXPECT_TRUE(Same(schedule.At(kMin), Ssp(0)));
  EXPECT_TRUE(Same(schedule.At(4), Ssp(0)));
  EXPECT_TRUE(Same(schedule.At(5), Bsp()));
  EXPECT_TRUE(Same(schedule.At(6), Bsp()));
  EXPECT_TRUE(Same(schedule.At(kMax), Bsp()));
  EXPECT_TRUE(Same(schedule.latest(), Bsp()));
  EXPECT_FALSE(schedule.Buffers(4));
  EXPECT_TRUE(schedule.Buffers(5));
}

TEST(ConsistencySchedule, RequiredServerClockFollowsTheModelOfThePullsClock) {
  ConsistencySchedule schedule(Ssp(0));
  schedule.Set(10, Ssp(5));
  schedule.Set(20, Async());
  schedule.Set(30, Bsp());
  EXPECT_EQ(schedule.RequiredServerClock(9), 9);    // SSP(0)
  EXPECT_EQ(schedule.RequiredServerClock(10), 5);   // SSP(5)
  EXPECT_EQ(schedule.RequiredServerClock(19), 14);  // SSP(5)
  EXPECT_EQ(schedule.RequiredServerClock(20), ConsistencySchedule::kNoWait);
  EXPECT_EQ(schedule.RequiredServerClock(29), ConsistencySchedule::kNoWait);
  EXPECT_EQ(schedule.RequiredServerClock(30), 30);  // BSP
  EXPECT_EQ(schedule.RequiredServerClock(31), 31);
}

TEST(ConsistencySchedule, AChangeReplacesEveryLaterChange) {
  ConsistencySchedule schedule(Ssp(0));
  schedule.Set(5, Bsp());
  schedule.Set(10, Ssp(2));
  schedule.Set(15, Async());
  // A change at 8 replaces those from 10 and 15 and keeps the one at 5.
  schedule.Set(8, Ssp(4));
  EXPECT_TRUE(Same(schedule.At(4), Ssp(0)));
  EXPECT_TRUE(Same(schedule.At(5), Bsp()));
  EXPECT_TRUE(Same(schedule.At(7), Bsp()));
  EXPECT_TRUE(Same(schedule.At(8), Ssp(4)));
  EXPECT_TRUE(Same(schedule.At(12), Ssp(4)));
  EXPECT_TRUE(Same(schedule.At(20), Ssp(4)));
  EXPECT_TRUE(Same(schedule.latest(), Ssp(4)));
}

TEST(ConsistencySchedule, AChangeAtTheSameClockReplacesThatChange) {
  ConsistencySchedule schedule(Ssp(0));
  schedule.Set(5, Bsp());
  schedule.Set(5, Ssp(7));
  EXPECT_TRUE(Same(schedule.At(4), Ssp(0)));
  EXPECT_TRUE(Same(schedule.At(5), Ssp(7)));
  EXPECT_TRUE(Same(schedule.latest(), Ssp(7)));
}

TEST(ConsistencySchedule, AChangeBeforeEveryOtherReplacesThemAll) {
  ConsistencySchedule schedule(Ssp(0));
  schedule.Set(5, Bsp());
  schedule.Set(10, Async());
  schedule.Set(kMin, Ssp(2));  // the whole history
  for (int64_t clock : {kMin, int64_t{0}, int64_t{5}, int64_t{10}, kMax}) {
    EXPECT_TRUE(Same(schedule.At(clock), Ssp(2))) << "clock " << clock;
  }
}

TEST(ConsistencySchedule, ForgetBeforeKeepsWhatLaterClocksAsk) {
  ConsistencySchedule schedule(Ssp(0));
  schedule.Set(5, Bsp());
  schedule.Set(10, Ssp(3));
  schedule.ForgetBefore(7);
  // Clocks >= 7 are answered as before.
  EXPECT_TRUE(Same(schedule.At(7), Bsp()));
  EXPECT_TRUE(Same(schedule.At(9), Bsp()));
  EXPECT_TRUE(Same(schedule.At(10), Ssp(3)));
  EXPECT_TRUE(Same(schedule.At(kMax), Ssp(3)));
  EXPECT_EQ(schedule.RequiredServerClock(9), 9);
  EXPECT_EQ(schedule.RequiredServerClock(12), 9);
  // The model before 5 is gone: the one in force at 7 now reaches back.
  EXPECT_TRUE(Same(schedule.At(0), Bsp()));
  EXPECT_TRUE(Same(schedule.At(kMin), Bsp()));
  EXPECT_TRUE(Same(schedule.latest(), Ssp(3)));
}

TEST(ConsistencySchedule, ForgetBeforeAtABoundaryKeepsThatBoundarysModel) {
  ConsistencySchedule schedule(Ssp(0));
  schedule.Set(5, Bsp());
  schedule.Set(10, Ssp(3));
  schedule.ForgetBefore(10);
  EXPECT_TRUE(Same(schedule.At(10), Ssp(3)));
  EXPECT_TRUE(Same(schedule.At(9), Ssp(3)));
  EXPECT_TRUE(Same(schedule.At(kMin), Ssp(3)));
}

TEST(ConsistencySchedule, ForgetBeforeTheFirstChangeChangesNothing) {
  ConsistencySchedule schedule(Ssp(1));
  schedule.Set(5, Bsp());
  schedule.ForgetBefore(3);
  EXPECT_TRUE(Same(schedule.At(0), Ssp(1)));
  EXPECT_TRUE(Same(schedule.At(4), Ssp(1)));
  EXPECT_TRUE(Same(schedule.At(5), Bsp()));
  schedule.ForgetBefore(3);  // idempotent
  EXPECT_TRUE(Same(schedule.At(4), Ssp(1)));
  EXPECT_TRUE(Same(schedule.At(5), Bsp()));
}

TEST(ConsistencySchedule, ASetAfterForgetBeforeStillReplacesLaterEntries) {
  ConsistencySchedule schedule(Ssp(0));
  schedule.Set(5, Bsp());
  schedule.Set(10, Async());
  schedule.ForgetBefore(6);
  schedule.Set(8, Ssp(2));
  EXPECT_TRUE(Same(schedule.At(6), Bsp()));
  EXPECT_TRUE(Same(schedule.At(8), Ssp(2)));
  EXPECT_TRUE(Same(schedule.At(11), Ssp(2)));
  EXPECT_TRUE(Same(schedule.latest(), Ssp(2)));
}

}  // namespace
}  // namespace ductile
