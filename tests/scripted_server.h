// One ServerNode on the simulated network (fake clock, no real socket),
// driven by a scripted coordinator and a scripted client that the test
// speaks for: it registers the server, creates its tables, tells it the
// live workers and moves its slots, and sends it requests, well formed
// or built frame by frame.
//
//   ScriptedCluster cluster;   // ServerOptions may set its limits
//   cluster.Register();        // server 0, table kTable of kWidth floats
//   Got reply = cluster.Request(wire::PUSH, 1, {3}, values);
//   std::vector<Got> replies = cluster.Exchange({header, keys});
//
// Time moves only in Run(), by whole milliseconds of simulated time;
// whatever the server sends is collected there. Not thread-safe.
#ifndef DUCTILE_TESTS_SCRIPTED_SERVER_H_
#define DUCTILE_TESTS_SCRIPTED_SERVER_H_

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
#include "server/server_node.h"
#include "sim/mem_stores.h"
#include "sim/sim_env.h"
#include "sim/sim_network.h"

namespace ductile::testing {

inline constexpr char kCoordinatorAddress[] = "tcp://coordinator:1";
// The address routing tables give server 1, which is never started.
inline constexpr char kServer1Address[] = "tcp://server-1:1";
inline constexpr int64_t kMaxBytes = int64_t{1} << 24;
inline constexpr TableId kTable = 0;
inline constexpr int kWidth = 4;
inline constexpr int32_t kSlots = 16;
inline constexpr uint64_t kClientId = 77;

// A message a scripted peer received: its header and the frames after it.
struct Got {
  std::string identity;  // the sender, for a router
  wire::Header header;
  std::vector<std::string> data;
};

// The next message `socket` holds, or nullopt.
inline std::optional<Got> Take(Socket& socket, bool router) {
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

// The floats of `frames`, one after the other.
inline std::vector<float> Floats(const std::vector<std::string>& frames) {
  std::string all;
  for (const std::string& frame : frames) all += frame;
  std::vector<float> values(all.size() / sizeof(float));
  std::memcpy(values.data(), all.data(), values.size() * sizeof(float));
  return values;
}

// Server 0, its coordinator and one client: the coordinator is a router
// the test answers for, the client a dealer connected to the server.
class ScriptedCluster {
 public:
  using milliseconds = std::chrono::milliseconds;

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
    reply.set_incarnation(incarnation_);
    TableOptions table;
    table.name = "t";
    table.value_width = kWidth;
    table.rule = UpdateRule::kAdd;
    *reply.add_tables() = ToWire(table, kTable);
    std::vector<int32_t> owners(kSlots, 0);
    for (int32_t slot : elsewhere) owners[slot] = 1;
    *reply.mutable_routing() = Routing(/*epoch=*/1, owners);
    SendFromCoordinator(reg->identity, reply);
    Run(milliseconds(5));
    ASSERT_TRUE(server_->registered());

    client_transport_ = net_->NewTransport("client");
    client_ = *client_transport_->NewDealer("client-77", kMaxBytes);
    ASSERT_TRUE(client_->Connect(server_address_).ok());
  }

  // A routing table at `epoch` giving slot i to server `owners[i]` (0 or
  // 1), with both servers' addresses.
  wire::RoutingTable Routing(uint64_t epoch,
                             const std::vector<int32_t>& owners) const {
    wire::RoutingTable routing;
    routing.set_epoch(epoch);
    routing.set_num_slots(static_cast<int32_t>(owners.size()));
    for (int32_t owner : owners) routing.add_slot_owner(owner);
    for (int32_t id : {0, 1}) {
      wire::ServerEndpoint* server = routing.add_servers();
      server->set_id(id);
      server->set_tcp_address(id == 0 ? server_address_ : kServer1Address);
      if (id == 0) server->set_incarnation(listed_incarnation_);
    }
    return routing;
  }

  // The registration number Register() tells the server (`told`), and the
  // one Routing() lists it under (`listed`); 0: none.
  void set_incarnations(uint64_t told, uint64_t listed) {
    incarnation_ = told;
    listed_incarnation_ = listed;
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

  // The coordinator's ROUTING_UPDATE of Routing(epoch, owners), delivered.
  void SendRouting(uint64_t epoch, const std::vector<int32_t>& owners) {
    wire::Header update;
    update.set_type(wire::ROUTING_UPDATE);
    *update.mutable_routing() = Routing(epoch, owners);
    SendToServer(update);
    Run(milliseconds(5));
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

  // Sends `frames` from the client, as they are (a header frame first,
  // well formed or not), without running the network.
  void SendFrames(const std::vector<std::string>& frames) {
    OutMessage out;
    for (const std::string& frame : frames) out.AddString(frame);
    EXPECT_TRUE(client_->Send(std::move(out)).ok());
  }

  // Sends `frames` from the client and returns what came back within 5 ms.
  std::vector<Got> Exchange(const std::vector<std::string>& frames) {
    SendFrames(frames);
    Run(milliseconds(5));
    return TakeAtClient();
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

  // Table `id`, created by the coordinator: the status the server
  // acknowledged it with.
  Status CreateTable(const TableOptions& table, TableId id) {
    wire::Header create;
    create.set_type(wire::TABLE_CREATE);
    create.set_seq(100 + id);
    *create.mutable_table() = ToWire(table, id);
    SendToServer(create);
    Run(milliseconds(5));
    std::optional<Got> ack = TakeAtCoordinator(wire::TABLE_CREATE_ACK);
    EXPECT_TRUE(ack.has_value());
    if (!ack.has_value()) return InternalError("no TABLE_CREATE_ACK");
    return StatusFromWire(ack->header);
  }

  // A BSP table `id` of kWidth floats, created by the coordinator.
  void CreateBspTable(TableId id) {
    TableOptions table;
    table.name = "bsp-" + std::to_string(id);
    table.value_width = kWidth;
    table.rule = UpdateRule::kAdd;
    table.consistency = {ConsistencyMode::kBsp, 0};
    const Status s = CreateTable(table, id);
    ASSERT_EQ(s.code(), StatusCode::kOk) << s;
  }

  // The values a pull of `keys` returns.
  std::vector<float> Pull(uint64_t seq, const std::vector<Key>& keys) {
    Got reply = Request(wire::PULL, seq, keys, {});
    EXPECT_EQ(StatusFromWire(reply.header).code(), StatusCode::kOk)
        << StatusFromWire(reply.header);
    return Floats(reply.data);
  }

  ServerNode& server() { return *server_; }
  sim::SimNetwork& network() { return *net_; }
  const std::string& server_address() const { return server_address_; }

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
  uint64_t incarnation_ = 0;
  uint64_t listed_incarnation_ = 0;
  std::string server_identity_;
  std::vector<Got> at_coordinator_, at_client_;
};

}  // namespace ductile::testing

#endif  // DUCTILE_TESTS_SCRIPTED_SERVER_H_
