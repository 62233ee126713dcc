// The counter workload's oracle (sim/counter_oracle.h): the counts a state
// holds, the range a read may show under each model, the bits encoding,
// and the checks of a read and of the final state.
#include "sim/counter_oracle.h"

#include <vector>

#include "gtest/gtest.h"

namespace ductile::counter_oracle {
namespace {

Consistency Ssp(int32_t s) { return {ConsistencyMode::kSsp, s}; }
Consistency Bsp(BspCombine combine) {
  return {ConsistencyMode::kBsp, 0, combine};
}
Consistency Async() { return {ConsistencyMode::kAsync, 0}; }

TEST(CounterOracle, TheStateAtAClockHoldsThePushesOfTheSpanBelowIt) {
  const PushSpan joined_late{3, 7};  // pushed at clocks 3..6
  EXPECT_FALSE(Holds(joined_late, 2, 10));
  EXPECT_TRUE(Holds(joined_late, 3, 10));
  EXPECT_TRUE(Holds(joined_late, 6, 10));
  EXPECT_FALSE(Holds(joined_late, 7, 10));  // had left
  EXPECT_FALSE(Holds(joined_late, 5, 5));   // not below the state's clock
  EXPECT_EQ(CountBefore(joined_late, 0), 0);
  EXPECT_EQ(CountBefore(joined_late, 5), 2);
  EXPECT_EQ(CountBefore(joined_late, 100), 4);
  EXPECT_EQ(CountBefore(PushSpan{}, 9), 9);
  EXPECT_EQ(CountBefore(PushSpan{-1, kNoEnd}, 9), 0);  // never admitted
}

TEST(CounterOracle, AReadSeesItsOwnPushesExactly) {
  // After Clock() reached 5: pushes of clocks 0..4.
  Range r = ReadRange(Ssp(2), PushSpan{}, 5, /*own=*/true, false);
  EXPECT_TRUE(r.exact());
  EXPECT_EQ(r.least, 5);
  // Pushed at clock 5 before reading: that one too, unless BSP holds it.
  EXPECT_EQ(ReadRange(Async(), PushSpan{}, 5, true, true).least, 6);
  r = ReadRange(Bsp(BspCombine::kSum), PushSpan{}, 5, true, true);
  EXPECT_TRUE(r.exact());
  EXPECT_EQ(r.least, 5);
}

TEST(CounterOracle, OthersCountersAreExactUnderBspAndBoundedUnderSsp) {
  Range r = ReadRange(Bsp(BspCombine::kMean), PushSpan{}, 5, false, true);
  EXPECT_TRUE(r.exact());
  EXPECT_EQ(r.least, 5);
  r = ReadRange(Ssp(2), PushSpan{}, 5, false, false);
  EXPECT_FALSE(r.exact());
  EXPECT_EQ(r.least, 3);  // every push of timestamp <= 5 - 2 - 1
  EXPECT_FALSE(r.Contains(2));
  EXPECT_TRUE(r.Contains(3));
  EXPECT_TRUE(r.Contains(9));
  r = ReadRange(Async(), PushSpan{}, 5, false, false);
  EXPECT_TRUE(r.Contains(0));
  EXPECT_TRUE(r.Contains(5));
}

TEST(CounterOracle, BitsShowHowManyPushesAppliedOnceInOrder) {
  EXPECT_EQ(BitsAfter(0), 0.0f);
  EXPECT_EQ(BitsAfter(4), 15.0f);
  EXPECT_EQ(BitsPrefixLength(0.0f), 0);
  EXPECT_EQ(BitsPrefixLength(15.0f), 4);
  EXPECT_EQ(BitsPrefixLength(BitsAfter(23)), 23);
  EXPECT_EQ(BitsPrefixLength(13.0f), -1);  // clock 1 missing
  EXPECT_EQ(BitsPrefixLength(16.0f), -1);  // clock 4 without 0..3
  EXPECT_EQ(BitsPrefixLength(17.0f), -1);  // one push applied twice
  EXPECT_EQ(BitsPrefixLength(-1.0f), -1);
  EXPECT_EQ(BitsPrefixLength(2.5f), -1);
}

// Two workers read at clock 4 under SSP(1); worker 0 reads.
struct Tables {
  std::vector<float> counter{4, 3, 7}, bits{15, 7, 0}, last{4, 3, 0};
  Read read() const { return {4, counter, bits, last}; }
};

TEST(CounterOracle, ARightReadHasNoViolation) {
  const Tables t;
  EXPECT_TRUE(CheckRead(t.read(), 0, 2, Ssp(1)).empty());
  EXPECT_EQ(CheckSharedCounter(t.read(), 2, Ssp(1)), "");
}

TEST(CounterOracle, EachBrokenPropertyIsNamed) {
  Tables stale;  // worker 1 misses clock 2, older than 4 - 1
  stale.counter[1] = 2;
  stale.bits[1] = 3;
  stale.last[1] = 2;
  std::vector<std::string> bad = CheckRead(stale.read(), 0, 2, Ssp(1));
  ASSERT_EQ(bad.size(), 3u);
  EXPECT_NE(bad[0].find("(1) counter[1]"), std::string::npos) << bad[0];
  EXPECT_TRUE(CheckRead(stale.read(), 0, 2, Ssp(2)).empty());
  EXPECT_TRUE(CheckRead(stale.read(), 0, 2, Async()).empty());

  Tables doubled;  // worker 0 sees a push of its own twice
  doubled.counter[0] = 5;
  doubled.bits[0] = 16;
  bad = CheckRead(doubled.read(), 0, 2, Ssp(1));
  ASSERT_EQ(bad.size(), 3u);
  EXPECT_NE(bad[0].find("(8) bits[0]"), std::string::npos) << bad[0];
  EXPECT_NE(bad[1].find("(2) counter[0]"), std::string::npos) << bad[1];

  // BSP: everyone's counter is exact; the shared one is the sum or mean.
  const Tables t;
  bad = CheckRead(t.read(), 0, 2, Bsp(BspCombine::kSum));
  ASSERT_FALSE(bad.empty());
  EXPECT_NE(bad[0].find("(2) counter[1]"), std::string::npos) << bad[0];
  Tables bsp;
  bsp.counter = {4, 4, 8};
  bsp.bits = {15, 15, 0};
  bsp.last = {4, 4, 0};
  EXPECT_TRUE(CheckRead(bsp.read(), 1, 2, Bsp(BspCombine::kSum)).empty());
  EXPECT_EQ(CheckSharedCounter(bsp.read(), 2, Bsp(BspCombine::kSum)), "");
  EXPECT_NE(CheckSharedCounter(bsp.read(), 2, Bsp(BspCombine::kMean)), "");
  Tables shared_stale;
  shared_stale.counter[2] = 5;  // below 2 * (4 - 1)
  EXPECT_NE(CheckSharedCounter(shared_stale.read(), 2, Ssp(1)), "");
}

TEST(CounterOracle, TheFinalStateHoldsEveryClockOnce) {
  const FinalState sum = Final(3, 10, Ssp(2));
  EXPECT_EQ(sum.counter, 10.0f);
  EXPECT_EQ(sum.bits, 1023.0f);
  EXPECT_EQ(sum.last, 10.0f);
  EXPECT_EQ(sum.shared, 30.0f);
  EXPECT_EQ(Final(3, 10, Bsp(BspCombine::kSum)).shared, 30.0f);
  EXPECT_EQ(Final(3, 10, Bsp(BspCombine::kMean)).shared, 10.0f);
}

}  // namespace
}  // namespace ductile::counter_oracle
