// Rows by id on the simulated network: two real ServerNodes (a fake clock,
// the in-memory checkpoint disk, latencies drawn from a seed), a scripted
// coordinator that registers them, takes checkpoints, rolls the job back
// and moves slots from the first to the second (a server joining), and a
// scripted worker that pushes ids, one request per push, and tells the
// servers its clocks.
//
// An oracle keeps what the table must hold: each id's pushes not admitted
// yet (the admission filter's counts), each stored row's value and the
// clock of its last update, and the servers' counts of rows admitted,
// pushes dropped and rows evicted. Checked against it, exactly, for
// several seeds:
//   1. a row is stored at exactly its N-th push, before and after a
//      checkpoint, a rollback (the counts as at the cut) and a slot move
//      (the counts follow the slot), and rollbacks to a cut taken before a
//      move restore the moved slots' counts on their new server;
//   2. rows idle for T clocks go, and restored and moved rows count as
//      updated at the clock they arrive at;
//   3. each server keeps at most its budget of rows, across a move and a
//      rollback, and the counts of evictions add up;
//   4. evicting by use, the most pushed rows stay, the servers' counts of
//      pushes following moves and rollbacks.
// No sleeps: time moves only in Run(), in simulated milliseconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ductile/table.h"
#include "proto/codec.h"
#include "proto/counters.h"
#include "proto/ductile.pb.h"
#include "proto/table_config.h"
#include "routing/slot_map.h"
#include "server/initializer.h"
#include "server/server_node.h"
#include "sim/mem_stores.h"
#include "sim/sim_env.h"
#include "sim/sim_network.h"
#include "util/split_mix.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;

constexpr char kCoordinator[] = "tcp://coordinator:1";
constexpr char kStateDir[] = "/state";
constexpr int64_t kMaxBytes = int64_t{1} << 24;
constexpr TableId kTable = 3;
constexpr int32_t kSlots = 16;
constexpr int kWidth = 2;
constexpr int kServers = 2;
constexpr int32_t kWorker = 0;
constexpr int64_t kClient = 500;

struct Got {
  std::string identity;
  wire::Header header;
  std::vector<std::string> data;
};

std::optional<Got> Take(Socket& socket, bool router) {
  InMessage message;
  bool any = false;
  if (!socket.Receive(&message, &any).ok() || !any) return std::nullopt;
  Got got;
  size_t first = 0;
  if (router) got.identity = std::string(message.frame_view(first++));
  EXPECT_TRUE(ParseHeader(message.frame(first), &got.header).ok());
  for (size_t i = first + 1; i < message.size(); ++i) {
    got.data.emplace_back(message.frame_view(i));
  }
  return got;
}

TableOptions RowTable(const RowPolicy& rows) {
  TableOptions t;
  t.name = "emb";
  t.value_width = kWidth;
  t.rule = UpdateRule::kAdd;
  t.init.kind = InitKind::kUniform;
  t.init.low = -1.0f;
  t.init.high = 1.0f;
  t.init.seed = 5;
  t.rows = rows;
  return t;
}

// What the table must hold, and what the servers must have counted.
struct Oracle {
  struct Row {
    int pushes = 0;  // applied, each of 1.0
    int64_t used = 0;
  };
  uint32_t threshold = 0;
  // The pushes of each id counted by the filter, saturated at the
  // threshold (an admitted id keeps its count).
  std::map<Key, uint32_t> counts;
  std::map<Key, Row> rows;
  uint64_t admitted = 0, dropped = 0, evicted_idle = 0, evicted_budget = 0;
};

// Two servers, a scripted coordinator and a scripted worker.
class RowCluster {
 public:
  RowCluster(uint64_t seed, const RowPolicy& rows) : table_(RowTable(rows)) {
    oracle_.threshold = std::max<uint32_t>(rows.admit_after_pushes, 1);
    sim::NetworkFaults faults;
    faults.min_latency_us = 50;
    faults.max_latency_us = 50 + static_cast<int64_t>(seed % 7) * 300;
    net_ = std::make_unique<sim::SimNetwork>(seed, faults);
    coordinator_transport_ = net_->NewTransport("coordinator");
    coordinator_ = *coordinator_transport_->NewRouter(kMaxBytes);
    EXPECT_TRUE(coordinator_->Bind(kCoordinator).ok());
    for (int i = 0; i < kServers; ++i) {
      ServerOptions o;
      o.coordinator_address = kCoordinator;
      o.host = "server-" + std::to_string(i);
      o.enable_ipc = false;
      o.requested_id = i;
      o.heartbeat_interval_ms = 500;
      o.state_dir = kStateDir;
      envs_.push_back(
          std::make_unique<sim::SimEnv>(net_.get(), &disk_, o.host));
      servers_.push_back(std::make_unique<ServerNode>(o, envs_.back().get()));
      EXPECT_TRUE(servers_.back()->Start().ok());
    }
    worker_transport_ = net_->NewTransport("worker");
  }

