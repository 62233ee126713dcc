// Reports of a member's exit (MEMBER_EXIT, ReportMemberExit) against a
// coordinator on the simulated network (fake clock), its members scripted
// by the test: who is declared dead, at once, and which reports change
// nothing. Also deaths by silence, and a coordinator that stopped running
// (its members' silence meanwhile is not theirs, nor are their answers
// late).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/pause_credit.h"
#include "ductile/table.h"
#include "proto/ductile.pb.h"
#include "proto/table_config.h"
#include "tests/scripted_coordinator.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;

using testing::AnswerTo;
using testing::Exit;
using testing::Heartbeat;
using testing::Peer;
using testing::RegisterServer;
using testing::RegisterWorker;
using testing::ScriptedCoordinator;

constexpr int64_t kHeartbeatTimeoutMs = 5000;

// A coordinator expecting one server and two workers.
CoordinatorOptions OneServerTwoWorkers() {
  CoordinatorOptions options;
  options.num_servers = 1;
  options.num_workers = 2;
  options.num_slots = 16;
  options.heartbeat_timeout_ms = kHeartbeatTimeoutMs;
  return options;
}

// Server 0 and workers 0 and 1, registered with `cluster`.
struct Members {
  explicit Members(ScriptedCoordinator& cluster)
      : server(cluster.NewPeer("server-0")),
        worker0(cluster.NewPeer("worker-0")),
        worker1(cluster.NewPeer("worker-1")) {
    server->Send(RegisterServer(0, 200));
    worker0->Send(RegisterWorker(0, 300));
    worker1->Send(RegisterWorker(1, 301));
    cluster.Run(milliseconds(20));
  }
  std::unique_ptr<Peer> server;
  std::unique_ptr<Peer> worker0;
  std::unique_ptr<Peer> worker1;
};

// The live workers of the last WORKERS_UPDATE among `messages` (none: -1).
std::vector<int32_t> LastLiveWorkers(const std::vector<wire::Header>& messages,
                                     bool* any) {
  *any = false;
  std::vector<int32_t> live;
  for (const wire::Header& m : messages) {
    if (m.type() != wire::WORKERS_UPDATE) continue;
    *any = true;
    live.assign(m.worker_ids().begin(), m.worker_ids().end());
  }
  return live;
}

TEST(MemberExit, AReportedWorkerLeavesTheLiveSetLongBeforeItsHeartbeatTimeout) {
  ScriptedCoordinator cluster(OneServerTwoWorkers());
  Members members(cluster);
  Peer& server = *members.server;
  auto launcher = cluster.NewPeer("launcher");
  server.Take();
  ASSERT_EQ(cluster.worker(1).pid, 301);
  EXPECT_FALSE(cluster.worker(1).dead);

  const wire::Header exit = Exit(wire::ROLE_WORKER, 1, 301);
  launcher->Send(exit);
  cluster.Run(milliseconds(20));
  EXPECT_EQ(AnswerTo(exit, launcher->Take()), 0);
  EXPECT_TRUE(cluster.worker(1).dead);
  // The server is told at once that only worker 0 is live: a BSP or SSP
  // clock no longer waits for worker 1.
  bool told = false;
  EXPECT_EQ(LastLiveWorkers(server.Take(), &told), std::vector<int32_t>({0}));
  EXPECT_TRUE(told);
  EXPECT_LT(cluster.ElapsedMs(), kHeartbeatTimeoutMs / 10);
}

TEST(MemberExit, AReportAboutAServerProcessThatWasReplacedChangesNothing) {
  ScriptedCoordinator cluster(OneServerTwoWorkers());
  auto first = cluster.NewPeer("server-0");
  auto launcher = cluster.NewPeer("launcher");
  first->Send(RegisterServer(0, 200));
  cluster.Run(milliseconds(20));
  const uint64_t old_incarnation = cluster.server(0).incarnation;
  EXPECT_GT(old_incarnation, 0u);

  // The launcher restarted it (same id) before its report of the first
  // process got through.
  auto second = cluster.NewPeer("server-0-again");
  second->Send(RegisterServer(0, 201));
  cluster.Run(milliseconds(20));
  ASSERT_EQ(cluster.server(0).pid, 201);
  EXPECT_GT(cluster.server(0).incarnation, old_incarnation);

  const wire::Header by_pid = Exit(wire::ROLE_SERVER, 0, 200);
  const wire::Header by_incarnation =
      Exit(wire::ROLE_SERVER, 0, 0, old_incarnation);
  const wire::Header both_not_fitting =
      Exit(wire::ROLE_SERVER, 0, 201, old_incarnation);
  launcher->Send(by_pid);
  launcher->Send(by_incarnation);
  launcher->Send(both_not_fitting);
  cluster.Run(milliseconds(20));
  const std::vector<wire::Header> replies = launcher->Take();
  const int refused = static_cast<int>(StatusCode::kFailedPrecondition);
  EXPECT_EQ(AnswerTo(by_pid, replies), refused);
  EXPECT_EQ(AnswerTo(by_incarnation, replies), refused);
  EXPECT_EQ(AnswerTo(both_not_fitting, replies), refused);
  EXPECT_FALSE(cluster.server(0).dead);

  // A report of the process now registered applies.
  const wire::Header current =
      Exit(wire::ROLE_SERVER, 0, 0, cluster.server(0).incarnation);
  launcher->Send(current);
  cluster.Run(milliseconds(20));
  EXPECT_EQ(AnswerTo(current, launcher->Take()), 0);
  EXPECT_TRUE(cluster.server(0).dead);
}

