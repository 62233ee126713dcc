// Server deaths with --replicas=2 against a coordinator on the simulated
// network (fake clock), its members scripted by the test: each slot gets a
// backup when the slots are assigned; a dead server's slots go to their
// backups in one published routing change with no rollback (no RECOVER,
// the generation unchanged); a death that leaves a slot with no live copy
// rolls back as with one replica, and the rollback's routing has no
// backups; a server heard from again after a takeover drops its keys
// before it gets slots.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "proto/ductile.pb.h"
#include "routing/routing_table.h"
#include "tests/scripted_coordinator.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;
using testing::AnswerTo;
using testing::Exit;
using testing::Peer;
using testing::RegisterServer;
using testing::RegisterWorker;
using testing::ScriptedCoordinator;

constexpr int64_t kHeartbeatTimeoutMs = 5000;
constexpr int32_t kSlots = 16;

CoordinatorOptions Options(int32_t replicas, const std::string& state_dir) {
  CoordinatorOptions options;
  options.state_dir = state_dir;
  options.num_servers = 3;
  options.num_workers = 1;
  options.num_slots = kSlots;
  options.heartbeat_timeout_ms = kHeartbeatTimeoutMs;
  options.replicas = replicas;
  return options;
}

// A server's heartbeat at `generation`, holding `keys` keys, its backups
// whole at routing epoch `synced`.
wire::Header ServerHeartbeat(int32_t id, uint64_t generation, uint64_t keys,
                             uint64_t synced = 0) {
  wire::Header h;
  h.set_type(wire::HEARTBEAT);
  h.set_member_id(id);
  h.set_generation(generation);
  h.mutable_counters()->set_keys_stored(keys);
  h.set_backups_synced_epoch(synced);
  return h;
}

int Count(const std::vector<wire::Header>& messages, wire::MessageType type) {
  int n = 0;
  for (const wire::Header& m : messages) n += m.type() == type;
  return n;
}

// The table of the last ROUTING_UPDATE among `messages` (epoch 0: none).
RoutingTable LastRoutingUpdate(const std::vector<wire::Header>& messages) {
  RoutingTable last;
  for (const wire::Header& m : messages) {
    if (m.type() != wire::ROUTING_UPDATE) continue;
    Result<RoutingTable> t = RoutingTable::FromWire(m.routing());
    EXPECT_TRUE(t.ok()) << t.status();
    if (t.ok()) last = std::move(*t);
  }
  return last;
}

// Three servers (ids 0, 1, 2), registered, and one worker, with a
// launcher to report exits.
class ThreeServers {
 public:
  // With a `state_dir`, the coordinator can be restarted on its state.
  explicit ThreeServers(int32_t replicas, const std::string& state_dir = "")
      : cluster_(Options(replicas, state_dir)) {
    for (int32_t id = 0; id < 3; ++id) {
      servers_[id] = cluster_.NewPeer("server-" + std::to_string(id));
      servers_[id]->Send(RegisterServer(id, 200 + id));
    }
    worker_ = cluster_.NewPeer("worker-0");
    worker_->Send(RegisterWorker(0, 300));
    launcher_ = cluster_.NewPeer("launcher");
    cluster_.Run(milliseconds(20));
    for (auto& [id, peer] : servers_) peer->Take();
    worker_->Take();
  }

  ScriptedCoordinator& cluster() { return cluster_; }
  const RoutingTable& routing() const { return cluster_.state().routing; }
  Peer& server(int32_t id) { return *servers_.at(id); }
  Peer& worker() { return *worker_; }
  Peer& launcher() { return *launcher_; }

  // Runs for `duration`; the servers of `beating` send a heartbeat at
  // generation 0 with keys every second, and so does the worker.
  void RunWithHeartbeats(milliseconds duration,
                         const std::set<int32_t>& beating) {
    for (milliseconds done{0}; done < duration; done += milliseconds(1000)) {
      for (int32_t id : beating) {
        servers_.at(id)->Send(ServerHeartbeat(id, 0, /*keys=*/10));
      }
      wire::Header worker_heartbeat;
      worker_heartbeat.set_type(wire::HEARTBEAT);
      worker_heartbeat.set_member_id(0);
      worker_->Send(worker_heartbeat);
      cluster_.Run(std::min(milliseconds(1000), duration - done));
    }
  }

