#include "coordinator/routing_manager.h"

#include "glog/logging.h"

namespace ductile {

bool RoutingManager::MaybeAssign() {
  ClusterState& state = ctx_.state;
  if (!state.routing.empty()) {
    // A server joining a running cluster gets the current table (and no
    // slots until resharding moves some to it).
    Publish();
    return false;
  }
  if (static_cast<int32_t>(state.servers.size()) < ctx_.options.num_servers) {
    return false;
  }
  state.routing =
      RoutingTable::Initial(ctx_.options.num_slots, state.LiveEndpoints());
  if (ctx_.options.replicas >= 2) {
    state.routing.AssignBackups(state.LiveServers());
  }
  LOG(INFO) << "coordinator: " << ctx_.options.num_slots
            << " slots assigned to " << state.servers.size()
            << " server(s), epoch " << state.routing.epoch()
            << (state.routing.HasBackups() ? ", each with a backup" : "");
  if (ctx_.options.replicas >= 2 && !state.routing.HasBackups()) {
    LOG(WARNING) << "coordinator: --replicas=" << ctx_.options.replicas
                 << " needs two servers or more: no slot has a backup, and "
                    "a server's death rolls the job back";
  }
  Publish();
  return true;
}

int32_t RoutingManager::TakeOver(const std::set<int32_t>& dead) {
  const int32_t promoted = ctx_.state.routing.Promote(dead);
  FillBackups();
  for (auto it = waits_.begin(); it != waits_.end();) {
    for (int32_t id : dead) it->round.Forget(id);
    if (it->round.complete()) {
      it->done(Status::Ok());
      it = waits_.erase(it);
    } else {
      ++it;
    }
  }
  Publish();
  return promoted;
}

int32_t RoutingManager::FillBackups() {
  ClusterState& state = ctx_.state;
  if (ctx_.options.replicas < 2 || state.routing.empty() || state.recovering ||
      ctx_.shutting_down) {
    return 0;
  }
  const int32_t filled = state.routing.FillBackups(state.BackupCandidates());
  if (filled > 0) {
    LOG(INFO) << "coordinator: " << filled
              << " slot(s) without a backup get one at epoch "
              << state.routing.epoch() << "; their owners send it a whole copy";
  }
  return filled;
}

bool RoutingManager::MaybeFillBackups() {
  if (FillBackups() == 0) return false;
  Publish();
  return true;
}

void RoutingManager::Publish() {
  ClusterState& state = ctx_.state;
  state.routing.SetServers(state.LiveEndpoints());
  wire::Header update;
  update.set_type(wire::ROUTING_UPDATE);
  state.routing.ToWire(update.mutable_routing());
  for (const auto& [id, m] : state.servers) ctx_.out.Send(m.identity, update);
  // Workers too: a server that joined hears of their clocks at once (a
  // worker tells every server new to its routing where it is).
  ctx_.SendTo(state.workers, state.LiveWorkers(), update);
}

void RoutingManager::HandleGet(const std::string& identity,
                               const wire::Header& h) {
  wire::Header reply;
  reply.set_type(wire::CONTROL_REPLY);
  reply.set_seq(h.seq());
  if (!ctx_.state.routing.empty()) {
    ctx_.state.routing.ToWire(reply.mutable_routing());
  }
  ctx_.out.Send(identity, reply);
}

void RoutingManager::HandleAck(const wire::Header& h) {
  uint64_t& acked = acked_[h.member_id()];
  acked = std::max<uint64_t>(acked, h.epoch());
  for (auto it = waits_.begin(); it != waits_.end();) {
    if (acked >= it->epoch) it->round.Ack(h.member_id());
    if (it->round.complete()) {
      it->done(Status::Ok());
      it = waits_.erase(it);
    } else {
      ++it;
    }
  }
}

void RoutingManager::WhenInstalled(std::function<void(const Status&)> done) {
  ClusterState& state = ctx_.state;
  std::set<int32_t> awaiting;
  for (int32_t id : state.LiveServers()) {
    if (acked_[id] < state.routing.epoch()) awaiting.insert(id);
  }
  if (awaiting.empty()) return done(Status::Ok());
  waits_.push_back({state.routing.epoch(),
                    AckRound(wire::Header(), std::move(awaiting), {}),
                    std::move(done)});
}

void RoutingManager::CancelWaits(const Status& status) {
  for (EpochWait& w : waits_) w.done(status);
  waits_.clear();
}

}  // namespace ductile
