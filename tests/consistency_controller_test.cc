// The consistency controller on its own: the server clock over live
// workers, the staleness gate, BSP buffering, and model changes, with no
// socket (pulls are parked as bare messages).
#include "consistency/consistency_controller.h"

#include <string>

#include "gtest/gtest.h"

namespace ductile {
namespace {

using Clock = std::chrono::steady_clock;
constexpr TableId kTable = 1;

ConsistencyController::ParkedPull Pull(int64_t clock, int64_t required,
                                       Clock::time_point deadline,
                                       int32_t worker_id = 0) {
  ConsistencyController::ParkedPull p;
  p.worker_id = worker_id;
  p.message = InMessage::Copy({"peer", "pull at " + std::to_string(clock)});
  p.table = kTable;
  p.clock = clock;
  p.required = required;
  p.deadline = deadline;
  return p;
}

TEST(ConsistencyController, TheServerClockIsTheSlowestLiveWorkers) {
  ConsistencyController c;
  c.AddTable(kTable, {ConsistencyMode::kSsp, 1});
  EXPECT_FALSE(c.SetWorkers({0, 1}));
  EXPECT_FALSE(c.Advance(0, 3));
  EXPECT_EQ(c.server_clock(), 0);
  EXPECT_TRUE(c.Advance(1, 2));
  EXPECT_EQ(c.server_clock(), 2);
  EXPECT_EQ(c.Laggards(3), "1 (at clock 2)");
  // A worker that is not live is remembered, not waited for.
  EXPECT_FALSE(c.Advance(7, 1));
  EXPECT_EQ(c.server_clock(), 2);
  EXPECT_TRUE(c.SetWorkers({0}));
  EXPECT_EQ(c.server_clock(), 3);
  // Back, it rejoins at the server clock (it had reached only 2): a
  // worker coming back never moves the others' bound back.
  EXPECT_FALSE(c.SetWorkers({0, 1}));
  EXPECT_EQ(c.server_clock(), 3);
  EXPECT_EQ(c.Laggards(4), "0 (at clock 3), 1 (at clock 3)");
}

TEST(ConsistencyController, AJoiningWorkerNeverMovesTheServerClockBack) {
  ConsistencyController c;
  c.AddTable(kTable, {ConsistencyMode::kSsp, 0});
  c.SetWorkers({0, 1});
  c.Advance(0, 6);
  c.Advance(1, 5);
  ASSERT_EQ(c.server_clock(), 5);
  // A new worker starts at the server clock, not at 0.
  EXPECT_FALSE(c.SetWorkers({0, 1, 2}));
  EXPECT_EQ(c.server_clock(), 5);
  EXPECT_EQ(c.floor(), 5);
  // It holds later clocks like everyone else.
  EXPECT_FALSE(c.Advance(1, 7));
  EXPECT_EQ(c.Laggards(6), "2 (at clock 5)");
  EXPECT_TRUE(c.Advance(2, 6));
  EXPECT_EQ(c.server_clock(), 6);
  // With every worker gone the server clock stays where it was, and a
  // worker coming back (even one last heard at a lower clock) starts there.
  EXPECT_FALSE(c.SetWorkers({}));
  EXPECT_EQ(c.server_clock(), 6);
  EXPECT_FALSE(c.SetWorkers({2}));
  EXPECT_EQ(c.server_clock(), 6);
  // A rollback sets it back, and joiners start from there.
  c.Reset({0}, 2);
  EXPECT_EQ(c.server_clock(), 2);
  EXPECT_FALSE(c.SetWorkers({0, 3}));
  EXPECT_EQ(c.server_clock(), 2);
}

TEST(ConsistencyController, APullIsReleasedExactlyWhenTheBoundAllows) {
  ConsistencyController c;
  c.AddTable(kTable, {ConsistencyMode::kSsp, 2});
  c.SetWorkers({0, 1});
  // SSP(2): a pull at clock 5 needs server clock 3.
  EXPECT_EQ(c.RequiredServerClock(kTable, 5), 3);
  const auto never = Clock::now() + std::chrono::hours(1);
  ASSERT_TRUE(c.Park(Pull(5, 3, never)).ok());
  c.Advance(0, 9);
  c.Advance(1, 2);
  EXPECT_TRUE(c.TakeReleasable().empty());
  EXPECT_EQ(c.parked(), 1u);
  c.Advance(1, 3);
  EXPECT_EQ(c.TakeReleasable().size(), 1u);
  EXPECT_EQ(c.parked(), 0u);
}

TEST(ConsistencyController, APullPastItsDeadlineExpires) {
  ConsistencyController c;
  c.AddTable(kTable, {ConsistencyMode::kBsp, 0});
  const auto now = Clock::now();
  ASSERT_TRUE(c.Park(Pull(4, 4, now + std::chrono::seconds(1))).ok());
  ASSERT_TRUE(c.Park(Pull(5, 5, now + std::chrono::seconds(5))).ok());
  EXPECT_EQ(c.NextDeadline(), now + std::chrono::seconds(1));
  EXPECT_EQ(c.TakeExpired(now + std::chrono::seconds(2)).size(), 1u);
  EXPECT_EQ(c.parked(), 1u);
}

TEST(ConsistencyController, BspPushesWaitUntilTheirClockIsOverEverywhere) {
  ConsistencyController c;
  c.AddTable(kTable, {ConsistencyMode::kBsp, 0});
  c.SetWorkers({0, 1});
  EXPECT_TRUE(c.Buffers(kTable, 0));
  c.Advance(0, 1);
  c.Advance(1, 1);
  // The server clock is past 0: a late push of clock 0 applies at once.
  EXPECT_FALSE(c.Buffers(kTable, 0));
  EXPECT_TRUE(c.Buffers(kTable, 1));
  EXPECT_TRUE(c.TakeCombined().empty());
}

TEST(ConsistencyController, AChangeHoldsLaterRequestsAndReleasesThemInOrder) {
  ConsistencyController c;
  c.AddTable(kTable, {ConsistencyMode::kAsync, 0});
  c.NoteClock(4);
  Result<int64_t> boundary = c.Prepare(kTable);
  ASSERT_TRUE(boundary.ok());
  EXPECT_EQ(*boundary, 4);
  EXPECT_FALSE(c.HoldsForChange(kTable, 4));
  EXPECT_TRUE(c.HoldsForChange(kTable, 5));
  c.HoldForChange(kTable, InMessage::Copy({"a", "first"}));
  c.HoldForChange(kTable, InMessage::Copy({"a", "second"}));
  std::vector<InMessage> held = c.Commit(kTable, 5, {ConsistencyMode::kSsp, 1});
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0].frame_view(1), "first");
  EXPECT_EQ(held[1].frame_view(1), "second");
  EXPECT_FALSE(c.HoldsForChange(kTable, 9));
  // Clocks before the boundary keep the old model; later ones the new.
  EXPECT_EQ(c.RequiredServerClock(kTable, 4), ConsistencySchedule::kNoWait);
  EXPECT_EQ(c.RequiredServerClock(kTable, 6), 5);
  EXPECT_EQ(c.latest(kTable).mode, ConsistencyMode::kSsp);
  EXPECT_EQ(c.Prepare(kTable + 1).status().code(), StatusCode::kNotFound);
}