 private:
  ScriptedCoordinator cluster_;
  std::map<int32_t, std::unique_ptr<Peer>> servers_;
  std::unique_ptr<Peer> worker_;
  std::unique_ptr<Peer> launcher_;
};

TEST(Takeover, EachSlotGetsABackupOtherThanItsOwnerAtTheStart) {
  ThreeServers c(/*replicas=*/2);
  const RoutingTable& routing = c.routing();
  ASSERT_FALSE(routing.empty());
  std::map<int32_t, int32_t> copies;
  for (int32_t s = 0; s < kSlots; ++s) {
    EXPECT_GE(routing.backup(s), 0) << s;
    EXPECT_NE(routing.backup(s), routing.owner(s)) << s;
    ++copies[routing.backup(s)];
  }
  EXPECT_EQ(copies.size(), 3u) << "every server backs some slots up";

  ThreeServers single(/*replicas=*/1);
  EXPECT_FALSE(single.routing().HasBackups());
}

TEST(Takeover, AnExitedServersSlotsGoToTheirBackupsWithNoRollback) {
  ThreeServers c(/*replicas=*/2);
  const RoutingTable before = c.routing();
  ASSERT_TRUE(c.routing().OwnsAny(1));
  const wire::Header exit = Exit(wire::ROLE_SERVER, 1, 201);
  c.launcher().Send(exit);
  c.cluster().Run(milliseconds(20));
  EXPECT_EQ(AnswerTo(exit, c.launcher().Take()), 0);

  for (int32_t id : {0, 2}) {
    const std::vector<wire::Header> got = c.server(id).Take();
    EXPECT_EQ(Count(got, wire::RECOVER), 0) << "server " << id;
    const RoutingTable after = LastRoutingUpdate(got);
    ASSERT_FALSE(after.empty()) << "server " << id << " got no new routing";
    EXPECT_GT(after.epoch(), before.epoch());
    EXPECT_EQ(after.endpoint(1), nullptr) << "the dead server is not listed";
    for (int32_t s = 0; s < kSlots; ++s) {
      const bool new_pair = before.owner(s) == 1 || before.backup(s) == 1;
      if (before.owner(s) == 1) {
        EXPECT_EQ(after.owner(s), before.backup(s)) << "slot " << s;
      } else {
        EXPECT_EQ(after.owner(s), before.owner(s)) << "slot " << s;
      }
      if (new_pair) {
        // A copy on the other survivor, to be sent whole.
        EXPECT_EQ(after.backup(s), 2 - after.owner(s)) << "slot " << s;
        EXPECT_GT(after.backup_from(s), before.epoch()) << "slot " << s;
      } else {
        EXPECT_EQ(after.backup(s), before.backup(s)) << "slot " << s;
        EXPECT_EQ(after.backup_from(s), 0u) << "slot " << s;
      }
    }
  }
  // The workers hear of the new owners too, and resume nothing.
  const std::vector<wire::Header> to_worker = c.worker().Take();
  EXPECT_EQ(Count(to_worker, wire::RESUME), 0);
  EXPECT_EQ(LastRoutingUpdate(to_worker).epoch(), c.routing().epoch());
  EXPECT_EQ(c.cluster().state().generation, 0u);
  EXPECT_FALSE(c.cluster().state().recovering);
  EXPECT_FALSE(c.routing().OwnsAny(1));
}

TEST(Takeover, WithOneReplicaAnExitedServerRollsTheJobBack) {
  ThreeServers c(/*replicas=*/1);
  c.launcher().Send(Exit(wire::ROLE_SERVER, 1, 201));
  c.cluster().Run(milliseconds(20));
  for (int32_t id : {0, 2}) {
    EXPECT_EQ(Count(c.server(id).Take(), wire::RECOVER), 1) << "server " << id;
  }
  EXPECT_EQ(c.cluster().state().generation, 1u);
  EXPECT_TRUE(c.cluster().state().recovering);
}

