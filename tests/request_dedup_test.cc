// Exactly-once bookkeeping: which (client, seq) pairs a server has applied.
#include "server/request_dedup.h"

#include "gtest/gtest.h"

namespace ductile {
namespace {

TEST(RequestDedup, AnUnseenRequestIsNotADuplicate) {
  RequestDedup dedup;
  EXPECT_FALSE(dedup.IsDuplicate(1, 0));
  EXPECT_FALSE(dedup.IsDuplicate(1, 5));
  EXPECT_EQ(dedup.tracked(), 0u);
}

TEST(RequestDedup, AnAppliedRequestIsADuplicateWhenResent) {
  RequestDedup dedup;
  dedup.MarkApplied(1, 5);
  EXPECT_TRUE(dedup.IsDuplicate(1, 5));
  EXPECT_FALSE(dedup.IsDuplicate(1, 4));
  EXPECT_FALSE(dedup.IsDuplicate(1, 6));
  EXPECT_EQ(dedup.tracked(), 1u);
}

TEST(RequestDedup, EverySeqBelowDoneBelowIsADuplicate) {
  RequestDedup dedup;
  dedup.Advance(1, 10);
  // Below the mark: completed, so any copy is a resend, even one this
  // server never saw applied (it may have gone to another server).
  EXPECT_TRUE(dedup.IsDuplicate(1, 0));
  EXPECT_TRUE(dedup.IsDuplicate(1, 9));
  EXPECT_FALSE(dedup.IsDuplicate(1, 10));
  EXPECT_FALSE(dedup.IsDuplicate(1, 11));
}

TEST(RequestDedup, AdvancingForgetsAppliedSeqsBelowTheMark) {
  RequestDedup dedup;
  dedup.MarkApplied(1, 5);
  dedup.MarkApplied(1, 7);
  dedup.MarkApplied(1, 12);
  EXPECT_EQ(dedup.tracked(), 3u);
  dedup.Advance(1, 10);
  EXPECT_EQ(dedup.tracked(), 1u);  // only 12 is still remembered
  EXPECT_TRUE(dedup.IsDuplicate(1, 5));
  EXPECT_TRUE(dedup.IsDuplicate(1, 7));
  EXPECT_TRUE(dedup.IsDuplicate(1, 12));
  EXPECT_FALSE(dedup.IsDuplicate(1, 11));
  dedup.Advance(1, 13);
  EXPECT_EQ(dedup.tracked(), 0u);
  EXPECT_TRUE(dedup.IsDuplicate(1, 12));
}

TEST(RequestDedup, DoneBelowNeverMovesBackwards) {
  RequestDedup dedup;
  dedup.Advance(1, 10);
  dedup.MarkApplied(1, 10);
  // A late message carrying an older mark must not re-open seqs 4..9.
  dedup.Advance(1, 4);
  EXPECT_TRUE(dedup.IsDuplicate(1, 6));
  EXPECT_TRUE(dedup.IsDuplicate(1, 10));
  EXPECT_EQ(dedup.tracked(), 1u);
}

TEST(RequestDedup, ClientsAreTrackedSeparately) {
  RequestDedup dedup;
  dedup.MarkApplied(1, 5);
  dedup.Advance(1, 100);
  EXPECT_FALSE(dedup.IsDuplicate(2, 5));
  EXPECT_FALSE(dedup.IsDuplicate(2, 50));
  dedup.MarkApplied(2, 5);
  EXPECT_TRUE(dedup.IsDuplicate(2, 5));
  EXPECT_FALSE(dedup.IsDuplicate(2, 6));
  // Negative and zero ids are ids like any other.
  dedup.MarkApplied(-1, 3);
  EXPECT_TRUE(dedup.IsDuplicate(-1, 3));
  EXPECT_FALSE(dedup.IsDuplicate(0, 3));
}

TEST(RequestDedup, AnOlderSeqAppliedAfterANewerOneIsNotADuplicate) {
  // A request re-split after a "moved" reply can reach a server after a
  // later request of the same client: seq 7 lands first, then seq 5 (still
  // open, so done_below stays at 5).
  RequestDedup dedup;
  dedup.Advance(1, 5);
  EXPECT_FALSE(dedup.IsDuplicate(1, 7));
  dedup.MarkApplied(1, 7);
  dedup.Advance(1, 5);
  EXPECT_FALSE(dedup.IsDuplicate(1, 5));
  dedup.MarkApplied(1, 5);
  EXPECT_TRUE(dedup.IsDuplicate(1, 5));
  EXPECT_TRUE(dedup.IsDuplicate(1, 7));
  EXPECT_FALSE(dedup.IsDuplicate(1, 6));
}

// A source's window, taken when its slots are copied, merged into the
// target's: what either applied is a duplicate there, and the higher
// done-below mark holds.
TEST(RequestDedup, AMergedWindowKnowsWhatEitherServerApplied) {
  RequestDedup source, target;
  source.Advance(1, 4);
  source.MarkApplied(1, 6);
  source.MarkApplied(2, 3);
  target.Advance(1, 2);
  target.MarkApplied(1, 5);
  for (const RequestDedup::Window& w : source.Snapshot()) target.Merge(w);
  EXPECT_TRUE(target.IsDuplicate(1, 3));  // below the source's mark
  EXPECT_TRUE(target.IsDuplicate(1, 5));  // the target's own
  EXPECT_TRUE(target.IsDuplicate(1, 6));  // the source's
  EXPECT_FALSE(target.IsDuplicate(1, 7));
  EXPECT_TRUE(target.IsDuplicate(2, 3));
  EXPECT_FALSE(target.IsDuplicate(2, 4));
  EXPECT_EQ(target.tracked(), 3u);
}

// A client is forgotten once its requests' timeout and the expiry have
// passed since the last of its requests arrived, and not before.
TEST(RequestDedup, ASweepForgetsOnlyClientsSilentPastTheirTimeoutAndTheExpiry) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  const RequestDedup::TimePoint t0 = RequestDedup::TimePoint() + seconds(1000);
  const milliseconds expiry = seconds(60);
  RequestDedup dedup;
  dedup.Touch(1, t0, /*timeout_ms=*/10000);
  dedup.MarkApplied(1, 5);
  dedup.Touch(2, t0, /*timeout_ms=*/100000);
  dedup.Advance(2, 3);
  // Just at 10 s + 60 s: kept.
  EXPECT_EQ(dedup.Sweep(t0 + seconds(70), expiry), 0u);
  EXPECT_TRUE(dedup.IsDuplicate(1, 5));
  // Past it: client 1 goes; client 2's timeout is longer.
  EXPECT_EQ(dedup.Sweep(t0 + seconds(71), expiry), 1u);
  EXPECT_FALSE(dedup.IsDuplicate(1, 5));
  EXPECT_TRUE(dedup.IsDuplicate(2, 1));
  // Heard from again: its clock starts over.
  dedup.Touch(2, t0 + seconds(150), 100000);
  EXPECT_EQ(dedup.Sweep(t0 + seconds(300), expiry), 0u);
  EXPECT_EQ(dedup.Sweep(t0 + seconds(311), expiry), 1u);
  EXPECT_EQ(dedup.clients(), 0u);
  EXPECT_EQ(dedup.tracked(), 0u);
}

TEST(RequestDedup, AWindowThatCameWithMovedSlotsIsKeptTheLongestTimeout) {
  using std::chrono::hours;
  using std::chrono::seconds;
  const RequestDedup::TimePoint t0 = RequestDedup::TimePoint() + hours(1000);
  RequestDedup dedup;
  dedup.SetNow(t0);
  dedup.Merge({.client = 7, .done_below = 2, .applied = {4}});
  EXPECT_EQ(dedup.Sweep(t0 + hours(24 * 30), seconds(60)), 0u);
  EXPECT_TRUE(dedup.IsDuplicate(7, 4));
  EXPECT_EQ(dedup.Sweep(t0 + hours(24 * 30) + seconds(61), seconds(60)), 1u);
  // Once its client is heard from, its own timeout counts.
  const RequestDedup::TimePoint later = t0 + hours(24 * 30) + seconds(61);
  dedup.Merge({.client = 8, .done_below = 0, .applied = {1}});
  dedup.Touch(8, later, 1000);
  EXPECT_EQ(dedup.Sweep(later + seconds(61), seconds(60)), 0u);
  EXPECT_EQ(dedup.Sweep(later + seconds(62), seconds(60)), 1u);
}

TEST(RequestDedup, AClientIsFullAtItsLimitOfAppliedSequences) {
  RequestDedup dedup(/*max_applied_per_client=*/3);
  dedup.Advance(1, 10);
  for (uint64_t seq : {10, 12, 14}) {
    EXPECT_FALSE(dedup.Full(1));
    dedup.MarkApplied(1, seq);
  }
  EXPECT_TRUE(dedup.Full(1));
  EXPECT_FALSE(dedup.Full(2));  // per client
  dedup.Advance(1, 13);         // 10 and 12 complete
  EXPECT_FALSE(dedup.Full(1));
}

}  // namespace
}  // namespace ductile
