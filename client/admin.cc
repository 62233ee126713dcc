// QueryClusterStatus, RequestShutdown, RequestCheckpoint: one request/reply
// with the coordinator over a private socket, no registration.
#include "ductile/admin.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "env/env.h"
#include "proto/codec.h"
#include "proto/counters.h"
#include "proto/ductile.pb.h"
#include "transport/message.h"
#include "transport/socket.h"

namespace ductile {
namespace {

// Sends `request` and waits for its CONTROL_REPLY. `awaited` names what
// the caller waits for in the timeout's message: a checkpoint request waits
// for the checkpoint itself, not just for a reachable coordinator.
Result<wire::Header> AskCoordinator(const std::string& address,
                                    const Security& security,
                                    const wire::Header& request,
                                    int64_t timeout_ms,
                                    const std::string& awaited = "answer") {
  std::unique_ptr<Transport> transport =
      SystemEnv()->NewTransport("admin", security);
  DUCTILE_ASSIGN_OR_RETURN(std::unique_ptr<Socket> socket,
                           transport->NewDealer(""));
  DUCTILE_RETURN_IF_ERROR(socket->Connect(address));
  OutMessage out;
  out.AddString(request.SerializeAsString());
  DUCTILE_RETURN_IF_ERROR(socket->Send(std::move(out)));
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  Socket* const sockets[] = {socket.get()};
  while (true) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return DeadlineExceededError(
          "no " + awaited + " from the coordinator at " + address + " within " +
          std::to_string(timeout_ms) + " ms");
    }
    DUCTILE_RETURN_IF_ERROR(transport->Wait(sockets, -1, deadline));
    InMessage message;
    bool got = false;
    DUCTILE_RETURN_IF_ERROR(socket->Receive(&message, &got));
    if (!got) continue;
    wire::Header reply;
    DUCTILE_RETURN_IF_ERROR(ParseHeader(message.frame(0), &reply));
    if (reply.type() != wire::CONTROL_REPLY || reply.seq() != request.seq()) {
      continue;
    }
    DUCTILE_RETURN_IF_ERROR(StatusFromWire(reply));
    return reply;
  }
}

}  // namespace

Result<ClusterStatus> QueryClusterStatus(const std::string& address,
                                         int64_t timeout_ms,
                                         const Security& security) {
  wire::Header request;
  request.set_type(wire::STATUS);
  request.set_seq(1);
  Result<wire::Header> reply =
      AskCoordinator(address, security, request, timeout_ms);
  DUCTILE_RETURN_IF_ERROR(reply.status());
  const wire::ClusterState& c = reply->cluster();
  ClusterStatus status;
  status.epoch = c.epoch();
  status.num_slots = c.num_slots();
  status.expected_servers = c.expected_servers();
  status.generation = c.generation();
  // With no checkpoint kept, the clock field may be absent, and proto3
  // would read it as a checkpoint at clock 0.
  status.last_checkpoint_clock =
      c.checkpoints() > 0 ? c.last_checkpoint_clock() : -1;
  status.checkpoints = c.checkpoints();
  status.recovering = c.recovering();
  status.problem = c.problem();
  status.slots_moving = c.slots_moving();
  status.target_workers = c.target_workers();
  status.target_servers = c.target_servers();
  status.data_epochs = c.data_epochs();
  status.data_batches_per_epoch = c.data_batches_per_epoch();
  status.data_epoch = c.data_epoch();
  status.data_batches_done = c.data_batches_done();
  for (const auto& t : c.tables()) status.tables.push_back(t);
  double gradient_sq = 0;
  double noise_trace = 0;
  for (const auto& m : c.members()) {
    MemberStatus s;
    s.id = m.id();
    s.role = m.role() == wire::ROLE_SERVER ? "server" : "worker";
    s.address = m.address();
    s.last_heartbeat_ms_ago = m.last_heartbeat_ms_ago();
    s.alive = m.alive();
    s.finished = m.finished();
    s.state = m.state();
    s.slots = m.slots();
    s.counters = CountersFromWire(m.counters());
    if (s.role == "server" && status.slots_moving > 0) {
      status.move_bytes_left += s.counters.move_bytes_left;
    }
    // The servers holding keys now: their shares add up to the model.
    if (s.role == "server" && s.alive &&
        (s.state == "active" || s.state == "draining")) {
      // A share that is not a number (a server that lies) is left out.
      if (std::isfinite(s.counters.gns_gradient_sq) &&
          std::isfinite(s.counters.gns_noise_trace)) {
        gradient_sq += s.counters.gns_gradient_sq;
        noise_trace += s.counters.gns_noise_trace;
      }
      status.noise_scale_clocks =
          std::max(status.noise_scale_clocks, s.counters.gns_clocks);
    }
    const wire::WorkerMetrics& w = m.metrics();
    s.clock = w.clock();
    s.pulls = w.pulls();
    s.blocked_ms = w.blocked_us() / 1000;
    s.cache_hits = w.cache_hits();
    s.cache_misses = w.cache_misses();
    // The histogram's last bucket holds "that or more": its index is a
    // lower bound, which is what the table shows.
    uint64_t counted = 0, weighted = 0;
    for (int i = 0; i < w.staleness_size(); ++i) {
      if (w.staleness(i) == 0) continue;
      s.max_staleness = i;
      counted += w.staleness(i);
      weighted += static_cast<uint64_t>(i) * w.staleness(i);
    }
    s.mean_staleness =
        counted ? static_cast<double>(weighted) / static_cast<double>(counted)
                : 0.0;
    status.members.push_back(s);
  }
  if (status.noise_scale_clocks > 0 && gradient_sq > 0) {
    status.noise_scale = noise_trace / gradient_sq;
  }
  return status;
}