TEST(Takeover, ASilentServerIsTakenOverAndDropsItsKeysBeforeItRejoins) {
  ThreeServers c(/*replicas=*/2);
  const RoutingTable before = c.routing();
  c.RunWithHeartbeats(milliseconds(kHeartbeatTimeoutMs + 2000), {0, 2});
  ASSERT_TRUE(c.cluster().server(1).dead);
  for (int32_t id : {0, 2}) {
    EXPECT_EQ(Count(c.server(id).Take(), wire::RECOVER), 0) << "server " << id;
  }
  EXPECT_EQ(c.cluster().state().generation, 0u);
  for (int32_t s = 0; s < kSlots; ++s) {
    if (before.owner(s) == 1) {
      EXPECT_EQ(c.routing().owner(s), before.backup(s)) << s;
    }
  }

  // It was only paused. At the job's generation still, but with the keys
  // of slots that are others' now: it is told to rejoin, and gets nothing.
  c.server(1).Take();
  c.server(1).Send(ServerHeartbeat(1, 0, /*keys=*/10));
  c.cluster().Run(milliseconds(20));
  const std::vector<wire::Header> told = c.server(1).Take();
  ASSERT_EQ(Count(told, wire::REJOIN), 1);
  for (const wire::Header& m : told) {
    if (m.type() == wire::REJOIN) {
      EXPECT_EQ(m.generation(), 0u);
    }
  }
  EXPECT_TRUE(c.cluster().server(1).rejoining);
  c.RunWithHeartbeats(milliseconds(2000), {0, 2});
  EXPECT_TRUE(c.cluster().server(1).rejoining);
  EXPECT_FALSE(c.routing().OwnsAny(1));

  // Once it holds no keys it takes its share of the slots again (moved to
  // it with their keys).
  c.server(1).Send(ServerHeartbeat(1, 0, /*keys=*/0));
  c.cluster().Run(milliseconds(20));
  EXPECT_FALSE(c.cluster().server(1).rejoining);
  int moves = 0;
  for (int32_t id : {0, 2}) {
    for (const wire::Header& m : c.server(id).Take()) {
      if (m.type() != wire::MIGRATE_OUT) continue;
      ++moves;
      EXPECT_EQ(m.member_id(), 1) << "moves to the server that rejoined";
    }
  }
  EXPECT_GT(moves, 0);
}

TEST(Takeover, ADeathThatLeavesASlotWithNoLiveCopyRollsBackWithoutBackups) {
  ThreeServers c(/*replicas=*/2);
  // 1 and 2 fall silent together: 1's slots are backed up on 2.
  c.RunWithHeartbeats(milliseconds(kHeartbeatTimeoutMs + 2000), {0});
  ASSERT_TRUE(c.cluster().server(1).dead);
  ASSERT_TRUE(c.cluster().server(2).dead);
  const std::vector<wire::Header> got = c.server(0).Take();
  // (Sent again at each heartbeat of the old generation.)
  ASSERT_GE(Count(got, wire::RECOVER), 1);
  for (const wire::Header& m : got) {
    if (m.type() != wire::RECOVER) continue;
    EXPECT_EQ(m.routing().slot_backup_size(), 0) << "no copy survives";
    for (int32_t owner : m.routing().slot_owner()) EXPECT_EQ(owner, 0);
  }
  EXPECT_EQ(c.cluster().state().generation, 1u);
  EXPECT_FALSE(c.routing().HasBackups());
}

TEST(Takeover, ARestartedServersSlotsGoToTheirBackupsAndItGetsNewOnes) {
  ThreeServers c(/*replicas=*/2);
  const RoutingTable before = c.routing();
  // A new process under id 1 (its launcher restarted it): the one that
  // held its slots is gone.
  std::unique_ptr<Peer> again = c.cluster().NewPeer("server-1-again");
  again->Send(RegisterServer(1, 211));
  c.cluster().Run(milliseconds(20));
  EXPECT_EQ(c.cluster().state().generation, 0u);
  int moves = 0;
  for (int32_t id : {0, 2}) {
    for (const wire::Header& m : c.server(id).Take()) {
      EXPECT_NE(m.type(), wire::RECOVER) << "server " << id;
      if (m.type() == wire::MIGRATE_OUT) {
        ++moves;
        EXPECT_EQ(m.member_id(), 1);
      }
    }
  }
  for (int32_t s = 0; s < kSlots; ++s) {
    if (before.owner(s) == 1) {
      EXPECT_NE(c.routing().owner(s), 1) << s;
    }
    if (before.backup(s) == 1 || before.owner(s) == 1) {
      EXPECT_GE(c.routing().backup(s), 0) << s;
      EXPECT_GT(c.routing().backup_from(s), before.epoch())
          << s << ": the old process's copies are gone; a new pair";
    }
  }
  EXPECT_GT(moves, 0) << "the new process gets its share, with keys";
  // Listed under its new registration, which tells peers it is another
  // process even where its address is the old one's.
  ASSERT_NE(c.routing().endpoint(1), nullptr);
  ASSERT_NE(before.endpoint(1), nullptr);
  EXPECT_NE(c.routing().endpoint(1)->incarnation(),
            before.endpoint(1)->incarnation());
  EXPECT_GT(before.endpoint(1)->incarnation(), 0u);
}

