// Fault tolerance with real processes on loopback: a coordinator and two
// servers (`ductile`), two workers running the exact counter workload of
// tests/recovery_worker_main.cc, checkpoints every 10 clocks. A server or
// the coordinator is killed with SIGKILL mid-run; the workers check, bit for
// bit, that the state after the rollback is exactly the state at the
// checkpoint's clock and that the final state is exactly the one with every
// update applied once. Every wait is bounded; every process is killed and
// its files removed when a test ends.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "ductile/admin.h"
#include "gtest/gtest.h"
#include "tests/recovery_cluster.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;
using testing::ChildProcess;
using testing::Kill9;
using testing::kWaitMs;
using testing::RecoveryCluster;

class RecoveryUnder : public ::testing::TestWithParam<const char*> {};

// Under SSP and async only the hold of later pushes at the servers makes a
// checkpoint exactly the cut at its clock.
TEST_P(RecoveryUnder, AKilledServerRestartedRestoresTheExactCheckpointState) {
  RecoveryCluster cluster;
  cluster.Start(/*clocks=*/160, GetParam());
  ASSERT_TRUE(cluster.WaitForCheckpoint(20));
  Kill9(cluster.server(1));
  cluster.StartServer(1);  // same id, same state directory
  cluster.ExpectWorkersExact(160, /*rolled_back=*/true);
  // The job ends by itself: coordinator and servers exit cleanly.
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 0)
      << cluster.coordinator().output();
  EXPECT_EQ(cluster.server(0).WaitExit(kWaitMs), 0);
  EXPECT_EQ(cluster.server(1).WaitExit(kWaitMs), 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, RecoveryUnder,
                         ::testing::Values("bsp", "ssp", "async"),
                         [](const auto& info) {
                           return std::string(info.param);
                         });

TEST(RecoveryProcess, AKilledServerNotRestartedHasItsSlotsRestoredOnTheOther) {
  RecoveryCluster cluster;
  cluster.Start(/*clocks=*/160);
  ASSERT_TRUE(cluster.WaitForCheckpoint(20));
  Kill9(cluster.server(1));
  // Declared dead after the heartbeat timeout; server 0 takes its slots
  // from server 1's checkpoint files.
  cluster.ExpectWorkersExact(160, /*rolled_back=*/true);
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 0);
  EXPECT_EQ(cluster.server(0).WaitExit(kWaitMs), 0);
  EXPECT_NE(cluster.coordinator().output().find("moved to the survivors"),
            std::string::npos)
      << cluster.coordinator().output();
}

TEST(RecoveryProcess, AKilledCoordinatorRestartedOnItsStateResumesTheJob) {
  RecoveryCluster cluster;
  cluster.Start(/*clocks=*/160);
  ASSERT_TRUE(cluster.WaitForCheckpoint(20));
  Kill9(cluster.coordinator());
  std::this_thread::sleep_for(milliseconds(300));
  cluster.StartCoordinator();  // same address, same state directory
  cluster.ExpectWorkersExact(160, /*rolled_back=*/false);
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 0)
      << cluster.coordinator().output();
  EXPECT_EQ(cluster.server(0).WaitExit(kWaitMs), 0);
  EXPECT_EQ(cluster.server(1).WaitExit(kWaitMs), 0);
}

// A coordinator paused (SIGSTOP) for twice the heartbeat timeout, as a
// long GC pause or a starved host would: on SIGCONT it must not declare
// every member dead before their heartbeats, queued meanwhile, are read.
// Their silence while it was not running is not theirs: the job goes on
// with no rollback and ends.
TEST(RecoveryProcess, ACoordinatorPausedLongerThanTheHeartbeatTimeoutGoesOn) {
  RecoveryCluster cluster;  // heartbeat timeout 4 s
  // Long enough to train on after the pause (a clock takes about 15 ms).
  cluster.Start(/*clocks=*/400);
  ASSERT_TRUE(cluster.WaitForCheckpoint(10));
  ASSERT_NO_FATAL_FAILURE(testing::Pause(cluster.coordinator()));
  std::this_thread::sleep_for(
      milliseconds(2 * cluster.heartbeat_timeout_ms() + 500));
  ASSERT_NO_FATAL_FAILURE(testing::Resume(cluster.coordinator()));
  const std::string out =
      cluster.ExpectWorkersExact(400, /*rolled_back=*/false);
  EXPECT_EQ(out.find("verified rollback"), std::string::npos) << out;
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 0)
      << cluster.coordinator().output();
  const std::string log = cluster.coordinator().output();
  EXPECT_EQ(log.find("declared dead"), std::string::npos) << log;
  EXPECT_NE(log.find("did not run for"), std::string::npos) << log;
}