  // Both servers registered with the table, every slot on server 0 (the
  // joiner, server 1, owns none yet), worker 0 live on both.
  void Start() {
    Run(milliseconds(5));
    std::vector<Got> regs;
    while (std::optional<Got> reg = TakeAtCoordinator(wire::REGISTER)) {
      regs.push_back(std::move(*reg));
    }
    ASSERT_EQ(regs.size(), 2u);
    for (const Got& reg : regs) {
      const int32_t id = reg.header.member_id();
      ASSERT_TRUE(id == 0 || id == 1);
      identities_[id] = reg.identity;
      addresses_[id] = reg.header.endpoint().tcp_address();
    }
    owners_.assign(kSlots, 0);
    for (const Got& reg : regs) {
      wire::Header reply;
      reply.set_type(wire::CONTROL_REPLY);
      reply.set_seq(reg.header.seq());
      reply.set_member_id(reg.header.member_id());
      *reply.add_tables() = ToWire(table_, kTable);
      *reply.mutable_routing() = Routing();
      ToServer(reg.header.member_id(), reply);
    }
    Run(milliseconds(5));
    for (int i = 0; i < kServers; ++i) {
      ASSERT_TRUE(servers_[i]->registered()) << i;
      workers_[i] = *worker_transport_->NewDealer("worker-0", kMaxBytes);
      ASSERT_TRUE(workers_[i]->Connect(addresses_[i]).ok());
      wire::Header update;
      update.set_type(wire::WORKERS_UPDATE);
      update.set_change_id(1);
      update.add_worker_ids(kWorker);
      ToServer(i, update);
    }
    Run(milliseconds(5));
  }

  // ---- The worker.

  // One push of 1.0 (every element) to `key`, at the worker's clock, to
  // the server owning its slot; the oracle follows.
  void Push(Key key) {
    const int32_t owner = owners_[SlotOf(kTable, key, kSlots)];
    Got reply =
        Data(owner, wire::PUSH, {key}, std::vector<float>(kWidth, 1.0f));
    ASSERT_EQ(reply.header.status_code(), 0) << reply.header.status_message();
    ++uses_[owner][key];  // every push, stored or not
    order_[key] = ++pushes_;
    auto row = oracle_.rows.find(key);
    if (row == oracle_.rows.end()) {
      // Saturated at the threshold: an id admitted, evicted and pushed
      // again is admitted at once.
      uint32_t& count = oracle_.counts[key];
      count = std::min(count + 1, oracle_.threshold);
      if (count < oracle_.threshold) {
        ++oracle_.dropped;
        return;
      }
      ++oracle_.admitted;
      row = oracle_.rows.emplace(key, Oracle::Row{}).first;
    }
    ++row->second.pushes;
    row->second.used = clock_;
    EnforceBudget(owner);
  }

  // The worker finishes its clock: CLOCK to both servers; rows idle for T
  // clocks go.
  void Clock() {
    ++clock_;
    for (int i = 0; i < kServers; ++i) {
      wire::Header h = WorkerHeader(wire::CLOCK);
      OutMessage out;
      out.AddString(h.SerializeAsString());
      ASSERT_TRUE(workers_[i]->Send(std::move(out)).ok());
    }
    Run(milliseconds(5));
    if (table_.rows.evict_idle_clocks > 0) {
      std::erase_if(oracle_.rows, [&](const auto& r) {
        const bool idle =
            clock_ - r.second.used >= table_.rows.evict_idle_clocks;
        oracle_.evicted_idle += idle;
        return idle;
      });
    }
  }

