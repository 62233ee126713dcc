// A ServerNode against a scripted coordinator and a scripted client on the
// simulated network (fake clock, no real socket): registration, tables
// created by the coordinator, pushes applied exactly once, bad requests
// answered with an error and nothing applied, keys of another
// server's slots sent back "moved", and pulls waiting on a staleness bound
// capped per worker and in all, and answered when their worker leaves.
#include "server/server_node.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ductile/table.h"
#include "proto/codec.h"
#include "proto/ductile.pb.h"
#include "proto/table_config.h"
#include "routing/slot_map.h"
#include "sim/mem_stores.h"
#include "sim/sim_env.h"
#include "sim/sim_network.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;

constexpr char kCoordinatorAddress[] = "tcp://coordinator:1";
constexpr int64_t kMaxBytes = int64_t{1} << 24;
constexpr TableId kTable = 0;
constexpr int kWidth = 4;
constexpr int32_t kSlots = 16;
constexpr uint64_t kClientId = 77;

// A message a scripted peer received: its header and the frames after it.
struct Got {
  std::string identity;  // the sender, for a router
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

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(T));
}

// Server 0, its coordinator and one client: the coordinator is a router
// the test answers for, the client a dealer connected to the server.
class ScriptedCluster {
 public:
  // `limits`: the server's options but for where it is (its address,
  // coordinator, id, heartbeat).
  explicit ScriptedCluster(const ServerOptions& limits = ServerOptions()) {
    sim::NetworkFaults faults;
    faults.min_latency_us = faults.max_latency_us = 100;
    net_ = std::make_unique<sim::SimNetwork>(/*seed=*/1, faults);
    coordinator_transport_ = net_->NewTransport("coordinator");
    coordinator_ = *coordinator_transport_->NewRouter(kMaxBytes);
    EXPECT_TRUE(coordinator_->Bind(kCoordinatorAddress).ok());

    ServerOptions o = limits;
    o.coordinator_address = kCoordinatorAddress;
    o.host = "server-0";
    o.enable_ipc = false;
    o.requested_id = 0;
    o.heartbeat_interval_ms = 500;
    server_env_ = std::make_unique<sim::SimEnv>(net_.get(), &disk_, "server-0");
    server_ = std::make_unique<ServerNode>(o, server_env_.get());
    EXPECT_TRUE(server_->Start().ok());
  }

  // The server's registration, answered: id 0, one table of kWidth floats
  // added on push, and every slot but those `elsewhere` on server 0 (the
  // others on a server 1 that is never started).
  void Register(const std::vector<int32_t>& elsewhere = {}) {
    Run(milliseconds(5));
    std::optional<Got> reg = TakeAtCoordinator(wire::REGISTER);
    ASSERT_TRUE(reg.has_value());
    EXPECT_EQ(reg->header.role(), wire::ROLE_SERVER);
    EXPECT_EQ(reg->header.member_id(), 0);
    server_address_ = reg->header.endpoint().tcp_address();
    server_identity_ = reg->identity;
    ASSERT_FALSE(server_address_.empty());

    wire::Header reply;
    reply.set_type(wire::CONTROL_REPLY);
    reply.set_seq(reg->header.seq());
    reply.set_member_id(0);
    TableOptions table;
    table.name = "t";
    table.value_width = kWidth;
    table.rule = UpdateRule::kAdd;
    *reply.add_tables() = ToWire(table, kTable);
    wire::RoutingTable* routing = reply.mutable_routing();
    routing->set_epoch(1);
    routing->set_num_slots(kSlots);
    for (int32_t slot = 0; slot < kSlots; ++slot) {
      const bool other = std::find(elsewhere.begin(), elsewhere.end(), slot) !=
                         elsewhere.end();
      routing->add_slot_owner(other ? 1 : 0);
    }
    for (int32_t id : {0, 1}) {
      wire::ServerEndpoint* server = routing->add_servers();
      server->set_id(id);
      server->set_tcp_address(id == 0 ? server_address_ : "tcp://server-1:1");
    }
    SendFromCoordinator(reg->identity, reply);
    Run(milliseconds(5));
    ASSERT_TRUE(server_->registered());

    client_transport_ = net_->NewTransport("client");
    client_ = *client_transport_->NewDealer("client-77", kMaxBytes);
    ASSERT_TRUE(client_->Connect(server_address_).ok());
  }

  // Runs the network and the server for `duration` of simulated time.
  void Run(milliseconds duration) {
    const auto end = net_->now() + duration;
    while (true) {
      net_->DeliverDue();
      server_->Step();
      Collect();
      auto next = std::min(server_->NextWakeup(), end);
      if (auto due = net_->NextDelivery(); due) next = std::min(next, *due);
      if (net_->now() >= end) break;
      net_->AdvanceTo(
          std::max(next, net_->now() + std::chrono::microseconds(1)));
    }
  }

  // A message from the coordinator to the registered server.
  void SendToServer(const wire::Header& h) {
    SendFromCoordinator(server_identity_, h);
  }

  void SendFromCoordinator(const std::string& to, const wire::Header& h) {
    OutMessage out;
    out.AddString(to);
    out.AddString(h.SerializeAsString());
    ASSERT_TRUE(coordinator_->Send(std::move(out)).ok());
  }

  // The first message of `type` the coordinator got, taken (older ones of
  // other types are dropped).
  std::optional<Got> TakeAtCoordinator(wire::MessageType type) {
    for (auto it = at_coordinator_.begin(); it != at_coordinator_.end(); ++it) {
      if (it->header.type() != type) continue;
      Got got = std::move(*it);
      at_coordinator_.erase(at_coordinator_.begin(), it + 1);
      return got;
    }
    return std::nullopt;
  }