TEST(MemberExit, AReportNamesAKnownMemberAndItsProcess) {
  ScriptedCoordinator cluster(OneServerTwoWorkers());
  auto worker = cluster.NewPeer("worker-0");
  auto launcher = cluster.NewPeer("launcher");
  worker->Send(RegisterWorker(0, 300));
  cluster.Run(milliseconds(20));

  const wire::Header unknown = Exit(wire::ROLE_WORKER, 7, 300);
  const wire::Header no_process = Exit(wire::ROLE_WORKER, 0, 0, 0);
  const wire::Header no_role = Exit(wire::ROLE_OBSERVER, 0, 300);
  const wire::Header wrong_role = Exit(wire::ROLE_SERVER, 0, 300);
  for (const auto& h : {unknown, no_process, no_role, wrong_role}) {
    launcher->Send(h);
  }
  cluster.Run(milliseconds(20));
  const std::vector<wire::Header> replies = launcher->Take();
  EXPECT_EQ(AnswerTo(unknown, replies),
            static_cast<int>(StatusCode::kNotFound));
  EXPECT_EQ(AnswerTo(no_process, replies),
            static_cast<int>(StatusCode::kInvalidArgument));
  EXPECT_EQ(AnswerTo(no_role, replies),
            static_cast<int>(StatusCode::kInvalidArgument));
  EXPECT_EQ(AnswerTo(wrong_role, replies),
            static_cast<int>(StatusCode::kNotFound));
  EXPECT_FALSE(cluster.worker(0).dead);
}

TEST(MemberExit,
     AMemberReportedTwiceIsDeadOnceAndNotBroughtBackByItsLastWords) {
  ScriptedCoordinator cluster(OneServerTwoWorkers());
  auto worker = cluster.NewPeer("worker-0");
  auto launcher = cluster.NewPeer("launcher");
  worker->Send(RegisterWorker(0, 300));
  cluster.Run(milliseconds(20));

  const wire::Header exit = Exit(wire::ROLE_WORKER, 0, 300);
  const wire::Header again = Exit(wire::ROLE_WORKER, 0, 300);
  launcher->Send(exit);
  cluster.Run(milliseconds(20));
  launcher->Send(again);
  // A heartbeat it sent before it died, arriving after the report.
  wire::Header heartbeat = Heartbeat(wire::ROLE_WORKER, 0);
  heartbeat.mutable_metrics()->set_clock(3);
  worker->Send(heartbeat);
  cluster.Run(milliseconds(20));
  const std::vector<wire::Header> replies = launcher->Take();
  EXPECT_EQ(AnswerTo(exit, replies), 0);
  EXPECT_EQ(AnswerTo(again, replies), 0);
  EXPECT_TRUE(cluster.worker(0).dead);
  EXPECT_NE(cluster.worker(0).metrics.clock(), 3);
}

// The coordinator stops right after it found its inbox empty, for twice
// the heartbeat timeout, while its members heartbeat on; then it runs on
// from there, judging its members' silence before it reads their queued
// heartbeats. Nobody is declared dead. A member that really falls silent
// afterwards still is, after the timeout.
TEST(MemberSilence, APauseOfTheCoordinatorAfterItReadsItsInboxIsNotTheMembers) {
  ScriptedCoordinator cluster(OneServerTwoWorkers());
  Members members(cluster);
  auto& server = members.server;
  auto& worker0 = members.worker0;
  auto& worker1 = members.worker1;
  ASSERT_FALSE(cluster.worker(0).dead);
  ASSERT_FALSE(cluster.worker(1).dead);
  ASSERT_FALSE(cluster.server(0).dead);

  int heartbeats = 0;
  cluster.StallAfterTheInboxIsRead(
      milliseconds(2 * kHeartbeatTimeoutMs), milliseconds(1000), [&] {
        server->Send(Heartbeat(wire::ROLE_SERVER, 0));
        worker0->Send(Heartbeat(wire::ROLE_WORKER, 0));
        worker1->Send(Heartbeat(wire::ROLE_WORKER, 1));
        ++heartbeats;
      });
  cluster.Run(milliseconds(20));
  ASSERT_EQ(heartbeats, 2 * kHeartbeatTimeoutMs / 1000);  // it stalled
  EXPECT_FALSE(cluster.worker(0).dead);
  EXPECT_FALSE(cluster.worker(1).dead);
  EXPECT_FALSE(cluster.server(0).dead);

  // Worker 1 falls silent; the others heartbeat on.
  for (int64_t ms = 0; ms < kHeartbeatTimeoutMs + 2000; ms += 1000) {
    server->Send(Heartbeat(wire::ROLE_SERVER, 0));
    worker0->Send(Heartbeat(wire::ROLE_WORKER, 0));
    cluster.Run(milliseconds(1000));
  }
  EXPECT_FALSE(cluster.worker(0).dead);
  EXPECT_TRUE(cluster.worker(1).dead);
  EXPECT_FALSE(cluster.server(0).dead);
}

