// A flood of connections from a peer holding no key, against real
// processes under a limit of 1024 open files: every wait is bounded and
// every process killed when the test ends.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "ductile/admin.h"
#include "ductile/security.h"
#include "gtest/gtest.h"
#include "tests/recovery_cluster.h"

namespace ductile {
namespace {

using testing::ChildProcess;
using testing::kWaitMs;
using testing::ListeningPort;

constexpr rlim_t kOpenFiles = 1024;

// TCP connections to 127.0.0.1:port from the addresses 127.0.0.2,
// 127.0.0.3, ... (`per_source` from each), that send nothing and are held
// until this goes. Those the server closes stay open here too.
class RawConnections {
 public:
  RawConnections(int port, int sources, int per_source) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int s = 0; s < sources; ++s) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      from.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + s);
      for (int i = 0; i < per_source; ++i) {
        const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return;
        // A server that accepts nothing more must not hold the test up.
        const timeval bound{2, 0};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof(bound));
        if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
            connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
          close(fd);
          continue;
        }
        fds_.push_back(fd);
      }
    }
  }
  ~RawConnections() {
    for (int fd : fds_) close(fd);
  }
  size_t size() const { return fds_.size(); }

 private:
  std::vector<int> fds_;
};

class ConnectionFlood : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/ductile-flood-XXXXXX";
    const char* made = mkdtemp(pattern);
    ASSERT_NE(made, nullptr);
    dir_ = made;
    // This process holds the flood: it needs more than the servers have.
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &original_), 0);
    if (original_.rlim_max != RLIM_INFINITY && original_.rlim_max < 2048) {
      GTEST_SKIP() << "the hard limit of open files (" << original_.rlim_max
                   << ") leaves the test no room for its connections";
    }
    rlimit raised = original_;
    raised.rlim_cur = std::max<rlim_t>(original_.rlim_cur, 2048);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &raised), 0);
  }
  void TearDown() override {
    setrlimit(RLIMIT_NOFILE, &original_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string dir_;
  rlimit original_{};
};

// A coordinator and a server with keys, each limited to 1024 open files
// (soft and hard, so raising the soft limit gains nothing). A peer with no
// key opens 1,100 TCP connections to the server's port from five addresses
// and holds them; then a worker with a key of its own starts and reaches
// the server over ipc://. libzmq takes a descriptor for each connection
// before any handshake, and aborts the process when accepting on its
// ipc:// socket finds none left: the server used to die there, and the
// worker failed with "servers 0 did not confirm table". Now the server
// refuses the tcp:// connections that would leave fewer than
// --reserved_descriptors free, and serves the worker while the flood
// holds the rest. Once the flood's connections go (as its handshakes time
// out), a second worker joins over tcp://, and both train to the end.
TEST_F(ConnectionFlood,
       ThousandsOfRawConnectionsLeaveAServerServingKeyedWorkers) {
  const std::string keys = dir_ + "/keys";
  ChildProcess keygen(
      {DUCTILE_CLI, "keygen", "--out=" + keys, "--servers=1", "--workers=2"});
  ASSERT_EQ(keygen.WaitExit(kWaitMs), 0) << keygen.output();

  const std::string coordinator_address = "ipc://" + dir_ + "/coordinator.sock";
  ChildProcess coordinator(
      {DUCTILE_CLI, "coordinator", "--listen=" + coordinator_address,
       "--servers=1", "--workers=2", "--slots=16",
       "--state_dir=" + dir_ + "/coordinator", "--keys=" + keys,
       "--heartbeat_timeout_ms=20000"},
      kOpenFiles);
  // The flood's connections outlive the flood, however slow the machine.
  ChildProcess server(
      {DUCTILE_CLI, "server", "--coordinator=" + coordinator_address,
       "--server_id=0", "--state_dir=" + dir_ + "/servers", "--ipc_dir=" + dir_,
       "--host=127.0.0.1", "--keys=" + keys, "--handshake_timeout_ms=60000"},
      kOpenFiles);
  const auto wait_for = [&](ChildProcess& p, const std::string& text) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
    while (p.output().find(text) == std::string::npos && p.Running() &&
           std::chrono::steady_clock::now() < deadline) {
      p.Pump(20);
      server.Pump(0);
      coordinator.Pump(0);
    }
    return p.output().find(text) != std::string::npos;
  };
  ASSERT_TRUE(wait_for(server, "listening on tcp://"))
      << server.output() << "\ncoordinator:\n"
      << coordinator.output();
  const int port = ListeningPort(server.output());
  ASSERT_GT(port, 0) << server.output();

  const auto worker = [&](int id, bool ipc) {
    return std::make_unique<ChildProcess>(std::vector<std::string>{
        DUCTILE_RECOVERY_WORKER, "--coordinator=" + coordinator_address,
        "--clocks=10", "--keys=16", "--sleep_ms=0", "--mode=bsp",
        "--cluster_keys=" + keys,
        "--member_key=" + keys + "/members/worker-" + std::to_string(id) +
            ".key",
        "--worker_id=" + std::to_string(id),
        std::string("--prefer_ipc=") + (ipc ? "1" : "0")});
  };
  std::vector<std::unique_ptr<ChildProcess>> workers;
  {
    RawConnections flood(port, /*sources=*/5, /*per_source=*/220);
    EXPECT_GT(flood.size(), kOpenFiles);
    // Refused, counted and said, not fatal.
    EXPECT_TRUE(wait_for(server, "kept for this process's own files"))
        << server.output();
    ASSERT_TRUE(server.Running()) << server.output();
    workers.push_back(worker(0, /*ipc=*/true));
    EXPECT_TRUE(wait_for(*workers[0], "tables created"))
        << workers[0]->output() << "\nserver:\n"
        << server.output();
    ASSERT_TRUE(server.Running()) << server.output();
    // The server's refusals reach the status with its next heartbeat.
    Result<Security> admin = LoadClusterKeys(keys, /*as_admin=*/true);
    ASSERT_TRUE(admin.ok()) << admin.status();
    uint64_t refused = 0;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
    while (refused == 0 && std::chrono::steady_clock::now() < deadline) {
      server.Pump(0);
      coordinator.Pump(0);
      workers[0]->Pump(20);
      Result<ClusterStatus> status =
          QueryClusterStatus(coordinator_address, 2000, *admin);
      if (!status.ok()) continue;
      for (const MemberStatus& m : status->members) {
        if (m.role == "server") refused = m.counters.refused_connections;
      }
    }
    EXPECT_GT(refused, 0u) << "no refusal counted in the status";
  }
  workers.push_back(worker(1, /*ipc=*/false));
  for (size_t i = 0; i < workers.size(); ++i) {
    const int code = workers[i]->WaitExit(kWaitMs);
    server.Pump(0);
    coordinator.Pump(0);
    EXPECT_EQ(code, 0) << "worker " << i << ":\n"
                       << workers[i]->output() << "\nserver:\n"
                       << server.output();
    EXPECT_NE(workers[i]->output().find("final state exact at clock 10"),
              std::string::npos)
        << workers[i]->output();
  }
  // The job is done: both end cleanly (an abort is no exit 0).
  EXPECT_EQ(server.WaitExit(kWaitMs), 0) << server.output();
  EXPECT_EQ(coordinator.WaitExit(kWaitMs), 0) << coordinator.output();
}

}  // namespace
}  // namespace ductile