Status RequestShutdown(const std::string& address, int64_t timeout_ms,
                       const Security& security) {
  wire::Header request;
  request.set_type(wire::SHUTDOWN);
  request.set_seq(1);
  return AskCoordinator(address, security, request, timeout_ms).status();
}

Status RequestDrainWorker(const std::string& address, int32_t worker_id,
                          int64_t timeout_ms, const Security& security) {
  wire::Header request;
  request.set_type(wire::DRAIN);
  request.set_seq(1);
  request.set_worker_id(worker_id);
  return AskCoordinator(address, security, request, timeout_ms).status();
}

Status RequestDrainServer(const std::string& address, int32_t server_id,
                          int64_t timeout_ms, const Security& security) {
  wire::Header request;
  request.set_type(wire::DRAIN);
  request.set_seq(1);
  request.set_role(wire::ROLE_SERVER);
  request.set_member_id(server_id);
  return AskCoordinator(address, security, request, timeout_ms,
                        "drained server")
      .status();
}

Status RequestResize(const std::string& address, int32_t workers,
                     int32_t servers, int64_t timeout_ms,
                     const Security& security) {
  if (workers < 0 || servers < 0 || (workers == 0 && servers == 0)) {
    return InvalidArgumentError(
        "a resize needs a number of workers and/or servers of at least 1");
  }
  wire::Header request;
  request.set_type(wire::RESIZE);
  request.set_seq(1);
  request.set_num_workers(workers);
  request.set_target_servers(servers);
  return AskCoordinator(address, security, request, timeout_ms).status();
}

Result<int64_t> RequestCheckpoint(const std::string& address,
                                  int64_t timeout_ms,
                                  const Security& security) {
  wire::Header request;
  request.set_type(wire::CHECKPOINT);
  request.set_seq(1);
  // The coordinator answers only once every server has written the
  // checkpoint, so the wait covers the whole checkpoint, not a round trip.
  Result<wire::Header> reply = AskCoordinator(
      address, security, request, timeout_ms, "complete checkpoint");
  DUCTILE_RETURN_IF_ERROR(reply.status());
  return reply->clock();
}

