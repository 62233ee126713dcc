// Replication with real processes on loopback (--replicas=2): a coordinator
// and two servers, each slot's primary on one and its backup on the other,
// two workers running the exact counter workload of
// tests/recovery_worker_main.cc. A server is killed with SIGKILL mid-run;
// the other takes its slots over from its copies: no rollback, and the
// final state is exactly the one with every update applied once. Every wait
// is bounded; every process is killed and its files removed when a test
// ends.
#include <string>

#include "gtest/gtest.h"
#include "tests/recovery_cluster.h"

namespace ductile {
namespace {

using testing::Kill9;
using testing::kWaitMs;
using testing::ListeningPort;
using testing::RecoveryCluster;

class TakeoverUnder : public ::testing::TestWithParam<const char*> {};

TEST_P(TakeoverUnder, AKilledServersSlotsAreTakenOverWithNothingLost) {
  RecoveryCluster cluster;
  cluster.set_coordinator_flags({"--replicas=2"});
  cluster.Start(/*clocks=*/160, GetParam());
  ASSERT_TRUE(cluster.WaitForCheckpoint(20));
  Kill9(cluster.server(1));
  const std::string out =
      cluster.ExpectWorkersExact(160, /*rolled_back=*/false);
  EXPECT_EQ(out.find("verified rollback"), std::string::npos) << out;
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 0)
      << cluster.coordinator().output();
  EXPECT_EQ(cluster.server(0).WaitExit(kWaitMs), 0);
  const std::string coordinator = cluster.coordinator().output();
  EXPECT_NE(coordinator.find("taken over by their backups"), std::string::npos)
      << coordinator;
  EXPECT_EQ(coordinator.find("rolling back"), std::string::npos) << coordinator;
  EXPECT_NE(cluster.server(0).output().find("took over"), std::string::npos)
      << cluster.server(0).output();
}

// A server killed and started again at once (as `ductile local` does) is
// noticed by its registration, not by a timeout: its slots are taken over
// by their backups, and the new process gets a share of the slots by a
// rebalance. Nothing rolls back, and the counts are exact.
TEST(Takeover, AServerRestartedAtOnceIsTakenOverAndGetsSlotsBack) {
  RecoveryCluster cluster;
  cluster.set_coordinator_flags({"--replicas=2"});
  cluster.Start(/*clocks=*/300, "ssp");
  ASSERT_TRUE(cluster.WaitForCheckpoint(20));
  Kill9(cluster.server(1));
  cluster.StartServer(1);  // same id, same state directory
  ASSERT_TRUE(
      cluster.WaitForOutput(cluster.coordinator(), "to server 1 (", 30000))
      << cluster.coordinator().output();
  const std::string out =
      cluster.ExpectWorkersExact(300, /*rolled_back=*/false);
  EXPECT_EQ(out.find("verified rollback"), std::string::npos) << out;
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 0)
      << cluster.coordinator().output();
  EXPECT_NE(cluster.server(0).output().find("took over"), std::string::npos)
      << cluster.server(0).output();
  EXPECT_EQ(cluster.coordinator().output().find("rolling back"),
            std::string::npos)
      << cluster.coordinator().output();
}

// As above, at the address the killed process had: the workers reach the
// servers over tcp, and the new process listens on the old one's port.
// The workers' connections to that address reconnect to the new process
// on their own, so a request meant for the old one (of an older routing
// epoch, for slots it no longer owns) can reach it. Nothing is applied
// twice, nothing is lost (the new process is answered with the takeover's
// routing, and serves none of its predecessor's slots), and nothing rolls
// back.
TEST(Takeover, AServerRestartedAtItsOldTcpAddressAppliesNothingTwice) {
  RecoveryCluster cluster;
  cluster.set_coordinator_flags({"--replicas=2"});
  cluster.set_worker_flags({"--prefer_ipc=0"});
  cluster.Start(/*clocks=*/300, "bsp");
  ASSERT_TRUE(cluster.WaitForCheckpoint(20));
  const int port = ListeningPort(cluster.server(1).output());
  ASSERT_GT(port, 0) << cluster.server(1).output();
  Kill9(cluster.server(1));
  cluster.StartServer(1, {"--port=" + std::to_string(port)});
  ASSERT_TRUE(
      cluster.WaitForOutput(cluster.coordinator(), "to server 1 (", 30000))
      << cluster.coordinator().output();
  const std::string out =
      cluster.ExpectWorkersExact(300, /*rolled_back=*/false);
  EXPECT_EQ(out.find("verified rollback"), std::string::npos) << out;
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 0)
      << cluster.coordinator().output();
  EXPECT_EQ(ListeningPort(cluster.server(1).output()), port)
      << cluster.server(1).output();
  EXPECT_NE(cluster.server(0).output().find("took over"), std::string::npos)
      << cluster.server(0).output();
  EXPECT_EQ(cluster.coordinator().output().find("rolling back"),
            std::string::npos)
      << cluster.coordinator().output();
}

