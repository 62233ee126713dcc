// A worker's side of the shared data plan (Client::NextBatch): the batches
// it holds ahead, the one it trains on, and the reports of batches trained
// that no answered claim has carried yet.
//
// A claim (DATA_CLAIM) carries every unacknowledged report and asks to
// hold a number of batches; its answer lists every batch the worker holds,
// from which the queue is rebuilt (less the batch in hand and those
// trained since the claim left). Reports still unacknowledged when a
// checkpoint's clock C is reached go with the worker's checkpoint report
// at C (UnackedBefore), so the plan a checkpoint records has them all:
// claims need not be answered before the worker clocks on.
//
// Not thread-safe: ClientImpl guards it.
#ifndef DUCTILE_CLIENT_BATCH_QUEUE_H_
#define DUCTILE_CLIENT_BATCH_QUEUE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "ductile/client.h"
#include "proto/ductile.pb.h"

namespace ductile {

class BatchQueue {
 public:
  // Batches a worker holds ahead of the one it trains on.
  static constexpr int kAhead = 4;

  // The plan's shape, given with every claim.
  void SetShape(int64_t batches_per_epoch, int64_t epochs) {
    batches_per_epoch_ = batches_per_epoch;
    epochs_ = epochs;
  }
  bool has_shape() const { return batches_per_epoch_ > 0; }

  // The batch in hand was trained, its gradient pushed at `clock`.
  void Trained(const Client::Batch& batch, int64_t clock);
  // Fills `claim` (shape, every unacknowledged report) to hold `want`
  // batches in all (0: none, give back what is held). Returns the number
  // of reports it carries, for OnGrant.
  size_t FillClaim(int want, wire::DataClaim* claim) const;
  // The answer to a claim that carried `reports` reports.
  void OnGrant(const wire::DataGrant& grant, size_t reports);
  // The next batch held, now in hand; nullopt if none is queued.
  std::optional<Client::Batch> Pop();
  size_t queued() const { return queue_.size(); }
  // Handed out, not reported trained yet.
  size_t in_hand() const { return in_hand_.size(); }
  bool has_unacked() const { return !unacked_.empty(); }
  // Reports not acknowledged yet of batches pushed before `clock`.
  std::vector<wire::DataBatch> UnackedBefore(int64_t clock) const;
  // What the last answer said when nothing was granted: kWait or kEnd.
  Client::Batch::Kind idle_kind() const { return idle_kind_; }
  int64_t epochs_done() const { return epochs_done_; }
  // The plan's batches per step, as of the last answer.
  int32_t batches_per_step() const { return batches_per_step_; }
  // The batches the caller says it trains in a step (its push weight): a
  // worker's own setting may take more than the plan's.
  void SetStepHint(int32_t batches) {
    step_hint_ = std::clamp(batches, 1, kMaxBatchesPerStep);
  }
  // Batches to hold ahead: kAhead, and two more for each batch a step
  // takes beyond the first, by the plan or the caller (at most 130).
  int ahead() const {
    return kAhead + 2 * (std::max(batches_per_step_, step_hint_) - 1);
  }
  // A rollback: nothing held or trained is the worker's any more.
  void Clear();

 private:
  int64_t batches_per_epoch_ = 0;
  int64_t epochs_ = 0;
  std::deque<Client::Batch> queue_;
  // Handed out and not reported trained yet (a worker may train several
  // in one step).
  std::vector<Client::Batch> in_hand_;
  std::vector<wire::DataBatch> unacked_;  // oldest first
  Client::Batch::Kind idle_kind_ = Client::Batch::kEnd;
  int64_t epochs_done_ = 0;
  int32_t batches_per_step_ = 1;
  int32_t step_hint_ = 1;
};

}  // namespace ductile

#endif  // DUCTILE_CLIENT_BATCH_QUEUE_H_