  // Pulls every id of `keys` from its owner and checks the values against
  // the oracle (a row's: the initializer's plus its pushes; an id not
  // stored: the initializer's), then the servers' counts.
  void Check(const std::vector<Key>& keys, const std::string& when) {
    for (Key key : keys) {
      const int32_t owner = owners_[SlotOf(kTable, key, kSlots)];
      Got reply = Data(owner, wire::PULL, {key}, {});
      ASSERT_EQ(reply.header.status_code(), 0)
          << when << ": " << reply.header.status_message();
      std::string all;
      for (const std::string& frame : reply.data) all += frame;
      ASSERT_EQ(all.size(), kWidth * sizeof(float)) << when;
      std::vector<float> got(kWidth);
      std::memcpy(got.data(), all.data(), all.size());
      std::vector<float> want(kWidth);
      InitializeValue(table_.init, kTable, key, want);
      auto row = oracle_.rows.find(key);
      if (row != oracle_.rows.end()) {
        for (float& x : want) {
          for (int p = 0; p < row->second.pushes; ++p) x += 1.0f;
        }
      }
      EXPECT_EQ(got, want) << when << ": id " << key << " on server " << owner
                           << (row == oracle_.rows.end() ? " (not stored)"
                                                         : " (stored)");
    }
    uint64_t stored = 0, admitted = 0, dropped = 0, idle = 0, budget = 0;
    for (int i = 0; i < kServers; ++i) {
      const ServerCounters c = servers_[i]->counters();
      EXPECT_EQ(c.keys_stored, RowsOn(i)) << when << ": server " << i;
      stored += c.keys_stored;
      admitted += c.rows_admitted;
      dropped += c.row_pushes_dropped;
      idle += c.rows_evicted_idle;
      budget += c.rows_evicted_budget;
    }
    EXPECT_EQ(stored, oracle_.rows.size()) << when;
    EXPECT_EQ(admitted, oracle_.admitted) << when;
    EXPECT_EQ(dropped, oracle_.dropped) << when;
    EXPECT_EQ(idle, oracle_.evicted_idle) << when;
    EXPECT_EQ(budget, oracle_.evicted_budget) << when;
  }

  // ---- The coordinator.

  // A checkpoint at the worker's clock (every push before it is in), on
  // both servers; the oracle's state is kept as the cut's.
  void Checkpoint() {
    const int64_t cut = clock_;
    ++round_;
    for (int i = 0; i < kServers; ++i) {
      wire::Header prepare;
      prepare.set_type(wire::CHECKPOINT_PREPARE);
      prepare.set_change_id(round_);
      prepare.set_generation(generation_);
      prepare.set_timeout_ms(60000);
      ToServer(i, prepare);
    }
    Run(milliseconds(5));
    for (int i = 0; i < kServers; ++i) {
      std::optional<Got> ack = TakeAtCoordinator(wire::CHECKPOINT_ACK);
      ASSERT_TRUE(ack.has_value());
      ASSERT_EQ(ack->header.status_code(), 0) << ack->header.status_message();
      ASSERT_LT(ack->header.clock(), cut);
    }
    for (int i = 0; i < kServers; ++i) {
      wire::Header commit;
      commit.set_type(wire::CHECKPOINT_COMMIT);
      commit.set_change_id(round_);
      commit.set_generation(generation_);
      commit.set_clock(cut);
      commit.set_data_clock(last_cut_);
      commit.set_timeout_ms(60000);
      ToServer(i, commit);
    }
    Run(milliseconds(5));
    for (int i = 0; i < kServers; ++i) {
      std::optional<Got> done = TakeAtCoordinator(wire::CHECKPOINT_DONE);
      ASSERT_TRUE(done.has_value());
      ASSERT_EQ(done->header.status_code(), 0) << done->header.status_message();
      ASSERT_EQ(done->header.clock(), cut);
    }
    Cut& c = cuts_[cut];
    c.owners = owners_;
    c.rows = oracle_.rows;
    c.counts = oracle_.counts;
    last_cut_ = cut;
  }

