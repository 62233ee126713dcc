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
#include <unistd.h>

#include <algorithm>
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
#include "gflags/gflags.h"
#include "proto/ductile.pb.h"

DEFINE_string(coordinator, "tcp://127.0.0.1:7000", "coordinator's address");
DEFINE_string(server, "tcp://127.0.0.1:7001", "the server's tcp address");
DEFINE_int32(server_pid, 0, "the server's process id");
DEFINE_int32(coordinator_pid, 0, "the coordinator's process id");
DEFINE_string(flood, "slow_reader", "slow_reader, status or parked");
DEFINE_int32(seconds, 30, "how long the peer floods");
DEFINE_int32(after_s, 5, "how long after the peer closed RSS is read");

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

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
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