// One server killed and restarted, then the other: the first takeover
// leaves slots with no copy; they get new backups (the restarted process
// among them), whole copies go to them while the job runs, and `ductile
// status` says when every slot has one again. The second death is then
// taken over too: two deaths, no rollback, exact counts.
TEST(Takeover, TheRebuiltBackupsTakeASecondDeathOver) {
  RecoveryCluster cluster;
  cluster.set_coordinator_flags({"--replicas=2"});
  cluster.Start(/*clocks=*/400, "bsp");
  ASSERT_TRUE(cluster.WaitForCheckpoint(20));
  Kill9(cluster.server(1));
  cluster.StartServer(1);
  ASSERT_TRUE(
      cluster.WaitForOutput(cluster.coordinator(), "rebalance done", 30000))
      << cluster.coordinator().output();
  ASSERT_TRUE(cluster.WaitForStatus([](const ClusterStatus& s) {
    return s.replicas == 2 && s.takeovers == 1 && s.slots_moving == 0 &&
           s.slots_without_copy == 0;
  })) << cluster.coordinator().output();
  Kill9(cluster.server(0));
  cluster.StartServer(0);
  const std::string out =
      cluster.ExpectWorkersExact(400, /*rolled_back=*/false);
  EXPECT_EQ(out.find("verified rollback"), std::string::npos) << out;
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 0)
      << cluster.coordinator().output();
  const std::string coordinator = cluster.coordinator().output();
  EXPECT_EQ(coordinator.find("rolling back"), std::string::npos) << coordinator;
  EXPECT_NE(coordinator.find("every slot has a backup with a whole copy again"),
            std::string::npos)
      << coordinator;
  EXPECT_EQ(cluster.server(1).WaitExit(kWaitMs), 0);
  EXPECT_NE(cluster.server(1).output().find("took over"), std::string::npos)
      << cluster.server(1).output();
}

// A primary paused (SIGSTOP) past the heartbeat timeout is taken for dead
// and its slots taken over, with no rollback. Running again, it still
// holds its keys and may take requests sent to it before the takeover; its
// backup, now their owner, refuses its records about them, so it answers
// none (it is fenced). It rejoins with no keys, gets its share of the
// slots back, and the counts stay exact: nothing applied twice or lost.
TEST(Takeover, APausedPrimaryComingBackRejoinsWithNothingAppliedTwice) {
  RecoveryCluster cluster;  // heartbeat timeout 4 s
  cluster.set_coordinator_flags({"--replicas=2"});
  cluster.Start(/*clocks=*/400, "async");
  ASSERT_TRUE(cluster.WaitForCheckpoint(10));
  ASSERT_NO_FATAL_FAILURE(testing::Pause(cluster.server(1)));
  ASSERT_TRUE(cluster.WaitForOutput(cluster.coordinator(),
                                    "taken over by their backups", 20000))
      << cluster.coordinator().output();
  ASSERT_NO_FATAL_FAILURE(testing::Resume(cluster.server(1)));
  ASSERT_TRUE(cluster.WaitForOutput(cluster.coordinator(),
                                    "server 1 rejoined at generation", 20000))
      << cluster.coordinator().output() << cluster.server(1).output();
  const std::string out =
      cluster.ExpectWorkersExact(400, /*rolled_back=*/false);
  EXPECT_EQ(out.find("verified rollback"), std::string::npos) << out;
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 0)
      << cluster.coordinator().output();
  EXPECT_EQ(cluster.server(1).WaitExit(kWaitMs), 0)
      << cluster.server(1).output();
  EXPECT_EQ(cluster.coordinator().output().find("rolling back"),
            std::string::npos)
      << cluster.coordinator().output();
}

INSTANTIATE_TEST_SUITE_P(Modes, TakeoverUnder,
                         ::testing::Values("bsp", "ssp", "async"),
                         [](const auto& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace ductile