std::string FormatClusterStatus(const ClusterStatus& status) {
  std::ostringstream os;
  os << "epoch " << status.epoch << ", " << status.num_slots << " slots, "
     << status.expected_servers << " servers expected\n";
  os << "generation " << status.generation << ", last checkpoint at clock ";
  if (status.last_checkpoint_clock >= 0) {
    os << status.last_checkpoint_clock;
  } else {
    os << "none";
  }
  os << ", " << status.checkpoints << " checkpoint(s) kept";
  if (status.recovering) os << ", recovering";
  if (status.slots_moving > 0) {
    char left[64];
    std::snprintf(left, sizeof(left), "%.1f MB", status.move_bytes_left / 1e6);
    os << ", " << status.slots_moving << " slot(s) moving between servers ("
       << left << " left)";
  }
  os << "\n";
  if (!status.problem.empty()) os << "problem: " << status.problem << "\n";
  if (status.target_workers > 0 || status.target_servers > 0) {
    os << "target size:";
    if (status.target_workers > 0) {
      os << " " << status.target_workers << " worker(s)";
    }
    if (status.target_servers > 0) {
      os << " " << status.target_servers << " server(s)";
    }
    os << "\n";
  }
  if (status.noise_scale_clocks > 0) {
    char noise[160];
    if (status.noise_scale > 0) {
      std::snprintf(noise, sizeof(noise),
                    "gradient noise scale: %.3g worker batches (averaged over "
                    "%llu clocks)\n",
                    status.noise_scale,
                    static_cast<unsigned long long>(status.noise_scale_clocks));
    } else {
      std::snprintf(noise, sizeof(noise),
                    "gradient noise scale: not estimable yet (%llu clocks)\n",
                    static_cast<unsigned long long>(status.noise_scale_clocks));
    }
    os << noise;
  }
  if (status.data_epochs > 0) {
    if (status.data_epoch >= status.data_epochs) {
      os << "data: all " << status.data_epochs << " epoch(s) done\n";
    } else {
      os << "data: epoch " << status.data_epoch + 1 << "/" << status.data_epochs
         << ", " << status.data_batches_done << "/"
         << status.data_batches_per_epoch << " batches done\n";
    }
  }
  os << "tables:";
  for (const auto& t : status.tables) os << " " << t;
  if (status.tables.empty()) os << " (none)";
  os << "\n";
  char line[512];
  std::snprintf(
      line, sizeof(line),
      "%-4s %-7s %-8s %9s %6s %10s %10s %10s %6s %6s %6s %6s %8s %7s %6s  %s\n",
      "id", "role", "state", "hb_ago", "slots", "requests", "pushes", "pulls",
      "dups", "errors", "limit", "denied", "keys", "clock", "parked",
      "address");
  os << line;
  for (const auto& m : status.members) {
    if (m.role != "server") continue;
    std::snprintf(
        line, sizeof(line),
        "%-4d %-7s %-8s %7lldms %6d %10llu %10llu %10llu %6llu %6llu %6llu "
        "%6llu %8llu %7lld %6llu  %s\n",
        m.id, m.role.c_str(), m.state.c_str(),
        static_cast<long long>(m.last_heartbeat_ms_ago), m.slots,
        static_cast<unsigned long long>(m.counters.requests),
        static_cast<unsigned long long>(m.counters.pushes),
        static_cast<unsigned long long>(m.counters.pulls),
        static_cast<unsigned long long>(m.counters.duplicates),
        static_cast<unsigned long long>(m.counters.errors),
        static_cast<unsigned long long>(m.counters.refused_limits),
        static_cast<unsigned long long>(m.counters.refused_permission),
        static_cast<unsigned long long>(m.counters.keys_stored),
        static_cast<long long>(m.counters.min_clock),
        static_cast<unsigned long long>(m.counters.parked_pulls),
        m.address.c_str());
    os << line;
  }
  std::snprintf(line, sizeof(line),
                "%-4s %-7s %-8s %9s %7s %10s %11s %9s %9s %9s\n", "id", "role",
                "state", "hb_ago", "clock", "pulls", "blocked_ms", "max_stale",
                "mean_stale", "cache_hit");
  os << line;
  for (const auto& m : status.members) {
    if (m.role == "server") continue;
    const uint64_t lookups = m.cache_hits + m.cache_misses;
    const std::string hit =
        lookups ? std::to_string(100 * m.cache_hits / lookups) + "%" : "-";
    std::snprintf(
        line, sizeof(line),
        "%-4d %-7s %-8s %7lldms %7lld %10llu %11llu %9lld %9.2f %9s\n", m.id,
        m.role.c_str(), m.state.c_str(),
        static_cast<long long>(m.last_heartbeat_ms_ago),
        static_cast<long long>(m.clock),
        static_cast<unsigned long long>(m.pulls),
        static_cast<unsigned long long>(m.blocked_ms),
        static_cast<long long>(m.max_staleness), m.mean_staleness, hit.c_str());
    os << line;
  }
  return os.str();
}

}  // namespace ductile
