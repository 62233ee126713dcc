// A ServerNode against a scripted coordinator and a scripted client on the
// simulated network (fake clock, no real socket): registration, tables
// created by the coordinator, pushes applied exactly once, bad requests
// answered with an error and nothing applied, keys of another
// server's slots sent back "moved", and pulls waiting on a staleness bound
// capped per worker and in all, and answered when their worker leaves.
#include "server/server_node.h"

#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "ductile/table.h"
#include "proto/codec.h"
#include "proto/ductile.pb.h"
#include "proto/table_config.h"
#include "routing/slot_map.h"
#include "server/record_codec.h"
#include "tests/scripted_server.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;

using testing::Got;
using testing::kSlots;
using testing::kTable;
using testing::kWidth;
using testing::ScriptedCluster;

const std::vector<float> kOnes(kWidth, 1.0f);

TEST(ServerNode, RegistersHostsItsTablesAndSendsHeartbeats) {
  ScriptedCluster cluster;
  cluster.Register();
  EXPECT_EQ(cluster.server().id(), 0);
  cluster.Run(milliseconds(1200));
  std::optional<Got> heartbeat = cluster.TakeAtCoordinator(wire::HEARTBEAT);
  ASSERT_TRUE(heartbeat.has_value());
  EXPECT_EQ(heartbeat->header.member_id(), 0);
}

TEST(ServerNode, ATableTheCoordinatorCreatesLaterIsAcknowledgedAndServed) {
  ScriptedCluster cluster;
  cluster.Register();
  wire::Header create;
  create.set_type(wire::TABLE_CREATE);
  create.set_seq(9);
  TableOptions table;
  table.name = "later";
  table.value_width = kWidth;
  table.rule = UpdateRule::kAssign;
  *create.mutable_table() = ToWire(table, /*id=*/1);
  cluster.SendToServer(create);
  cluster.Run(milliseconds(5));
  std::optional<Got> ack = cluster.TakeAtCoordinator(wire::TABLE_CREATE_ACK);
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->header.seq(), 9u);
  EXPECT_EQ(StatusFromWire(ack->header).code(), StatusCode::kOk);
  // The same creation again (its ack lost) is acknowledged too.
  cluster.SendToServer(create);
  cluster.Run(milliseconds(5));
  ack = cluster.TakeAtCoordinator(wire::TABLE_CREATE_ACK);
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(StatusFromWire(ack->header).code(), StatusCode::kOk)
      << StatusFromWire(ack->header);
}

TEST(ServerNode, APushSentTwiceUnderOneSeqIsAppliedOnce) {
  ScriptedCluster cluster;
  cluster.Register();
  const std::vector<Key> keys = {3};
  Got first = cluster.Request(wire::PUSH, 1, keys, kOnes);
  EXPECT_EQ(StatusFromWire(first.header).code(), StatusCode::kOk);
  EXPECT_FALSE(first.header.duplicate());
  Got again = cluster.Request(wire::PUSH, 1, keys, kOnes);
  EXPECT_EQ(StatusFromWire(again.header).code(), StatusCode::kOk);
  EXPECT_TRUE(again.header.duplicate());
  EXPECT_EQ(cluster.Pull(2, keys), kOnes);
  // A new seq is a new push.
  cluster.Request(wire::PUSH, 3, keys, kOnes);
  EXPECT_EQ(cluster.Pull(4, keys), std::vector<float>(kWidth, 2.0f));
}

