// The job's shared data plan: which batches of which epochs are done, and
// which worker holds which, so that every sample of an epoch is trained on
// exactly once however workers join, leave or die (docs/elasticity.md).
//
// An epoch is `batches_per_epoch` batches (the training app maps batch b
// of epoch e to samples of e's shuffle). A worker claims one batch at a
// time; the next it gets is the lowest free batch of the lowest epoch that
// has one, and a new epoch opens when every batch of the open ones is done
// or held. A worker may hold a few ahead (Take). When a worker leaves or
// dies, what it held is free again and goes to whoever asks next, within
// the same epoch. A worker reports a batch done with the clock its
// gradient was pushed at, at the latest with its checkpoint report at the
// next checkpoint's clock: a checkpoint at clock C then records exactly
// the batches pushed before C (At(C)), and a rollback to C restores them
// (Restore).
//
// Example (the coordinator's side):
//   DataPlan plan;
//   plan.Configure(938, 10);                      // from the first claim
//   DataPlan::Grant g = plan.Next(/*worker=*/0);  // epoch 0, batch 0
//   ... worker 0 pushes batch 0 at clock 5 ...
//   plan.Done(0, g.epoch, g.batch, /*clock=*/5);
//   plan.Take(1, 4, &kind);  // worker 1 holds 4 batches ahead
//   plan.Release(1);         // worker 1 left: its batches are free again
//
// Not thread-safe: owned by the coordinator's loop.
#ifndef DUCTILE_COORDINATOR_DATA_PLAN_H_
#define DUCTILE_COORDINATOR_DATA_PLAN_H_

#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "ductile/status.h"
#include "ductile/table.h"
#include "proto/ductile.pb.h"

namespace ductile {

class DataPlan {
 public:
  struct Grant {
    wire::DataGrant::Kind kind = wire::DataGrant::END;
    int64_t epoch = -1;
    int64_t batch = -1;
  };

  // The largest shape a plan takes: each open epoch costs 8 bytes per
  // batch on the coordinator, so a claim cannot make it allocate more than
  // 128 MiB per open epoch.
  static constexpr int64_t kMaxBatchesPerEpoch = int64_t{1} << 24;
  static constexpr int64_t kMaxEpochs = int64_t{1} << 20;

  // Sets the plan's shape, on the first claim; a later claim must give
  // the same. InvalidArgument if a count is below 1 or above its maximum,
  // or the shape differs from the plan's.
  Status Configure(int64_t batches_per_epoch, int64_t epochs);
  bool configured() const { return batches_per_epoch_ > 0; }

  // `worker` finished `batch` of `epoch`, pushed at `clock`. Ignored
  // unless `worker` holds that batch (a resend of a report already taken,
  // or one from before a rollback).
  void Done(int32_t worker, int64_t epoch, int64_t batch, int64_t clock);
  // Epochs done in full: 0, 1, ..., epochs_done() - 1.
  int64_t epochs_done() const;
  // Tops up what `worker` holds to `want` batches with the next free ones,
  // and returns every batch it holds, oldest first. When it holds none,
  // *kind says why: WAIT (none is free, others hold some of the last
  // epoch) or END (every batch of every epoch is done); GRANTED otherwise.
  std::vector<std::pair<int64_t, int64_t>> Take(int32_t worker, int want,
                                                wire::DataGrant::Kind* kind);
  // The oldest batch `worker` holds, or else the next free one, now held
  // by it (Take with want 1).
  Grant Next(int32_t worker);
  // Frees every batch `worker` holds (it left or died).
  void Release(int32_t worker);

  // The plan as it was at `clock`: the batches done at earlier clocks,
  // none held. What a checkpoint at `clock` records.
  wire::DataPlanState At(int64_t clock) const;
  // Back to a state At() returned (a rollback); an empty state (no
  // checkpoint) is the start, keeping the shape.
  void Restore(const wire::DataPlanState& state);
  // Everything, holders included (the coordinator's own state).
  wire::DataPlanState ToWire() const;
  // From ToWire()'s output; InvalidArgument if it is inconsistent.
  Status FromWire(const wire::DataPlanState& state);

  // Drops the per-batch clocks no checkpoint after `clock` needs: epochs
  // done in full before it.
  void Forget(int64_t clock);

  // How many batches each worker is to train in one step: told to workers
  // with every grant (they take that many for a step, and say so with
  // their pushes: Client::SetPushWeight). A rollback keeps it.
  // InvalidArgument outside 1 - kMaxBatchesPerStep.
  Status SetBatchesPerStep(int32_t batches);
  int32_t batches_per_step() const { return batches_per_step_; }
  // For status: the lowest epoch not done in full, and its batches done.
  int64_t current_epoch() const { return first_epoch_; }
  int64_t batches_done_in_current() const;
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  int64_t epochs() const { return epochs_; }
  size_t holders() const;

 private:
  static constexpr int64_t kNotDone = -1;
  static constexpr int64_t kHeld = -2;

  // The per-batch state of `epoch`, opened if need be; null if out of
  // range.
  std::vector<int64_t>* EpochState(int64_t epoch);
  // Pops the leading epochs done in full with every clock below
  // forget_below_.
  void Seal();

  int64_t batches_per_epoch_ = 0;
  int64_t epochs_ = 0;
  // Epochs first_epoch_, first_epoch_ + 1, ...: per batch its done clock,
  // kNotDone or kHeld.
  int64_t first_epoch_ = 0;
  std::deque<std::vector<int64_t>> open_;
  // worker -> the batches it holds, oldest first.
  std::map<int32_t, std::vector<std::pair<int64_t, int64_t>>> held_;
  int64_t forget_below_ = 0;
  int32_t batches_per_step_ = 1;
};

}  // namespace ductile

#endif  // DUCTILE_COORDINATOR_DATA_PLAN_H_
