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
// Time moves only in Run() (and in a stall, StallAfterTheInboxIsRead).
// Not thread-safe.
#ifndef DUCTILE_TESTS_SCRIPTED_COORDINATOR_H_
#define DUCTILE_TESTS_SCRIPTED_COORDINATOR_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
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

// The coordinator's Env: the simulated one, with a router that can call
// back once it finds no message waiting (the moment a stopped process has
// read its inbox and not yet judged its members).
class StallingEnv final : public Env {
 public:
  explicit StallingEnv(std::unique_ptr<sim::SimEnv> inner)
      : inner_(std::move(inner)) {}

  // `stall` runs once, the next time the router finds its inbox empty.
  void StallAfterTheInboxIsRead(std::function<void()> stall) {
    stall_ = std::move(stall);
  }

  TimePoint Now() override { return inner_->Now(); }
  int64_t UnixMs() override { return inner_->UnixMs(); }
  uint64_t RandomU64() override { return inner_->RandomU64(); }
  int32_t ProcessId() override { return inner_->ProcessId(); }
  std::unique_ptr<Transport> NewTransport(const std::string& node,
                                          const Security& security,
                                          int io_threads) override {
    return std::make_unique<StallingTransport>(
        inner_->NewTransport(node, security, io_threads), &stall_);
  }
  Result<std::unique_ptr<CheckpointStore>> OpenCheckpointStore(
      const CheckpointStoreOptions& options) override {
    return inner_->OpenCheckpointStore(options);
  }
  Result<LoadedCheckpoint> LoadCheckpointFrom(const std::string& dir,
                                              int64_t clock) override {
    return inner_->LoadCheckpointFrom(dir, clock);
  }
  Result<std::unique_ptr<CoordinatorStore>> OpenCoordinatorStore(
      const CoordinatorStoreOptions& options) override {
    return inner_->OpenCoordinatorStore(options);
  }

 private:
  using Stall = std::function<void()>;

  class StallingSocket final : public Socket {
   public:
    StallingSocket(std::unique_ptr<Socket> inner, Stall* stall)
        : inner_(std::move(inner)), stall_(stall) {}
    Result<std::string> Bind(const std::string& address) override {
      return inner_->Bind(address);
    }
    Status Connect(const std::string& address) override {
      return inner_->Connect(address);
    }
    Status Send(OutMessage&& message) override {
      return inner_->Send(std::move(message));
    }
    Status Receive(InMessage* message, bool* got) override {
      Status s = inner_->Receive(message, got);
      if (s.ok() && !*got && *stall_) std::exchange(*stall_, nullptr)();
      return s;
    }
    uint64_t queued_bytes() const override { return inner_->queued_bytes(); }
    RouterRefusals refusals() const override { return inner_->refusals(); }

   private:
    std::unique_ptr<Socket> inner_;
    Stall* const stall_;
  };

  class StallingTransport final : public Transport {
   public:
    StallingTransport(std::unique_ptr<Transport> inner, Stall* stall)
        : inner_(std::move(inner)), stall_(stall) {}
    Result<std::unique_ptr<Socket>> NewRouter(int64_t max_message_bytes,
                                              int64_t max_queued,
                                              int64_t max_queued_bytes,
                                              int64_t max_unread) override {
      auto socket = inner_->NewRouter(max_message_bytes, max_queued,
                                      max_queued_bytes, max_unread);
      if (!socket.ok()) return socket;
      return std::unique_ptr<Socket>(
          std::make_unique<StallingSocket>(std::move(*socket), stall_));
    }
    Result<std::unique_ptr<Socket>> NewDealer(
        const std::string& identity, int64_t max_message_bytes) override {
      return inner_->NewDealer(identity, max_message_bytes);
    }
    Status Wait(std::span<Socket* const> sockets, int wakeup_fd,
                TimePoint deadline) override {
      return inner_->Wait(sockets, wakeup_fd, deadline);
    }

   private:
    std::unique_ptr<Transport> inner_;
    Stall* const stall_;
  };

  std::unique_ptr<sim::SimEnv> inner_;
  Stall stall_;
};

// A coordinator with `options` (its bind_address replaced), stepped with
// the network's fake clock.
class ScriptedCoordinator {
 public:
  explicit ScriptedCoordinator(CoordinatorOptions options) {
    sim::NetworkFaults faults;
    faults.min_latency_us = faults.max_latency_us = 100;
    net_ = std::make_unique<sim::SimNetwork>(/*seed=*/1, faults);
    options_ = options;
    options_.bind_address = kScriptedCoordinatorAddress;
    StartCoordinator();
    start_ = net_->now();
  }

  // Kills the coordinator and starts it again on its state (the options'
  // state_dir, on the simulated disk): it knows its members by id only
  // until they are heard from again.
  void Restart() {
    net_->Crash("coordinator");
    coordinator_.reset();
    StartCoordinator();
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

  // The next time the coordinator finds its inbox empty, it stops there
  // (SIGSTOP, a starved host) for `duration` of simulated time, before it
  // judges its members' silence. Meanwhile `meanwhile` runs every `every`
  // (the members' heartbeats), and what it sends is delivered to the
  // coordinator's inbox, unread.
  void StallAfterTheInboxIsRead(std::chrono::milliseconds duration,
                                std::chrono::milliseconds every,
                                std::function<void()> meanwhile) {
    env_->StallAfterTheInboxIsRead([this, duration, every, meanwhile] {
      const auto end = net_->now() + duration;
      while (net_->now() < end) {
        net_->AdvanceTo(std::min(end, net_->now() + every));
        meanwhile();
        net_->DeliverDue();
      }
    });
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
  void StartCoordinator() {
    env_ = std::make_unique<StallingEnv>(
        std::make_unique<sim::SimEnv>(net_.get(), &disk_, "coordinator"));
    coordinator_ = std::make_unique<CoordinatorNode>(options_, env_.get());
    EXPECT_TRUE(coordinator_->Start().ok());
  }

  CoordinatorOptions options_;
  std::unique_ptr<sim::SimNetwork> net_;
  sim::MemDisk disk_;
  std::unique_ptr<StallingEnv> env_;
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

// A worker's or server's HEARTBEAT (a server's carries its counters).
inline wire::Header Heartbeat(wire::Role role, int32_t id) {
  static uint64_t seq = 1000;
  wire::Header h;
  h.set_type(wire::HEARTBEAT);
  h.set_seq(++seq);
  h.set_role(role);
  h.set_member_id(id);
  if (role == wire::ROLE_SERVER) h.mutable_counters();
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