TEST(ServerNode, ARequestWithBadSizesGetsAnErrorAndAppliesNothing) {
  ScriptedCluster cluster;
  cluster.Register();
  const uint64_t errors_before = cluster.server().counters().errors;
  // Two keys announced, one sent; then values one float short.
  Got short_keys = cluster.Request(wire::PUSH, 1, {5}, kOnes, /*num_keys=*/2);
  EXPECT_EQ(StatusFromWire(short_keys.header).code(),
            StatusCode::kInvalidArgument)
      << StatusFromWire(short_keys.header);
  Got short_values =
      cluster.Request(wire::PUSH, 2, {5}, std::vector<float>(kWidth - 1, 1.0f));
  EXPECT_EQ(StatusFromWire(short_values.header).code(),
            StatusCode::kInvalidArgument)
      << StatusFromWire(short_values.header);
  EXPECT_EQ(cluster.server().counters().errors, errors_before + 2);
  // Nothing was applied, and the server goes on serving.
  EXPECT_EQ(cluster.Pull(3, {5}), std::vector<float>(kWidth, 0.0f));
}

TEST(ServerNode, KeysOfAnotherServersSlotAreSentBackMovedWithTheRouting) {
  // A key whose slot is on server 1.
  Key elsewhere = 0;
  while (SlotOf(kTable, elsewhere, kSlots) != 5) ++elsewhere;
  ScriptedCluster cluster;
  cluster.Register(/*elsewhere=*/{5});
  Got reply = cluster.Request(wire::PUSH, 1, {elsewhere}, kOnes);
  EXPECT_TRUE(reply.header.moved());
  ASSERT_TRUE(reply.header.has_routing());
  EXPECT_EQ(reply.header.routing().slot_owner(5), 1);
  // Not applied here: server 0 does not hold the key.
  std::vector<float> stored;
  EXPECT_FALSE(cluster.server().GetForTesting(kTable, elsewhere, &stored));
}

// A process restarted under its id may be sent a routing made before it
// registered, which lists the process it replaced: the slots it gives that
// one are not this one's (they were taken over, or are being restored),
// so it serves nothing under it until a routing lists it.
TEST(ServerNode, ARoutingThatListsTheProcessItReplacedIsNotServed) {
  ScriptedCluster cluster;
  cluster.set_incarnations(/*told=*/7, /*listed=*/6);
  cluster.Register();
  Got refused = cluster.Request(wire::PUSH, 1, {3}, kOnes);
  EXPECT_FALSE(refused.header.moved());
  EXPECT_EQ(StatusFromWire(refused.header).code(), StatusCode::kUnavailable)
      << StatusFromWire(refused.header);
  std::vector<float> stored;
  EXPECT_FALSE(cluster.server().GetForTesting(kTable, 3, &stored));

  // The coordinator's next routing lists it: served.
  cluster.set_incarnations(7, 7);
  cluster.SendRouting(/*epoch=*/2, std::vector<int32_t>(kSlots, 0));
  Got applied = cluster.Request(wire::PUSH, 2, {3}, kOnes, 0, /*epoch=*/2);
  EXPECT_EQ(StatusFromWire(applied.header).code(), StatusCode::kOk)
      << StatusFromWire(applied.header);
  EXPECT_TRUE(cluster.server().GetForTesting(kTable, 3, &stored));
  EXPECT_EQ(stored, kOnes);
}

// A routing that lists a newer registration under its id: another process
// took its place (this one was taken for dead): it stops, saying so. One
// that lists no registration number (a coordinator that gives none) is
// installed as before.
TEST(ServerNode, ARoutingThatListsANewerProcessUnderItsIdStopsIt) {
  ScriptedCluster cluster;
  cluster.set_incarnations(/*told=*/7, /*listed=*/0);
  cluster.Register();
  Got applied = cluster.Request(wire::PUSH, 1, {3}, kOnes);
  EXPECT_EQ(StatusFromWire(applied.header).code(), StatusCode::kOk)
      << StatusFromWire(applied.header);
  EXPECT_FALSE(cluster.server().shut_down());

  cluster.set_incarnations(7, 9);
  cluster.SendRouting(/*epoch=*/2, std::vector<int32_t>(kSlots, 0));
  EXPECT_TRUE(cluster.server().shut_down());
  EXPECT_EQ(cluster.server().failure().code(), StatusCode::kAborted);
  EXPECT_NE(cluster.server().failure().message().find("was replaced"),
            std::string::npos)
      << cluster.server().failure();
}

