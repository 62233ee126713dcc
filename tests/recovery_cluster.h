// A job of real processes on loopback for the process-level fault tests
// (tests/recovery_process_test.cc, tests/migration_fault_test.cc): a
// coordinator and servers (`ductile`), two workers running the exact
// counter workload of tests/recovery_worker_main.cc, checkpoints every 10
// clocks. Processes can be killed (SIGKILL), paused (SIGSTOP) and resumed;
// killed ones are started again on the same state directory. Every wait is
// bounded; every process is killed and the job's files removed when the
// cluster goes out of scope.
//
// A test's translation unit defines DUCTILE_CLI and DUCTILE_RECOVERY_WORKER
// (the binaries' paths) before including this header.
#ifndef DUCTILE_TESTS_RECOVERY_CLUSTER_H_
#define DUCTILE_TESTS_RECOVERY_CLUSTER_H_

#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
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

namespace ductile::testing {

constexpr int64_t kWaitMs = 120000;  // bound of every wait (sanitizers)

class RecoveryCluster {
 public:
  // How long a member may be silent before the coordinator declares it
  // dead: long enough that a worker stalled by a sanitizer on a loaded
  // machine is not declared dead (a BSP worker dropped and heard from again
  // has its late push applied as a step of its own, which the exact Adam
  // state would, rightly, count as a mismatch).
  static constexpr int64_t kHeartbeatTimeoutMs = 4000;

