// What one peer with no key can make a server or the coordinator hold:
// three floods from a raw ZeroMQ dealer that speaks the wire format by hand
// (plain mode, loopback), each measured as the target process's resident
// memory (VmRSS) before, at its peak during, and after the peer has gone.
//
//   slow_reader  pulls of a 64 KiB key, whose replies it never reads
//                (to the server);
//   status       STATUS requests whose answers it never reads (to the
//                coordinator);
//   parked       BSP pulls far ahead of the job's clock, each naming a
//                made-up worker id (to the server).
//
// Run by bench/peer_memory_flood.sh, which starts the coordinator and the
// server (`ductile` processes) and passes their addresses and pids. A
// worker of this program's own (ductile::Client) creates the tables first
// and stays connected, as a live worker at clock 0.
//
// With --soak (bench/flood_soak.sh) it joins no job and measures nothing:
// it floods a running job's table (--table_id, --length) for --seconds,
// with a fresh peer every --cycle_s, as a member holding a key of its own
// where the job has keys (--keys, --member_key); and one more kind:
//
//   connections  holds up to --connections raw TCP connections to
//                --target from the addresses 127.0.0.2 to 127.0.0.6,
//                sending nothing, and opens new ones as the target closes
//                them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "ductile/client.h"
#include "ductile/security.h"
#include "gflags/gflags.h"
#include "proto/ductile.pb.h"

DEFINE_string(coordinator, "tcp://127.0.0.1:7000", "coordinator's address");
DEFINE_string(server, "tcp://127.0.0.1:7001", "the server's tcp address");
DEFINE_int32(server_pid, 0, "the server's process id");
DEFINE_int32(coordinator_pid, 0, "the coordinator's process id");
DEFINE_string(flood, "slow_reader", "slow_reader, status or parked");
DEFINE_int32(seconds, 30, "how long the peer floods");
DEFINE_int32(after_s, 5, "how long after the peer closed RSS is read");
DEFINE_bool(soak, false,
            "flood a running job's table; join nothing, measure nothing");
DEFINE_int32(table_id, 0, "--soak: the table flooded");
DEFINE_int32(length, 0,
             "--soak: floats of the table's key 0 (a variable-width "
             "table's; 0: fixed width)");
DEFINE_int32(cycle_s, 60, "--soak: seconds each peer lives");
DEFINE_string(keys, "", "--soak: the job's keys (cluster.pub)");
DEFINE_string(member_key, "", "--soak: the key this peer proves");
DEFINE_string(target, "", "connections: the tcp://IP:PORT flooded");
DEFINE_int32(connections, 1100, "connections: how many to hold");

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kWideFloats = 16384;  // 64 KiB per key

double RssMb(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024;
  }
  return -1;
}

std::string Bytes(const std::vector<uint64_t>& keys) {
  return std::string(reinterpret_cast<const char*>(keys.data()),
                     keys.size() * sizeof(uint64_t));
}

// One flooding request (header, then keys, then lengths) as --soak sends
// it; `n` counts the requests sent.
std::vector<std::string> SoakRequest(uint64_t n) {
  ductile::wire::Header h;
  h.set_seq(1000 + n);
  if (FLAGS_flood == "status") {
    h.set_type(ductile::wire::STATUS);
    return {h.SerializeAsString()};
  }
  h.set_type(ductile::wire::PULL);
  h.set_epoch(1);
  h.set_num_keys(1);
  h.set_timeout_ms(600000);
  h.set_table_id(static_cast<uint32_t>(FLAGS_table_id));
  h.set_has_lengths(FLAGS_length > 0);
  h.set_client_id(900000 + (FLAGS_flood == "parked" ? n : 0));
  if (FLAGS_flood == "parked") {
    h.set_worker_id(static_cast<int32_t>(1000 + n % 1000000));
    h.set_clock(1000000);
  }
  std::vector<std::string> frames = {h.SerializeAsString(), Bytes({0})};
  if (FLAGS_length > 0) {
    const uint32_t length = static_cast<uint32_t>(FLAGS_length);
    frames.emplace_back(reinterpret_cast<const char*>(&length), sizeof(length));
  }
  return frames;
}

