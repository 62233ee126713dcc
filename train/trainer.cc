#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "proto/table_config.h"
#include "train/step_loop.h"

namespace ductile::train {

LearningRateSchedule ScheduleInClocks(const TrainerOptions& o,
                                      double clocks_per_epoch) {
  auto clocks = [&](double epochs) {
    return static_cast<int64_t>(std::llround(epochs * clocks_per_epoch));
  };
  LearningRateSchedule s;
  s.warmup_clocks = clocks(o.lr_warmup_epochs);
  s.gamma = o.lr_gamma;
  s.min_factor = o.lr_min_factor;
  if (o.lr_decay == "step") {
    s.decay = LearningRateSchedule::Decay::kStep;
    s.step_clocks = std::max<int64_t>(1, clocks(o.lr_step_epochs));
  } else if (o.lr_decay == "cosine") {
    s.decay = LearningRateSchedule::Decay::kCosine;
    s.total_clocks = std::max(s.warmup_clocks + 1, clocks(o.epochs));
  }
  return s;
}

namespace {

// The row policy's flags (RowPolicy's ranges): only mf has rows by id.
Status ValidateRows(const TrainerOptions& o) {
  const RowPolicy& r = o.rows;
  const bool any = r.admit_after_pushes != 0 || r.admission_counters != 0 ||
                   r.evict_idle_clocks != 0 || r.max_rows != 0 ||
                   r.eviction != RowPolicy::Eviction::kLeastRecent;
  if (any && o.app != "mf") {
    return InvalidArgumentError(
        "--admit_after_pushes, --admission_counters, --evict_idle_clocks, "
        "--max_rows and --eviction are for --app=mf, whose factor rows are "
        "stored by id; " +
        o.app + "'s parameters are dense tensors");
  }
  // The API's ranges, the field named as its flag.
  if (Status s = ValidateRowPolicy(r); !s.ok()) {
    std::string message = s.message();
    if (message.starts_with("rows.")) message.replace(0, 5, "--");
    return InvalidArgumentError(message);
  }
  if (r.eviction == RowPolicy::Eviction::kLeastUsed && r.max_rows == 0) {
    return InvalidArgumentError(
        "--eviction=least_used chooses the rows --max_rows removes: give "
        "--max_rows too");
  }
  return Status::Ok();
}

}  // namespace

BatchScaling BatchScalingOf(const TrainerOptions& o, int world) {
  BatchScaling b;
  if (o.lr_scaling == "none") return b;  // the same for every worker
  if (o.lr_scaling == "linear") b.rule = BatchScaling::Rule::kLinear;
  if (o.lr_scaling == "sqrt") b.rule = BatchScaling::Rule::kSqrt;
  if (o.lr_scaling == "adascale") b.rule = BatchScaling::Rule::kAdaScale;
  b.base_pushes = std::max(1, world);
  b.ramp_clocks = o.lr_scaling_ramp;
  return b;
}

Status Validate(const TrainerOptions& o) {
  if (o.app != "fmnist-logreg" && o.app != "fmnist-mlp" && o.app != "mf") {
    return InvalidArgumentError("unknown --app '" + o.app +
                                "' (apps: fmnist-logreg, fmnist-mlp, mf)");
  }
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda") {
    return InvalidArgumentError("unknown --device '" + o.device +
                                "' (cpu, cuda, auto)");
  }
  if (o.app == "fmnist-mlp" &&
      (o.layers.size() < 2 ||
       std::find(o.layers.begin(), o.layers.end(), 0) != o.layers.end())) {
    return InvalidArgumentError(
        "--layers must be two or more sizes of at least 1, e.g. "
        "784,256,128,10");
  }
  if (o.epochs < 1) return InvalidArgumentError("--epochs must be >= 1");
  if (o.batch_size < 1)
    return InvalidArgumentError("--batch_size must be >= 1");
  if (!(o.learning_rate > 0) || !std::isfinite(o.learning_rate)) {
    return InvalidArgumentError("--learning_rate must be a positive number");
  }
  if (o.log_every < 1) return InvalidArgumentError("--log_every must be >= 1");
  if (o.lr_for_batch < 0 || o.lr_for_batch > (1 << 20)) {
    return InvalidArgumentError("--lr_for_batch must be in [0, 1048576]");
  }
  if (const float rate = LearningRateForBatch(o);
      !(rate > 0) || !std::isfinite(rate)) {
    return InvalidArgumentError(
        "--learning_rate scaled by --lr_for_batch is not a positive number");
  }
  if (!(o.lr_warmup_epochs >= 0) || o.lr_warmup_epochs > o.epochs) {
    return InvalidArgumentError("--lr_warmup_epochs must be in [0, --epochs]");
  }
  if (o.lr_decay != "none" && o.lr_decay != "step" && o.lr_decay != "cosine") {
    return InvalidArgumentError("unknown --lr_decay '" + o.lr_decay +
                                "' (none, step, cosine)");
  }
  if (o.lr_decay == "step" &&
      !(o.lr_step_epochs > 0 && o.lr_step_epochs <= o.epochs)) {
    return InvalidArgumentError(
        "--lr_decay=step needs --lr_step_epochs in (0, --epochs]");
  }
  if (!(o.lr_gamma > 0 && o.lr_gamma <= 1)) {
    return InvalidArgumentError("--lr_gamma must be in (0, 1]");
  }
  if (!(o.lr_min_factor >= 0 && o.lr_min_factor <= 1)) {
    return InvalidArgumentError("--lr_min_factor must be in [0, 1]");
  }
  if (o.lr_scaling != "none" && o.lr_scaling != "linear" &&
      o.lr_scaling != "sqrt" && o.lr_scaling != "adascale") {
    return InvalidArgumentError("unknown --lr_scaling '" + o.lr_scaling +
                                "' (none, linear, sqrt, adascale)");
  }
  if (o.lr_scaling_ramp < 0 || o.lr_scaling_ramp > (int64_t{1} << 40)) {
    return InvalidArgumentError("--lr_scaling_ramp must be in [0, 2^40]");
  }
  if (o.lr_scaling != "none" && o.app == "mf") {
    return InvalidArgumentError(
        "--lr_scaling is for the dense apps (fmnist-logreg, fmnist-mlp): mf's "
        "keys are pushed by a different number of workers each clock");
  }
  if (o.lr_scaling != "none" && !(o.consistency.mode == ConsistencyMode::kBsp &&
                                  o.consistency.combine == BspCombine::kMean)) {
    return InvalidArgumentError(
        "--lr_scaling applies to BSP clocks combined by the mean: it needs "
        "--consistency=bsp --bsp_combine=mean");
  }
  if (o.lr_decay == "cosine" && !(o.lr_warmup_epochs < o.epochs)) {
    return InvalidArgumentError(
        "--lr_decay=cosine needs --lr_warmup_epochs below --epochs");
  }
  DUCTILE_RETURN_IF_ERROR(ValidateRows(o));
  if (o.app == "mf" && (o.mf_rows < 1 || o.mf_cols < 1 || o.mf_rank < 1 ||
                        !(o.mf_observed > 0 && o.mf_observed <= 1))) {
    return InvalidArgumentError(
        "mf needs --mf_rows, --mf_cols, --mf_rank >= 1 and --mf_observed in "
        "(0, 1]");
  }
  return Status::Ok();
}

