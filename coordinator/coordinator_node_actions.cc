// What the job's policies and administrators ask of a CoordinatorNode: a
// target size, the batches a step, a table's consistency model, a
// worker's replacement; and the data plan's claims of batches (the rest
// of the node is in coordinator_node.cc).
#include <string>
#include <vector>

#include "coordinator/coordinator_node.h"
#include "glog/logging.h"
#include "proto/codec.h"
#include "proto/table_config.h"

namespace ductile {
namespace {

// The most data-plan batches a worker holds at once.
// (A worker training 64 batches a step holds up to 131: BatchQueue::ahead.)
constexpr int32_t kMaxHeldBatches = 160;

}  // namespace

void CoordinatorNode::HandleResize(const std::string& identity,
                                   const wire::Header& h) {
  out_.Reply(identity, h.seq(),
             SetTargetSize(h.num_workers(), h.target_servers()));
}

Status CoordinatorNode::SetBatchesPerStep(int32_t batches) {
  if (finishing()) {
    return FailedPreconditionError("the job is ending: no new batch size");
  }
  const int32_t before = state_.data_plan.batches_per_step();
  DUCTILE_RETURN_IF_ERROR(state_.data_plan.SetBatchesPerStep(batches));
  if (before != batches) {
    LOG(INFO) << "coordinator: workers train " << batches
              << " batch(es) a step from their next grant (were " << before
              << ")";
  }
  return Status::Ok();
}

Status CoordinatorNode::SetTargetSize(int32_t workers, int32_t servers) {
  if (finishing()) {
    return FailedPreconditionError("the job is ending: no new size");
  }
  if (workers < 0 || servers < 0 || (workers == 0 && servers == 0)) {
    return InvalidArgumentError(
        "a resize needs --workers and/or --servers of at least 1 (got "
        "workers " +
        std::to_string(workers) + ", servers " + std::to_string(servers) + ")");
  }
  if (workers > 0 && options_.max_workers > 0 &&
      workers > options_.max_workers) {
    return InvalidArgumentError(
        "the job allows at most " + std::to_string(options_.max_workers) +
        " workers (--max_workers); asked for " + std::to_string(workers));
  }
  if (workers > 0) state_.target_workers = workers;
  if (servers > 0) state_.target_servers = servers;
  LOG(INFO) << "coordinator: target size " << state_.target_workers
            << " worker(s), " << state_.target_servers << " server(s)";
  return Status::Ok();
}

Status CoordinatorNode::ChangeConsistency(const std::string& table,
                                          const Consistency& consistency) {
  if (finishing() || state_.recovering) {
    return FailedPreconditionError(
        "the job is ending or rolling back: no consistency change now");
  }
  return tables_.ChangeConsistency(table, ToWire(consistency));
}

Status CoordinatorNode::RequestReplacement(int32_t id) {
  state_.ForgetReplacedWorkers();
  if (finishing()) {
    return FailedPreconditionError("the job is ending: no replacements");
  }
  auto it = state_.workers.find(id);
  if (it == state_.workers.end() || !it->second.live_worker() ||
      it->second.draining()) {
    return NotFoundError("worker " + std::to_string(id) +
                         " is not an active worker");
  }
  // The replacement joins before the old one leaves: one more at once.
  const int32_t bound = options_.max_workers;
  if (bound > 0 && !state_.replace_workers.contains(id) &&
      membership_.CountLiveWorkers() + 1 > bound) {
    return ResourceExhaustedError("replacing worker " + std::to_string(id) +
                                  " needs room for one more "
                                  "worker, and the job has its maximum of " +
                                  std::to_string(bound) + " (--max_workers)");
  }
  if (state_.replace_workers.insert(id).second) {
    LOG(INFO) << "coordinator: worker " << id
              << " is to be replaced (a policy asked)";
  }
  return Status::Ok();
}

void CoordinatorNode::HandleDataClaim(const std::string& identity,
                                      const wire::Header& h) {
  if (state_.recovering || h.generation() != state_.generation) {
    // A claim of the abandoned timeline: the worker takes the rollback,
    // and the plan is the checkpoint's.
    return out_.Reply(identity, h.seq(),
                      AbortedError("the job rolled back to a checkpoint: "
                                   "call AwaitRecovery()"));
  }
  auto worker = state_.workers.find(h.member_id());
  if (worker == state_.workers.end() || !worker->second.live_worker()) {
    return out_.Reply(
        identity, h.seq(),
        FailedPreconditionError("worker " + std::to_string(h.member_id()) +
                                " is not in the job: it cannot take data"));
  }
  const wire::DataClaim& claim = h.data_claim();
  DataPlan& plan = state_.data_plan;
  if (Status s = plan.Configure(claim.batches_per_epoch(), claim.epochs());
      !s.ok()) {
    return out_.Reply(identity, h.seq(), s);
  }
  wire::Header reply;
  reply.set_type(wire::CONTROL_REPLY);
  reply.set_seq(h.seq());
  wire::DataGrant* grant = reply.mutable_data_grant();
  for (const wire::DataBatch& b : claim.done()) {
    plan.Done(h.member_id(), b.epoch(), b.batch(), b.clock());
  }
  grant->set_epochs_done(plan.epochs_done());
  grant->set_batches_per_step(plan.batches_per_step());
  if (claim.want() <= 0) {
    plan.Release(h.member_id());
    grant->set_kind(wire::DataGrant::END);
    return out_.Send(identity, reply);
  }
  wire::DataGrant::Kind kind;
  for (const auto& [epoch, batch] : plan.Take(
           h.member_id(), std::min(claim.want(), kMaxHeldBatches), &kind)) {
    wire::DataBatch* held = grant->add_held();
    held->set_epoch(epoch);
    held->set_batch(batch);
  }
  grant->set_kind(kind);
  out_.Send(identity, reply);
}

}  // namespace ductile
