// One CoordinatorNode on the simulated network (fake clock, no real
// socket), its members scripted by the test: each Peer is a dealer of its
// own that sends what the test builds and collects what the coordinator
// sends it.
//
//   ScriptedCoordinator cluster(options);  // bind_address is set here
//   auto server = cluster.NewPeer("server-0");
//   server->Send(RegisterServer(0, /*pid=*/200));
//   cluster.Run(milliseconds(20));
//   std::vector<wire::Header> got = server->Take();
//
// Time moves only in Run(). Not thread-safe.
#ifndef DUCTILE_TESTS_SCRIPTED_COORDINATOR_H_
#define DUCTILE_TESTS_SCRIPTED_COORDINATOR_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/coordinator_node.h"
#include "proto/codec.h"
#include "proto/ductile.pb.h"
#include "sim/mem_stores.h"
#include "sim/sim_env.h"
#include "sim/sim_network.h"

namespace ductile::testing {

inline constexpr char kScriptedCoordinatorAddress[] = "tcp://coordinator:1";

// One scripted process: a dealer of its own, connected to the coordinator.
class Peer {
 public:
  Peer(sim::SimNetwork* net, const std::string& node)
      : transport_(net->NewTransport(node)) {
    socket_ = *transport_->NewDealer("", kMaxBytes);
    EXPECT_TRUE(socket_->Connect(kScriptedCoordinatorAddress).ok());
  }

  void Send(const wire::Header& h) {
    OutMessage out;
    out.AddString(h.SerializeAsString());
    EXPECT_TRUE(socket_->Send(std::move(out)).ok());
  }

  // Every message received so far, oldest first, taken.
  std::vector<wire::Header> Take() {
    std::vector<wire::Header> got;
    while (true) {
      InMessage message;
      bool any = false;
      if (!socket_->Receive(&message, &any).ok() || !any) return got;
      wire::Header h;
      EXPECT_TRUE(ParseHeader(message.frame(0), &h).ok());
      got.push_back(h);
    }
  }

 private:
  static constexpr int64_t kMaxBytes = int64_t{1} << 24;

  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Socket> socket_;
};

// A coordinator with `options` (its bind_address replaced), stepped with
// the network's fake clock.
class ScriptedCoordinator {
 public:
  explicit ScriptedCoordinator(CoordinatorOptions options) {
    sim::NetworkFaults faults;
    faults.min_latency_us = faults.max_latency_us = 100;
    net_ = std::make_unique<sim::SimNetwork>(/*seed=*/1, faults);
    env_ = std::make_unique<sim::SimEnv>(net_.get(), &disk_, "coordinator");
    options.bind_address = kScriptedCoordinatorAddress;
    coordinator_ = std::make_unique<CoordinatorNode>(options, env_.get());
    EXPECT_TRUE(coordinator_->Start().ok());
    start_ = net_->now();
  }

  std::unique_ptr<Peer> NewPeer(const std::string& node) {
    return std::make_unique<Peer>(net_.get(), node);
  }

  // Runs the network and the coordinator for `duration` of simulated time.
  void Run(std::chrono::milliseconds duration) {
    const auto end = net_->now() + duration;
    while (true) {
      net_->DeliverDue();
      coordinator_->Step();
      if (net_->now() >= end) break;
      auto next = std::min(coordinator_->NextWakeup(), end);
      if (auto due = net_->NextDelivery(); due) next = std::min(next, *due);
      net_->AdvanceTo(
          std::max(next, net_->now() + std::chrono::microseconds(1)));
    }
  }

  // Simulated time since the coordinator started.
  int64_t ElapsedMs() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(net_->now() -
                                                                 start_)
        .count();
  }

  const ClusterState& state() const { return coordinator_->state(); }
  const Member& server(int32_t id) const { return state().servers.at(id); }
  const Member& worker(int32_t id) const { return state().workers.at(id); }

 private:
  std::unique_ptr<sim::SimNetwork> net_;
  sim::MemDisk disk_;
  std::unique_ptr<sim::SimEnv> env_;
  std::unique_ptr<CoordinatorNode> coordinator_;
  sim::SimNetwork::TimePoint start_;
};

// A server's REGISTER under `id`, from process `pid`.
inline wire::Header RegisterServer(int32_t id, int32_t pid) {
  wire::Header h;
  h.set_type(wire::REGISTER);
  h.set_seq(1);
  h.set_role(wire::ROLE_SERVER);
  h.set_member_id(id);
  h.set_pid(pid);
  h.mutable_endpoint()->set_tcp_address("tcp://server-" + std::to_string(id) +
                                        ":1");
  return h;
}

// A worker's REGISTER under `id`, from process `pid`.
inline wire::Header RegisterWorker(int32_t id, int32_t pid) {
  wire::Header h;
  h.set_type(wire::REGISTER);
  h.set_seq(1);
  h.set_role(wire::ROLE_WORKER);
  h.set_worker_id(id);
  h.set_pid(pid);
  return h;
}

// MEMBER_EXIT: the process of `role` `id` named by `pid` and/or
// `incarnation` exited.
inline wire::Header Exit(wire::Role role, int32_t id, int32_t pid,
                         uint64_t incarnation = 0) {
  static uint64_t seq = 100;
  wire::Header h;
  h.set_type(wire::MEMBER_EXIT);
  h.set_seq(++seq);
  h.set_role(role);
  h.set_member_id(id);
  h.set_pid(pid);
  h.set_incarnation(incarnation);
  return h;
}

// The status code of the answer to `request` among `replies`, or -1.
inline int AnswerTo(const wire::Header& request,
                    const std::vector<wire::Header>& replies) {
  for (const wire::Header& r : replies) {
    if (r.type() == wire::CONTROL_REPLY && r.seq() == request.seq()) {
      return r.status_code();
    }
  }
  return -1;
}

}  // namespace ductile::testing

#endif  // DUCTILE_TESTS_SCRIPTED_COORDINATOR_H_