// The coordinator's refusal of a heartbeat from a replaced process (its
// id registered again since) stops the server too; any other refusal is
// only logged.
TEST(ServerNode, ARefusalNamingANewerRegistrationStopsIt) {
  ScriptedCluster cluster;
  cluster.set_incarnations(/*told=*/7, /*listed=*/7);
  cluster.Register();
  wire::Header refusal;
  refusal.set_type(wire::CONTROL_REPLY);
  refusal.set_seq(3);
  StatusToWire(AbortedError("some other refusal"), &refusal);
  cluster.SendToServer(refusal);
  cluster.Run(std::chrono::milliseconds(5));
  EXPECT_FALSE(cluster.server().shut_down());

  refusal.set_incarnation(9);
  StatusToWire(AbortedError("server 0 was replaced"), &refusal);
  cluster.SendToServer(refusal);
  cluster.Run(std::chrono::milliseconds(5));
  EXPECT_TRUE(cluster.server().shut_down());
  EXPECT_EQ(cluster.server().failure().code(), StatusCode::kAborted);
}

StatusCode CodeOf(const Got& reply) {
  return StatusFromWire(reply.header).code();
}

TEST(ServerNode, PullsWaitingOnTheStalenessBoundAreCappedPerWorkerAndInAll) {
  ServerOptions limits;
  limits.max_parked_pulls_per_worker = 2;
  limits.max_parked_pulls = 3;
  ScriptedCluster cluster(limits);
  cluster.Register();
  constexpr TableId kBsp = 1;
  cluster.CreateBspTable(kBsp);
  cluster.SetWorkers({0, 1, 2}, /*change_id=*/1);
  // Under BSP a pull at clock 1 waits for every worker to reach clock 1.
  EXPECT_TRUE(cluster.WorkerRequest(wire::PULL, kBsp, 0, 1, 1, {3}).empty());
  EXPECT_TRUE(cluster.WorkerRequest(wire::PULL, kBsp, 0, 1, 2, {3}).empty());
  EXPECT_EQ(cluster.server().counters().parked_pulls, 2u);
  const uint64_t limits_before = cluster.server().counters().refused_limits;
  EXPECT_EQ(cluster.server().counters().refused_parked_pulls, 0u);
  // Worker 0's third is refused at once, naming the limit.
  std::vector<Got> third =
      cluster.WorkerRequest(wire::PULL, kBsp, 0, 1, 3, {3});
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].header.seq(), 3u);
  EXPECT_EQ(CodeOf(third[0]), StatusCode::kResourceExhausted);
  EXPECT_NE(
      third[0].header.status_message().find("--max_parked_pulls_per_worker"),
      std::string::npos)
      << third[0].header.status_message();
  // Worker 1 fills the server's limit; worker 2 is refused by it.
  EXPECT_TRUE(cluster.WorkerRequest(wire::PULL, kBsp, 1, 1, 4, {3}).empty());
  std::vector<Got> full = cluster.WorkerRequest(wire::PULL, kBsp, 2, 1, 5, {3});
  ASSERT_EQ(full.size(), 1u);
  EXPECT_EQ(CodeOf(full[0]), StatusCode::kResourceExhausted);
  EXPECT_NE(full[0].header.status_message().find("--max_parked_pulls)"),
            std::string::npos)
      << full[0].header.status_message();
  // A worker id that is not the job's parks nothing (kUnavailable).
  std::vector<Got> made_up =
      cluster.WorkerRequest(wire::PULL, kBsp, 99, 1, 6, {3});
  ASSERT_EQ(made_up.size(), 1u);
  EXPECT_EQ(CodeOf(made_up[0]), StatusCode::kUnavailable);
  EXPECT_EQ(cluster.server().counters().parked_pulls, 3u);
  EXPECT_EQ(cluster.server().counters().refused_limits, limits_before + 2);
  // Both refusals are counted as such (not the made-up worker's pull).
  EXPECT_EQ(cluster.server().counters().refused_parked_pulls, 2u);
  // Every worker reaches clock 1: the three waiting pulls are served.
  for (int32_t w : {0, 1}) {
    EXPECT_TRUE(cluster.WorkerRequest(wire::CLOCK, kBsp, w, 1, 10 + w).empty());
  }
  std::vector<Got> served = cluster.WorkerRequest(wire::CLOCK, kBsp, 2, 1, 12);
  ASSERT_EQ(served.size(), 3u);
  for (const Got& reply : served) {
    EXPECT_EQ(CodeOf(reply), StatusCode::kOk) << StatusFromWire(reply.header);
  }
  EXPECT_EQ(cluster.server().counters().parked_pulls, 0u);
}