// A coordinator whose every turn is slow (say its saves stall on a disk)
// looks paused at each turn. Its pauses are forgiven out of a credit that
// such a loop uses up (coordinator/pause_credit.h): a worker that falls
// silent is still found dead, within the minute of credit and then the
// timeout at half speed, and the members that heartbeat on are not.
TEST(MemberSilence, ACoordinatorSlowAtEveryTurnStillFindsASilentMemberDead) {
  ScriptedCoordinator cluster(OneServerTwoWorkers());
  Members members(cluster);
  auto& server = members.server;
  auto& worker0 = members.worker0;
  ASSERT_FALSE(cluster.worker(1).dead);

  // Worker 1 falls silent; every turn stalls 2 s. Were each stall forgiven
  // whole, its silence would stay at the first turn's 20 ms.
  int turns = 0;
  for (; turns < 150 && !cluster.worker(1).dead; ++turns) {
    cluster.StallAfterTheInboxIsRead(
        milliseconds(2000), milliseconds(1000), [&] {
          server->Send(Heartbeat(wire::ROLE_SERVER, 0));
          worker0->Send(Heartbeat(wire::ROLE_WORKER, 0));
        });
    cluster.Run(milliseconds(20));
    ASSERT_FALSE(cluster.worker(0).dead) << "turn " << turns;
    ASSERT_FALSE(cluster.server(0).dead) << "turn " << turns;
  }
  EXPECT_TRUE(cluster.worker(1).dead);
  // About 60 turns use the credit up; then half of each 2 s counts.
  EXPECT_LT(turns, 80);
}

TEST(PauseCredit, OneStopOfUpToAMinuteIsForgivenWholeAndAShortGapNotAtAll) {
  using std::chrono::seconds;
  EXPECT_EQ(PauseCredit().Forgive(milliseconds(1000)), milliseconds(0));
  EXPECT_EQ(PauseCredit().Forgive(seconds(60)), seconds(60));
  EXPECT_EQ(PauseCredit().Forgive(seconds(90)), seconds(60));
  // Used up by one stop, the credit comes back at half the time that
  // passes: after 30 s more, a 20 s stop is forgiven whole again.
  PauseCredit credit;
  EXPECT_EQ(credit.Forgive(seconds(60)), seconds(60));
  for (int i = 0; i < 300; ++i) credit.Forgive(milliseconds(100));
  EXPECT_EQ(credit.Forgive(seconds(20)), seconds(20));
}

TEST(PauseCredit, ALoopSlowAtEveryTurnHasHalfOfEachGapForgivenAtMost) {
  PauseCredit credit;
  auto forgiven = PauseCredit::Duration{};
  const int turns = 1000;
  for (int i = 0; i < turns; ++i)
    forgiven += credit.Forgive(milliseconds(2000));
  // The first minute, then half of each turn's 2 s.
  EXPECT_LE(forgiven, std::chrono::seconds(60) + turns * milliseconds(1000));
  EXPECT_EQ(credit.Forgive(milliseconds(2000)), milliseconds(1000));
}