// The restarted process's registration is answered with the takeover's
// routing, which lists it under its own registration: it never serves,
// empty, the slots its predecessor held (under the routing before the
// takeover it would, and its backup, by then their owner, would drop what
// it applied as stale: updates lost).
TEST(Takeover, ARestartedServerIsAnsweredWithTheRoutingAfterTheTakeover) {
  ThreeServers c(/*replicas=*/2);
  const RoutingTable before = c.routing();
  std::unique_ptr<Peer> again = c.cluster().NewPeer("server-1-again");
  const wire::Header registration = RegisterServer(1, 211);
  again->Send(registration);
  c.cluster().Run(milliseconds(20));
  const std::vector<wire::Header> got = again->Take();
  const wire::Header* answer = nullptr;
  for (const wire::Header& m : got) {
    if (m.type() == wire::CONTROL_REPLY && m.seq() == registration.seq()) {
      answer = &m;
      break;
    }
  }
  ASSERT_NE(answer, nullptr) << got.size() << " message(s)";
  EXPECT_EQ(answer->status_code(), 0) << answer->status_message();
  ASSERT_TRUE(answer->has_routing());
  Result<RoutingTable> routing = RoutingTable::FromWire(answer->routing());
  ASSERT_TRUE(routing.ok()) << routing.status();
  EXPECT_GT(routing->epoch(), before.epoch());
  int predecessors = 0;
  for (int32_t s = 0; s < kSlots; ++s) {
    if (before.owner(s) != 1) continue;
    ++predecessors;
    EXPECT_NE(routing->owner(s), 1) << "slot " << s;
    EXPECT_EQ(routing->owner(s), c.routing().owner(s)) << "slot " << s;
  }
  EXPECT_GT(predecessors, 0);
  ASSERT_NE(routing->endpoint(1), nullptr);
  EXPECT_NE(answer->incarnation(), 0u);
  EXPECT_EQ(routing->endpoint(1)->incarnation(), answer->incarnation());
  EXPECT_NE(answer->incarnation(), before.endpoint(1)->incarnation());
}

// With one replica a restarted server rolls the job back. Its answer's
// routing still lists the process it replaced (the server installs none
// that does); the rollback's RECOVER, which follows, lists it under the
// answer's registration number.
TEST(Takeover, WithOneReplicaARestartedServersRecoverListsTheNewProcess) {
  ThreeServers c(/*replicas=*/1);
  std::unique_ptr<Peer> again = c.cluster().NewPeer("server-1-again");
  const wire::Header registration = RegisterServer(1, 211);
  again->Send(registration);
  c.cluster().Run(milliseconds(20));
  uint64_t incarnation = 0;
  bool recover = false;
  for (const wire::Header& m : again->Take()) {
    if (m.type() == wire::CONTROL_REPLY && m.seq() == registration.seq()) {
      EXPECT_EQ(m.status_code(), 0) << m.status_message();
      EXPECT_FALSE(recover) << "the RECOVER came before the answer";
      incarnation = m.incarnation();
    } else if (m.type() == wire::RECOVER) {
      recover = true;
      ASSERT_NE(incarnation, 0u) << "a RECOVER before the answer";
      Result<RoutingTable> routing = RoutingTable::FromWire(m.routing());
      ASSERT_TRUE(routing.ok()) << routing.status();
      ASSERT_NE(routing->endpoint(1), nullptr);
      EXPECT_EQ(routing->endpoint(1)->incarnation(), incarnation);
    }
  }
  EXPECT_NE(incarnation, 0u);
  EXPECT_TRUE(recover);
  EXPECT_EQ(c.cluster().state().generation, 1u);
}

// A server's heartbeat names its registration. The process a restart
// replaced under id 1, still running, is told so when it heartbeats
// (kAborted, naming the registration that holds the id now), so that it
// stops; also after a restart of the coordinator, which then knows its
// members by id only and takes the new process, not the old one, for
// server 1, whichever is heard from first.
class Replaced : public ::testing::TestWithParam<bool> {};