// --soak: a peer per cycle, each flooding until the cycle ends, then
// closed (what it left queued goes with it).
int Soak() {
  ductile::Security security;
  if (!FLAGS_keys.empty()) {
    auto loaded = ductile::LoadClusterKeys(FLAGS_keys, /*as_admin=*/false);
    if (!loaded.ok()) {
      std::cerr << "keys: " << loaded.status() << "\n";
      return 1;
    }
    security = std::move(*loaded);
    if (auto s = ductile::LoadMemberKey(FLAGS_member_key, &security); !s.ok()) {
      std::cerr << "member key: " << s << "\n";
      return 1;
    }
  }
  const std::string& address =
      FLAGS_flood == "status" ? FLAGS_coordinator : FLAGS_server;
  zmq::context_t context(1);
  uint64_t sent = 0;
  const auto end = Clock::now() + std::chrono::seconds(FLAGS_seconds);
  for (int cycle = 0; Clock::now() < end; ++cycle) {
    zmq::socket_t peer(context, zmq::socket_type::dealer);
    peer.set(zmq::sockopt::linger, 0);
    peer.set(zmq::sockopt::rcvhwm, 1);
    peer.set(zmq::sockopt::sndhwm, 100000);
    if (security.curve()) {
      peer.set(zmq::sockopt::curve_serverkey, security.cluster_public);
      peer.set(zmq::sockopt::curve_publickey, security.member_public);
      peer.set(zmq::sockopt::curve_secretkey, security.member_secret);
    }
    peer.connect(address);
    const uint64_t before = sent;
    const auto cycle_end =
        std::min(end, Clock::now() + std::chrono::seconds(FLAGS_cycle_s));
    while (Clock::now() < cycle_end) {
      const std::vector<std::string> frames = SoakRequest(sent);
      bool ok = true;
      for (size_t i = 0; i < frames.size() && ok; ++i) {
        const auto more = i + 1 < frames.size() ? zmq::send_flags::sndmore
                                                : zmq::send_flags::none;
        // Once the first frame is taken the rest are too.
        ok = peer.send(zmq::buffer(frames[i]),
                       more | (i == 0 ? zmq::send_flags::dontwait
                                      : zmq::send_flags::none))
                 .has_value();
      }
      if (ok) {
        ++sent;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    std::printf("%s: peer %d sent %llu requests\n", FLAGS_flood.c_str(), cycle,
                static_cast<unsigned long long>(sent - before));
    std::fflush(stdout);
  }
  return 0;
}

// One raw TCP connection to `to` from `from`; -1 if refused.
int RawConnection(const sockaddr_in& from, const sockaddr_in& to) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const timeval bound{1, 0};  // a target accepting nothing holds us 1 s
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof(bound));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&from), sizeof(from)) != 0 ||
      connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// --flood=connections: holds --connections to --target, replacing those