// A server announced a silence (a checkpoint write) and ends it with a
// heartbeat just after the coordinator read its inbox and stopped; the
// coordinator runs again past the announced end. As of its last read, the
// server was within its announced time: not dead.
TEST(MemberSilence, AServersAnnouncedSilenceIsJudgedAsOfTheSameRead) {
  ScriptedCoordinator cluster(OneServerTwoWorkers());
  auto server = cluster.NewPeer("server-0");
  auto worker0 = cluster.NewPeer("worker-0");
  server->Send(RegisterServer(0, 200));
  worker0->Send(RegisterWorker(0, 300));
  cluster.Run(milliseconds(20));
  wire::Header busy = Heartbeat(wire::ROLE_SERVER, 0);
  busy.set_busy(true);
  busy.set_timeout_ms(3 * kHeartbeatTimeoutMs);
  server->Send(busy);
  // Silent for most of the announced time; the worker heartbeats on.
  for (int64_t ms = 0; ms < 2 * kHeartbeatTimeoutMs; ms += 1000) {
    worker0->Send(Heartbeat(wire::ROLE_WORKER, 0));
    cluster.Run(milliseconds(1000));
  }
  ASSERT_FALSE(cluster.server(0).dead);
  // The coordinator stops past the announced end; meanwhile the server's
  // write ends and it heartbeats again.
  cluster.StallAfterTheInboxIsRead(
      milliseconds(2 * kHeartbeatTimeoutMs), milliseconds(1000), [&] {
        server->Send(Heartbeat(wire::ROLE_SERVER, 0));
        worker0->Send(Heartbeat(wire::ROLE_WORKER, 0));
      });
  cluster.Run(milliseconds(20));
  EXPECT_FALSE(cluster.server(0).dead);
  EXPECT_FALSE(cluster.worker(0).dead);
}

// A table is being created: the server's acknowledgement arrives while
// the coordinator, having read its inbox just after asking, is stopped
// past the round's 10 s deadline. As of its last read the round was not
// late: the table is created, and the worker that asked for it is told
// so, not that the servers did not answer in time.
// A table being created: the server's acknowledgement as it arrives.
struct TableRound {
  wire::Header create;  // the worker's CREATE_TABLE
  wire::Header ack;     // the server's TABLE_CREATE_ACK
};

// Server 0 and workers 0 and 1 registered; worker 0 asked for table "t",
// and the coordinator asked the server.
TableRound StartTableRound(ScriptedCoordinator& cluster, Peer& server,
                           Peer& worker0) {
  server.Take();
  TableOptions options;
  options.name = "t";
  options.value_width = 4;
  TableRound round;
  round.create.set_type(wire::CREATE_TABLE);
  round.create.set_seq(7);
  *round.create.mutable_table() = ToWire(options, /*id=*/0);
  worker0.Send(round.create);
  cluster.Run(milliseconds(20));
  for (const wire::Header& m : server.Take()) {
    if (m.type() != wire::TABLE_CREATE) continue;
    round.ack.set_type(wire::TABLE_CREATE_ACK);
    round.ack.set_seq(m.seq());
    round.ack.set_member_id(0);
  }
  EXPECT_EQ(round.ack.type(), wire::TABLE_CREATE_ACK) << "no TABLE_CREATE";
  return round;
}

TEST(MemberSilence, AnAnswerAPauseLeftUnreadIsNotLate) {
  ScriptedCoordinator cluster(OneServerTwoWorkers());
  Members members(cluster);
  auto& server = members.server;
  auto& worker0 = members.worker0;
  auto& worker1 = members.worker1;
  const TableRound round = StartTableRound(cluster, *server, *worker0);
  bool acknowledged = false;
  cluster.StallAfterTheInboxIsRead(
      milliseconds(12000), milliseconds(1000), [&] {
        if (!acknowledged) server->Send(round.ack);
        acknowledged = true;
        server->Send(Heartbeat(wire::ROLE_SERVER, 0));
        worker0->Send(Heartbeat(wire::ROLE_WORKER, 0));
        worker1->Send(Heartbeat(wire::ROLE_WORKER, 1));
      });
  cluster.Run(milliseconds(20));  // stalls, then judges the round
  ASSERT_TRUE(acknowledged);      // it stalled
  cluster.Run(milliseconds(20));  // reads what waited
  EXPECT_EQ(AnswerTo(round.create, worker0->Take()), 0);
  EXPECT_EQ(cluster.state().tables.count("t"), 1u);
}

// The coordinator stops past a round's deadline; the server's answer,
// sent while it was stopped, comes in only after its first read once it
// runs again (still in the sockets' buffers then). The pause moved the
// round's deadline as much: the answer is not late.
TEST(MemberSilence, AnAnswerThatComesInAfterAPauseIsNotLate) {
  ScriptedCoordinator cluster(OneServerTwoWorkers());
  Members members(cluster);
  auto& server = members.server;
  auto& worker0 = members.worker0;
  const TableRound round = StartTableRound(cluster, *server, *worker0);
  bool stalled = false;
  cluster.StallAfterTheInboxIsRead(milliseconds(12000), milliseconds(1000),
                                   [&] { stalled = true; });
  cluster.Run(milliseconds(20));  // stalls; then reads its inbox, empty
  ASSERT_TRUE(stalled);
  server->Send(round.ack);
  cluster.Run(milliseconds(20));
  EXPECT_EQ(AnswerTo(round.create, worker0->Take()), 0);
  EXPECT_EQ(cluster.state().tables.count("t"), 1u);
}

}  // namespace
}  // namespace ductile