  // The job rolls back to the checkpoint at `cut`: each slot from the
  // store of the server that owned it then, onto its owner now.
  void RollBack(int64_t cut) {
    ASSERT_EQ(cuts_.count(cut), 1u);
    const Cut& c = cuts_.at(cut);
    ++generation_;
    wire::Header recover;
    recover.set_type(wire::RECOVER);
    recover.set_generation(generation_);
    recover.set_clock(cut);
    recover.add_worker_ids(kWorker);
    *recover.add_tables() = ToWire(table_, kTable);
    for (int s = 0; s < kServers; ++s) {
      wire::CheckpointSource* source = recover.add_sources();
      source->set_server_id(s);
      source->set_state_dir(std::string(kStateDir) + "/server-" +
                            std::to_string(s));
      for (int32_t slot = 0; slot < kSlots; ++slot) {
        if (c.owners[slot] == s) source->add_slots(slot);
      }
    }
    for (int i = 0; i < kServers; ++i) ToServer(i, recover);
    Run(milliseconds(5));
    for (int i = 0; i < kServers; ++i) {
      std::optional<Got> ack = TakeAtCoordinator(wire::RECOVER_ACK);
      ASSERT_TRUE(ack.has_value());
      ASSERT_EQ(ack->header.status_code(), 0) << ack->header.status_message();
    }
    clock_ = cut;
    oracle_.rows = c.rows;
    oracle_.counts = c.counts;
    // Restored rows count as updated at the checkpoint's clock, before any
    // push after the rollback, in the order restored (by id); rows beyond a
    // budget wait for the next push.
    for (auto& [key, row] : oracle_.rows) {
      row.used = cut;
      order_[key] = 0;
    }
    for (auto& uses : uses_) uses.clear();
    for (const auto& [key, row] : oracle_.rows) {
      if (row.pushes > 0) uses_[OwnerOf(key)][key] = row.pushes;
    }
  }

  // A checkpoint at the worker's clock, then the slots from kSlots / 2 on
  // moving to server 1, the values of `ids` checked after; returns the cut.
  int64_t CutThenMoveHalf(const std::vector<Key>& ids) {
    const int64_t cut = clock_;
    Checkpoint();
    if (::testing::Test::HasFatalFailure()) return cut;
    MoveSlots(kSlots / 2);
    if (!::testing::Test::HasFatalFailure()) Check(ids, "after the move");
    return cut;
  }

  // Server 1 joins: the slots from `first` on move to it from server 0,
  // then the routing gives them to it. With `from` 1, they move back (as
  // when server 1 is drained). The rows moved count as updated at the
  // clock they arrive at.
  void MoveSlots(int32_t first, int32_t from = 0) {
    const int32_t to = 1 - from;
    ++move_;
    wire::Header out;
    out.set_type(wire::MIGRATE_OUT);
    out.set_change_id(move_);
    out.set_member_id(to);
    out.mutable_endpoint()->set_tcp_address(addresses_[to]);
    std::set<int32_t> moving;
    for (int32_t slot = first; slot < kSlots; ++slot) {
      if (owners_[slot] == from) {
        out.add_slots(slot);
        moving.insert(slot);
      }
    }
    ToServer(from, out);
    Run(milliseconds(20));
    std::optional<Got> done = TakeAtCoordinator(wire::MIGRATE_DONE);
    ASSERT_TRUE(done.has_value());
    ASSERT_EQ(done->header.status_code(), 0) << done->header.status_message();
    for (int32_t slot : moving) owners_[slot] = to;
    ++epoch_;
    wire::Header update;
    update.set_type(wire::ROUTING_UPDATE);
    *update.mutable_routing() = Routing();
    for (int i = 0; i < kServers; ++i) ToServer(i, update);
    Run(milliseconds(5));
    // The target takes the moved rows in their order of use (a table with
    // a budget sends them so) after its own: in these scenarios it has
    // none before a move, so `order_` stays right.
    for (auto& [key, row] : oracle_.rows) {
      if (moving.count(SlotOf(kTable, key, kSlots)) == 0) continue;
      row.used = clock_;
      uint32_t& uses = uses_[to][key];
      if (uses == 0) uses = row.pushes;
    }
  }

  int64_t clock() const { return clock_; }
  int32_t OwnerOf(Key key) const {
    return owners_[SlotOf(kTable, key, kSlots)];
  }
  uint64_t RowsOn(int32_t server) const {
    uint64_t n = 0;
    for (const auto& [key, row] : oracle_.rows) n += OwnerOf(key) == server;
    return n;
  }
  Oracle& oracle() { return oracle_; }
  ServerNode& server(int i) { return *servers_[i]; }