TEST(ConsistencyController, ARollbackDropsEverythingWaiting) {
  ConsistencyController c;
  c.AddTable(kTable, {ConsistencyMode::kSsp, 0});
  c.SetWorkers({0});
  ASSERT_TRUE(c.Park(Pull(3, 3, Clock::now() + std::chrono::hours(1))).ok());
  ASSERT_TRUE(c.Prepare(kTable).ok());
  c.HoldForChange(kTable, InMessage::Copy({"a", "held"}));
  EXPECT_EQ(c.TakeAllWaiting().size(), 2u);
  c.Reset({0, 1}, 7);
  EXPECT_EQ(c.server_clock(), 7);
  EXPECT_EQ(c.max_clock_seen(), 7);
  EXPECT_EQ(c.parked(), 0u);
  EXPECT_FALSE(c.HoldsForChange(kTable, 100));
}

TEST(ConsistencyController, ParkedPullsAreCappedPerWorkerAndInAll) {
  ConsistencyController c(/*max_parked_per_worker=*/2, /*max_parked=*/3);
  c.AddTable(kTable, {ConsistencyMode::kBsp, 0});
  c.SetWorkers({0, 1, 2});
  const auto never = Clock::now() + std::chrono::hours(1);
  ASSERT_TRUE(c.Park(Pull(1, 1, never, /*worker_id=*/0)).ok());
  ASSERT_TRUE(c.Park(Pull(1, 1, never, 0)).ok());
  // A third of worker 0's is refused, and left to the caller to answer.
  ConsistencyController::ParkedPull third = Pull(1, 1, never, 0);
  const Status refused = c.Park(std::move(third));
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("--max_parked_pulls_per_worker"),
            std::string::npos);
  EXPECT_EQ(third.message.frame_view(1), "pull at 1");
  EXPECT_EQ(c.parked_of(0), 2u);
  // Another worker fills the server's limit; a third worker is refused.
  ASSERT_TRUE(c.Park(Pull(1, 1, never, 1)).ok());
  const Status full = c.Park(Pull(1, 1, never, 2));
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("--max_parked_pulls)"), std::string::npos);
  EXPECT_EQ(c.parked(), 3u);
  // Released pulls free their worker's share and the server's.
  c.Advance(0, 1);
  c.Advance(1, 1);
  c.Advance(2, 1);
  EXPECT_EQ(c.TakeReleasable().size(), 3u);
  EXPECT_EQ(c.parked_of(0), 0u);
  ASSERT_TRUE(c.Park(Pull(2, 2, never, 2)).ok());
  ASSERT_TRUE(c.Park(Pull(2, 2, never, 2)).ok());
}

