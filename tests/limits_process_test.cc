// Limits a peer must not be able to push a process past, tried on real
// processes: every wait is bounded and every process killed when the test
// ends.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "gtest/gtest.h"
#include "proto/ductile.pb.h"
#include "tests/recovery_cluster.h"

namespace ductile {
namespace {

using testing::kWaitMs;
using testing::ListeningPort;
using testing::RecoveryCluster;

// How many file descriptors process `pid` has open.
size_t OpenFiles(pid_t pid) {
  std::error_code ec;
  size_t n = 0;
  for (std::filesystem::directory_iterator
           it("/proc/" + std::to_string(pid) + "/fd", ec),
       end;
       !ec && it != end; it.increment(ec)) {
    ++n;
  }
  return n;
}

// Idle TCP connections to 127.0.0.1:port, closed when it goes.
class IdleConnections {
 public:
  IdleConnections(int port, int n) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < n; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) break;
      if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
        close(fd);
        break;
      }
      fds_.push_back(fd);
    }
  }
  ~IdleConnections() {
    for (int fd : fds_) close(fd);
  }
  size_t size() const { return fds_.size(); }

 private:
  std::vector<int> fds_;
};

// A server started with a soft limit of 256 open files gets 400 idle TCP
// connections (an attacker needs no key for that). With no descriptor left
// it cannot accept anyone (libzmq can even abort the process when that
// happens on its ipc:// socket), and same-host workers waited until libzmq
// dropped the idle connections. The server raises its soft limit to the
// hard one at start, keeps the first 256 from that one address
// (--max_connections_per_source) and refuses the rest, and the workers
// train to the end.
TEST(Limits, IdleConnectionsUpToTheSoftFileLimitDoNotKillAServer) {
  rlimit original{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &original), 0);
  if (original.rlim_max != RLIM_INFINITY && original.rlim_max < 4096) {
    GTEST_SKIP() << "the hard limit of open files (" << original.rlim_max
                 << ") leaves no room above the test's 256";
  }
  RecoveryCluster cluster;
  rlimit low = original;
  low.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  cluster.StartCoordinator();
  cluster.StartServer(0);
  cluster.StartServer(1);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &original), 0);  // this process's own
  ASSERT_TRUE(
      cluster.WaitForOutput(cluster.server(0), "listening on tcp://", 20000))
      << cluster.server(0).output();
  const int port = ListeningPort(cluster.server(0).output());
  ASSERT_GT(port, 0) << cluster.server(0).output();
  IdleConnections idle(port, 400);
  ASSERT_EQ(idle.size(), 400u);
  // The server holds 256 of them (a descriptor each, more than its soft
  // limit left at 256 would allow) and refuses the others.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  size_t open = 0;
  while ((open = OpenFiles(cluster.server(0).pid())) < 256 &&
         std::chrono::steady_clock::now() < deadline) {
    cluster.PumpAll();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GE(open, 256u) << cluster.server(0).output();
  EXPECT_TRUE(cluster.WaitForOutput(
      cluster.server(0), "connections from that address already", 20000))
      << cluster.server(0).output();
  cluster.StartWorkers(/*clocks=*/30, "bsp");
  cluster.ExpectWorkersExact(30, /*rolled_back=*/false);
  EXPECT_NE(cluster.server(0).output().find("raised the open-file limit"),
            std::string::npos)
      << cluster.server(0).output();
  EXPECT_EQ(cluster.server(0).WaitExit(kWaitMs), 0)
      << cluster.server(0).output();
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 0)
      << cluster.coordinator().output();
}

// A peer that sends the coordinator STATUS requests and never reads an
// answer; it keeps its connection (and what it queued) until it goes.
class StatusFlood {
 public:
  explicit StatusFlood(const std::string& address)
      : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::sndhwm, 1000);
    socket_.set(zmq::sockopt::rcvhwm, 1);  // reads nothing, holds little
    socket_.connect(address);
  }
  ~StatusFlood() { Stop(); }

  // Sends as fast as the connection takes them, on a thread of its own,
  // until Stop(); the connection stays after.
  void Start() {
    thread_ = std::thread([this] {
      while (!stop_) {
        if (!SendOne())
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  uint64_t sent() const { return sent_; }

 private:
  bool SendOne() {
    wire::Header h;
    h.set_type(wire::STATUS);
    h.set_seq(sent_ + 1);
    const std::string bytes = h.SerializeAsString();
    if (!socket_.send(zmq::buffer(bytes), zmq::send_flags::dontwait)) {
      return false;
    }
    ++sent_;
    return true;
  }

  zmq::context_t context_{1};
  zmq::socket_t socket_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> sent_{0};
  std::thread thread_;
};

// A peer floods the coordinator with STATUS requests and reads none of the
// answers, from before a job starts until it has trained to the end. The
// coordinator reads at most --max_queued_requests of the peer's requests
// ahead of answering them (RouterUnread tests that bound on the router
// itself) and keeps at most --max_queued_replies answers for it; it reads
// the servers' and workers' messages all along, so the job trains to the
// end, exact, and every process ends cleanly. The answers it dropped are
// counted in the coordinator's status.
TEST(Limits, AFloodOfUnreadRequestsLeavesTheCoordinatorServingTheJob) {
  RecoveryCluster cluster;
  cluster.set_coordinator_flags(
      {"--max_queued_requests=16", "--max_queued_replies=64"});
  cluster.StartCoordinator();
  ASSERT_TRUE(cluster.WaitForOutput(cluster.coordinator(),
                                    "coordinator listening on", 20000))
      << cluster.coordinator().output();
  StatusFlood flood(cluster.address());
  flood.Start();
  cluster.StartServer(0);
  cluster.StartServer(1);
  // The answers it did not read past its queue were dropped, and counted
  // (`ductile status`, /metrics).
  uint64_t dropped = 0;
  EXPECT_TRUE(cluster.WaitForStatus([&](const ClusterStatus& s) {
    dropped = s.coordinator_refusals.dropped_replies;
    return dropped > 0;
  })) << "sent "
      << flood.sent() << ", none dropped";
  // (Checked here: once the workers are done the coordinator ends the job
  // and exits, cleanly, which WaitExit checks below.)
  ASSERT_TRUE(cluster.coordinator().Running())
      << cluster.coordinator().output();
  cluster.StartWorkers(/*clocks=*/30, "bsp");
  cluster.ExpectWorkersExact(30, /*rolled_back=*/false);
  flood.Stop();
  EXPECT_GT(flood.sent(), 0u);
  EXPECT_EQ(cluster.server(0).WaitExit(kWaitMs), 0)
      << cluster.server(0).output();
  EXPECT_EQ(cluster.server(1).WaitExit(kWaitMs), 0)
      << cluster.server(1).output();
  EXPECT_EQ(cluster.coordinator().WaitExit(kWaitMs), 0)
      << cluster.coordinator().output();
}

}  // namespace
}  // namespace ductile