 private:
  struct Cut {
    std::vector<int32_t> owners;
    std::map<Key, Oracle::Row> rows;
    std::map<Key, uint32_t> counts;
  };

  void EnforceBudget(int32_t server) {
    const uint64_t budget = table_.rows.max_rows;
    if (budget == 0) return;
    const bool by_use = table_.rows.eviction == RowPolicy::Eviction::kLeastUsed;
    while (RowsOn(server) > budget) {
      // The least recently updated row of the server: the oldest clock,
      // then the earliest push (the oracle's push order); by use, the
      // least pushed of them (each of these tables is smaller than the
      // rows the server compares), the least recent of equals.
      auto oldest = oracle_.rows.end();
      for (auto it = oracle_.rows.begin(); it != oracle_.rows.end(); ++it) {
        if (OwnerOf(it->first) != server) continue;
        if (oldest == oracle_.rows.end()) {
          oldest = it;
          continue;
        }
        const uint32_t uses = by_use ? uses_[server][it->first] : 0;
        const uint32_t fewest = by_use ? uses_[server][oldest->first] : 0;
        if (uses != fewest ? uses < fewest
                           : order_[it->first] < order_[oldest->first]) {
          oldest = it;
        }
      }
      oracle_.rows.erase(oldest);
      ++oracle_.evicted_budget;
    }
  }

  // Each row's last update for the budget: the number of pushes before
  // it, 0 for the rows a rollback restored (older than any push after).
  std::map<Key, uint64_t> order_;
  uint64_t pushes_ = 0;
  // Each server's pushes of each id as its use sketch counts them (every
  // push it took; a row restored or moved in, unknown to it, counts its
  // pushes applied; a rollback starts the counts over).
  std::map<Key, uint32_t> uses_[kServers];

  wire::RoutingTable Routing() const {
    wire::RoutingTable routing;
    routing.set_epoch(epoch_);
    routing.set_num_slots(kSlots);
    for (int32_t owner : owners_) routing.add_slot_owner(owner);
    for (int id = 0; id < kServers; ++id) {
      wire::ServerEndpoint* server = routing.add_servers();
      server->set_id(id);
      server->set_tcp_address(addresses_.at(id));
    }
    return routing;
  }

  wire::Header WorkerHeader(wire::MessageType type) {
    wire::Header h;
    h.set_type(type);
    h.set_seq(++seq_);
    h.set_client_id(kClient);
    h.set_worker_id(kWorker);
    h.set_clock(clock_);
    h.set_table_id(kTable);
    h.set_epoch(epoch_);
    h.set_generation(generation_);
    h.set_timeout_ms(60000);
    return h;
  }

  Got Data(int32_t server, wire::MessageType type, const std::vector<Key>& keys,
           const std::vector<float>& values) {
    wire::Header h = WorkerHeader(type);
    h.set_num_keys(static_cast<uint32_t>(keys.size()));
    if (!values.empty()) h.set_values_frames(1);
    OutMessage out;
    out.AddString(h.SerializeAsString());
    out.AddString(std::string(reinterpret_cast<const char*>(keys.data()),
                              keys.size() * sizeof(Key)));
    if (!values.empty()) {
      out.AddString(std::string(reinterpret_cast<const char*>(values.data()),
                                values.size() * sizeof(float)));
    }
    EXPECT_TRUE(workers_[server]->Send(std::move(out)).ok());
    for (int i = 0; i < 100; ++i) {
      Run(milliseconds(1));
      while (std::optional<Got> got = Take(*workers_[server], false)) {
        if (got->header.seq() == h.seq()) return *got;
      }
    }
    ADD_FAILURE() << "no reply from server " << server << " to seq " << h.seq();
    return Got{};
  }

  void ToServer(int32_t id, const wire::Header& h) {
    OutMessage out;
    out.AddString(identities_.at(id));
    out.AddString(h.SerializeAsString());
    ASSERT_TRUE(coordinator_->Send(std::move(out)).ok());
  }

  std::optional<Got> TakeAtCoordinator(wire::MessageType type) {
    for (auto it = at_coordinator_.begin(); it != at_coordinator_.end(); ++it) {
      if (it->header.type() != type) continue;
      Got got = std::move(*it);
      at_coordinator_.erase(it);
      return got;
    }
    return std::nullopt;
  }

