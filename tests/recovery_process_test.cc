// Fault tolerance with real processes on loopback: a coordinator and two
// servers (`ductile`), two workers running the exact counter workload of
// tests/recovery_worker_main.cc, checkpoints every 10 clocks. A server or
// the coordinator is killed with SIGKILL mid-run; the workers check, bit for
// bit, that the state after the rollback is exactly the state at the
// checkpoint's clock and that the final state is exactly the one with every
// update applied once. Every wait is bounded; every process is killed and
// its files removed when a test ends.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ductile/admin.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"

#ifndef DUCTILE_CLI
#error "DUCTILE_CLI (path of the ductile binary) must be set"
#endif
#ifndef DUCTILE_RECOVERY_WORKER
#error "DUCTILE_RECOVERY_WORKER (path of recovery_worker) must be set"
#endif

namespace ductile {
namespace {

using testing::ChildProcess;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int64_t kWaitMs = 120000;  // bound of every wait (sanitizers)

class RecoveryCluster {
 public:
  RecoveryCluster() {
    char pattern[] = "/tmp/ductile-recovery-XXXXXX";
    const char* made = mkdtemp(pattern);
    EXPECT_NE(made, nullptr);
    dir_ = made ? made : "/tmp";
    address_ = "ipc://" + dir_ + "/coordinator.sock";
  }
  ~RecoveryCluster() {
    workers_.clear();
    servers_.clear();
    coordinator_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  const std::string& address() const { return address_; }
  const std::string& dir() const { return dir_; }

  void StartCoordinator() {
    coordinator_ = std::make_unique<ChildProcess>(std::vector<std::string>{
        DUCTILE_CLI, "coordinator", "--listen=" + address_, "--servers=2",
        "--workers=2", "--slots=64", "--state_dir=" + dir_ + "/coordinator",
        "--checkpoint_every=10",
        // Long enough that a worker stalled by a sanitizer on a loaded
        // machine is not declared dead: a BSP worker dropped and heard
        // from again has its late push applied as a step of its own, which
        // the exact Adam state would (rightly) count as a mismatch.
        "--heartbeat_timeout_ms=4000"});
  }
  void StartServer(int id) {
    if (servers_.size() <= static_cast<size_t>(id)) servers_.resize(id + 1);
    servers_[id] = std::make_unique<ChildProcess>(std::vector<std::string>{
        DUCTILE_CLI, "server", "--coordinator=" + address_,
        "--server_id=" + std::to_string(id), "--state_dir=" + dir_ + "/servers",
        "--timeout_ms=30000"});
  }
  void StartWorkers(int clocks, const std::string& mode) {
    for (int i = 0; i < 2; ++i) {
      workers_.push_back(
          std::make_unique<ChildProcess>(std::vector<std::string>{
              DUCTILE_RECOVERY_WORKER, "--coordinator=" + address_,
              "--clocks=" + std::to_string(clocks), "--keys=48",
              // Under async the workers drift apart: one sleeps more.
              "--sleep_ms=" +
                  std::to_string(mode == "async" ? 10 + 15 * i : 15),
              "--mode=" + mode}));
    }
  }
  void Start(int clocks, const std::string& mode = "bsp") {
    StartCoordinator();
    StartServer(0);
    StartServer(1);
    StartWorkers(clocks, mode);
  }

  ChildProcess& coordinator() { return *coordinator_; }
  ChildProcess& server(int id) { return *servers_[id]; }
  ChildProcess& worker(int i) { return *workers_[i]; }

  void PumpAll() {
    for (auto* group : {&workers_, &servers_}) {
      for (auto& p : *group) {
        if (p) p->Pump(1);
      }
    }
    if (coordinator_) coordinator_->Pump(1);
  }

  // Waits (bounded) until the coordinator's catalog has a checkpoint at
  // `clock` or later.
  bool WaitForCheckpoint(int64_t clock) {
    const auto deadline = SteadyClock::now() + milliseconds(kWaitMs);
    while (SteadyClock::now() < deadline) {
      PumpAll();
      auto status = QueryClusterStatus(address_, 2000);
      if (status.ok() && status->last_checkpoint_clock >= clock) return true;
      std::this_thread::sleep_for(milliseconds(20));
    }
    return false;
  }

  // Waits for both workers; each must have exited 0.
  void ExpectWorkersSucceed() {
    for (int i = 0; i < 2; ++i) {
      const int code = worker(i).WaitExit(kWaitMs);
      if (code == 0) continue;
      PumpAll();
      std::string servers;
      for (size_t s = 0; s < servers_.size(); ++s) {
        if (servers_[s]) {
          servers += "server " + std::to_string(s) + ":\n" +
                     servers_[s]->output() + "\n";
        }
      }
      ADD_FAILURE() << "worker " << i << " exited with " << code
                    << "; its output:\n"
                    << worker(i).output() << "\ncoordinator:\n"
                    << coordinator().output() << "\n"
                    << servers;
    }
  }

  // Waits for both workers, which must have checked the final state of a
  // run of `clocks` (and, if `rolled_back`, the state after a rollback)
  // exactly; returns their output.
  std::string ExpectWorkersExact(int clocks, bool rolled_back) {
    ExpectWorkersSucceed();
    const std::string out = WorkerOutput();
    if (rolled_back) {
      EXPECT_NE(out.find("verified rollback to clock "), std::string::npos)
          << out;
    }
    EXPECT_NE(out.find("final state exact at clock " + std::to_string(clocks)),
              std::string::npos)
        << out;
    return out;
  }

  // Output of every worker, concatenated.
  std::string WorkerOutput() {
    std::string out;
    for (auto& w : workers_) out += w->output();
    return out;
  }

 private:
  std::string dir_;
  std::string address_;
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> servers_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
};

void Kill9(ChildProcess& p) {
  ASSERT_GT(p.pid(), 0);
  ASSERT_EQ(kill(p.pid(), SIGKILL), 0);
  EXPECT_EQ(p.WaitExit(10000), -1);  // killed by the signal
}

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
