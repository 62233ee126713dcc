#include "transport/connection_ledger.h"

#include "gtest/gtest.h"

namespace ductile {
namespace {

using Verdict = ConnectionLedger::Verdict;

constexpr int64_t kLimit = 1024;

TEST(ConnectionLedger, ATcpConnectionOnADescriptorWithinTheReserveIsRefused) {
  ConnectionLedger ledger(/*reserved_descriptors=*/128, /*max_per_source=*/0);
  EXPECT_EQ(ledger.Accepted(895, true, "10.0.0.1", kLimit), Verdict::kKeep);
  EXPECT_EQ(ledger.Accepted(896, true, "10.0.0.1", kLimit),
            Verdict::kRefuseDescriptors);
  EXPECT_EQ(ledger.Accepted(1023, true, "10.0.0.2", kLimit),
            Verdict::kRefuseDescriptors);
  EXPECT_EQ(ledger.open(), 1u);
}

TEST(ConnectionLedger, AnIpcConnectionMayTakeHalfTheReserve) {
  ConnectionLedger ledger(128, 0);
  EXPECT_EQ(ledger.Accepted(900, false, "", kLimit), Verdict::kKeep);
  EXPECT_EQ(ledger.Accepted(959, false, "", kLimit), Verdict::kKeep);
  EXPECT_EQ(ledger.Accepted(960, false, "", kLimit),
            Verdict::kRefuseDescriptors);
  EXPECT_EQ(ledger.open(), 2u);
}

TEST(ConnectionLedger, OneSourceKeepsAtMostItsCapAndOthersAreNotCounted) {
  ConnectionLedger ledger(128, /*max_per_source=*/2);
  EXPECT_EQ(ledger.Accepted(10, true, "10.0.0.1", kLimit), Verdict::kKeep);
  EXPECT_EQ(ledger.Accepted(11, true, "10.0.0.1", kLimit), Verdict::kKeep);
  EXPECT_EQ(ledger.Accepted(12, true, "10.0.0.1", kLimit),
            Verdict::kRefuseSource);
  EXPECT_EQ(ledger.Accepted(13, true, "10.0.0.2", kLimit), Verdict::kKeep);
  EXPECT_EQ(ledger.Accepted(14, false, "", kLimit), Verdict::kKeep);
  EXPECT_EQ(ledger.open_from("10.0.0.1"), 2u);
  EXPECT_EQ(ledger.open_from("10.0.0.2"), 1u);
  // One of the first source's closes: it may connect again.
  ledger.Closed(10);
  EXPECT_EQ(ledger.open_from("10.0.0.1"), 1u);
  EXPECT_EQ(ledger.Accepted(10, true, "10.0.0.1", kLimit), Verdict::kKeep);
}

TEST(ConnectionLedger, ARefusedConnectionLeavesNoRecord) {
  ConnectionLedger ledger(128, 1);
  EXPECT_EQ(ledger.Accepted(10, true, "10.0.0.1", kLimit), Verdict::kKeep);
  EXPECT_EQ(ledger.Accepted(11, true, "10.0.0.1", kLimit),
            Verdict::kRefuseSource);
  ledger.Closed(11);  // the refused one closes: nothing changes
  EXPECT_EQ(ledger.open_from("10.0.0.1"), 1u);
  ledger.Closed(10);
  EXPECT_EQ(ledger.open(), 0u);
  EXPECT_EQ(ledger.open_from("10.0.0.1"), 0u);
}

TEST(ConnectionLedger, ADescriptorAcceptedAgainReplacesItsOldRecord) {
  ConnectionLedger ledger(128, 1);
  EXPECT_EQ(ledger.Accepted(10, true, "10.0.0.1", kLimit), Verdict::kKeep);
  // Its close went unheard; the descriptor now holds another connection.
  EXPECT_EQ(ledger.Accepted(10, true, "10.0.0.1", kLimit), Verdict::kKeep);
  EXPECT_EQ(ledger.open(), 1u);
  EXPECT_EQ(ledger.open_from("10.0.0.1"), 1u);
}

}  // namespace
}  // namespace ductile
