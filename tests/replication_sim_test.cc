// Replication (--replicas=2) in the deterministic simulation: a real
// coordinator, servers and workers on a simulated network with delays,
// duplicates and losses, the counter workload's oracle checking the
// consistency contract at every read and exactly-once at the end. A
// server crash with a live backup for each of its slots is taken over with
// no rollback; losing both copies of a slot rolls the job back as without
// replicas.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>

#include "glog/logging.h"
#include "gtest/gtest.h"
#include "sim/sim_cluster.h"
#include "tests/sim_test_support.h"

namespace ductile::sim {
namespace {

using testing::SlowTestSeeds;

// Seed `seed`'s job: 2 or 3 servers, 2 to 4 workers, each model, faults
// on the network, checkpoints, and every slot with a backup.
SimOptions Replicated(uint64_t seed) {
  SimOptions o;
  o.seed = seed;
  o.replicas = 2;
  o.servers = 2 + static_cast<int>(seed % 2);
  o.workers = 2 + static_cast<int>((seed / 2) % 3);
  o.clocks = 8 + static_cast<int>(seed % 4);
  switch ((seed / 6) % 4) {
    case 0:
      o.consistency = {ConsistencyMode::kBsp, 0};
      break;
    case 1:
      o.consistency = {ConsistencyMode::kSsp, static_cast<int>(seed % 3)};
      o.cache = seed % 2 == 0;
      break;
    case 2:
      o.consistency = {ConsistencyMode::kSsp, 2};
      break;
    default:
      o.consistency = {ConsistencyMode::kAsync, 0};
  }
  o.push_pull = (seed / 5) % 2 == 1;
  o.faults.delay = (seed % 7) * 0.01;
  o.faults.duplicate = (seed % 4) * 0.02;
  o.faults.drop = (seed % 6) * 0.01;
  o.checkpoint_every = 2;
  return o;
}

// Runs seeds 1..`n` of Replicated() with `fault` added; counts those that
// break a property, roll back or end before every crash came, and reports
// the first five.
int FailedSeeds(uint64_t n, const std::function<void(SimOptions&)>& fault) {
  int failures = 0;
  for (uint64_t seed = 1; seed <= n; ++seed) {
    SimOptions o = Replicated(seed);
    fault(o);
    const SimResult r = RunSimulation(o);
    const int crashes = static_cast<int>(o.crashes.size());
    if (r.ok && r.rollbacks == 0 && r.server_crashes == crashes) continue;
    if (++failures <= 5) {
      ADD_FAILURE() << Describe(o) << ": "
                    << (!r.ok ? r.failure
                        : r.rollbacks > 0
                            ? std::to_string(r.rollbacks) + " rollback(s)"
                            : std::to_string(r.server_crashes) + " of " +
                                  std::to_string(crashes) +
                                  " crash(es) came before the job ended");
    }
  }
  return failures;
}

// One server killed at a clock from 2 to 5 and restarted 50 ms later.
void KillOne(SimOptions& o) {
  o.crashes.push_back({static_cast<int>(o.seed % o.servers),
                       2 + static_cast<int64_t>(o.seed % 4), 50});
}

// The coordinator killed too, from 0 to 80 ms after every worker passed
// the first kill's clock, and restarted on its state 100 ms later.
void CoordinatorCrashToo(SimOptions& o) {
  o.coordinator_crashes.push_back(
      {o.crashes.front().at_clock, static_cast<int64_t>(o.seed % 5) * 20, 100});
}

// One server killed at clock 2, another at clock 6 or later, once the
// coordinator sees the slots the first left without a copy with whole
// new backups (the rebuilt backups' test; a death before that rolls back).
void SecondKill(SimOptions& o) {
  const int first = static_cast<int>(o.seed % o.servers);
  o.crashes.push_back({first, 2, 50});
  SimOptions::Crash second{(first + 1) % o.servers, 6, 50};
  second.after_rebuilt_backups = true;
  o.crashes.push_back(second);
}

// The crash case of seed N alone: DUCTILE_SIM_SEED=N (with
// DUCTILE_SIM_LOGS=1 GLOG_v=1, every node's log), to reproduce a failure;
// with DUCTILE_SIM_COORDINATOR_CRASH=1 the coordinator is also killed and
// restarted on its state around the server's death; with
// DUCTILE_SIM_SECOND_KILL=1 the case is SecondKill's.
TEST(ReplicationSimulationRepro, TheSeedFromTheEnvironment) {
  const char* v = std::getenv("DUCTILE_SIM_SEED");
  if (v == nullptr) GTEST_SKIP() << "DUCTILE_SIM_SEED is not set";
  const uint64_t seed = std::strtoull(v, nullptr, 10);
  SimOptions o = Replicated(seed);
  if (std::getenv("DUCTILE_SIM_SECOND_KILL") != nullptr) {
    SecondKill(o);
  } else {
    KillOne(o);
  }
  if (std::getenv("DUCTILE_SIM_COORDINATOR_CRASH") != nullptr) {
    CoordinatorCrashToo(o);
  }
  const SimResult r = RunSimulation(o);
  EXPECT_TRUE(r.ok) << Describe(o) << ": " << r.failure;
  EXPECT_EQ(r.rollbacks, 0) << Describe(o);
  EXPECT_EQ(r.server_crashes, static_cast<int>(o.crashes.size()))
      << Describe(o);
}

// A server killed mid-run and started again (its registration tells the
// coordinator the old process died): its backups take its slots over, no
// worker rolls back, and every read and the end state are exact.
TEST(ReplicationSimulation, AKilledServersSlotsAreTakenOverWithNoRollback) {
  EXPECT_EQ(FailedSeeds(SlowTestSeeds(1000), KillOne), 0);
}

// A server paused past the heartbeat timeout is taken for dead and taken
// over; running again, what it still holds is fenced off, it rejoins with
// no keys and gets slots back. No rollback, every read exact.
TEST(ReplicationSimulation, APausedServerIsTakenOverAndRejoins) {
  EXPECT_EQ(FailedSeeds(SlowTestSeeds(200),
                        [](SimOptions& o) {
                          o.crashes.push_back(
                              {.server = static_cast<int>(o.seed % o.servers),
                               .at_clock = static_cast<int64_t>(2 + o.seed % 4),
                               .down_ms = 7000,
                               .pause = true});
                        }),
            0);
}

// One server killed, then another: the first takeover leaves slots with
// no copy, which get new backups (the restarted process among them) and
// whole copies while the job goes on; the second death is taken over too.
TEST(ReplicationSimulation, ASecondKillIsTakenOverByTheRebuiltBackups) {
  EXPECT_EQ(FailedSeeds(SlowTestSeeds(200), SecondKill), 0);
}

// The coordinator killed around a server's death and restarted on its
// state (before, during or after the takeover): the takeover holds, the
// restarted coordinator abandons the moves its earlier process planned
// (one still on its way is refused), and nothing rolls back.
TEST(ReplicationSimulation,
     ACoordinatorRestartAroundATakeoverRollsNothingBack) {
  EXPECT_EQ(FailedSeeds(SlowTestSeeds(200),
                        [](SimOptions& o) {
                          KillOne(o);
                          CoordinatorCrashToo(o);
                        }),
            0);
}

// Two servers of two die together: no slot has a live copy, and the job
// rolls back to its last checkpoint, exactly as without replicas.
TEST(ReplicationSimulation, BothCopiesLostRollsTheJobBack) {
  for (uint64_t seed = 1; seed <= SlowTestSeeds(12); ++seed) {
    SimOptions o = Replicated(seed);
    o.servers = 2;
    const int64_t at = 2 + static_cast<int64_t>(seed % 4);
    o.crashes.push_back({0, at, 50});
    o.crashes.push_back({1, at, 50});
    const SimResult r = RunSimulation(o);
    ASSERT_TRUE(r.ok) << Describe(o) << ": " << r.failure;
    EXPECT_GT(r.rollbacks, 0) << Describe(o);
  }
}

}  // namespace
}  // namespace ductile::sim
