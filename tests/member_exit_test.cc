// Reports of a member's exit (MEMBER_EXIT, ReportMemberExit) against a
// coordinator on the simulated network (fake clock), its members scripted
// by the test: who is declared dead, at once, and which reports change
// nothing.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/coordinator_node.h"
#include "proto/codec.h"
#include "proto/ductile.pb.h"
#include "sim/mem_stores.h"
#include "sim/sim_env.h"
#include "sim/sim_network.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;

constexpr char kCoordinatorAddress[] = "tcp://coordinator:1";
constexpr int64_t kHeartbeatTimeoutMs = 5000;
constexpr int64_t kMaxBytes = int64_t{1} << 24;

// One scripted process: a dealer of its own, connected to the coordinator.
class Peer {
 public:
  Peer(sim::SimNetwork* net, const std::string& node)
      : transport_(net->NewTransport(node)) {
    socket_ = *transport_->NewDealer("", kMaxBytes);
    EXPECT_TRUE(socket_->Connect(kCoordinatorAddress).ok());
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
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Socket> socket_;
};

// A coordinator expecting one server and two workers, stepped with the
// network's fake clock.
class ScriptedCluster {
 public:
  ScriptedCluster() {
    sim::NetworkFaults faults;
    faults.min_latency_us = faults.max_latency_us = 100;
    net_ = std::make_unique<sim::SimNetwork>(/*seed=*/1, faults);
    env_ = std::make_unique<sim::SimEnv>(net_.get(), &disk_, "coordinator");
    CoordinatorOptions options;
    options.bind_address = kCoordinatorAddress;
    options.num_servers = 1;
    options.num_workers = 2;
    options.num_slots = 16;
    options.heartbeat_timeout_ms = kHeartbeatTimeoutMs;
    coordinator_ = std::make_unique<CoordinatorNode>(options, env_.get());
    EXPECT_TRUE(coordinator_->Start().ok());
    start_ = net_->now();
  }

  std::unique_ptr<Peer> NewPeer(const std::string& node) {
    return std::make_unique<Peer>(net_.get(), node);
  }

  // Runs the network and the coordinator for `duration` of simulated time.
  void Run(milliseconds duration) {
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
    return std::chrono::duration_cast<milliseconds>(net_->now() - start_)
        .count();
  }

  const Member& server(int32_t id) const {
    return coordinator_->state().servers.at(id);
  }
  const Member& worker(int32_t id) const {
    return coordinator_->state().workers.at(id);
  }

 private:
  std::unique_ptr<sim::SimNetwork> net_;
  sim::MemDisk disk_;
  std::unique_ptr<sim::SimEnv> env_;
  std::unique_ptr<CoordinatorNode> coordinator_;
  sim::SimNetwork::TimePoint start_;
};

wire::Header RegisterServer(int32_t id, int32_t pid) {
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

wire::Header RegisterWorker(int32_t id, int32_t pid) {
  wire::Header h;
  h.set_type(wire::REGISTER);
  h.set_seq(1);
  h.set_role(wire::ROLE_WORKER);
  h.set_worker_id(id);
  h.set_pid(pid);
  return h;
}

wire::Header Exit(wire::Role role, int32_t id, int32_t pid,
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
int AnswerTo(const wire::Header& request,
             const std::vector<wire::Header>& replies) {
  for (const wire::Header& r : replies) {
    if (r.type() == wire::CONTROL_REPLY && r.seq() == request.seq()) {
      return r.status_code();
    }
  }
  return -1;
}

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
  ScriptedCluster cluster;
  auto server = cluster.NewPeer("server-0");
  auto worker0 = cluster.NewPeer("worker-0");
  auto worker1 = cluster.NewPeer("worker-1");
  auto launcher = cluster.NewPeer("launcher");
  server->Send(RegisterServer(0, 200));
  worker0->Send(RegisterWorker(0, 300));
  worker1->Send(RegisterWorker(1, 301));
  cluster.Run(milliseconds(20));
  server->Take();
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
  EXPECT_EQ(LastLiveWorkers(server->Take(), &told), std::vector<int32_t>({0}));
  EXPECT_TRUE(told);
  EXPECT_LT(cluster.ElapsedMs(), kHeartbeatTimeoutMs / 10);
}

TEST(MemberExit, AReportAboutAServerProcessThatWasReplacedChangesNothing) {
  ScriptedCluster cluster;
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
  ScriptedCluster cluster;
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
  ScriptedCluster cluster;
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
  wire::Header heartbeat;
  heartbeat.set_type(wire::HEARTBEAT);
  heartbeat.set_seq(2);
  heartbeat.set_member_id(0);
  heartbeat.mutable_metrics()->set_clock(3);
  worker->Send(heartbeat);
  cluster.Run(milliseconds(20));
  const std::vector<wire::Header> replies = launcher->Take();
  EXPECT_EQ(AnswerTo(exit, replies), 0);
  EXPECT_EQ(AnswerTo(again, replies), 0);
  EXPECT_TRUE(cluster.worker(0).dead);
  EXPECT_NE(cluster.worker(0).metrics.clock(), 3);
}

}  // namespace
}  // namespace ductile