TEST(ServerNode, PullsOfAWorkerThatLeavesAreAnsweredAndItsShareFreed) {
  ServerOptions limits;
  limits.max_parked_pulls_per_worker = 1;
  ScriptedCluster cluster(limits);
  cluster.Register();
  constexpr TableId kBsp = 1;
  cluster.CreateBspTable(kBsp);
  cluster.SetWorkers({0, 1}, /*change_id=*/1);
  EXPECT_TRUE(cluster.WorkerRequest(wire::PULL, kBsp, 0, 1, 1, {3}).empty());
  EXPECT_TRUE(cluster.WorkerRequest(wire::PULL, kBsp, 1, 1, 2, {3}).empty());
  EXPECT_EQ(cluster.server().counters().parked_pulls, 2u);
  // Worker 0 leaves (or is declared dead): its pull is answered, not kept
  // to its deadline.
  cluster.SetWorkers({1}, /*change_id=*/2);
  std::vector<Got> answered = cluster.TakeAtClient();
  ASSERT_EQ(answered.size(), 1u);
  EXPECT_EQ(answered[0].header.seq(), 1u);
  EXPECT_EQ(CodeOf(answered[0]), StatusCode::kUnavailable);
  EXPECT_NE(answered[0].header.status_message().find("left the job"),
            std::string::npos);
  EXPECT_EQ(cluster.server().counters().parked_pulls, 1u);
  // It joins again: its share is free.
  cluster.SetWorkers({0, 1}, /*change_id=*/3);
  EXPECT_TRUE(cluster.WorkerRequest(wire::PULL, kBsp, 0, 1, 3, {3}).empty());
  EXPECT_EQ(cluster.server().counters().parked_pulls, 2u);
}

// A push-pull applies its push before its pull waits: refused at the pull
// (its worker gone, or never live), the answer says the values were
// applied, so that the client does not push them again (the client reads
// `duplicate` on an Unavailable answer as "pull only").
TEST(ServerNode, APushPullRefusedAtItsPullSaysItsPushWasApplied) {
  ScriptedCluster cluster;
  cluster.Register();
  constexpr TableId kBsp = 1;
  cluster.CreateBspTable(kBsp);
  cluster.SetWorkers({0, 1}, /*change_id=*/1);
  const std::vector<float> ones(kWidth, 1.0f);
  EXPECT_TRUE(
      cluster.WorkerRequest(wire::PUSH_PULL, kBsp, 0, 1, 1, {3}, ones).empty());
  cluster.SetWorkers({1}, /*change_id=*/2);
  std::vector<Got> answered = cluster.TakeAtClient();
  ASSERT_EQ(answered.size(), 1u);
  EXPECT_EQ(CodeOf(answered[0]), StatusCode::kUnavailable);
  EXPECT_TRUE(answered[0].header.duplicate());
  // Worker 0 is not live now: a push-pull of its is applied, then refused
  // at its pull, and says so too.
  answered = cluster.WorkerRequest(wire::PUSH_PULL, kBsp, 0, 1, 2, {3}, ones);
  ASSERT_EQ(answered.size(), 1u);
  EXPECT_EQ(CodeOf(answered[0]), StatusCode::kUnavailable);
  EXPECT_TRUE(answered[0].header.duplicate());
  // A plain pull refused the same way applied nothing.
  answered = cluster.WorkerRequest(wire::PULL, kBsp, 0, 1, 3, {3});
  ASSERT_EQ(answered.size(), 1u);
  EXPECT_EQ(CodeOf(answered[0]), StatusCode::kUnavailable);
  EXPECT_FALSE(answered[0].header.duplicate());
}

