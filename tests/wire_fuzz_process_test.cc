// A wire fuzzer against live processes: while two workers train the exact
// counter workload (tests/recovery_worker_main.cc) on a coordinator and a
// server started as `ductile` processes, a raw peer sends them thousands of
// mutated valid messages (fields set to edge values, bytes flipped, frames
// dropped, added, truncated or replaced). Both processes must stay up, keep
// answering, and serve the workers to the exact end state.
//
// The peer holds no keys (plain mode: it may do anything a member or the
// admin may), so messages that would legitimately change the job (shutdown,
// registering, another worker's clock, the workload's tables) are not sent:
// the fuzzer aims at the parsers and the checks, not at the protocol's
// rights (docs/security.md).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "ductile/client.h"
#include "gtest/gtest.h"
#include "proto/ductile.pb.h"
#include "tests/recovery_cluster.h"

namespace ductile {
namespace {

using testing::kWaitMs;
using testing::ListeningPort;
using testing::RecoveryCluster;

template <typename T>
std::string Bytes(const std::vector<T>& items) {
  return std::string(reinterpret_cast<const char*>(items.data()),
                     items.size() * sizeof(T));
}

// Messages the fuzzer may send: to the server, data requests; to the
// coordinator, queries and table creation. Anything that does not parse
// as a header is fine too.
const std::set<int> kServerTypes = {wire::PUSH, wire::PULL, wire::PUSH_PULL};
const std::set<int> kCoordinatorTypes = {wire::STATUS, wire::GET_ROUTING,
                                         wire::GET_TABLE, wire::CREATE_TABLE};

class WireFuzzer {
 public:
  WireFuzzer(uint64_t seed, TableId fuzz_table, std::set<TableId> forbidden)
      : rng_(seed), fuzz_table_(fuzz_table), forbidden_(std::move(forbidden)) {}

  // A mutated message for the server (to_server) or the coordinator.
  std::vector<std::string> Next(bool to_server) {
    while (true) {
      std::vector<std::string> frames = Template(to_server);
      const int rounds = 1 + Pick(3);
      for (int i = 0; i < rounds; ++i) Mutate(&frames);
      if (Allowed(frames, to_server)) return frames;
    }
  }

 private:
  uint64_t Pick(uint64_t n) { return rng_() % n; }

  // A value near an edge, or any.
  uint64_t Edge() {
    static const uint64_t kEdges[] = {0,
                                      1,
                                      2,
                                      3,
                                      255,
                                      65535,
                                      (uint64_t{1} << 24) + 1,
                                      (uint64_t{1} << 28),
                                      (uint64_t{1} << 31),
                                      (uint64_t{1} << 32) - 1,
                                      (uint64_t{1} << 40) + 1,
                                      (uint64_t{1} << 62),
                                      ~uint64_t{0} >> 1,
                                      ~uint64_t{0}};
    return Pick(4) == 0 ? rng_() : kEdges[Pick(std::size(kEdges))];
  }

  std::vector<std::string> Template(bool to_server) {
    wire::Header h;
    h.set_seq(++seq_);
    h.set_client_id(777000 + Pick(3));
    std::vector<std::string> frames;
    if (to_server) {
      const int type =
          std::vector<int>(kServerTypes.begin(), kServerTypes.end())[Pick(3)];
      h.set_type(static_cast<wire::MessageType>(type));
      h.set_table_id(fuzz_table_);
      h.set_epoch(1 + Pick(3));
      h.set_clock(Pick(2));
      const uint32_t n = 1 + Pick(4);
      h.set_num_keys(n);
      std::vector<uint64_t> keys;
      for (uint32_t k = 0; k < n; ++k) keys.push_back(k * 7 + Pick(5) + 1);
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
      h.set_num_keys(static_cast<uint32_t>(keys.size()));
      frames.push_back("");
      frames.push_back(Bytes(keys));
      if (type != wire::PULL) {
        h.set_values_frames(1);
        frames.push_back(Bytes(std::vector<float>(keys.size() * 2, 0.25f)));
      }
      h.set_timeout_ms(Pick(100));
      frames[0] = h.SerializeAsString();
    } else {
      const int type = std::vector<int>(kCoordinatorTypes.begin(),
                                        kCoordinatorTypes.end())[Pick(4)];
      h.set_type(static_cast<wire::MessageType>(type));
      h.set_table_id(fuzz_table_);
      if (type == wire::CREATE_TABLE || type == wire::GET_TABLE) {
        wire::TableConfig* t = h.mutable_table();
        t->set_name("fz" + std::to_string(Pick(50)));
        t->set_value_width(static_cast<uint32_t>(Pick(9)));
        t->set_rule(static_cast<int32_t>(Pick(7)));
        t->set_learning_rate(0.01f);
      }
      frames.push_back(h.SerializeAsString());
    }
    return frames;
  }

