// The built-in training apps, data-parallel over the job's workers.
//
//   fmnist-logreg  multinomial logistic regression on Fashion-MNIST
//   fmnist-mlp     a ReLU MLP (default 784-256-128-10) on Fashion-MNIST
//   mf             matrix factorization by SGD on synthetic low-rank data,
//                  pushing and pulling only the rows a batch touches
//
// Each worker takes its share of every epoch's shuffled data; per step it
// pulls the parameters, computes the gradient (on the CPU with OpenBLAS or
// on a GPU with cuBLAS, see --device) and pushes it; the servers apply the
// update rule under the table's consistency model. Worker 0 prints progress
// (epoch, clock, loss, samples/s, ETA), the test metric after each epoch,
// and writes a CSV log.
//
// Fault tolerance (docs/fault_tolerance.md): each step records the worker's
// data position and counters as its resume state; when the job rolls back
// to a checkpoint after a server failure, the worker restores them from the
// checkpoint's clock and goes on. Each epoch is split among the workers
// alive when it starts, and the lowest live worker reports progress.
#ifndef DUCTILE_TRAIN_TRAINER_H_
#define DUCTILE_TRAIN_TRAINER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ductile/client.h"
#include "ductile/policy.h"
#include "ductile/status.h"
#include "models/fmnist_data.h"
#include "models/mf_model.h"

namespace ductile::train {

struct TrainerOptions {
  std::string app = "fmnist-logreg";  // fmnist-logreg, fmnist-mlp or mf
  std::string device = "auto";        // cpu, cuda or auto (compute backend)
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int epochs = 10;      // passes over the training set, >= 1
  int batch_size = 64;  // samples per worker per step, >= 1
  // Server-side update rule: kSgd, kMomentum, kAdaGrad or kAdam.
  UpdateRule optimizer = UpdateRule::kAdam;
  float learning_rate = 0.001f;  // step size of `optimizer`
  // > 0: `learning_rate` is meant for batches of this many samples per
  // worker, and the tables get it scaled to `batch_size`
  // (LearningRateForBatch); 0: used as given.
  int lr_for_batch = 0;
  // Its schedule (TableOptions::lr_schedule), in epochs: a linear warm-up
  // over `lr_warmup_epochs`, then `lr_decay`: "none", "step" (times
  // `lr_gamma` every `lr_step_epochs`) or "cosine" (down to
  // `lr_min_factor` of the rate at the last epoch). Made into clocks with
  // the clocks per epoch of the workers the job has when its tables are
  // made; a worker joining later takes the tables' schedule as it is.
  double lr_warmup_epochs = 0;
  std::string lr_decay = "none";
  double lr_step_epochs = 0;
  float lr_gamma = 0.1f;
  float lr_min_factor = 0.0f;
  // How the rate follows the global batch of BSP (mean) clocks when the
  // workers change (TableOptions::batch_scaling): "none", "linear" or
  // "sqrt", against the workers the job has when its tables are made, or
  // "adascale" (the gain from the gradient noise scale, BatchScaling),
  // ramped over `lr_scaling_ramp` clocks.
  std::string lr_scaling = "none";
  int64_t lr_scaling_ramp = 50;
  float l2 = 0.0f;          // L2 weight decay
  Consistency consistency;  // of the parameter tables
  uint64_t seed = 1;        // data shuffling and initialisation
  int log_every = 100;      // clocks between progress lines (worker 0)
  // Stop after this many samples per worker (0 = no limit): short runs.
  int64_t max_samples = 0;
  // fmnist apps: fail when the final test accuracy is below this.
  double min_accuracy = 0.0;
  // mf: fail when the final test RMSE is above this (0: no check).
  double max_rmse = 0.0;
  // Pull the next step's parameters while this step computes (the
  // gradient then comes from parameters one step older). Used only where
  // the consistency model allows such a read: async, and SSP with s >= 1.
  bool prefetch = false;
  // fmnist-mlp: push each layer's gradient as soon as the backward pass has
  // it (last layer first), while the layers before it are computed, rather
  // than the whole gradient after the pass.
  bool overlap_push = false;
  // fmnist apps: start the forward pass on each layer as soon as its
  // parameters have arrived (they are pulled in the order the pass reads
  // them), rather than once the whole model has. The MLP reads layer by
  // layer; logistic regression has one layer, so it waits for all.
  bool layered_pulls = false;
  // Worker 0 writes one line per progress report and per epoch here
  // ("" = none).
  std::string csv_log;
  // fmnist-mlp: layer sizes, input first.
  std::vector<size_t> layers = {784, 256, 128, 10};
  // Worker policies (ductile/policy.h), their hooks run between this
  // worker's steps, in this order.
  std::vector<std::shared_ptr<WorkerPolicy>> worker_policies;
  // mf: the synthetic matrix.
  size_t mf_rows = 2000;
  size_t mf_cols = 2000;
  size_t mf_rank = 10;
  double mf_observed = 0.05;
  double mf_noise = 0.1;
  // mf: the factor tables' rows by id (admission and eviction).
  RowPolicy rows;
};

// The batch scaling of the tables `o` makes when the job has `world`
// workers.
BatchScaling BatchScalingOf(const TrainerOptions& o, int world);

// The schedule of `o` in clocks, for workers that make `clocks_per_epoch`
// clocks per epoch each.
LearningRateSchedule ScheduleInClocks(const TrainerOptions& o,
                                      double clocks_per_epoch);

// Checks `options` (the app, the device, the learning-rate schedule, the
// model's sizes); an InvalidArgument error names the flag. Needs no data
// and no cluster, so a launcher can check a job before it starts anything.
[[nodiscard]] Status Validate(const TrainerOptions& options);

// What a worker needs before it joins the job: its app's data (the
// Fashion-MNIST sets, or mf's synthetic matrix). Loaded before the worker
// registers, so that it is a member of the job (a joiner, a replacement
// the old worker is drained for) only once it can train: loading takes
// seconds on a busy machine.
struct WorkerData {
  std::optional<models::Dataset> train;
  std::optional<models::Dataset> test;
  std::optional<models::LowRankData> ratings;
};

// Checks `options` (Validate) and loads its app's data; a missing or bad
// data file is an error that names it.
[[nodiscard]] Result<WorkerData> LoadWorkerData(const TrainerOptions& options);

// Runs the app as one worker of the job (Validate(options) first) on
// `data` (LoadWorkerData's; loaded here when empty); returns when training
// is done.
Status RunTrainingWorker(Client& client, const TrainerOptions& options,
                         WorkerData data = {});

// The learning rate the tables get: `learning_rate` as given, or, with
// `lr_for_batch`, scaled from batches of lr_for_batch samples to batches
// of batch_size: by the ratio for SGD and momentum (the linear rule), by
// its square root for Adam and AdaGrad (whose steps do not grow with the
// gradient's size).
float LearningRateForBatch(const TrainerOptions& options);

// The chunk size (floats per key) of a parameter block of `num_floats` on
// the servers: about 64 chunks per block, 256 to 8192 floats each, so that
// even a small model (logistic regression's 7,850 floats) spreads over the
// servers by its keys' slots. It depends on the block alone, not on the
// servers of the moment: every worker, joiners included, must chunk a
// tensor the same way.
uint32_t TensorChunkFloats(uint64_t num_floats);

}  // namespace ductile::train

#endif  // DUCTILE_TRAIN_TRAINER_H_