// A server paused (SIGSTOP) past the heartbeat timeout is declared dead and
// the job rolls back without it. When it runs again it rejoins with no
// keys and gets its share of the slots back while the job trains on; the
// counts stay exact and it ends with the job.
TEST(RecoveryProcess, AServerPausedPastTheHeartbeatTimeoutRejoinsTheJob) {
  RecoveryCluster cluster;  // heartbeat timeout 4 s
  // Long enough to train on after the pause: a clock takes about 15 ms
  // here, the slots are back about 0.5 s (some 30 clocks) after the
  // rollback to clock 10.
  cluster.Start(/*clocks=*/400);
  ASSERT_TRUE(cluster.WaitForCheckpoint(10));
  ASSERT_NO_FATAL_FAILURE(testing::Pause(cluster.server(1)));
  ASSERT_TRUE(cluster.WaitForOutput(cluster.coordinator(),
                                    "server 1 silent for", 20000))
      << cluster.coordinator().output();
  ASSERT_TRUE(
      cluster.WaitForOutput(cluster.coordinator(), "rolling back", 10000))
      << cluster.coordinator().output();
  ASSERT_NO_FATAL_FAILURE(testing::Resume(cluster.server(1)));
  ASSERT_TRUE(cluster.WaitForOutput(cluster.coordinator(),
                                    "server 1 rejoined at generation", 20000))
      << cluster.coordinator().output() << cluster.server(1).output();
  // Its share of the slots moves back to it.
  ASSERT_TRUE(
      cluster.WaitForOutput(cluster.coordinator(), "to server 1 (", 30000))
      << cluster.coordinator().output();
  cluster.ExpectWorkersExact(400, /*rolled_back=*/true);
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 0)
      << cluster.coordinator().output();
  EXPECT_EQ(cluster.server(1).WaitExit(kWaitMs), 0)
      << cluster.server(1).output();
  EXPECT_NE(cluster.server(1).output().find("rejoining at generation"),
            std::string::npos)
      << cluster.server(1).output();
}

// A restarted coordinator sees every worker finish before any server has
// reconnected: it must not end the job without the servers, which would
// run on forever. Held so on purpose: the coordinator is killed while the
// workers train; the servers are paused while it restarts, so they cannot
// reconnect; once the workers have reconnected, its socket file is
// renamed, so that the servers, going on, serve the workers (already
// connected) but cannot reach it; the workers finish. The file then comes
// back: the servers reconnect, are told the job is over, and exit.
TEST(RecoveryProcess, ServersBackAfterTheJobEndedAreToldToShutDown) {
  RecoveryCluster cluster(/*heartbeat_timeout_ms=*/10000);
  cluster.Start(/*clocks=*/40);
  ASSERT_TRUE(cluster.WaitForCheckpoint(10));
  Kill9(cluster.coordinator());
  // The workers train to the end (data does not go through the
  // coordinator) and wait for it at their final barrier.
  std::this_thread::sleep_for(milliseconds(2000));
  ASSERT_NO_FATAL_FAILURE(testing::Pause(cluster.server(0)));
  ASSERT_NO_FATAL_FAILURE(testing::Pause(cluster.server(1)));
  cluster.StartCoordinator();  // same address, same state directory
  for (int w : {0, 1}) {
    ASSERT_TRUE(cluster.WaitForOutput(
        cluster.coordinator(), "worker " + std::to_string(w) + " reconnected",
        10000))
        << cluster.coordinator().output();
  }
  const std::string path =
      cluster.address().substr(std::string("ipc://").size());
  ASSERT_EQ(std::rename(path.c_str(), (path + ".away").c_str()), 0) << path;
  ASSERT_NO_FATAL_FAILURE(testing::Resume(cluster.server(0)));
  ASSERT_NO_FATAL_FAILURE(testing::Resume(cluster.server(1)));
  const bool finished = cluster.WaitForOutput(cluster.coordinator(),
                                              "every worker finished", 8000);
  // Give a coordinator that would not wait for the servers time to end.
  std::this_thread::sleep_for(milliseconds(1000));
  ASSERT_EQ(std::rename((path + ".away").c_str(), path.c_str()), 0) << path;
  ASSERT_TRUE(finished) << cluster.coordinator().output()
                        << cluster.WorkerOutput();
  cluster.ExpectWorkersExact(40, /*rolled_back=*/false);
  EXPECT_EQ(cluster.server(0).WaitExit(30000), 0) << cluster.server(0).output();
  EXPECT_EQ(cluster.server(1).WaitExit(30000), 0) << cluster.server(1).output();
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 0)
      << cluster.coordinator().output();
  EXPECT_NE(cluster.coordinator().output().find("told to shut down"),
            std::string::npos)
      << cluster.coordinator().output();
}

