// The consistency contract with workers as separate processes
// (tests/consistency_worker_main.cc) against an in-process cluster: one
// straggler process stops itself with SIGSTOP at clock k and is resumed
// with SIGCONT once the fast workers have been seen held at the bound.
// Each worker checks properties 1, 2 and 8 on every read and reports its
// final counters and largest observed staleness; this test checks those
// reports, the exit codes and, while the straggler is stopped, how far the
// fast workers got (property 5; property 7 for async). Every wait is
// bounded; children are killed on failure.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "sim/counter_oracle.h"
#include "tests/child_process.h"
#include "tests/test_cluster.h"

#ifndef DUCTILE_CONSISTENCY_WORKER
#error "DUCTILE_CONSISTENCY_WORKER (path of consistency_worker) must be set"
#endif

namespace ductile {
namespace {

using testing::TestCluster;
using testing::TestClusterOptions;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int64_t kWaitMs = 60000;  // bound of every wait (sanitizers)
constexpr milliseconds kBlockedObservation{300};

using WorkerProcess = testing::ChildProcess;

// Pumps every process's output until `done` or `limit_ms` passes.
bool PumpUntil(std::vector<std::unique_ptr<WorkerProcess>>& processes,
               const std::function<bool()>& done, int64_t limit_ms = kWaitMs) {
  const auto deadline = SteadyClock::now() + milliseconds(limit_ms);
  while (!done()) {
    if (SteadyClock::now() >= deadline) return false;
    for (auto& p : processes) p->Pump(2);
  }
  return true;
}

// The fields of a worker's RESULT line.
std::map<std::string, std::string> ParseResult(const std::string& output) {
  std::map<std::string, std::string> fields;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("RESULT ", 0) != 0) continue;
    std::istringstream words(line.substr(7));
    std::string word;
    while (words >> word) {
      const size_t eq = word.find('=');
      if (eq != std::string::npos) {
        fields[word.substr(0, eq)] = word.substr(eq + 1);
      }
    }
  }
  return fields;
}

std::string Repeat(int64_t value, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (i > 0) out += ",";
    out += std::to_string(value);
  }
  return out;
}

struct ProcessCase {
  const char* name;
  const char* mode;  // consistency_worker's --mode
  int staleness;
};

void PrintTo(const ProcessCase& c, std::ostream* os) { *os << c.name; }

class ConsistencyProcesses : public ::testing::TestWithParam<ProcessCase> {};

