// Addresses between processes: stale ipc socket files.
#include "transport/endpoint.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "ductile/security.h"
#include "gtest/gtest.h"
#include "transport/message.h"
#include "transport/zmq_transport.h"

namespace ductile {
namespace {

namespace fs = std::filesystem;

// A unix socket file at `path`, bound (and listening if `listen`); the
// descriptor is returned (closing it leaves the file, as a killed process
// does).
int MakeSocketFile(const std::string& path, bool listen) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
      << path << ": " << std::strerror(errno);
  if (listen) {
    EXPECT_EQ(::listen(fd, 1), 0);
  }
  return fd;
}

// The pid of a process that has exited (and been reaped).
pid_t DeadPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

// libzmq takes tcp://host:70000 as port 4464: a port out of range is an
// error, before anything is bound or connected.
TEST(Endpoint, ATcpPortOutOfRangeIsRefused) {
  for (const char* ok : {"tcp://127.0.0.1:0", "tcp://127.0.0.1:65535",
                         "tcp://*:*", "tcp://[::1]:7000", "ipc:///tmp/x:9"}) {
    EXPECT_TRUE(CheckTcpPort(ok).ok()) << ok;
  }
  for (const char* bad :
       {"tcp://127.0.0.1:65536", "tcp://127.0.0.1:70000", "tcp://127.0.0.1",
        "tcp://127.0.0.1:", "tcp://127.0.0.1:-1", "tcp://127.0.0.1:123456"}) {
    const Status s = CheckTcpPort(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("[0, 65535]"), std::string::npos) << s;
  }
  std::unique_ptr<Transport> transport = NewZmqTransport(Security());
  Result<std::unique_ptr<Socket>> router = transport->NewRouter(0);
  ASSERT_TRUE(router.ok()) << router.status();
  Result<std::string> bound = (*router)->Bind("tcp://127.0.0.1:70000");
  EXPECT_EQ(bound.status().code(), StatusCode::kInvalidArgument);
}

TEST(Endpoint, StaleIpcFilesOfGoneProcessesAreRemovedAndNoOthers) {
  char pattern[] = "/tmp/ductile-endpoint-test-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  const pid_t dead = DeadPid();
  const std::string stale =
      dir + "/ductile-server-" + std::to_string(dead) + "-0.sock";
  const std::string alive_pid =
      dir + "/ductile-server-" + std::to_string(getppid()) + "-0.sock";
  const std::string listening =
      dir + "/ductile-server-" + std::to_string(dead) + "-1.sock";
  const std::string other = dir + "/other-" + std::to_string(dead) + "-0.sock";
  const std::string not_a_socket =
      dir + "/ductile-server-" + std::to_string(dead) + "-2.sock";
  ::close(MakeSocketFile(stale, false));
  ::close(MakeSocketFile(alive_pid, false));
  const int listener = MakeSocketFile(listening, true);
  ::close(MakeSocketFile(other, false));
  std::ofstream(not_a_socket) << "data";

  EXPECT_EQ(RemoveStaleIpcFiles(dir), 1);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(alive_pid));  // its process runs
  EXPECT_TRUE(fs::exists(listening));  // something accepts on it
  EXPECT_TRUE(fs::exists(other));      // not one of ours
  EXPECT_TRUE(fs::exists(not_a_socket));
  ::close(listener);
  EXPECT_EQ(RemoveStaleIpcFiles(dir + "/missing"), 0);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace ductile

namespace ductile {
namespace {

// The next message at `socket`, waiting up to 10 s for it.
Status ReceiveWithin(Transport& transport, Socket& socket, InMessage* in,
                     bool* got) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  *got = false;
  while (!*got && std::chrono::steady_clock::now() < deadline) {
    Socket* sockets[] = {&socket};
    DUCTILE_RETURN_IF_ERROR(transport.Wait(sockets, -1, deadline));
    DUCTILE_RETURN_IF_ERROR(socket.Receive(in, got));
  }
  return Status::Ok();
}

// ZeroMQ's "Peer-Address" of an ipc:// peer carries its credentials; a
// tcp:// peer's is numeric, IPv6 included, and names no process.
TEST(IpcPeerPid, ReadsThePidOfAUnixPeerAndNothingElse) {
  EXPECT_EQ(IpcPeerPid("localhost:0:0:23662"), 23662);
  EXPECT_EQ(IpcPeerPid("localhost:1000:1000:7"), 7);
  EXPECT_EQ(IpcPeerPid("127.0.0.1"), 0);
  EXPECT_EQ(IpcPeerPid("::1"), 0);
  EXPECT_EQ(IpcPeerPid("fe80::1:2:3"), 0);
  EXPECT_EQ(IpcPeerPid(""), 0);
  EXPECT_EQ(IpcPeerPid("localhost"), 0);
  EXPECT_EQ(IpcPeerPid("localhost:0:0:"), 0);
  EXPECT_EQ(IpcPeerPid("localhost:0:0:0"), 0);
  EXPECT_EQ(IpcPeerPid("localhost:0:0:12x"), 0);
  EXPECT_EQ(IpcPeerPid("localhost:0:12"), 0);
  EXPECT_EQ(IpcPeerPid("localhost:0:0:99999999999"), 0);
  EXPECT_EQ(IpcPeerPid("localhost:0:0:-5"), 0);
}

// A router's messages say which process sent them over ipc://, and none
// over tcp://; a dealer's say none.
TEST(IpcPeerPid, ARoutersMessagesCarryTheSendersPidOverIpcOnly) {
  auto transport = NewZmqTransport(Security{});
  auto router = transport->NewRouter(1 << 20);
  ASSERT_TRUE(router.ok()) << router.status();
  auto tcp = (*router)->Bind("tcp://127.0.0.1:*");
  ASSERT_TRUE(tcp.ok()) << tcp.status();
  const std::string ipc =
      MakeIpcAddress(fs::temp_directory_path().string(), "endpoint-test");
  auto bound_ipc = (*router)->Bind(ipc);
  ASSERT_TRUE(bound_ipc.ok()) << bound_ipc.status();
  for (const std::string& address : {*bound_ipc, *tcp}) {
    auto dealer = transport->NewDealer("", 1 << 20);
    ASSERT_TRUE(dealer.ok()) << dealer.status();
    ASSERT_TRUE((*dealer)->Connect(address).ok());
    OutMessage out;
    out.AddString("hello");
    ASSERT_TRUE((*dealer)->Send(std::move(out)).ok());
    InMessage in;
    bool got = false;
    ASSERT_TRUE(ReceiveWithin(*transport, **router, &in, &got).ok());
    ASSERT_TRUE(got) << address;
    EXPECT_EQ(in.peer_pid(), address == *bound_ipc ? getpid() : 0) << address;
    // The answer, at the dealer: no pid.
    OutMessage back;
    back.AddCopy(in.frame(0));
    back.AddString("hi");
    ASSERT_TRUE((*router)->Send(std::move(back)).ok());
    ASSERT_TRUE(ReceiveWithin(*transport, **dealer, &in, &got).ok());
    ASSERT_TRUE(got) << address;
    EXPECT_EQ(in.peer_pid(), 0) << address;
  }
  RemoveIpcFile(*bound_ipc);
}

// A count asked for is kept (within 1 - 64); 0 gives encrypted members a
// quarter of the cores (1 - 4) and plain ones 1.
TEST(ZmqIoThreads, ZeroChoosesByEncryptionAndCores) {
  EXPECT_EQ(ZmqIoThreads(3, false, 16), 3);
  EXPECT_EQ(ZmqIoThreads(3, true, 2), 3);
  EXPECT_EQ(ZmqIoThreads(100, true, 16), 64);
  EXPECT_EQ(ZmqIoThreads(-5, false, 16), 1);
  EXPECT_EQ(ZmqIoThreads(0, false, 64), 1);
  EXPECT_EQ(ZmqIoThreads(0, true, 0), 1);  // cores unknown
  EXPECT_EQ(ZmqIoThreads(0, true, 2), 1);
  EXPECT_EQ(ZmqIoThreads(0, true, 8), 2);
  EXPECT_EQ(ZmqIoThreads(0, true, 16), 4);
  EXPECT_EQ(ZmqIoThreads(0, true, 128), 4);
}

}  // namespace
}  // namespace ductile
