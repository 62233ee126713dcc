// Faults during a slot move, with real processes on loopback
// (docs/elasticity.md, "Faults during a move"): the job of
// tests/recovery_cluster.h (a coordinator, servers 0 and 1, two workers
// running the exact counter workload under BSP, checkpoints every 10
// clocks) is joined by server 2, and while its slots are on the way the
// target, a source or the coordinator is killed, or a checkpoint is
// requested; two servers also join at once. The workers check, bit for
// bit, the state after a rollback and the final state: no update is lost
// or applied twice, whichever way the move ends.
//
// A move is held in flight on purpose, not caught by luck: the sources are
// paused (SIGSTOP) while the joiner registers, so the coordinator's
// MIGRATE_OUT waits at them; the joiner is paused once registered, so it
// acknowledges no chunk; then the sources go on, copy the slots and stream
// them to a target that does not answer. Every pause is far shorter than
// the heartbeat timeout, except where a member is meant to be declared
// dead. Every wait is bounded; every process is killed and its files
// removed when a test ends.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "ductile/admin.h"
#include "gtest/gtest.h"
#include "tests/recovery_cluster.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;
using testing::Kill9;
using testing::kWaitMs;
using testing::Pause;
using testing::RecoveryCluster;
using testing::Resume;

constexpr int kClocks = 80;
// The coordinator's heartbeat timeout here: the sources stay paused while
// the joiners start (a process start, slow under a sanitizer on a loaded
// machine), and must not be declared dead meanwhile.
constexpr int64_t kHeartbeatTimeoutMs = 10000;

// The status of server `id` in `status`, or null.
const MemberStatus* FindServer(const ClusterStatus& status, int32_t id) {
  for (const MemberStatus& m : status.members) {
    if (m.role == "server" && m.id == id) return &m;
  }
  return nullptr;
}

// Server 2 (the joiner) owns slots and nothing is moving.
bool JoinerHasSlots(const ClusterStatus& status) {
  const MemberStatus* joiner = FindServer(status, 2);
  return status.slots_moving == 0 && joiner != nullptr && joiner->slots > 0;
}

// Pauses servers 0 and 1 (the sources of any rebalance), starts `joiners`
// and waits until each has registered, then resumes the sources: each
// joiner's registration has started a rebalance (or queued one behind it)
// before any slot could move. With `pause_joiners`, the joiners are paused
// before the sources go on, so that no chunk is ever acknowledged.
void JoinWhileSourcesArePaused(RecoveryCluster& cluster,
                               const std::vector<int>& joiners,
                               bool pause_joiners) {
  const auto paused_at = std::chrono::steady_clock::now();
  ASSERT_NO_FATAL_FAILURE(Pause(cluster.server(0)));
  ASSERT_NO_FATAL_FAILURE(Pause(cluster.server(1)));
  for (int id : joiners) cluster.StartServer(id);
  for (int id : joiners) {
    ASSERT_TRUE(cluster.WaitForOutput(
        cluster.server(id), "server " + std::to_string(id) + " listening on",
        10000))
        << cluster.server(id).output();
    if (pause_joiners) {
      ASSERT_NO_FATAL_FAILURE(Pause(cluster.server(id)));
    }
  }
  const int64_t paused_ms = std::chrono::duration_cast<milliseconds>(
                                std::chrono::steady_clock::now() - paused_at)
                                .count();
  // Otherwise the sources would be declared dead: not the fault under test.
  ASSERT_LT(paused_ms, kHeartbeatTimeoutMs / 2)
      << "the joiners took too long to register";
  ASSERT_NO_FATAL_FAILURE(Resume(cluster.server(0)));
  ASSERT_NO_FATAL_FAILURE(Resume(cluster.server(1)));
}