TEST_P(ConsistencyProcesses,
       StoppedStragglerProcessHoldsFastWorkersAtTheBound) {
  constexpr int kWorkers = 3;
  constexpr int64_t kClocks = 10;
  constexpr int64_t kStopAt = 3;  // k
  const ProcessCase param = GetParam();
  const bool async = std::string(param.mode) == "async";
  const int64_t s = std::string(param.mode) == "bsp" ? 0 : param.staleness;

  TestClusterOptions options;
  options.num_servers = 2;
  options.num_workers = kWorkers;
  // A stopped process sends no heartbeats; it must not be declared dead
  // while this test holds it (that is not what is tested here).
  options.heartbeat_timeout_ms = 600000;
  TestCluster cluster(options);

  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int i = 0; i < kWorkers; ++i) {
    std::vector<std::string> args = {
        DUCTILE_CONSISTENCY_WORKER,
        "--coordinator=" + cluster.address(),
        "--workers=" + std::to_string(kWorkers),
        "--clocks=" + std::to_string(kClocks),
        std::string("--mode=") + param.mode,
        "--staleness=" + std::to_string(param.staleness),
        "--combine=sum",
        "--seed=" + std::to_string(7000 + i),
        "--max_sleep_us=2000",
        "--stop_at=" + std::to_string(i == 0 ? kStopAt : -1)};
    workers.push_back(std::make_unique<WorkerProcess>(args));
  }
  WorkerProcess& straggler = *workers[0];
  auto dump = [&] {
    std::string all;
    for (int i = 0; i < kWorkers; ++i) {
      all += "--- process " + std::to_string(i) + " output:\n" +
             workers[i]->output();
    }
    return all;
  };

  ASSERT_TRUE(straggler.WaitStopped(kWaitMs))
      << "the straggler did not stop at clock k\n"
      << dump();
  EXPECT_TRUE(straggler.HasLine("stopping " + std::to_string(kStopAt)));
  // While it is stopped, the fast workers get exactly as far as the bound
  // allows (async: all the way).
  const int64_t last_free = async ? kClocks : kStopAt + s;
  const std::string reached = async ? "pulled " + std::to_string(kClocks)
                                    : "clock " + std::to_string(last_free + 1);
  ASSERT_TRUE(PumpUntil(workers,
                        [&] {
                          for (int i = 1; i < kWorkers; ++i) {
                            if (!workers[i]->HasLine(reached)) return false;
                          }
                          return true;
                        }))
      << "fast workers never printed '" << reached << "'\n"
      << dump();
  if (!async) {
    // Their pulls at clock k + s + 1 are parked at the servers ...
    EXPECT_TRUE(PumpUntil(workers, [&] {
      uint64_t parked = 0;
      for (int i = 0; i < cluster.num_servers(); ++i) {
        parked += cluster.server(i).counters().parked_pulls;
      }
      return parked >= kWorkers - 1;
    }));
  }
  // ... and stay there while the straggler is stopped.
  PumpUntil(
      workers, [] { return false; }, kBlockedObservation.count());
  for (int i = 1; i < kWorkers; ++i) {
    EXPECT_EQ(workers[i]->Latest("pulled"), last_free)
        << "(5) fast process " << i << "\n"
        << dump();
  }
  for (int i = 0; i < cluster.num_servers(); ++i) {
    EXPECT_EQ(cluster.server(i).counters().min_clock, kStopAt)
        << "(4) server " << i;
  }
  ASSERT_EQ(kill(straggler.pid(), SIGCONT), 0);

  for (int i = 0; i < kWorkers; ++i) {
    EXPECT_EQ(workers[i]->WaitExit(kWaitMs), 0) << "process " << i << "\n"
                                                << dump();
  }
  Consistency summed;  // the workers combine BSP's pushes by sum
  summed.combine = BspCombine::kSum;
  const counter_oracle::FinalState want =
      counter_oracle::Final(kWorkers, kClocks, summed);
  for (int i = 0; i < kWorkers; ++i) {
    SCOPED_TRACE("process " + std::to_string(i));
    auto result = ParseResult(workers[i]->output());
    ASSERT_FALSE(result.empty()) << "no RESULT line\n" << dump();
    EXPECT_EQ(result["violations"], "0") << dump();
    // (3) and (8): exact counters after the barrier (the shared key gets
    // no bits or last pushes).
    EXPECT_EQ(result["counters"],
              Repeat(static_cast<int64_t>(want.counter), kWorkers) + "," +
                  std::to_string(static_cast<int64_t>(want.shared)));
    EXPECT_EQ(result["bits"],
              Repeat(static_cast<int64_t>(want.bits), kWorkers) + ",0");
    EXPECT_EQ(result["last"],
              Repeat(static_cast<int64_t>(want.last), kWorkers) + ",0");
    const int64_t max_staleness = std::stoll(result["max_staleness"]);
    if (i == 0) {
      if (!async) {
        EXPECT_LE(max_staleness, s);
      }
    } else if (async) {
      // (7) the fast workers' reads at clock kClocks were made while the
      // straggler was stopped at k or earlier (nothing made them wait for
      // it to get there): at least kClocks - k ahead, beyond any bound.
      EXPECT_GE(max_staleness, kClocks - kStopAt);
    } else {
      // (5) the largest gap a fast worker saw is s, not less.
      EXPECT_EQ(max_staleness, s);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ConsistencyProcesses,
                         ::testing::Values(ProcessCase{"Ssp0", "ssp", 0},
                                           ProcessCase{"Ssp2", "ssp", 2},
                                           ProcessCase{"Bsp", "bsp", 0},
                                           ProcessCase{"Async", "async", 0}),
                         [](const ::testing::TestParamInfo<ProcessCase>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace ductile