  void Run(milliseconds duration) {
    const auto end = net_->now() + duration;
    while (true) {
      net_->DeliverDue();
      for (auto& s : servers_) s->Step();
      while (std::optional<Got> got = Take(*coordinator_, true)) {
        if (got->header.type() != wire::HEARTBEAT &&
            got->header.type() != wire::ROUTING_ACK &&
            got->header.type() != wire::WORKERS_ACK) {
          at_coordinator_.push_back(std::move(*got));
        }
      }
      auto next = end;
      for (auto& s : servers_) next = std::min(next, s->NextWakeup());
      if (auto due = net_->NextDelivery(); due) next = std::min(next, *due);
      if (net_->now() >= end) break;
      net_->AdvanceTo(
          std::max(next, net_->now() + std::chrono::microseconds(1)));
    }
  }

  const TableOptions table_;
  Oracle oracle_;
  std::unique_ptr<sim::SimNetwork> net_;
  sim::MemDisk disk_;
  std::unique_ptr<Transport> coordinator_transport_, worker_transport_;
  std::unique_ptr<Socket> coordinator_;
  std::vector<std::unique_ptr<sim::SimEnv>> envs_;
  std::vector<std::unique_ptr<ServerNode>> servers_;
  std::map<int32_t, std::string> identities_, addresses_;
  std::unique_ptr<Socket> workers_[kServers];
  std::vector<Got> at_coordinator_;
  std::vector<int32_t> owners_;
  std::map<int64_t, Cut> cuts_;
  uint64_t epoch_ = 1, generation_ = 0, seq_ = 0, round_ = 0, move_ = 0;
  int64_t clock_ = 0, last_cut_ = 0;
};

// `n` ids drawn from `seed`, ascending, spread over the slots.
std::vector<Key> Ids(uint64_t seed, int n) {
  std::vector<Key> ids;
  for (int i = 0; i < n; ++i) ids.push_back(SplitMix64(seed * 1000 + i));
  std::sort(ids.begin(), ids.end());
  return ids;
}

// 1. Admission with exact counts: ids pushed below, at and above the
// threshold, then a checkpoint, more pushes, a server joining (half the
// slots move), a second checkpoint, more pushes, a rollback to the second
// cut (each server's slots from its own store), and one to the first
// (the moved slots' counts from the store of the server they left).
TEST(RowSimulation, AdmissionCountsAreExactAcrossCheckpointsRollbacksAndMoves) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RowPolicy rows;
    rows.admit_after_pushes = 3;
    RowCluster cluster(seed, rows);
    cluster.Start();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    const std::vector<Key> ids = Ids(seed, 24);
    // Each id 0 - 4 times: below, at and past the threshold.
    for (size_t i = 0; i < ids.size(); ++i) {
      for (size_t p = 0; p < (i + seed) % 5; ++p) cluster.Push(ids[i]);
    }
    cluster.Check(ids, "before the first cut");
    cluster.Clock();
    cluster.Checkpoint();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    const int64_t first = cluster.clock();
    for (size_t i = 0; i < ids.size(); i += 2) cluster.Push(ids[i]);
    cluster.Check(ids, "after the first cut");

    cluster.MoveSlots(kSlots / 2);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    cluster.Check(ids, "after the move");
    size_t on_joiner = 0;
    for (Key id : ids) on_joiner += cluster.OwnerOf(id) == 1;
    ASSERT_GT(on_joiner, 0u);
    ASSERT_LT(on_joiner, ids.size());
    // The counts followed the slots: an id one push short of the threshold
    // is stored at its next push on the joiner.
    for (Key id : ids) cluster.Push(id);
    cluster.Check(ids, "pushed once after the move");
    cluster.Clock();
    cluster.Checkpoint();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    const int64_t second = cluster.clock();
    for (size_t i = 1; i < ids.size(); i += 2) cluster.Push(ids[i]);
    cluster.Check(ids, "after the second cut");

    cluster.RollBack(second);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    cluster.Check(ids, "rolled back to the second cut");
    for (int round = 0; round < 3; ++round) {
      for (Key id : ids) cluster.Push(id);
      cluster.Check(ids, "pushed after the rollback to the second cut");
    }
    cluster.RollBack(first);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    cluster.Check(ids, "rolled back to the first cut");
    for (int round = 0; round < 3; ++round) {
      for (Key id : ids) cluster.Push(id);
      cluster.Check(ids, "pushed after the rollback to the first cut");
    }
  }
}