  // Sends a data request of `type` for `keys` (and `values`, for a push)
  // as client kClientId, and returns the server's answer.
  Got Request(wire::MessageType type, uint64_t seq,
              const std::vector<Key>& keys, const std::vector<float>& values,
              uint32_t num_keys = 0, uint64_t epoch = 1) {
    wire::Header h;
    h.set_type(type);
    h.set_seq(seq);
    h.set_client_id(kClientId);
    h.set_table_id(kTable);
    h.set_epoch(epoch);
    h.set_num_keys(num_keys > 0 ? num_keys
                                : static_cast<uint32_t>(keys.size()));
    h.set_timeout_ms(10000);
    if (type != wire::PULL) h.set_values_frames(1);
    OutMessage out;
    out.AddString(h.SerializeAsString());
    out.AddString(Bytes(keys));
    if (type != wire::PULL) out.AddString(Bytes(values));
    EXPECT_TRUE(client_->Send(std::move(out)).ok());
    Run(milliseconds(5));
    EXPECT_EQ(at_client_.size(), 1u);
    if (at_client_.empty()) return Got{};
    Got reply = std::move(at_client_.front());
    at_client_.clear();
    EXPECT_EQ(reply.header.type(), wire::DATA_REPLY);
    EXPECT_EQ(reply.header.seq(), seq);
    return reply;
  }

  // Sends a worker's pull of `keys` at `clock` to `table` (or a CLOCK,
  // with no keys) and returns the replies that came within 5 ms (none
  // for a pull parked on the staleness bound).
  std::vector<Got> WorkerRequest(wire::MessageType type, TableId table,
                                 int32_t worker, int64_t clock, uint64_t seq,
                                 const std::vector<Key>& keys = {},
                                 const std::vector<float>& values = {}) {
    wire::Header h;
    h.set_type(type);
    h.set_seq(seq);
    h.set_client_id(kClientId + worker);
    h.set_worker_id(worker);
    h.set_clock(clock);
    h.set_table_id(table);
    h.set_epoch(1);
    h.set_num_keys(static_cast<uint32_t>(keys.size()));
    h.set_timeout_ms(10000);
    if (!values.empty()) h.set_values_frames(1);
    OutMessage out;
    out.AddString(h.SerializeAsString());
    if (type != wire::CLOCK) out.AddString(Bytes(keys));
    if (!values.empty()) out.AddString(Bytes(values));
    EXPECT_TRUE(client_->Send(std::move(out)).ok());
    Run(milliseconds(5));
    return TakeAtClient();
  }

  std::vector<Got> TakeAtClient() {
    std::vector<Got> got = std::move(at_client_);
    at_client_.clear();
    return got;
  }

  // The coordinator's list of live workers, sent and acknowledged.
  void SetWorkers(const std::vector<int32_t>& live, uint64_t change_id) {
    wire::Header update;
    update.set_type(wire::WORKERS_UPDATE);
    update.set_change_id(change_id);
    for (int32_t w : live) update.add_worker_ids(w);
    SendToServer(update);
    Run(milliseconds(5));
    ASSERT_TRUE(TakeAtCoordinator(wire::WORKERS_ACK).has_value());
  }

  // A BSP table `id` of kWidth floats, created by the coordinator.
  void CreateBspTable(TableId id) {
    wire::Header create;
    create.set_type(wire::TABLE_CREATE);
    create.set_seq(100 + id);
    TableOptions table;
    table.name = "bsp-" + std::to_string(id);
    table.value_width = kWidth;
    table.rule = UpdateRule::kAdd;
    table.consistency = {ConsistencyMode::kBsp, 0};
    *create.mutable_table() = ToWire(table, id);
    SendToServer(create);
    Run(milliseconds(5));
    std::optional<Got> ack = TakeAtCoordinator(wire::TABLE_CREATE_ACK);
    ASSERT_TRUE(ack.has_value());
    ASSERT_EQ(StatusFromWire(ack->header).code(), StatusCode::kOk)
        << StatusFromWire(ack->header);
  }

  // The values a pull of `keys` returns.
  std::vector<float> Pull(uint64_t seq, const std::vector<Key>& keys) {
    Got reply = Request(wire::PULL, seq, keys, {});
    EXPECT_EQ(StatusFromWire(reply.header).code(), StatusCode::kOk)
        << StatusFromWire(reply.header);
    std::string all;
    for (const std::string& frame : reply.data) all += frame;
    std::vector<float> values(all.size() / sizeof(float));
    std::memcpy(values.data(), all.data(), values.size() * sizeof(float));
    return values;
  }

  ServerNode& server() { return *server_; }

 private:
  void Collect() {
    while (std::optional<Got> got = Take(*coordinator_, /*router=*/true)) {
      at_coordinator_.push_back(std::move(*got));
    }
    if (client_) {
      while (std::optional<Got> got = Take(*client_, /*router=*/false)) {
        at_client_.push_back(std::move(*got));
      }
    }
  }

  std::unique_ptr<sim::SimNetwork> net_;
  sim::MemDisk disk_;
  std::unique_ptr<Transport> coordinator_transport_, client_transport_;
  std::unique_ptr<Socket> coordinator_, client_;
  std::unique_ptr<sim::SimEnv> server_env_;
  std::unique_ptr<ServerNode> server_;
  std::string server_address_;
  std::string server_identity_;
  std::vector<Got> at_coordinator_, at_client_;
};

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

}  // namespace
}  // namespace ductile