  void Mutate(std::vector<std::string>* frames) {
    std::vector<std::string>& f = *frames;
    switch (Pick(9)) {
      case 0:
      case 1:
      case 2: {  // a header field to an edge value
        wire::Header h;
        if (!h.ParseFromString(f[0])) return;
        const uint64_t v = Edge();
        switch (Pick(10)) {
          case 0:
            h.set_num_keys(static_cast<uint32_t>(v));
            break;
          case 1:
            h.set_values_frames(static_cast<uint32_t>(v));
            break;
          case 2:
            h.set_has_lengths(!h.has_lengths());
            break;
          case 3:
            h.set_clock(static_cast<int64_t>(v));
            break;
          case 4:
            h.set_timeout_ms(static_cast<int64_t>(v));
            break;
          case 5:
            h.set_epoch(v);
            break;
          case 6:
            h.set_seq(v);
            break;
          case 7:
            h.set_table_id(static_cast<uint32_t>(v));
            break;
          case 8:
            h.mutable_table()->set_value_width(static_cast<uint32_t>(v));
            break;
          case 9:
            h.set_worker_id(static_cast<int32_t>(v));
            break;
        }
        f[0] = h.SerializeAsString();
        return;
      }
      case 3: {  // flip bytes anywhere
        std::string& frame = f[Pick(f.size())];
        if (frame.empty()) return;
        for (int i = 1 + static_cast<int>(Pick(4)); i > 0; --i) {
          frame[Pick(frame.size())] ^= static_cast<char>(1 + Pick(255));
        }
        return;
      }
      case 4:  // truncate a frame
      {
        std::string& frame = f[Pick(f.size())];
        frame.resize(Pick(frame.size() + 1));
        return;
      }
      case 5:  // drop a frame
        if (f.size() > 1) f.erase(f.begin() + 1 + Pick(f.size() - 1));
        return;
      case 6:  // add a frame: lengths, or garbage
        f.push_back(Pick(2) == 0
                        ? Bytes(std::vector<uint32_t>(
                              1 + Pick(4), static_cast<uint32_t>(Edge())))
                        : std::string(Pick(64), static_cast<char>(Pick(256))));
        return;
      case 7:  // duplicate a frame
        f.push_back(f[Pick(f.size())]);
        return;
      case 8:  // an odd-sized value frame
        if (f.size() > 2) f[2].push_back('x');
        return;
    }
  }

  // Whether a mutated message stays clear of what would rightly change the
  // job (see the top of the file).
  bool Allowed(const std::vector<std::string>& frames, bool to_server) {
    wire::Header h;
    if (!h.ParseFromString(frames[0])) return true;  // garbage: welcome
    if (forbidden_.count(h.table_id()) > 0) return false;
    if (!(to_server ? kServerTypes : kCoordinatorTypes).count(h.type())) {
      // Unknown numbers are welcome; known types outside the set are not.
      return !wire::MessageType_IsValid(h.type());
    }
    // A push's clock far ahead holds checkpoints (a known, documented
    // lie), which the workload's checkpoints would wait on.
    return !(to_server && h.clock() > 1);
  }

  std::mt19937_64 rng_;
  const TableId fuzz_table_;
  const std::set<TableId> forbidden_;
  uint64_t seq_ = 0;
};

// A dealer that sends without waiting and counts the replies it drains.
class FuzzPeer {
 public:
  explicit FuzzPeer(const std::string& address)
      : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::sndhwm, 0);
    socket_.connect(address);
  }
  void Send(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      socket_.send(zmq::buffer(frames[i]), i + 1 < frames.size()
                                               ? zmq::send_flags::sndmore
                                               : zmq::send_flags::none);
    }
  }
  void Drain() {
    zmq::message_t m;
    while (socket_.recv(m, zmq::recv_flags::dontwait)) {
      if (!m.more()) ++replies_;
    }
  }
  // Waits (bounded) for the replies to reach `n`.
  bool WaitForReplies(uint64_t n, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (replies_ < n && std::chrono::steady_clock::now() < deadline) {
      zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, 1, std::chrono::milliseconds(50));
      Drain();
    }
    return replies_ >= n;
  }
  uint64_t replies() const { return replies_; }

 private:
  zmq::context_t context_{1};
  zmq::socket_t socket_;
  uint64_t replies_ = 0;
};