// the target closes, at most 100 new ones every 100 ms.
int ConnectionFlood() {
  const std::string prefix = "tcp://127.0.0.1:";
  if (FLAGS_target.rfind(prefix, 0) != 0) {
    std::cerr << "give --target=tcp://127.0.0.1:PORT\n";
    return 2;
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(
      static_cast<uint16_t>(std::stoi(FLAGS_target.substr(prefix.size()))));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> fds;
  uint64_t opened = 0, closed_by_target = 0;
  const auto end = Clock::now() + std::chrono::seconds(FLAGS_seconds);
  auto next_report = Clock::now();
  while (Clock::now() < end) {
    // Those the target closed read as the end of their stream, after
    // what it sent (its greeting).
    for (int& fd : fds) {
      char bytes[256];
      ssize_t n;
      while ((n = recv(fd, bytes, sizeof(bytes), MSG_DONTWAIT)) > 0) {
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        close(fd);
        fd = -1;
        ++closed_by_target;
      }
    }
    std::erase(fds, -1);
    for (int i = 0;
         i < 100 && fds.size() < static_cast<size_t>(FLAGS_connections); ++i) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      from.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + opened % 5);
      const int fd = RawConnection(from, to);
      if (fd < 0) break;
      fds.push_back(fd);
      ++opened;
    }
    if (Clock::now() >= next_report) {
      std::printf(
          "connections to %s: %zu held, %llu opened, %llu closed by it\n",
          FLAGS_target.c_str(), fds.size(),
          static_cast<unsigned long long>(opened),
          static_cast<unsigned long long>(closed_by_target));
      std::fflush(stdout);
      next_report = Clock::now() + std::chrono::seconds(60);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (int fd : fds) close(fd);
  std::printf("connections to %s: %llu opened, %llu closed by it\n",
              FLAGS_target.c_str(), static_cast<unsigned long long>(opened),
              static_cast<unsigned long long>(closed_by_target));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_flood == "connections") return ConnectionFlood();
  if (FLAGS_soak) {
    if (FLAGS_flood != "slow_reader" && FLAGS_flood != "status" &&
        FLAGS_flood != "parked") {
      std::cerr << "give --flood=slow_reader|status|parked|connections\n";
      return 2;
    }
    return Soak();
  }
  const bool to_coordinator = FLAGS_flood == "status";
  const int pid = to_coordinator ? FLAGS_coordinator_pid : FLAGS_server_pid;
  if (pid <= 0 || (FLAGS_flood != "slow_reader" && FLAGS_flood != "status" &&
                   FLAGS_flood != "parked")) {
    std::cerr << "give --flood=slow_reader|status|parked and the pids\n";
    return 2;
  }

  ductile::ClientOptions options;
  options.coordinator_address = FLAGS_coordinator;
  auto client = ductile::Client::Connect(options);
  if (!client.ok()) {
    std::cerr << "connect: " << client.status() << "\n";
    return 1;
  }
  ductile::TableOptions wide;
  wide.name = "wide";
  wide.value_width = kWideFloats;
  wide.rule = ductile::UpdateRule::kAdd;
  auto wide_id = (*client)->CreateTable(wide);
  ductile::TableOptions bsp;
  bsp.name = "bsp";
  bsp.value_width = 4;
  bsp.rule = ductile::UpdateRule::kAdd;
  bsp.consistency = {ductile::ConsistencyMode::kBsp, 0};
  auto bsp_id = (*client)->CreateTable(bsp);
  if (!wide_id.ok() || !bsp_id.ok()) {
    std::cerr << "tables: " << wide_id.status() << " " << bsp_id.status()
              << "\n";
    return 1;
  }
  const std::vector<ductile::Key> key = {1};
  if (auto s =
          (*client)->Push(*wide_id, key, std::vector<float>(kWideFloats, 1.0f));
      !s.ok()) {
    std::cerr << "push: " << s << "\n";
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));  // settle
  const double before = RssMb(pid);

  zmq::context_t context(1);
  auto peer =
      std::make_unique<zmq::socket_t>(context, zmq::socket_type::dealer);
  peer->set(zmq::sockopt::linger, 0);
  peer->set(zmq::sockopt::rcvhwm, 1);
  peer->set(zmq::sockopt::sndhwm, 100000);
  peer->connect(to_coordinator ? FLAGS_coordinator : FLAGS_server);

  uint64_t sent = 0;
  double peak = before;
  const auto end = Clock::now() + std::chrono::seconds(FLAGS_seconds);
  auto next_sample = Clock::now();
  const std::string keys = Bytes({1});
  while (Clock::now() < end) {
    ductile::wire::Header h;
    h.set_seq(1000 + sent);
    if (to_coordinator) {
      h.set_type(ductile::wire::STATUS);
    } else {
      h.set_type(ductile::wire::PULL);
      h.set_client_id(900000 + (FLAGS_flood == "parked" ? sent : 0));
      h.set_epoch(1);
      h.set_num_keys(1);
      h.set_timeout_ms(600000);
      if (FLAGS_flood == "parked") {
        h.set_table_id(*bsp_id);
        h.set_worker_id(static_cast<int32_t>(1000 + sent % 1000000));
        h.set_clock(1000000);
      } else {
        h.set_table_id(*wide_id);
      }
    }
    const std::string header = h.SerializeAsString();
    zmq::send_result_t ok;
    if (to_coordinator) {
      ok = peer->send(zmq::buffer(header), zmq::send_flags::dontwait);
    } else {
      ok = peer->send(zmq::buffer(header),
                      zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      if (ok) peer->send(zmq::buffer(keys), zmq::send_flags::none);
    }
    if (ok) {
      ++sent;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (Clock::now() >= next_sample) {
      peak = std::max(peak, RssMb(pid));
      next_sample = Clock::now() + std::chrono::milliseconds(100);
    }
  }
  // What was sent is still being answered: read on until it settles.
  for (int i = 0; i < 30; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    peak = std::max(peak, RssMb(pid));
  }
  const double during = RssMb(pid);
  peer.reset();  // the peer goes
  std::this_thread::sleep_for(std::chrono::seconds(FLAGS_after_s));
  const double after = RssMb(pid);

  // A legitimate pull still served, and how long it takes.
  std::vector<float> out(kWideFloats);
  const auto start = Clock::now();
  const ductile::Status pulled = (*client)->Pull(*wide_id, key, out);
  const auto pull_us = std::chrono::duration_cast<std::chrono::microseconds>(
                           Clock::now() - start)
                           .count();
  std::printf(
      "%s: %llu requests in %d s; %s RSS before %.0f MB, peak during %.0f "
      "MB, at the flood's end %.0f MB, %d s after the peer closed %.0f MB; "
      "a worker's pull then: %s in %lld us\n",
      FLAGS_flood.c_str(), static_cast<unsigned long long>(sent), FLAGS_seconds,
      to_coordinator ? "coordinator" : "server", before, peak, during,
      FLAGS_after_s, after, pulled.ok() ? "ok" : "FAILED",
      static_cast<long long>(pull_us));
  return pulled.ok() ? 0 : 1;
}
