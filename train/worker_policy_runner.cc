#include "train/worker_policy_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>

namespace ductile::train {

void WorkerPolicyRunner::BeforeStep(int64_t epoch) {
  if (policies_.empty()) return;
  WorkerPolicyEvent e = Event(epoch);
  const std::vector<int32_t> live = client_.live_workers();
  if (live != live_) {
    live_ = live;
    for (auto& p : policies_) p->OnMembershipChange(live, e, *this);
  }
  for (auto& p : policies_) p->BeforeStep(e, *this);
}

void WorkerPolicyRunner::AfterStep(int64_t epoch, int32_t batches, double loss,
                                   int64_t epochs_done) {
  if (policies_.empty()) return;
  WorkerPolicyEvent e = Event(epoch);
  e.batches_per_step = batches;
  e.loss = loss;
  for (auto& p : policies_) p->AfterStep(e, *this);
  // A rollback took the plan back before an epoch's end: that end is
  // told again when the plan gets there.
  epochs_seen_ = std::min(epochs_seen_, epochs_done);
  if (epochs_done > epochs_seen_) {
    e.loss = std::numeric_limits<double>::quiet_NaN();
    e.epoch = epochs_done;
    for (auto& p : policies_) p->AfterEpoch(epochs_seen_, e, *this);
    epochs_seen_ = epochs_done;
  }
}

Status WorkerPolicyRunner::SetBatchesPerStep(int32_t batches) {
  if (batches < 0 || batches > kMaxBatchesPerStep) {
    return InvalidArgumentError("a worker's batches a step must be 1 - " +
                                std::to_string(kMaxBatchesPerStep) +
                                " (0: the job's), not " +
                                std::to_string(batches));
  }
  data_.SetLocalPerStep(batches);
  std::printf(
      "worker %d: %d batches a step (a worker policy asked for %d; "
      "0: the job's)\n",
      client_.worker_id(), data_.per_step(), batches);
  std::fflush(stdout);
  return Status::Ok();
}

Status WorkerPolicyRunner::SetConsistency(const std::string& table,
                                          const Consistency& consistency) {
  DUCTILE_ASSIGN_OR_RETURN(TableInfo info, client_.GetTable(table));
  return client_.SetConsistency(info.id, consistency).status();
}

Status WorkerPolicyRunner::Leave() {
  leave_ = true;
  return Status::Ok();
}

WorkerPolicyEvent WorkerPolicyRunner::Event(int64_t epoch) const {
  WorkerPolicyEvent e;
  e.worker_id = client_.worker_id();
  e.clock = client_.clock();
  e.epoch = epoch;
  e.steps = data_.steps;
  e.batches_per_step = data_.per_step();
  e.now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now().time_since_epoch())
                 .count();
  e.stats = client_.stats();
  return e;
}

}  // namespace ductile::train