TEST(WireFuzz, MutatedMessagesLeaveTheCoordinatorAndServerServingWorkers) {
  RecoveryCluster cluster;
  cluster.set_coordinator_flags({"--servers=1"});
  cluster.StartCoordinator();
  cluster.StartServer(0);
  ASSERT_TRUE(
      cluster.WaitForOutput(cluster.server(0), "listening on tcp://", 20000))
      << cluster.server(0).output();
  const int port = ListeningPort(cluster.server(0).output());
  ASSERT_GT(port, 0);
  // The fuzzer's own table (async, variable width), made before the
  // workers make theirs (ids 2 and 3, which it never names).
  TableId fuzz_table = 0;
  {
    ClientOptions o;
    o.coordinator_address = cluster.address();
    o.register_as_worker = false;
    o.connect_timeout_ms = 30000;
    auto client = Client::Connect(o);
    ASSERT_TRUE(client.ok()) << client.status();
    TableOptions t;
    t.name = "fuzz";
    t.value_width = 0;
    auto id = (*client)->CreateTable(t);
    ASSERT_TRUE(id.ok()) << id.status();
    fuzz_table = *id;
  }
  const uint64_t seed = std::random_device()();
  SCOPED_TRACE("seed " + std::to_string(seed));
  WireFuzzer fuzzer(seed, fuzz_table,
                    {fuzz_table + 1, fuzz_table + 2, fuzz_table + 3});
  FuzzPeer server("tcp://127.0.0.1:" + std::to_string(port));
  FuzzPeer coordinator(cluster.address());

  // Well-formed queries, each from a connection of its own (so that no
  // reply to a mutated message can pass for theirs), sent while the job
  // runs: both processes still answer in the midst of the flood.
  FuzzPeer server_probe("tcp://127.0.0.1:" + std::to_string(port));
  FuzzPeer coordinator_probe(cluster.address());
  bool probed = false;
  auto probe = [&] {
    wire::Header status;
    status.set_type(wire::STATUS);
    status.set_seq(1);
    coordinator_probe.Send({status.SerializeAsString()});
    EXPECT_TRUE(coordinator_probe.WaitForReplies(1, std::chrono::seconds(10)))
        << "the coordinator no longer answers";
    wire::Header pull;
    pull.set_type(wire::PULL);
    pull.set_seq(1);
    pull.set_client_id(1);
    pull.set_table_id(fuzz_table);
    pull.set_epoch(1);
    pull.set_num_keys(1);
    pull.set_has_lengths(true);
    server_probe.Send({pull.SerializeAsString(),
                       Bytes(std::vector<uint64_t>{5}),
                       Bytes(std::vector<uint32_t>{2})});
    EXPECT_TRUE(server_probe.WaitForReplies(1, std::chrono::seconds(10)))
        << "the server no longer answers";
  };

  cluster.StartWorkers(/*clocks=*/150, "bsp");
  // Until the workers are done or kMessages are sent: bursts to both, the
  // processes' output read between them.
  constexpr uint64_t kMessages = 30000;
  uint64_t sent = 0;
  while (cluster.worker(0).Running() || cluster.worker(1).Running()) {
    for (int i = 0; i < 50; ++i) {
      const bool to_server = i % 3 != 0;
      (to_server ? server : coordinator).Send(fuzzer.Next(to_server));
      ++sent;
    }
    server.Drain();
    coordinator.Drain();
    cluster.PumpAll();
    if (!probed && sent >= 1000) {
      probed = true;
      probe();
    }
    // Paced (about 20,000 messages a second at most), so that on a small
    // machine the workers still get the cores.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    // Bounded: a flood this size already keeps the workers from progressing
    // much (see docs/security.md), so the job ends once it stops.
    if (sent >= kMessages) break;
  }
  cluster.ExpectWorkersExact(150, /*rolled_back=*/false);
  EXPECT_TRUE(probed) << "the job ended before 1000 messages were sent";
  EXPECT_GT(sent, 1000u);
  EXPECT_GT(server.replies(), 0u);
  EXPECT_GT(coordinator.replies(), 0u);
  std::printf(
      "sent %llu mutated messages; %llu server and %llu coordinator "
      "replies\n",
      static_cast<unsigned long long>(sent),
      static_cast<unsigned long long>(server.replies()),
      static_cast<unsigned long long>(coordinator.replies()));
  EXPECT_EQ(cluster.server(0).WaitExit(kWaitMs), 0)
      << cluster.server(0).output();
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 0)
      << cluster.coordinator().output();
}

}  // namespace
}  // namespace ductile