  // `heartbeat_timeout_ms`: the coordinator's.
  explicit RecoveryCluster(int64_t heartbeat_timeout_ms = kHeartbeatTimeoutMs)
      : heartbeat_timeout_ms_(heartbeat_timeout_ms) {
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
  RecoveryCluster(const RecoveryCluster&) = delete;
  RecoveryCluster& operator=(const RecoveryCluster&) = delete;

  const std::string& address() const { return address_; }
  const std::string& dir() const { return dir_; }
  int64_t heartbeat_timeout_ms() const { return heartbeat_timeout_ms_; }

  void StartCoordinator() {
    std::vector<std::string> args = {
        DUCTILE_CLI,
        "coordinator",
        "--listen=" + address_,
        "--servers=2",
        "--workers=2",
        "--slots=64",
        "--state_dir=" + dir_ + "/coordinator",
        "--checkpoint_every=10",
        "--heartbeat_timeout_ms=" + std::to_string(heartbeat_timeout_ms_)};
    args.insert(args.end(), coordinator_flags_.begin(),
                coordinator_flags_.end());
    coordinator_ = std::make_unique<ChildProcess>(std::move(args));
  }
  // Flags of the coordinators started from now on, beyond the usual.
  void set_coordinator_flags(std::vector<std::string> flags) {
    coordinator_flags_ = std::move(flags);
  }
  // Starts server `id` (again, if it was killed: same state directory),
  // with `flags` beyond the usual. The job starts with servers 0 and 1; a
  // higher id joins it.
  void StartServer(int id, const std::vector<std::string>& flags = {}) {
    if (servers_.size() <= static_cast<size_t>(id)) servers_.resize(id + 1);
    std::vector<std::string> args = {
        DUCTILE_CLI, "server", "--coordinator=" + address_,
        "--server_id=" + std::to_string(id), "--state_dir=" + dir_ + "/servers",
        // A killed server's socket file goes with the job's directory.
        "--ipc_dir=" + dir_, "--timeout_ms=30000",
        "--move_timeout_ms=" + std::to_string(move_timeout_ms_),
        "--coordinator_timeout_ms=" + std::to_string(coordinator_timeout_ms_)};
    args.insert(args.end(), flags.begin(), flags.end());
    servers_[id] = std::make_unique<ChildProcess>(std::move(args));
  }
  // Flags of the workers started from now on, beyond the usual.
  void set_worker_flags(std::vector<std::string> flags) {
    worker_flags_ = std::move(flags);
  }
  // A slot move's timeout at the servers started from now on.
  void set_move_timeout_ms(int64_t ms) { move_timeout_ms_ = ms; }
  // How long the servers started from now on wait for word from the
  // coordinator before they stop.
  void set_coordinator_timeout_ms(int64_t ms) { coordinator_timeout_ms_ = ms; }
  void StartWorkers(int clocks, const std::string& mode) {
    for (int i = 0; i < 2; ++i) {
      std::vector<std::string> args = {
          DUCTILE_RECOVERY_WORKER, "--coordinator=" + address_,
          "--clocks=" + std::to_string(clocks), "--keys=48",
          // Under async the workers drift apart: one sleeps more.
          "--sleep_ms=" + std::to_string(mode == "async" ? 10 + 15 * i : 15),
          "--mode=" + mode};
      args.insert(args.end(), worker_flags_.begin(), worker_flags_.end());
      workers_.push_back(std::make_unique<ChildProcess>(std::move(args)));
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

  // Waits (bounded by `limit_ms`) until `done` holds for the coordinator's
  // answer to a status query.
  bool WaitForStatus(const std::function<bool(const ClusterStatus&)>& done,
                     int64_t limit_ms = kWaitMs) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      PumpAll();
      auto status = QueryClusterStatus(address_, 2000);
      if (status.ok() && done(*status)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Waits (bounded) until the coordinator's catalog has a checkpoint at
  // `clock` or later.
  // Waits until the coordinator lists `n` members of `role` ("server",
  // "worker").
  bool WaitForMembers(const std::string& role, int n) {
    return WaitForStatus(
        [&](const ClusterStatus& s) {
          int count = 0;
          for (const auto& m : s.members) count += m.role == role;
          return count == n;
        },
        kWaitMs);
  }
  bool WaitForCheckpoint(int64_t clock) {
    return WaitForStatus([clock](const ClusterStatus& s) {
      return s.last_checkpoint_clock >= clock;
    });
  }

  // Waits (bounded by `limit_ms`) until `p` has printed `text`; the other
  // processes' output is read meanwhile.
  bool WaitForOutput(ChildProcess& p, const std::string& text,
                     int64_t limit_ms = kWaitMs) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
    while (p.output().find(text) == std::string::npos) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      PumpAll();
    }
    return true;
  }

  // Waits for both workers; each must have exited 0.
  void ExpectWorkersSucceed() {
    for (int i = 0; i < 2; ++i) {
      const int code = worker(i).WaitExit(kWaitMs);
      if (code == 0) continue;
      PumpAll();
      ADD_FAILURE() << "worker " << i << " exited with " << code
                    << "; its output:\n"
                    << worker(i).output() << "\ncoordinator:\n"
                    << coordinator().output() << "\n"
                    << ServerOutput();
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
  // Output of every server started, each under a heading.
  std::string ServerOutput() {
    std::string out;
    for (size_t s = 0; s < servers_.size(); ++s) {
      if (servers_[s]) {
        out += "server " + std::to_string(s) + ":\n" + servers_[s]->output() +
               "\n";
      }
    }
    return out;
  }

 private:
  const int64_t heartbeat_timeout_ms_;
  int64_t move_timeout_ms_ = 30000;
  int64_t coordinator_timeout_ms_ = 600000;
  std::vector<std::string> coordinator_flags_;
  std::vector<std::string> worker_flags_;
  std::string dir_;
  std::string address_;
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> servers_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
};

inline void Kill9(ChildProcess& p) {
  ASSERT_GT(p.pid(), 0);
  ASSERT_EQ(kill(p.pid(), SIGKILL), 0);
  EXPECT_EQ(p.WaitExit(10000), -1);  // killed by the signal
}

// Stops `p` with SIGSTOP and waits until it has stopped: it reads,
// answers and heartbeats nothing until Resume.
inline void Pause(ChildProcess& p) {
  ASSERT_GT(p.pid(), 0);
  ASSERT_EQ(kill(p.pid(), SIGSTOP), 0);
  ASSERT_TRUE(p.WaitStopped(10000));
}

inline void Resume(ChildProcess& p) {
  ASSERT_GT(p.pid(), 0);
  ASSERT_EQ(kill(p.pid(), SIGCONT), 0);
}

// The port of the tcp:// address a process printed ("... listening on
// tcp://H:PORT ..."), or -1.
inline int ListeningPort(const std::string& output) {
  const std::string marker = "listening on tcp://";
  const size_t at = output.find(marker);
  if (at == std::string::npos) return -1;
  const size_t colon = output.find(':', at + marker.size());
  return colon == std::string::npos ? -1 : std::stoi(output.substr(colon + 1));
}

}  // namespace ductile::testing

#endif  // DUCTILE_TESTS_RECOVERY_CLUSTER_H_