TEST_P(Replaced, AProcessReplacedUnderItsIdIsToldToStop) {
  const bool coordinator_restarts = GetParam();
  ThreeServers c(/*replicas=*/2, "/sim/coordinator");
  const uint64_t old_registration = c.routing().endpoint(1)->incarnation();
  std::unique_ptr<Peer> again = c.cluster().NewPeer("server-1-again");
  again->Send(RegisterServer(1, 211));
  c.cluster().Run(milliseconds(20));
  const uint64_t new_registration = c.routing().endpoint(1)->incarnation();
  ASSERT_GT(new_registration, old_registration);
  again->Take();
  if (coordinator_restarts) {
    c.cluster().Restart();
    c.cluster().Run(milliseconds(20));
    ASSERT_TRUE(c.cluster().server(1).identity.empty());
  }

  wire::Header stale = ServerHeartbeat(1, 0, /*keys=*/10);
  stale.set_seq(901);
  stale.set_incarnation(old_registration);
  c.server(1).Send(stale);
  c.cluster().Run(milliseconds(20));
  bool told = false;
  for (const wire::Header& m : c.server(1).Take()) {
    if (m.type() != wire::CONTROL_REPLY || m.seq() != stale.seq()) continue;
    told = true;
    EXPECT_EQ(StatusFromWire(m).code(), StatusCode::kAborted)
        << StatusFromWire(m);
    EXPECT_EQ(m.incarnation(), new_registration);
  }
  EXPECT_TRUE(told);

  wire::Header current = ServerHeartbeat(1, 0, /*keys=*/0);
  current.set_seq(902);
  current.set_incarnation(new_registration);
  again->Send(current);
  c.cluster().Run(milliseconds(20));
  for (const wire::Header& m : again->Take()) {
    EXPECT_EQ(m.status_code(), 0) << StatusFromWire(m);
  }
  EXPECT_FALSE(c.cluster().server(1).identity.empty());
  EXPECT_FALSE(c.cluster().server(1).dead);
}

INSTANTIATE_TEST_SUITE_P(Takeover, Replaced, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "AfterACoordinatorRestart"
                                             : "WhileTheCoordinatorRuns";
                         });

// After a takeover the slots' new backups are saving only once their
// owners say the copies sent them are whole: a second death before that
// rolls back, one after it is taken over too.
TEST(Takeover, ASecondDeathIsTakenOverOnceTheNewBackupsAreWhole) {
  for (bool whole : {false, true}) {
    SCOPED_TRACE(whole ? "reported whole" : "not reported whole");
    ThreeServers c(/*replicas=*/2);
    const uint64_t first = c.routing().epoch();
    const wire::Header exit = Exit(wire::ROLE_SERVER, 1, 201);
    c.launcher().Send(exit);
    c.cluster().Run(milliseconds(20));
    ASSERT_EQ(c.cluster().state().generation, 0u);
    ASSERT_FALSE(c.routing().OwnsAny(1));
    const uint64_t epoch = c.routing().epoch();
    for (int32_t id : {0, 2}) {
      // (Not whole: as they said before the takeover.)
      c.server(id).Send(ServerHeartbeat(id, 0, 10, whole ? epoch : first));
    }
    c.cluster().Run(milliseconds(20));
    for (int32_t id : {0, 2}) c.server(id).Take();

    const wire::Header second = Exit(wire::ROLE_SERVER, 0, 200);
    c.launcher().Send(second);
    c.cluster().Run(milliseconds(20));
    const std::vector<wire::Header> got = c.server(2).Take();
    if (whole) {
      EXPECT_EQ(Count(got, wire::RECOVER), 0);
      EXPECT_EQ(c.cluster().state().generation, 0u);
      for (int32_t s = 0; s < kSlots; ++s) {
        EXPECT_EQ(c.routing().owner(s), 2) << s;
      }
    } else {
      EXPECT_GE(Count(got, wire::RECOVER), 1);
      EXPECT_EQ(c.cluster().state().generation, 1u);
    }
  }
}

TEST(Takeover, ReplicasAreOneOrTwo) {
  CoordinatorOptions options;
  for (int32_t bad : {0, 3, -1}) {
    options.replicas = bad;
    const Status s = Validate(options);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("replicas must be 1"), std::string::npos) << s;
  }
  options.replicas = 2;
  EXPECT_TRUE(Validate(options).ok());
}

}  // namespace
}  // namespace ductile
