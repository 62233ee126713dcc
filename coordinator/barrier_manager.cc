#include "coordinator/barrier_manager.h"

namespace ductile {

void BarrierManager::HandleBarrier(const std::string& identity,
                                   const wire::Header& h) {
  ClusterState& state = ctx_.state;
  auto it = state.workers.find(h.member_id());
  if (it == state.workers.end()) {
    return ctx_.out.Reply(
        identity, h.seq(),
        FailedPreconditionError("barrier from an unregistered worker"));
  }
  it->second.identity = identity;  // after a coordinator restart
  if (state.recovering || h.generation() < state.generation) {
    return ctx_.out.Reply(
        identity, h.seq(),
        AbortedError("the job is rolling back to a checkpoint"));
  }
  if (h.barrier_round() < state.barrier_round) {
    // Released already: a worker that gave up waiting, or whose answer a
    // coordinator restart lost, asks again.
    return ctx_.out.Reply(identity, h.seq(), Status::Ok());
  }
  if (h.barrier_round() > state.barrier_round) {
    return ctx_.out.Reply(
        identity, h.seq(),
        InvalidArgumentError("barrier round " +
                             std::to_string(h.barrier_round()) +
                             " is ahead of the cluster's " +
                             std::to_string(state.barrier_round)));
  }
  // A request asked again replaces the first.
  waiting_[h.member_id()] = {identity, h.seq()};
  MaybeRelease();
}

void BarrierManager::MaybeRelease() {
  if (waiting_.empty() || ctx_.state.WorkersNotYetRegistered() > 0) return;
  for (int32_t id : ctx_.state.LiveWorkers()) {
    if (waiting_.count(id) == 0) return;
  }
  for (const auto& [id, w] : waiting_) {
    ctx_.out.Reply(w.identity, w.seq, Status::Ok());
  }
  waiting_.clear();
  ++ctx_.state.barrier_round;
}

void BarrierManager::AbortAll(const Status& status) {
  for (const auto& [id, w] : waiting_) {
    ctx_.out.Reply(w.identity, w.seq, status);
  }
  waiting_.clear();
}

}  // namespace ductile