// 2. Eviction by idle clocks: rows not updated for T clocks go; rows
// restored by a rollback count as updated at the cut's clock, rows moved
// to a joining server at the clock they arrive at.
TEST(RowSimulation, IdleRowsGoAfterTClocksAcrossACheckpointAMoveAndARollback) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RowPolicy rows;
    rows.admit_after_pushes = 2;
    rows.evict_idle_clocks = 3;
    RowCluster cluster(seed, rows);
    cluster.Start();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    const std::vector<Key> ids = Ids(seed + 100, 20);
    // Clock c pushes the ids i with i % 4 <= c % 4, twice for the first
    // half (admitted at once), once for the others.
    for (int c = 0; c < 4; ++c) {
      for (size_t i = 0; i < ids.size(); ++i) {
        if (static_cast<int>(i % 4) > c) continue;
        cluster.Push(ids[i]);
        if (i < ids.size() / 2) cluster.Push(ids[i]);
      }
      cluster.Clock();
      cluster.Check(ids, "clock " + std::to_string(cluster.clock()));
    }
    const int64_t cut = cluster.CutThenMoveHalf(ids);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    for (int c = 0; c < 4; ++c) {
      for (size_t i = 0; i < ids.size(); i += 3) cluster.Push(ids[i]);
      cluster.Clock();
      cluster.Check(ids,
                    "after the move, clock " + std::to_string(cluster.clock()));
    }
    cluster.RollBack(cut);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    cluster.Check(ids, "rolled back");
    for (int c = 0; c < 4; ++c) {
      if (c == 1) {
        for (size_t i = 1; i < ids.size(); i += 4) cluster.Push(ids[i]);
      }
      cluster.Clock();
      cluster.Check(
          ids, "after the rollback, clock " + std::to_string(cluster.clock()));
    }
    EXPECT_GT(cluster.oracle().evicted_idle, 0u);
  }
}

// 4. Slots that leave a server and come back: the rows evicted while they
// were away are not in the checkpoints the server writes after they
// return (a rollback to one restores exactly the live rows), and the
// counts came back with them.
TEST(RowSimulation, RowsOfSlotsThatLeftAndCameBackAreExactlyTheLiveOnes) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RowPolicy rows;
    rows.admit_after_pushes = 2;
    rows.evict_idle_clocks = 2;
    RowCluster cluster(seed, rows);
    cluster.Start();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    const std::vector<Key> ids = Ids(seed + 300, 24);
    for (size_t i = 0; i < ids.size(); ++i) {
      cluster.Push(ids[i]);
      if (i % 3 != 0) cluster.Push(ids[i]);  // a third stays counted at 1
    }
    cluster.Clock();
    cluster.Checkpoint();  // every row on server 0, in its store
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    cluster.MoveSlots(kSlots / 2);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    // The rows that stayed are kept in use; the moved ones idle away on
    // server 1.
    for (int c = 0; c < 2; ++c) {
      for (Key id : ids) {
        if (cluster.OwnerOf(id) == 0) cluster.Push(id);
      }
      cluster.Clock();
      cluster.Check(ids,
                    "slots away, clock " + std::to_string(cluster.clock()));
    }
    cluster.MoveSlots(kSlots / 2, /*from=*/1);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    cluster.Check(ids, "slots back");
    cluster.Clock();
    cluster.Checkpoint();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    const int64_t cut = cluster.clock();
    for (Key id : ids) cluster.Push(id);
    cluster.Check(ids, "after the cut");
    cluster.RollBack(cut);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    cluster.Check(ids, "rolled back to the cut after the slots came back");
    for (Key id : ids) cluster.Push(id);
    cluster.Check(ids, "pushed after the rollback");
  }
}