TEST(ConsistencyController, APullOfAWorkerThatIsNotLiveIsNotParked) {
  ConsistencyController c;
  c.AddTable(kTable, {ConsistencyMode::kBsp, 0});
  c.SetWorkers({0, 1});
  const auto never = Clock::now() + std::chrono::hours(1);
  const Status s = c.Park(Pull(1, 1, never, /*worker_id=*/99));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(c.parked(), 0u);
}

TEST(ConsistencyController, PullsOfAWorkerThatLeftAreTakenOut) {
  ConsistencyController c(/*max_parked_per_worker=*/1, /*max_parked=*/10);
  c.AddTable(kTable, {ConsistencyMode::kBsp, 0});
  c.SetWorkers({0, 1});
  const auto never = Clock::now() + std::chrono::hours(1);
  ASSERT_TRUE(c.Park(Pull(1, 1, never, /*worker_id=*/0)).ok());
  ASSERT_TRUE(c.Park(Pull(1, 1, never, 1)).ok());
  EXPECT_TRUE(c.TakeOfGoneWorkers().empty());
  // Worker 1 leaves (or is declared dead): its pull goes, and its share
  // is free again once it comes back.
  c.SetWorkers({0});
  std::vector<ConsistencyController::ParkedPull> gone = c.TakeOfGoneWorkers();
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].worker_id, 1);
  EXPECT_EQ(c.parked(), 1u);
  EXPECT_EQ(c.parked_of(1), 0u);
  c.SetWorkers({0, 1});
  EXPECT_TRUE(c.Park(Pull(1, 1, never, 1)).ok());
}

}  // namespace
}  // namespace ductile