// A coordinator gone for good (killed, never restarted) leaves no server
// running on forever: each stops once it has heard nothing for its
// coordinator timeout, and says why. While the coordinator lives, its
// answers to the heartbeats keep them running past that timeout.
TEST(RecoveryProcess, ServersStopWhenTheCoordinatorIsGoneForGood) {
  RecoveryCluster cluster;
  cluster.set_coordinator_timeout_ms(3000);
  cluster.Start(/*clocks=*/100000);
  ASSERT_TRUE(cluster.WaitForMembers("server", 2));
  std::this_thread::sleep_for(milliseconds(4500));
  for (int s : {0, 1}) {
    ASSERT_TRUE(cluster.server(s).Running()) << cluster.server(s).output();
  }
  Kill9(cluster.coordinator());
  for (int s : {0, 1}) {
    EXPECT_EQ(cluster.server(s).WaitExit(kWaitMs), 1)
        << cluster.server(s).output();
    EXPECT_NE(
        cluster.server(s).output().find("heard nothing from the coordinator"),
        std::string::npos)
        << cluster.server(s).output();
  }
}

// A job whose workers all died, with none finished and none joining, fails
// after the coordinator's no-worker timeout: the coordinator says why and
// exits with an error, and the servers are told to stop. (It used to wait
// for new workers forever.)
TEST(RecoveryProcess, AJobWhoseWorkersAllDiedFailsAndEnds) {
  RecoveryCluster cluster;
  cluster.set_coordinator_flags({"--no_worker_timeout_ms=2000"});
  cluster.Start(/*clocks=*/100000);
  ASSERT_TRUE(cluster.WaitForMembers("worker", 2));
  Kill9(cluster.worker(0));
  Kill9(cluster.worker(1));
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 1)
      << cluster.coordinator().output();
  EXPECT_NE(cluster.coordinator().output().find("no worker was live"),
            std::string::npos)
      << cluster.coordinator().output();
  for (int s : {0, 1}) {
    EXPECT_EQ(cluster.server(s).WaitExit(kWaitMs), 0)
        << cluster.server(s).output();
  }
}

TEST(RecoveryProcess, ACorruptLatestCheckpointFallsBackToTheOneBefore) {
  RecoveryCluster cluster;
  cluster.Start(/*clocks=*/160);
  ASSERT_TRUE(cluster.WaitForCheckpoint(30));
  Kill9(cluster.server(1));
  // No checkpoint completes without server 1: the catalog's latest is the
  // one the rollback would use. Damage server 1's copy of it.
  auto status = QueryClusterStatus(cluster.address(), 5000);
  ASSERT_TRUE(status.ok()) << status.status();
  const int64_t latest = status->last_checkpoint_clock;
  ASSERT_GE(latest, 30);
  const std::filesystem::path version = std::filesystem::path(cluster.dir()) /
                                        "servers/server-1/checkpoints" /
                                        std::to_string(latest);
  int damaged = 0;
  for (const auto& f : std::filesystem::directory_iterator(version)) {
    if (f.path().filename().string().rfind("MANIFEST-", 0) != 0) continue;
    std::FILE* out = std::fopen(f.path().c_str(), "r+b");
    ASSERT_NE(out, nullptr);
    const std::string garbage(4096, '\x5a');
    std::fwrite(garbage.data(), 1, garbage.size(), out);
    std::fclose(out);
    ++damaged;
  }
  ASSERT_EQ(damaged, 1);
  cluster.StartServer(1);
  const std::string out = cluster.ExpectWorkersExact(160, /*rolled_back=*/true);
  // Not to the damaged one.
  EXPECT_EQ(
      out.find("verified rollback to clock " + std::to_string(latest) + " "),
      std::string::npos)
      << out;
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 0);
  const std::string log = cluster.coordinator().output();
  EXPECT_NE(log.find("the checkpoint at clock " + std::to_string(latest) +
                     " cannot be restored"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("falling back to"), std::string::npos) << log;
}

TEST(RecoveryProcess, AnUnwritableStateDirectoryIsAClearError) {
  RecoveryCluster cluster;
  cluster.StartCoordinator();
  ChildProcess server({DUCTILE_CLI, "server",
                       "--coordinator=" + cluster.address(), "--server_id=0",
                       "--state_dir=/proc/ductile-cannot-write-here",
                       "--timeout_ms=20000"});
  EXPECT_NE(server.WaitExit(kWaitMs), 0);
  EXPECT_NE(server.output().find("cannot open its checkpoint store"),
            std::string::npos)
      << server.output();
  EXPECT_NE(server.output().find("/proc/ductile-cannot-write-here"),
            std::string::npos)
      << server.output();
}

}  // namespace
}  // namespace ductile