// 3. Eviction by the row budget: each server keeps at most B rows, the
// least recently updated going first; a move and a rollback hand rows
// around, and the next push on each server brings it back within B.
TEST(RowSimulation, EachServerKeepsItsBudgetAcrossAMoveAndARollback) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RowPolicy rows;
    rows.max_rows = 6;
    RowCluster cluster(seed, rows);
    cluster.Start();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    const std::vector<Key> ids = Ids(seed + 200, 20);
    for (Key id : ids) cluster.Push(id);
    cluster.Check(ids, "all pushed once");
    EXPECT_EQ(cluster.server(0).counters().keys_stored, 6u);
    cluster.Clock();
    const int64_t cut = cluster.CutThenMoveHalf(ids);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    // New ids on each server: its rows in push order, within the budget.
    for (size_t i = 0; i < ids.size(); i += 2) cluster.Push(ids[i] ^ 1);
    std::vector<Key> all = ids;
    for (size_t i = 0; i < ids.size(); i += 2) all.push_back(ids[i] ^ 1);
    cluster.Check(all, "new ids after the move");
    for (int s = 0; s < 2; ++s) {
      EXPECT_LE(cluster.server(s).counters().keys_stored, 6u) << s;
    }
    cluster.RollBack(cut);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    cluster.Check(all, "rolled back");
    // The rows of the cut, on their owners now, count as updated before
    // any push after the rollback, in the order restored (by id). Fresh
    // ids on each server fill it to its budget and push the restored rows
    // out, the smallest ids first.
    for (int s = 0; s < 2; ++s) {
      int pushed = 0;
      for (Key k = 1; pushed < 4; ++k) {
        if (cluster.OwnerOf(k) != s ||
            std::find(all.begin(), all.end(), k) != all.end()) {
          continue;
        }
        all.push_back(k);
        cluster.Push(k);
        ++pushed;
      }
      EXPECT_LE(cluster.server(s).counters().keys_stored, 6u) << s;
    }
    cluster.Check(all, "pushed after the rollback");
  }
}

// 4. Eviction by use: beyond the budget the rows pushed the fewest times
// go, counted by each server for every push it takes; after a move the
// target counts a moved row's pushes applied, and after a rollback every
// server counts its restored rows' so.
TEST(RowSimulation, TheMostPushedRowsStayAcrossAMoveAndARollback) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RowPolicy rows;
    rows.max_rows = 6;
    rows.eviction = RowPolicy::Eviction::kLeastUsed;
    RowCluster cluster(seed, rows);
    cluster.Start();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    const std::vector<Key> ids = Ids(seed + 300, 16);
    // Four popular ids, pushed 4 times each (the last of them the oldest),
    // then 12 once each: the popular rows stay, the others go oldest first.
    const std::vector<Key> popular(ids.begin(), ids.begin() + 4);
    for (int round = 0; round < 4; ++round) {
      for (Key id : popular) cluster.Push(id);
    }
    for (size_t i = 4; i < ids.size(); ++i) cluster.Push(ids[i]);
    cluster.Check(ids, "popular and single pushes");
    for (Key id : popular) {
      EXPECT_EQ(cluster.oracle().rows.count(id), 1u) << "popular id " << id;
    }
    EXPECT_EQ(cluster.oracle().evicted_budget, 10u);
    cluster.Clock();
    // Half the slots move: the target counts the moved rows' pushes
    // applied. New ids pushed twice each fill both servers past the
    // budget.
    const int64_t cut = cluster.CutThenMoveHalf(ids);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    std::vector<Key> all = ids;
    const std::vector<Key> more = Ids(seed + 400, 10);
    for (int round = 0; round < 2; ++round) {
      for (Key id : more) cluster.Push(id);
    }
    all.insert(all.end(), more.begin(), more.end());
    cluster.Check(all, "new ids after the move");
    for (int s = 0; s < 2; ++s) {
      EXPECT_LE(cluster.server(s).counters().keys_stored, 6u) << s;
    }
    // Back to the cut: the counts start over from the restored rows'
    // pushes; once-pushed ids fill each server and go before them.
    cluster.RollBack(cut);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    cluster.Check(all, "rolled back");
    const std::vector<Key> last = Ids(seed + 500, 8);
    for (Key id : last) cluster.Push(id);
    all.insert(all.end(), last.begin(), last.end());
    cluster.Check(all, "pushed after the rollback");
    for (Key id : popular) {
      EXPECT_EQ(cluster.oracle().rows.count(id), 1u) << "popular id " << id;
    }
  }
}

}  // namespace
}  // namespace ductile