Result<WorkerData> LoadWorkerData(const TrainerOptions& o) {
  DUCTILE_RETURN_IF_ERROR(Validate(o));
  WorkerData data;
  if (o.app == "fmnist-logreg" || o.app == "fmnist-mlp") {
    Result<models::Dataset> train =
        models::LoadFashionMnist(o.data_dir, /*train=*/true);
    DUCTILE_RETURN_IF_ERROR(train.status());
    Result<models::Dataset> test =
        models::LoadFashionMnist(o.data_dir, /*train=*/false);
    DUCTILE_RETURN_IF_ERROR(test.status());
    data.train = std::move(*train);
    data.test = std::move(*test);
  } else if (o.app == "mf") {
    // Every worker generates the same data from the same seed.
    data.ratings = models::MakeLowRankData(o.mf_rows, o.mf_cols, o.mf_rank,
                                           o.mf_observed, o.mf_noise, o.seed);
  }
  return data;
}

Status RunTrainingWorker(Client& client, const TrainerOptions& options,
                         WorkerData data) {
  if (!data.train && !data.ratings) {
    DUCTILE_ASSIGN_OR_RETURN(data, LoadWorkerData(options));  // validates
  } else {
    DUCTILE_RETURN_IF_ERROR(Validate(options));
  }
  const int rank = client.worker_id();
  if (rank < 0) {
    return FailedPreconditionError("this client is not registered as a worker");
  }
  // The workers the job started with; a worker that joined later counts
  // itself too (the data is split among the live workers each epoch).
  const int world = std::max(client.num_workers(), rank + 1);
  if (options.app == "fmnist-logreg" || options.app == "fmnist-mlp") {
    return RunClassifier(client, options, rank, world, data);
  }
  if (options.app == "mf") return RunMf(client, options, rank, world, data);
  return InvalidArgumentError("unknown --app '" + options.app +
                              "' (apps: fmnist-logreg, fmnist-mlp, mf)");
}

float LearningRateForBatch(const TrainerOptions& o) {
  if (o.lr_for_batch <= 0 || o.lr_for_batch == o.batch_size) {
    return o.learning_rate;
  }
  const double ratio =
      static_cast<double>(o.batch_size) / static_cast<double>(o.lr_for_batch);
  const bool adaptive =
      o.optimizer == UpdateRule::kAdam || o.optimizer == UpdateRule::kAdaGrad;
  return static_cast<float>(o.learning_rate *
                            (adaptive ? std::sqrt(ratio) : ratio));
}

uint32_t TensorChunkFloats(uint64_t num_floats) {
  constexpr uint64_t kChunksPerBlock = 64, kMin = 256, kMax = 8192;
  return static_cast<uint32_t>(std::clamp<uint64_t>(
      (num_floats + kChunksPerBlock - 1) / kChunksPerBlock, kMin, kMax));
}

}  // namespace ductile::train
