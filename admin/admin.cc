// QueryClusterStatus, RequestShutdown, RequestCheckpoint, ReportMemberExit
// and the others: one request/reply with the coordinator over a private
// socket, no registration.
#include "ductile/admin.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "admin/cluster_status_wire.h"
#include "env/env.h"
#include "proto/codec.h"
#include "proto/counters.h"
#include "proto/ductile.pb.h"
#include "proto/table_config.h"
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
      SystemEnv()->NewTransport("admin", security, /*io_threads=*/1);
  DUCTILE_ASSIGN_OR_RETURN(std::unique_ptr<Socket> socket,
                           transport->NewDealer("", kControlMessageBytes));
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
  return ClusterStatusFromWire(reply->cluster());
}

ClusterStatus ClusterStatusFromWire(const wire::ClusterState& c) {
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
  status.replicas = std::max(1, c.replicas());
  status.slots_without_copy = c.slots_without_copy();
  status.takeovers = c.takeovers();
  status.target_workers = c.target_workers();
  status.target_servers = c.target_servers();
  status.replace_workers.assign(c.replace_workers().begin(),
                                c.replace_workers().end());
  status.data_epochs = c.data_epochs();
  status.data_batches_per_epoch = c.data_batches_per_epoch();
  status.data_epoch = c.data_epoch();
  status.data_batches_done = c.data_batches_done();
  status.data_batches_per_step = std::max(1, c.data_batches_per_step());
  const wire::Refusals& r = c.coordinator_refusals();
  status.coordinator_refusals.refused_connections = r.refused_connections();
  status.coordinator_refusals.failed_accepts = r.failed_accepts();
  status.coordinator_refusals.failed_handshakes = r.failed_handshakes();
  status.coordinator_refusals.refused_replies = r.refused_replies();
  status.coordinator_refusals.dropped_replies = r.dropped_replies();
  for (const auto& t : c.tables()) status.tables.push_back(t);
  for (const auto& t : c.table_consistency()) {
    status.table_consistency.push_back(FromWire(t));
  }
  double gradient_sq = 0;
  double loss_sum = 0;
  int loss_workers = 0;
  double noise_trace = 0;
  for (const auto& m : c.members()) {
    MemberStatus s;
    s.id = m.id();
    s.role = m.role() == wire::ROLE_SERVER ? "server" : "worker";
    s.address = m.address();
    s.last_heartbeat_ms_ago = m.last_heartbeat_ms_ago();
    s.alive = m.alive();
    s.finished = m.finished();
    s.pid = m.pid();
    s.incarnation = m.incarnation();
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
      status.noise_scale_us += s.counters.gns_us;
    }
    const wire::WorkerMetrics& w = m.metrics();
    s.clock = w.clock();
    s.pulls = w.pulls();
    s.blocked_ms = w.blocked_us() / 1000;
    s.cache_hits = w.cache_hits();
    s.cache_misses = w.cache_misses();
    // The histogram's last bucket holds "that or more": its index is a
    // lower bound, which is what the table shows. A longer one (from a
    // worker that lies) is cut there.
    const int buckets = std::min<int>(w.staleness_size(), kStalenessBuckets);
    uint64_t counted = 0, weighted = 0;
    for (int i = 0; i < buckets; ++i) {
      if (w.staleness(i) == 0) continue;
      s.max_staleness = i;
      counted += w.staleness(i);
      weighted += static_cast<uint64_t>(i) * w.staleness(i);
    }
    s.mean_staleness =
        counted ? static_cast<double>(weighted) / static_cast<double>(counted)
                : 0.0;
    if (s.role == "worker") {
      s.steps = w.steps();
      s.samples = w.samples();
      s.step_seconds = static_cast<double>(w.step_us()) / 1e6;
      s.push_wait_seconds = static_cast<double>(w.push_wait_us()) / 1e6;
      s.pull_wait_seconds = static_cast<double>(w.pull_wait_us()) / 1e6;
      s.recent_step_ms = w.recent_step_us() / 1e3;
      s.recent_push_wait_ms = w.recent_push_wait_us() / 1e3;
      s.recent_pull_wait_ms = w.recent_pull_wait_us() / 1e3;
      s.samples_per_s = w.recent_samples_per_s();
      if (s.alive && s.state == "active" && std::isfinite(s.samples_per_s) &&
          s.samples_per_s > 0) {
        status.samples_per_s += s.samples_per_s;
      }
      s.recent_loss = w.recent_loss();
      s.losses = w.losses();
      if (s.alive && s.state == "active" && s.losses > 0 &&
          std::isfinite(s.recent_loss)) {
        loss_sum += s.recent_loss;
        ++loss_workers;
      }
      s.staleness.assign(w.staleness().begin(),
                         w.staleness().begin() + buckets);
      if (status.staleness.size() < s.staleness.size()) {
        status.staleness.resize(s.staleness.size());
      }
      for (size_t i = 0; i < s.staleness.size(); ++i) {
        status.staleness[i] += s.staleness[i];
      }
    }
    status.members.push_back(s);
  }
  // Each server's requests in flight, from the live workers' heartbeats.
  std::map<int32_t, uint64_t> in_flight;
  for (const auto& m : c.members()) {
    // Workers in the job: one that left or finished has nothing in flight
    // (its last heartbeat may say otherwise until it is forgotten).
    if (m.role() == wire::ROLE_SERVER || !m.alive() ||
        (m.state() != "active" && m.state() != "joining" &&
         m.state() != "draining")) {
      continue;
    }
    for (const wire::InFlight& f : m.metrics().in_flight()) {
      in_flight[f.server()] += f.requests();
    }
  }
  for (MemberStatus& s : status.members) {
    if (s.role != "server") continue;
    auto it = in_flight.find(s.id);
    if (it != in_flight.end()) s.in_flight_requests = it->second;
  }
  if (status.noise_scale_clocks > 0 && gradient_sq > 0) {
    status.noise_scale = noise_trace / gradient_sq;
  }
  if (loss_workers > 0) status.loss = loss_sum / loss_workers;
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

Status ReportMemberExit(const std::string& address,
                        const MemberProcess& process, int64_t timeout_ms,
                        const Security& security) {
  if (process.role != "server" && process.role != "worker") {
    return InvalidArgumentError(
        "a member's exit names its role, server or worker, not '" +
        process.role + "'");
  }
  if (process.id < 0 || (process.pid <= 0 && process.incarnation == 0)) {
    return InvalidArgumentError(
        "a member's exit names its id and its process: a pid or an "
        "incarnation (ductile status)");
  }
  wire::Header request;
  request.set_type(wire::MEMBER_EXIT);
  request.set_seq(1);
  request.set_role(process.role == "server" ? wire::ROLE_SERVER
                                            : wire::ROLE_WORKER);
  request.set_member_id(process.id);
  request.set_pid(process.pid);
  request.set_incarnation(process.incarnation);
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

}  // namespace ductile