// The busy spells (ms) the coordinator of `cluster` was told of since the
// last call, its heartbeats taken; the interval's ordinary heartbeats are
// not spells.
std::vector<int64_t> BusySpells(ScriptedCluster& cluster) {
  std::vector<int64_t> spells;
  while (std::optional<Got> hb = cluster.TakeAtCoordinator(wire::HEARTBEAT)) {
    if (hb->header.busy()) spells.push_back(hb->header.timeout_ms());
  }
  return spells;
}

// Work on many keys keeps the request thread, and so the heartbeats, busy
// for a while (a key new to a table is allocated, its lookup missing the
// caches): the server first tells the coordinator how long it may be
// silent, so that a working server is not taken for a dead one. A push of
// 2^17 keys is announced (each such push, with the same spell) and one of
// fewer is not, nor a pull of 2^17; and a BSP clock whose combine takes
// 2^17 keys is announced, though each of its pushes took fewer.
TEST(ServerNode, WorkOnManyKeysIsAnnouncedToTheCoordinatorAsABusySpell) {
  ScriptedCluster cluster;
  cluster.Register();
  constexpr TableId kBsp = 1;
  cluster.CreateBspTable(kBsp);
  cluster.SetWorkers({0, 1}, /*change_id=*/1);
  constexpr size_t kMany = size_t{1} << 17;
  auto keys_from = [](Key first, size_t n) {
    std::vector<Key> keys(n);
    std::iota(keys.begin(), keys.end(), first);
    return keys;
  };
  auto ones = [](size_t keys) { return std::vector<float>(keys * kWidth, 1); };
  // 2 s, plus the values at 10 MB/s, plus 40 us a key (7451 ms), rounded
  // up to a power of two.
  const int64_t need = 2000 + static_cast<int64_t>(kMany * kWidth * 4 / 10000) +
                       static_cast<int64_t>(kMany / 25);
  ASSERT_EQ(need, 7451);
  const std::vector<int64_t> one_spell = {8192};
  BusySpells(cluster);

  Got fewer =
      cluster.Request(wire::PUSH, 1, keys_from(0, kMany - 1), ones(kMany - 1));
  EXPECT_EQ(CodeOf(fewer), StatusCode::kOk) << StatusFromWire(fewer.header);
  EXPECT_TRUE(BusySpells(cluster).empty());
  Got many =
      cluster.Request(wire::PUSH, 2, keys_from(kMany, kMany), ones(kMany));
  EXPECT_EQ(CodeOf(many), StatusCode::kOk) << StatusFromWire(many.header);
  EXPECT_EQ(BusySpells(cluster), one_spell);
  // Another push of as many keys: the same spell again (the coordinator
  // has nothing new to write).
  Got again =
      cluster.Request(wire::PUSH, 3, keys_from(2 * kMany, kMany), ones(kMany));
  EXPECT_EQ(CodeOf(again), StatusCode::kOk) << StatusFromWire(again.header);
  EXPECT_EQ(BusySpells(cluster), one_spell);
  // A pull of as many keys only looks them up: it is not announced.
  EXPECT_EQ(cluster.Pull(4, keys_from(kMany, kMany)), ones(kMany));
  EXPECT_TRUE(BusySpells(cluster).empty());

  // Under BSP each worker pushes half of the keys at clock 0, and the
  // combine applies them all once both reach clock 1.
  const size_t half = kMany / 2;
  for (int32_t w : {0, 1}) {
    std::vector<Got> pushed = cluster.WorkerRequest(
        wire::PUSH, kBsp, w, 0, 20 + w, keys_from(w * half, half), ones(half));
    ASSERT_EQ(pushed.size(), 1u);
    EXPECT_EQ(CodeOf(pushed[0]), StatusCode::kOk);
  }
  EXPECT_TRUE(cluster.WorkerRequest(wire::CLOCK, kBsp, 0, 1, 30).empty());
  EXPECT_TRUE(BusySpells(cluster).empty());
  EXPECT_TRUE(cluster.WorkerRequest(wire::CLOCK, kBsp, 1, 1, 31).empty());
  EXPECT_EQ(BusySpells(cluster), one_spell);
  // Applied: every key holds its one push.
  std::vector<Got> pulled =
      cluster.WorkerRequest(wire::PULL, kBsp, 0, 1, 40, keys_from(0, kMany));
  ASSERT_EQ(pulled.size(), 1u);
  ASSERT_EQ(CodeOf(pulled[0]), StatusCode::kOk);
  EXPECT_EQ(testing::Floats(pulled[0].data), ones(kMany));
}