// Starts server 2 against the running job and holds the moves of its
// slots in flight: returns once both sources have copied their slots and
// are streaming them to server 2, which stays paused.
void HoldMovesToAJoiner(RecoveryCluster& cluster) {
  ASSERT_NO_FATAL_FAILURE(
      JoinWhileSourcesArePaused(cluster, {2}, /*pause_joiners=*/true));
  for (int source : {0, 1}) {
    ASSERT_TRUE(cluster.WaitForOutput(cluster.server(source),
                                      "slot(s) to server 2:", 10000))
        << cluster.server(source).output();
  }
  // The status shows the moves and the bytes the target has not
  // acknowledged (the sources report them in their heartbeats).
  Result<ClusterStatus> status = UnavailableError("not asked yet");
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  while (std::chrono::steady_clock::now() < deadline) {
    status = QueryClusterStatus(cluster.address(), 5000);
    if (status.ok() && status->slots_moving > 0 &&
        status->move_bytes_left > 0) {
      break;
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_GT(status->slots_moving, 0);
  EXPECT_GT(status->move_bytes_left, 0u);
  EXPECT_NE(FormatClusterStatus(*status).find(" MB left)"), std::string::npos)
      << FormatClusterStatus(*status);
  const MemberStatus* joiner = FindServer(*status, 2);
  ASSERT_NE(joiner, nullptr);
  EXPECT_EQ(joiner->slots, 0);
}

// The servers and the coordinator exit 0 once the job is over.
void ExpectCleanExit(RecoveryCluster& cluster,
                     const std::vector<int>& servers) {
  // After a failed check the job may never end: the cluster's destructor
  // kills it instead.
  if (::testing::Test::HasFailure()) return;
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 0)
      << cluster.coordinator().output();
  for (int id : servers) {
    EXPECT_EQ(cluster.server(id).WaitExit(kWaitMs), 0)
        << cluster.server(id).output();
  }
}

// The joiner, owning nothing after an abandoned move, gets its share in a
// new rebalance; the workers' final state is exact with no rollback, and
// every process ends cleanly.
void ExpectJoinerServesWithoutARollback(RecoveryCluster& cluster) {
  EXPECT_TRUE(cluster.WaitForStatus(JoinerHasSlots, kWaitMs))
      << cluster.coordinator().output();
  const std::string out =
      cluster.ExpectWorkersExact(kClocks, /*rolled_back=*/false);
  EXPECT_EQ(out.find("verified rollback"), std::string::npos) << out;
  ExpectCleanExit(cluster, {0, 1, 2});
}

// The target's death is a server death: the job rolls back to the latest
// checkpoint, and the moves to it are abandoned with the abandoned
// timeline. Its slots were never its own: the sources restore them.
TEST(MigrationFault, ATargetKilledMidMoveRollsTheJobBackWithoutIt) {
  RecoveryCluster cluster(kHeartbeatTimeoutMs);
  cluster.Start(kClocks);
  ASSERT_TRUE(cluster.WaitForCheckpoint(10));
  ASSERT_NO_FATAL_FAILURE(HoldMovesToAJoiner(cluster));
  Kill9(cluster.server(2));
  // Declared dead after the heartbeat timeout.
  cluster.ExpectWorkersExact(kClocks, /*rolled_back=*/true);
  ExpectCleanExit(cluster, {0, 1});
  const std::string log = cluster.coordinator().output();
  EXPECT_NE(log.find("server 2 silent for"), std::string::npos) << log;
  EXPECT_NE(log.find("rebalance abandoned"), std::string::npos) << log;
  EXPECT_EQ(log.find("slot(s) moved from"), std::string::npos) << log;
}

// A target that acknowledges nothing for the move timeout (3 s here; it
// stays paused, far less than the heartbeat timeout, so it is not declared
// dead) fails the move: each source reports it, the coordinator aborts it
// and the sources serve their slots again, with no rollback. The target,
// going on, owns nothing and gets its share in a new rebalance, whose
// first chunks drop the partial copy the failed move may have left there.
TEST(MigrationFault, ASilentTargetFailsTheMoveWhichIsAbortedWithoutARollback) {
  RecoveryCluster cluster(kHeartbeatTimeoutMs);
  cluster.set_move_timeout_ms(3000);
  cluster.Start(kClocks);
  ASSERT_TRUE(cluster.WaitForCheckpoint(10));
  ASSERT_NO_FATAL_FAILURE(HoldMovesToAJoiner(cluster));
  for (int source : {0, 1}) {
    ASSERT_TRUE(cluster.WaitForOutput(cluster.server(source),
                                      "acknowledged 0 of", 10000))
        << cluster.server(source).output();
  }
  ASSERT_NO_FATAL_FAILURE(Resume(cluster.server(2)));
  ExpectJoinerServesWithoutARollback(cluster);
  const std::string log = cluster.coordinator().output();
  const size_t failed = log.find("ended with a failure");
  EXPECT_NE(failed, std::string::npos) << log;
  EXPECT_EQ(log.find("silent for"), std::string::npos) << log;
  EXPECT_LT(failed, log.find("slot(s) moved from")) << log;
}

// A source restarted on its state directory rolls the job back; the moves
// are abandoned and the target, which acknowledged nothing, restores no
// slot. Once the rollback is over, the target, owning nothing, gets its
// share in a new rebalance.
TEST(MigrationFault, ASourceKilledMidMoveAndRestartedRollsTheJobBack) {
  RecoveryCluster cluster(kHeartbeatTimeoutMs);
  cluster.Start(kClocks);
  ASSERT_TRUE(cluster.WaitForCheckpoint(10));
  ASSERT_NO_FATAL_FAILURE(HoldMovesToAJoiner(cluster));
  Kill9(cluster.server(0));
  cluster.StartServer(0);  // same id, same state directory
  // The rollback waits for the paused target's acknowledgement.
  ASSERT_TRUE(cluster.WaitForStatus(
      [](const ClusterStatus& s) { return s.generation > 0; }, 10000));
  ASSERT_NO_FATAL_FAILURE(Resume(cluster.server(2)));
  // After the rollback the joiner, owning nothing, gets its share again.
  EXPECT_TRUE(cluster.WaitForStatus(JoinerHasSlots, kWaitMs))
      << cluster.coordinator().output();
  cluster.ExpectWorkersExact(kClocks, /*rolled_back=*/true);
  ExpectCleanExit(cluster, {0, 1, 2});
  const std::string log = cluster.coordinator().output();
  EXPECT_NE(log.find("server 0 restarted"), std::string::npos) << log;
  const size_t abandoned = log.find("rebalance abandoned");
  EXPECT_NE(abandoned, std::string::npos) << log;
  // Nothing moved before the rollback; the new rebalance moved its slots.
  EXPECT_LT(abandoned, log.find("owns no slot")) << log;
  EXPECT_LT(log.find("owns no slot"), log.find("slot(s) moved from")) << log;
}

// A coordinator restarted on its state directory abandons the moves under
// way: each source, reconnecting, is told to abort and serves its slots
// again; the routing last persisted stands. No rollback. Once the target is
// heard from again, it gets its share in a new rebalance.
TEST(MigrationFault, ACoordinatorRestartedMidMoveAbandonsTheMove) {
  RecoveryCluster cluster(kHeartbeatTimeoutMs);
  cluster.Start(kClocks);
  ASSERT_TRUE(cluster.WaitForCheckpoint(10));
  ASSERT_NO_FATAL_FAILURE(HoldMovesToAJoiner(cluster));
  Kill9(cluster.coordinator());
  const std::string old_log = cluster.coordinator().output();
  std::this_thread::sleep_for(milliseconds(300));
  cluster.StartCoordinator();  // same address, same state directory
  // Both sources have aborted their moves (a heartbeat since says so:
  // the restarted coordinator knows their counters only from heartbeats)
  // while the target is still paused: the move cannot have finished.
  ASSERT_TRUE(cluster.WaitForStatus(
      [](const ClusterStatus& s) {
        for (int id : {0, 1}) {
          const MemberStatus* m = FindServer(s, id);
          if (m == nullptr || m->counters.keys_stored == 0 ||
              m->counters.slots_moving != 0) {
            return false;
          }
        }
        const MemberStatus* joiner = FindServer(s, 2);
        return s.slots_moving == 0 && joiner != nullptr && joiner->slots == 0;
      },
      kHeartbeatTimeoutMs / 2))
      << cluster.coordinator().output();
  ASSERT_NO_FATAL_FAILURE(Resume(cluster.server(2)));
  // Heard from again, the joiner (owning nothing) gets its share: a new
  // rebalance by the restarted coordinator.
  ExpectJoinerServesWithoutARollback(cluster);
  EXPECT_EQ(old_log.find("slot(s) moved from"), std::string::npos) << old_log;
  const std::string log = cluster.coordinator().output();
  EXPECT_NE(log.find("owns no slot"), std::string::npos) << log;
}

// A checkpoint requested while slots move is refused with kUnavailable
// (its catalog would record owners that change under it); once the move
// is done, one is taken with the moved slots at their new owner, and a
// rollback to it restores them there exactly.
TEST(MigrationFault, ACheckpointRequestedMidMoveIsRefusedAndOneAfterItWorks) {
  RecoveryCluster cluster(kHeartbeatTimeoutMs);
  cluster.Start(kClocks);
  ASSERT_TRUE(cluster.WaitForCheckpoint(10));
  ASSERT_NO_FATAL_FAILURE(HoldMovesToAJoiner(cluster));
  Result<int64_t> refused = RequestCheckpoint(cluster.address(), 5000);
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable)
      << refused.status();
  EXPECT_NE(refused.status().message().find("slots are moving"),
            std::string::npos)
      << refused.status();
  auto before = QueryClusterStatus(cluster.address(), 5000);
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_NO_FATAL_FAILURE(Resume(cluster.server(2)));
  ASSERT_TRUE(cluster.WaitForStatus(JoinerHasSlots, 20000));
  Result<int64_t> taken = RequestCheckpoint(cluster.address(), 30000);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_GT(*taken, before->last_checkpoint_clock);
  // The moved slots' keys are in the target's checkpoint: a rollback to
  // it (the target killed and restarted) restores them exactly.
  Kill9(cluster.server(2));
  cluster.StartServer(2);
  const std::string out =
      cluster.ExpectWorkersExact(kClocks, /*rolled_back=*/true);
  ExpectCleanExit(cluster, {0, 1, 2});
  const std::string log = cluster.coordinator().output();
  EXPECT_NE(log.find("slot(s) moved from server 0 to server 2"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("slot(s) moved from server 1 to server 2"),
            std::string::npos)
      << log;
  // Not to the checkpoint before the move.
  EXPECT_EQ(out.find("verified rollback to clock " +
                     std::to_string(before->last_checkpoint_clock) + " "),
            std::string::npos)
      << out;
}

// A server that registers while another's slots are moving waits for that
// plan; then the load is evened again, over all four servers.
TEST(MigrationFault, TwoServersJoiningAtOnceBothGetTheirShare) {
  RecoveryCluster cluster(kHeartbeatTimeoutMs);
  cluster.Start(kClocks);
  ASSERT_TRUE(cluster.WaitForCheckpoint(10));
  ASSERT_NO_FATAL_FAILURE(
      JoinWhileSourcesArePaused(cluster, {2, 3}, /*pause_joiners=*/false));
  ASSERT_TRUE(cluster.WaitForStatus(
      [](const ClusterStatus& s) {
        if (s.slots_moving != 0) return false;
        for (int id = 0; id < 4; ++id) {
          const MemberStatus* m = FindServer(s, id);
          if (m == nullptr || m->slots != 16) return false;
        }
        return true;
      },
      20000))
      << cluster.coordinator().output();
  const std::string out =
      cluster.ExpectWorkersExact(kClocks, /*rolled_back=*/false);
  EXPECT_EQ(out.find("verified rollback"), std::string::npos) << out;
  ExpectCleanExit(cluster, {0, 1, 2, 3});
  const std::string log = cluster.coordinator().output();
  EXPECT_NE(log.find("to server 2 ("), std::string::npos) << log;
  EXPECT_NE(log.find("to server 3 ("), std::string::npos) << log;
}

}  // namespace
}  // namespace ductile
