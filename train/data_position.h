// DataPosition: where one worker of the training apps is in the data, step
// after step, across epochs and rollbacks.
//
// The batches come from the job's shared data plan (Client::NextBatch).
// Batch b of epoch e is the b-th slice of `batch_size` samples of e's
// shuffle, PartitionIndices(num_samples, 0, 1, seed, e)
// (models/fmnist_data.h), so every sample of an epoch is trained on once
// across the workers, however they join, leave or die; the plan rolls back
// with the model. A step trains as many of the plan's batches as the plan
// last asked for (Batch::batches_per_step, PolicyActions::
// SetBatchesPerStep), or this worker's own count where that is more
// (SetLocalPerStep), as one batch; batches taken beyond a step's (the
// count went down) wait for the next. The worker's own counters are
// recorded with every clock for checkpoints (Record) and restored after a
// rollback (Restore).
//
// Example (one worker's loop, errors and rollbacks left out):
//   DataPosition data(client, num_samples, seed, batch_size, epochs);
//   std::vector<size_t> batch;
//   int epoch = 0;
//   while (!data.done()) {
//     data.Record();
//     if (!*data.Current(&batch, &epoch)) { client.Clock(); continue; }
//     ... pull, compute on batch, push ...
//     ++data.steps;
//     data.samples += batch.size();
//     data.Trained(/*stop=*/false);
//     client.Clock();
//   }
//
// Thread safety: not thread-safe; one worker's training thread uses it.
#ifndef DUCTILE_TRAIN_DATA_POSITION_H_
#define DUCTILE_TRAIN_DATA_POSITION_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "ductile/client.h"
#include "ductile/status.h"

namespace ductile::train {

class DataPosition {
 public:
  // `client` must outlive this; `batch_size` >= 1, `epochs` >= 1.
  DataPosition(Client& client, uint64_t num_samples, uint64_t seed,
               int batch_size, int epochs)
      : client_(client),
        num_samples_(num_samples),
        seed_(seed),
        batch_size_(batch_size),
        epochs_(epochs),
        batches_per_epoch_(std::max<int64_t>(
            1, (num_samples + batch_size - 1) / batch_size)) {}

  // The samples to train on now (the step's batches, taken from the plan
  // if none are held), and the epoch of its first batch: false when there
  // is none now (kWait: the last batches are in others' hands) or ever
  // again (done() then says so).
  Result<bool> Current(std::vector<size_t>* batch, int* epoch);
  // The plan's batches in the step Current() gave.
  int32_t batches_in_step() const {
    return std::max<int32_t>(1, static_cast<int32_t>(step_.size()));
  }
  // The batches a step takes: the plan's, or this worker's own count (a
  // worker policy's, 1 - 64) where that is more.
  int32_t per_step() const { return std::max(local_per_step_, per_step_); }
  // 0: the plan's again.
  void SetLocalPerStep(int32_t batches) { local_per_step_ = batches; }

  // The step's gradient is pushed: reports each of its batches as trained
  // at this clock (the caller clocks past it next), taking as many new
  // ones, unless `stop`.
  Status Trained(bool stop);

  // Every batch of every epoch is done (or this worker stopped taking).
  bool done() const { return done_; }
  // Epochs done in full, job-wide, as the plan last said.
  int64_t epochs_done() const { return epochs_done_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

  // After a rollback: back to the counters recorded at the checkpoint's
  // clock (zero when there was none); the plan went back on its own, and
  // the batch held before is nobody's any more.
  Status Restore(const std::string& saved);

  // Records this worker's counters for a checkpoint at this clock, as
  // "samples=S steps=N" (what Restore reads back).
  void Record();

  // Samples and steps this worker has trained on (rolled back with it).
  int64_t samples = 0;
  uint64_t steps = 0;
  // The plan's batches this worker has trained (for progress only: not
  // rolled back).
  uint64_t batches = 0;
  // This worker left the job (it was drained): no more data for it.
  bool left = false;

 private:
  // A batch held, or else the plan's next: nullopt when the plan has none
  // (done_ says whether ever again).
  Result<std::optional<Client::Batch>> Take();
  // What an answer of the plan says of the job.
  void Note(const Client::Batch& b);
  // Appends the samples of batch `index` of `epoch`.
  void Slice(int64_t epoch, int64_t index, std::vector<size_t>* batch);

  Client& client_;
  const uint64_t num_samples_;
  const uint64_t seed_;
  const size_t batch_size_;
  const int64_t epochs_;
  const int64_t batches_per_epoch_;
  std::vector<Client::Batch> step_;  // the step's batches, in hand
  std::deque<Client::Batch> held_;   // taken for later steps
  int32_t per_step_ = 1;             // the plan's batches per step
  int32_t local_per_step_ = 0;       // this worker's own (0: none)
  bool done_ = false;
  int64_t epochs_done_ = 0;
  std::vector<size_t> shuffle_;  // of epoch shuffle_epoch_
  int64_t shuffle_epoch_ = -1;
};

}  // namespace ductile::train

#endif  // DUCTILE_TRAIN_DATA_POSITION_H_