// A backup takes a primary's records of many rows as a push of them: it
// allocates each, and first tells the coordinator it may be busy a while.
TEST(ServerNode, ABackupAnnouncesTheRecordsOfManyRowsAsABusySpell) {
  ScriptedCluster cluster;
  cluster.Register();
  // Every slot is server 1's, backed here.
  wire::Header update;
  update.set_type(wire::ROUTING_UPDATE);
  *update.mutable_routing() =
      cluster.Routing(/*epoch=*/2, std::vector<int32_t>(kSlots, 1));
  for (int32_t slot = 0; slot < kSlots; ++slot) {
    update.mutable_routing()->add_slot_backup(0);
  }
  cluster.SendToServer(update);
  cluster.Run(milliseconds(600));  // past an ordinary heartbeat
  BusySpells(cluster);
  auto primary_transport = cluster.network().NewTransport("server-1");
  std::unique_ptr<Socket> primary =
      *primary_transport->NewDealer("server-1-records", testing::kMaxBytes);
  ASSERT_TRUE(primary->Connect(cluster.server_address()).ok());
  // Records of `rows` rows, sent as server 1's `seq`-th; its answer.
  auto replicate = [&](uint64_t seq, Key first, size_t rows) {
    std::string payload;
    for (size_t i = 0; i < rows; ++i) {
      RecordCodec::AppendEntry({kTable, first + i, kOnes, {}, 1}, &payload);
    }
    wire::Header h;
    h.set_type(wire::REPLICATE);
    h.set_member_id(1);
    h.set_epoch(2);
    h.set_change_id(5);  // the primary's stream
    h.set_seq(seq);
    OutMessage out;
    out.AddString(h.SerializeAsString());
    out.AddString(std::move(payload));
    EXPECT_TRUE(primary->Send(std::move(out)).ok());
    cluster.Run(milliseconds(5));
    std::optional<Got> ack = testing::Take(*primary, /*router=*/false);
    EXPECT_TRUE(ack.has_value());
    return ack ? StatusFromWire(ack->header) : InternalError("no answer");
  };
  constexpr size_t kMany = size_t{1} << 17;
  EXPECT_TRUE(replicate(1, 0, kMany - 1).ok());
  EXPECT_TRUE(BusySpells(cluster).empty());
  EXPECT_TRUE(replicate(2, kMany, kMany).ok());
  EXPECT_EQ(BusySpells(cluster).size(), 1u);
}

}  // namespace
}  // namespace ductile
