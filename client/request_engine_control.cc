// RequestEngine's side towards the coordinator: control requests and
// notices, the coordinator's messages (routing, consistency changes,
// rollbacks, checkpoints, live workers, drains), heartbeats and routing
// requests. Sending data requests is in request_engine.cc, their replies
// in request_engine_replies.cc.
#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "client/request_engine.h"
#include "glog/logging.h"
#include "proto/codec.h"

namespace ductile {

void RequestEngine::Dispatch(const std::shared_ptr<ControlOperation>& op) {
  if (shared_.recovery->shut_down()) return op->Release(ShutDownError());
  const uint64_t seq = next_seq_++;
  op->request.set_seq(seq);
  OutMessage out;
  out.AddString(op->request.SerializeAsString());
  Status s = coordinator_->Send(std::move(out));
  if (!s.ok()) return op->Release(s);
  if (op->resend) op->resend_at = env_->Now() + kControlResendAfter;
  controls_[seq] = op;
}

void RequestEngine::Dispatch(const std::shared_ptr<NoticeOperation>& op) {
  OutMessage out;
  out.AddString(op->message.SerializeAsString());
  op->Release(coordinator_->Send(std::move(out)));
}

void RequestEngine::HandleControlMessage(InMessage& message) {
  wire::Header header;
  if (message.empty() || !ParseHeader(message.frame(0), &header).ok()) {
    LOG(WARNING) << "client: unreadable message from the coordinator, dropped";
    return;
  }
  if (header.has_routing()) InstallRouting(header.routing());
  switch (header.type()) {
    case wire::CONSISTENCY_PREPARE:
    case wire::CONSISTENCY_COMMIT:
      return HandleConsistencyChange(header);
    case wire::RESUME:
      return HandleResume(header);
    case wire::CHECKPOINT_COMMIT:
      return HandleCheckpointCommit(header);
    case wire::WORKERS_UPDATE:
      return shared_.recovery->SetLiveWorkers(
          {header.worker_ids().begin(), header.worker_ids().end()});
    case wire::DRAIN:
      LOG(INFO) << "worker " << shared_.worker_id->load()
                << ": the coordinator asks this worker to leave";
      return shared_.recovery->RequestLeave();
    case wire::SHUTDOWN_NOTICE:
      return HandleShutdownNotice();
    case wire::CONTROL_REPLY:
      break;
    default:
      return;
  }
  auto it = controls_.find(header.seq());
  if (it == controls_.end()) return;
  std::shared_ptr<ControlOperation> op = std::move(it->second);
  controls_.erase(it);
  Status s = StatusFromWire(header);
  if (s.ok() && op->on_reply) s = op->on_reply(header);
  op->reply = std::move(header);
  op->Release(s);
}

void RequestEngine::HandleShutdownNotice() {
  if (shared_.recovery->shut_down()) return;
  // Quiet: it comes at every job's end too.
  VLOG(1) << "worker " << shared_.worker_id->load()
          << ": the coordinator says the job is shutting down";
  shared_.recovery->MarkShutDown();
  // The servers stop too: nothing in flight will be answered, and a call
  // from now on fails at once (Dispatch) rather than at its deadline.
  const Status status = ShutDownError();
  for (auto& op : deferred_clocks_) op->Release(status);
  deferred_clocks_.clear();
  FailInFlight(status);
}

void RequestEngine::HandleConsistencyChange(const wire::Header& header) {
  const TableId table = header.table_id();
  if (header.type() == wire::CONSISTENCY_PREPARE) {
    shared_.tables->SuspendCache(table);
  } else {
    shared_.tables->ResumeCache(table, header.clock(), header.consistency());
  }
  shared_.cache->DropTable(table);
  if (header.type() != wire::CONSISTENCY_PREPARE) return;
  // The boundary must lie beyond this worker's clock too.
  wire::Header ack;
  ack.set_type(wire::CONSISTENCY_ACK);
  ack.set_role(wire::ROLE_WORKER);
  ack.set_member_id(shared_.worker_id->load());
  ack.set_change_id(header.change_id());
  ack.set_clock(shared_.clock->load());
  SendToCoordinator(ack);
}

void RequestEngine::HandleResume(const wire::Header& header) {
  if (!shared_.recovery->IsNews(header)) return;  // old news
  if (shared_.worker_id->load() < 0) {
    // Not in the job yet: nothing of the old timeline is this worker's.
    // Its registration is answered after this (in order), in the new
    // generation; it must not fail (a coordinator restarted during the
    // rollback does not know the registration waits).
    VLOG(1) << "a worker not yet registered ignores the rollback to clock "
            << header.clock();
    return;
  }
  LOG(WARNING) << "worker " << shared_.worker_id->load()
               << ": the job rolls back to clock " << header.clock()
               << " (generation " << header.generation() << ")";
  // Whatever was in flight belongs to the abandoned timeline: it fails
  // before the rollback is announced, so nothing the caller sends after
  // taking it is failed with it.
  const Status aborted =
      AbortedError("the job rolled back to the checkpoint at clock " +
                   std::to_string(header.clock()) +
                   "; call AwaitRecovery() and resume from there");
  std::deque<AnyOperation> batch;
  {
    MutexLock lock(&queue_mu_);
    batch.swap(queue_);
  }
  for (AnyOperation& op : batch) {
    std::visit([&](const auto& o) { o->Release(aborted); }, op);
  }
  FailInFlight(aborted);
  shared_.cache->Clear();
  shared_.recovery->Announce(header);
}

void RequestEngine::HandleCheckpointCommit(const wire::Header& header) {
  const int64_t clock = header.clock();
  if (!shared_.recovery->OnCheckpointCommit(clock, header.generation(),
                                            shared_.clock->load())) {
    return;
  }
  wire::Header done;
  done.set_type(wire::CHECKPOINT_DONE);
  done.set_role(wire::ROLE_WORKER);
  done.set_member_id(shared_.worker_id->load());
  done.set_clock(clock);
  done.set_generation(shared_.recovery->generation());
  done.set_resume_state(shared_.recovery->StateAt(clock));
  if (shared_.complete_report) shared_.complete_report(clock, &done);
  SendToCoordinator(done);
}

void RequestEngine::SendHeartbeat() {
  const int32_t id = shared_.worker_id->load();
  if (id < 0) return;
  wire::Header hb;
  hb.set_type(wire::HEARTBEAT);
  hb.set_member_id(id);
  hb.set_generation(shared_.recovery->generation());
  shared_.stats->Fill(hb.mutable_metrics());
  hb.mutable_metrics()->set_clock(shared_.clock->load());
  // What each server has of this worker's requests now: in its socket,
  // in its hands, parked on a bound (or its reply on the way back).
  std::map<int32_t, uint32_t> in_flight;
  for (const auto& [seq, part] : parts_) {
    if (part.sent && !part.awaiting_reroute()) ++in_flight[part.server];
  }
  for (const auto& [server, requests] : in_flight) {
    wire::InFlight* f = hb.mutable_metrics()->add_in_flight();
    f->set_server(server);
    f->set_requests(requests);
  }
  SendToCoordinator(hb);  // best effort
  if (last_clock_ && !in_flight.empty() &&
      last_clock_->generation == shared_.recovery->generation()) {
    std::vector<int32_t> waited_at;
    for (const auto& [server, requests] : in_flight)
      waited_at.push_back(server);
    SendLastClock(waited_at);
  }
}

void RequestEngine::SendToCoordinator(const wire::Header& header) {
  OutMessage out;
  out.AddString(header.SerializeAsString());
  coordinator_->Send(std::move(out)).IgnoreError();
}

void RequestEngine::RequestRouting() {
  const TimePoint now = env_->Now();
  if (now - routing_requested_at_ < kRetryAfter) return;
  routing_requested_at_ = now;
  wire::Header get;
  get.set_type(wire::GET_ROUTING);
  SendToCoordinator(get);
}

void RequestEngine::InstallRouting(const wire::RoutingTable& routing) {
  if (!routing_->Install(routing)) return;
  RebuildSockets();
  const std::vector<int32_t>& anew = routing_->connected_anew();
  auto is_new = [&anew](int32_t server) {
    return std::find(anew.begin(), anew.end(), server) != anew.end();
  };
  // Parts sent to a server that has left the routing, or to the process
  // its id named before (listed at another address now), will not be
  // answered (their connection is closed): they go to the new owners of
  // their keys.
  std::vector<uint64_t> orphans;
  for (const auto& [seq, part] : parts_) {
    if (!part.awaiting_reroute() &&
        (!routing_->Lists(part.server) || is_new(part.server))) {
      orphans.push_back(seq);
    }
  }
  for (uint64_t seq : orphans) {
    Orphan(parts_.at(seq), std::chrono::milliseconds(0));
  }
  // Parts waiting to be re-routed go now, under the new table, oldest
  // first (Step's timers).
  if (waiting_parts_ > 0) {
    const TimePoint now = env_->Now();
    for (auto& [seq, part] : parts_) {
      if (part.awaiting_reroute()) part.retry_at = now;
    }
    reroute_now_ = true;
  }
  if (!last_clock_) return;
  // A server that joined the job (or a new process under an id) learns
  // this worker's clock before any request of it (same socket), or it
  // would wait for it forever.
  wire::Header header;
  header.set_type(wire::CLOCK);
  header.set_worker_id(shared_.worker_id->load());
  header.set_clock(last_clock_->clock);
  header.set_generation(last_clock_->generation);
  const std::string bytes = header.SerializeAsString();
  for (int32_t id : anew) {
    if (Socket* socket = routing_->SocketOf(id)) {
      OutMessage out;
      out.AddString(bytes);
      socket->Send(std::move(out)).IgnoreError();
    }
  }
}

}  // namespace ductile
