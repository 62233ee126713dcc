#include "train/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "models/compute_backend.h"
#include "train/data_position.h"
#include "models/fmnist_data.h"
#include "models/logreg_model.h"
#include "models/mf_model.h"
#include "models/mlp_model.h"
#include "train/worker_policy_runner.h"

namespace ductile::train {

using models::ComputeBackend;
using models::Dataset;
using models::HostBuffer;
using models::LoadFashionMnist;
using models::LogRegModel;
using models::LowRankData;
using models::MakeComputeBackend;
using models::MakeLowRankData;
using models::MfModel;
using models::MlpModel;
using models::MlpOptions;
using models::Rating;
using models::SparseFactors;
namespace {

using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

const char* RuleName(UpdateRule rule) {
  switch (rule) {
    case UpdateRule::kSgd:
      return "sgd";
    case UpdateRule::kMomentum:
      return "momentum";
    case UpdateRule::kAdaGrad:
      return "adagrad";
    case UpdateRule::kAdam:
      return "adam";
    default:
      return "other";
  }
}


}  // namespace

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

namespace {

// The schedule of the tables `o` makes, for `world` workers that take
// `batches_per_epoch` batches an epoch between them; a table that exists
// already (made before this worker joined) keeps its own.
LearningRateSchedule TableSchedule(Client& client, const std::string& table,
                                   const TrainerOptions& o,
                                   int64_t batches_per_epoch, int world) {
  if (Result<TableInfo> existing = client.GetTable(table); existing.ok()) {
    return existing->options.lr_schedule;
  }
  return ScheduleInClocks(
      o, static_cast<double>(batches_per_epoch) / std::max(1, world));
}

// Makes table `t` with `make` (CreateTable or RegisterTensor). Workers that
// counted different numbers of workers compute different schedules: when
// the table exists (or is being made) with other options, this takes its
// schedule, once it can be read, and makes it again.
template <typename Make>
auto MakeTable(Client& client, TableOptions t, Make make) -> decltype(make(t)) {
  auto made = make(t);
  for (int attempt = 0; attempt < 100 && !made.ok() &&
                        made.status().code() == StatusCode::kAlreadyExists;
       ++attempt) {
    Result<TableInfo> existing = client.GetTable(t.name);
    if (existing.ok()) {
      t.lr_schedule = existing->options.lr_schedule;
      t.batch_scaling = existing->options.batch_scaling;
      return make(t);
    }
    // Still being made by another worker.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return made;
}

// Progress lines on stdout and the CSV log, from worker 0 only.
class Progress {
 public:
  // `total_batches`: this worker's share of the plan's batches (for the
  // ETA).
  Progress(bool lead, int epochs, uint64_t total_batches, int world)
      : lead_(lead),
        epochs_(epochs),
        total_batches_(total_batches),
        world_(world) {}

  Status OpenLog(const std::string& path) {
    if (!lead_ || path.empty()) return Status::Ok();
    csv_.open(path, std::ios::trunc);
    if (!csv_) {
      return FailedPreconditionError("cannot write the CSV log '" + path + "'");
    }
    // The step split, per step over the window: the wall time between
    // clocks, and of it the waits for pushes, for pulls and (inside those)
    // on the staleness bound; compute is the rest.
    csv_ << "kind,epoch,clock,time_s,loss,samples_per_s,metric,workers,"
            "step_ms,compute_ms,push_wait_ms,pull_wait_ms,blocked_ms\n";
    return Status::Ok();
  }

  void Start() { start_ = window_start_ = SteadyClock::now(); }
  // The lowest live worker leads: another takes over when it dies.
  void set_lead(bool lead) { lead_ = lead; }
  bool lead() const { return lead_; }

  // After each step (this worker's `step`-th, which made its plan batches
  // trained `batches`); prints every `every` steps (and when `force`).
  void Step(const Client& client, int epoch, int64_t clock, double loss,
            size_t samples, uint64_t step, uint64_t batches, int every,
            bool force) {
    window_loss_ += loss;
    ++window_steps_;
    window_samples_ += samples;
    if (!lead_ || (step % every != 0 && !force)) return;
    const double window_s = std::max(1e-9, SecondsSince(window_start_));
    const double elapsed = SecondsSince(start_);
    const double eta = batches == 0 || batches >= total_batches_
                           ? 0.0
                           : elapsed / batches * (total_batches_ - batches);
    const double rate = window_samples_ / window_s;
    const double mean_loss = window_loss_ / window_steps_;
    // The job's workers now (it may have been resized), else the first.
    const size_t live = client.live_workers().size();
    const int workers = live > 0 ? static_cast<int>(live) : world_;
    std::printf(
        "[epoch %d/%d] clock %lld  loss %.4f  samples/s %.0f (all "
        "%d workers ~%.0f)  ETA %.0fs\n",
        epoch + 1, epochs_, static_cast<long long>(clock), mean_loss, rate,
        workers, workers * rate, eta);
    std::fflush(stdout);
    const ClientStats stats = client.stats();
    if (csv_) {
      const double steps =
          static_cast<double>(std::max<uint64_t>(1, stats.steps - last_.steps));
      auto per_step_ms = [&](uint64_t now, uint64_t before) {
        return static_cast<double>(now - before) / 1000.0 / steps;
      };
      const double step_ms = per_step_ms(stats.step_us, last_.step_us);
      const double push_ms =
          per_step_ms(stats.push_wait_us, last_.push_wait_us);
      const double pull_ms =
          per_step_ms(stats.pull_wait_us, last_.pull_wait_us);
      csv_ << "step," << epoch + 1 << "," << clock << "," << elapsed << ","
           << mean_loss << "," << workers * rate << ",," << workers << ","
           << step_ms << "," << std::max(0.0, step_ms - push_ms - pull_ms)
           << "," << push_ms << "," << pull_ms << ","
           << per_step_ms(stats.blocked_us, last_.blocked_us) << "\n";
      csv_.flush();
    }
    last_ = stats;
    window_start_ = SteadyClock::now();
    window_loss_ = 0;
    window_steps_ = 0;
    window_samples_ = 0;
  }

  void Epoch(int epoch, int64_t clock, const char* metric_name, double metric) {
    if (!lead_) return;
    std::printf("epoch %d done: %s %.4f (%.1fs)\n", epoch + 1, metric_name,
                metric, SecondsSince(start_));
    std::fflush(stdout);
    if (csv_) {
      csv_ << "epoch," << epoch + 1 << "," << clock << ","
           << SecondsSince(start_) << ",,," << metric << ",,,,,,\n";
      csv_.flush();
    }
  }

  double elapsed() const { return SecondsSince(start_); }

 private:
  bool lead_;
  int epochs_;
  uint64_t total_batches_;
  int world_;
  std::ofstream csv_;
  SteadyClock::time_point start_, window_start_;
  double window_loss_ = 0;
  uint64_t window_steps_ = 0, window_samples_ = 0;
  ClientStats last_;  // at the previous line
};

Status CheckLoss(double loss, int epoch, int64_t clock) {
  if (std::isfinite(loss) && loss < 1e6) return Status::Ok();
  return FailedPreconditionError(
      "training diverged at epoch " + std::to_string(epoch + 1) + ", clock " +
      std::to_string(clock) + " (loss " + std::to_string(loss) +
      "); lower --learning_rate");
}

// --------------------------------------------------------- fault tolerance

// A step failed: if it is because the job rolls back (a server died),
// waits for the rollback and restores the data position; otherwise, or if
// no rollback comes, returns the step's error.
// How long to wait for a rollback after a call failed with `code` (0: the
// failure is not one a rollback explains).
int64_t RecoveryWaitMs(StatusCode code) {
  if (code == StatusCode::kAborted) {
    return 300000;  // a rollback was announced: restoring may be slow
  }
  if (code == StatusCode::kDeadlineExceeded ||
      code == StatusCode::kUnavailable) {
    return 10000;  // maybe a server died and nobody has said so yet
  }
  return 0;
}

Status RecoverOrFail(Client& client, const Status& failed, DataPosition& data,
                     bool lead) {
  const int64_t wait_ms = RecoveryWaitMs(failed.code());
  if (wait_ms == 0) return failed;
  Result<Client::Recovery> r = client.AwaitRecovery(wait_ms);
  if (!r.ok()) return failed;
  DUCTILE_RETURN_IF_ERROR(data.Restore(r->resume_state));
  if (lead) {
    std::printf(
        "rolled back to the checkpoint at clock %lld after a "
        "failure (%s); resuming\n",
        static_cast<long long>(r->clock), failed.message().c_str());
    std::fflush(stdout);
  }
  return Status::Ok();
}

// A worker's start: `create_tables`, then, unless it joins a running job,
// the barrier where every worker starts together. A server dying meanwhile
// aborts these calls as it would a step's: the worker waits for the
// rollback and starts again (tables are created idempotently).
Status StartUp(Client& client, const std::function<Status()>& create_tables) {
  constexpr int kAttempts = 10;
  for (int attempt = 1;; ++attempt) {
    Status s = create_tables();
    if (s.ok() && client.clock() == 0) s = client.Barrier();
    if (s.ok()) return s;
    const int64_t wait_ms = RecoveryWaitMs(s.code());
    if (wait_ms == 0 || attempt == kAttempts) return s;
    Result<Client::Recovery> r = client.AwaitRecovery(wait_ms);
    if (!r.ok()) return s;
    std::printf(
        "worker %d: the job rolled back while it started (%s); starting "
        "again\n",
        client.worker_id(), s.message().c_str());
    std::fflush(stdout);
  }
}

bool IsLead(const Client& client) {
  const std::vector<int32_t> live = client.live_workers();
  return live.empty() ? client.worker_id() == 0
                      : live.front() == client.worker_id();
}

// The barrier after a worker's last step. Workers do not all end at one
// clock (one joined late, shares differ by a batch): one that waits here
// keeps its clock moving, pushing nothing, so that it never holds back the
// others' staleness bound or BSP clocks while they finish.
Status FinalBarrier(Client& client, DataPosition& data) {
  std::atomic<bool> passed{false};
  Status s;
  std::thread barrier([&] {
    s = client.Barrier();
    passed.store(true);
  });
  while (!passed.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (passed.load()) break;
    client.Clock();
    data.Record();  // where it is (done) at every clock
  }
  barrier.join();
  return s;
}

// One app's step: pull, gradient (its loss checked with CheckLoss before
// anything is pushed) and push for `batch`, indices into its training set
// of epoch `epoch`. Returns the batch's loss.
using StepFn =
    std::function<Result<float>(std::span<const size_t> batch, int epoch)>;

// Runs one worker's training. Per step: records the data position (the
// resume state), takes the plan's next batch, runs `step`, reports the
// batch trained and clocks, and reports progress. The lead worker reports
// `metric` (`evaluate`) for each epoch once it learns the epoch is done
// (a step later, when another worker's batch completed it). When the plan has
// no free batch but others still hold some, the worker keeps its clock moving
// and asks again. Ends after the final barrier, once every worker's last
// push is in. A step failed by a rollback resumes from the checkpoint,
// after `abandon` drops what the step left in flight; any other error is
// returned.
Status RunSteps(Client& client, const TrainerOptions& o, DataPosition& data,
                Progress& progress, const StepFn& step, const char* metric,
                const std::function<Result<double>()>& evaluate,
                const std::function<void()>& abandon) {
  WorkerPolicyRunner policies(client, data, o.worker_policies);
  std::vector<size_t> batch;
  // Epochs done whose metric was reported (or that ended before this
  // worker led).
  int64_t reported = 0;
  auto report_epochs = [&]() -> Status {
    if (data.epochs_done() <= reported) return Status::Ok();
    progress.set_lead(IsLead(client));
    if (!progress.lead()) {
      reported = data.epochs_done();
      return Status::Ok();
    }
    Result<double> value = evaluate();
    DUCTILE_RETURN_IF_ERROR(value.status());
    for (; reported < data.epochs_done(); ++reported) {
      progress.Epoch(static_cast<int>(reported), client.clock(), metric,
                     *value);
    }
    return Status::Ok();
  };
  bool waited = false;  // the last attempt found no batch
  auto one_step = [&]() -> Status {
    data.Record();
    // Once per step, not at every attempt while waiting for a batch.
    if (!waited) policies.BeforeStep(data.epochs_done());
    int epoch = 0;
    DUCTILE_ASSIGN_OR_RETURN(const bool have, data.Current(&batch, &epoch));
    waited = !have;
    if (!have) {
      if (data.done()) return report_epochs();
      // The last batches are in others' hands (one may die and free its).
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      client.Clock();
      return Status::Ok();
    }
    client.SetPushWeight(data.batches_in_step()).IgnoreError();  // 1 - 64
    Result<float> loss = step(batch, epoch);
    DUCTILE_RETURN_IF_ERROR(loss.status());
    ++data.steps;
    const int32_t in_step = data.batches_in_step();  // Trained() clears it
    data.batches += static_cast<uint64_t>(in_step);
    data.samples += static_cast<int64_t>(batch.size());
    const bool stop = o.max_samples > 0 && data.samples >= o.max_samples;
    DUCTILE_RETURN_IF_ERROR(data.Trained(stop));
    client.RecordSamples(batch.size());
    client.RecordLoss(*loss);
    client.Clock();
    progress.set_lead(IsLead(client));
    progress.Step(client, epoch, client.clock(), *loss, batch.size(),
                  data.steps, data.batches, o.log_every, stop);
    policies.AfterStep(epoch, in_step, *loss, data.epochs_done());
    return report_epochs();
  };
  while (true) {
    const bool training = !data.done();
    if (training && (client.leave_requested() || policies.leave())) {
      // Drained: out of the job at this clock, its pushes so far kept and
      // the batch it held back in the plan.
      Status s = client.Leave();
      if (s.ok()) {
        std::printf("worker %d left the job at clock %lld (%s)\n",
                    client.worker_id(), static_cast<long long>(client.clock()),
                    policies.leave() ? "a worker policy asked" : "drained");
        std::fflush(stdout);
        data.left = true;
        return Status::Ok();
      }
      DUCTILE_RETURN_IF_ERROR(RecoverOrFail(client, s, data, progress.lead()));
      continue;
    }
    // After the last step, every worker's last push is in before the final
    // evaluation. A checkpoint may be taken at the final clock meanwhile:
    // it needs this worker's position there.
    if (!training) data.Record();
    Status s = training ? one_step() : FinalBarrier(client, data);
    if (s.ok() && !training) return Status::Ok();
    if (s.ok()) continue;
    abandon();
    DUCTILE_RETURN_IF_ERROR(RecoverOrFail(client, s, data, progress.lead()));
  }
}

// ------------------------------------------------------------ classifiers

// A block of the flat parameter vector stored as one dense tensor.
struct ParamBlock {
  std::string name;
  size_t offset = 0;
  size_t size = 0;
  Initializer init;
};

class Classifier {
 public:
  virtual ~Classifier() = default;
  virtual const char* name() const = 0;
  virtual size_t num_params() const = 0;
  virtual std::vector<ParamBlock> Blocks() const = 0;
  // `ready`, where the model can (the MLP): called with each range of
  // `grad` as soon as it is final (MlpModel::LossAndGradient); ranges never
  // named are final once the call returns. `params_ready`, if given: called
  // with each range of `params` before it is read, in the order the model
  // reads them (the MLP: layer by layer, as its forward pass goes; the
  // others: all at once), returning once the range holds the parameters.
  virtual Result<float> LossAndGradient(
      std::span<const float> params, const Dataset& data,
      std::span<const size_t> batch, std::span<float> grad,
      const MlpModel::GradientReady& ready,
      const MlpModel::ParamsReady& params_ready) = 0;
  virtual Result<double> Accuracy(std::span<const float> params,
                                  const Dataset& data) = 0;
  // Host memory for parameters and gradients of `count` floats, the kind
  // the model's backend moves fastest (ComputeBackend::AllocateHost).
  virtual Result<HostBuffer> HostVector(size_t count) {
    return HostBuffer::Plain(count);
  }
};

// Forwards the Classifier calls to a model of the shape both models share
// (LossAndGradient, Accuracy, num_params).
template <typename Model>
class ModelClassifier : public Classifier {
 public:
  explicit ModelClassifier(Model model) : model_(std::move(model)) {}
  size_t num_params() const override { return model_.num_params(); }
  Result<float> LossAndGradient(
      std::span<const float> params, const Dataset& data,
      std::span<const size_t> batch, std::span<float> grad,
      const MlpModel::GradientReady& ready,
      const MlpModel::ParamsReady& params_ready) override {
    if constexpr (requires {
                    model_.LossAndGradient(params, data, batch, grad, ready,
                                           params_ready);
                  }) {
      return model_.LossAndGradient(params, data, batch, grad, ready,
                                    params_ready);
    } else {
      if (params_ready) {
        DUCTILE_RETURN_IF_ERROR(params_ready(0, params.size()));
      }
      return model_.LossAndGradient(params, data, batch, grad);
    }
  }
  Result<double> Accuracy(std::span<const float> params,
                          const Dataset& data) override {
    return model_.Accuracy(params, data);
  }

 protected:
  Model model_;
};

class LogRegClassifier final : public ModelClassifier<LogRegModel> {
 public:
  LogRegClassifier(size_t features, int classes, float l2)
      : ModelClassifier(LogRegModel(features, classes, l2)) {}
  const char* name() const override { return "logistic regression"; }
  std::vector<ParamBlock> Blocks() const override {
    return {{"logreg.params", 0, model_.num_params(), Initializer{}}};
  }
};

// Owns the compute backend. A base listed before ModelClassifier, so the
// backend is built before the model and destroyed after it (the model's
// device buffers go back to the backend).
struct BackendOwner {
  std::unique_ptr<ComputeBackend> backend;
};

class MlpClassifier final : private BackendOwner,
                            public ModelClassifier<MlpModel> {
 public:
  static Result<std::unique_ptr<MlpClassifier>> Create(
      const std::string& device, const std::vector<size_t>& layers, float l2) {
    Result<std::unique_ptr<ComputeBackend>> backend =
        MakeComputeBackend(device);
    DUCTILE_RETURN_IF_ERROR(backend.status());
    MlpOptions o;
    o.layer_sizes = layers;
    o.l2_weight_decay = l2;
    Result<MlpModel> model = MlpModel::Create(backend->get(), o);
    DUCTILE_RETURN_IF_ERROR(model.status());
    return std::unique_ptr<MlpClassifier>(
        new MlpClassifier(std::move(*backend), std::move(*model)));
  }
  const char* name() const override { return "MLP"; }
  std::string backend_name() const { return backend->name(); }
  // Page-locked memory where the backend has it to give; ordinary memory
  // otherwise (slower copies, but the same training).
  Result<HostBuffer> HostVector(size_t count) override {
    Result<HostBuffer> buffer = backend->AllocateHost(count);
    if (buffer.ok() || buffer.status().code() != StatusCode::kResourceExhausted)
      return buffer;
    std::fprintf(stderr,
                 "warning: %s; the parameters go through ordinary memory\n",
                 buffer.status().ToString().c_str());
    return HostBuffer::Plain(count);
  }
  // Layer by layer: W (out x in, He-uniform) then b (zeros), the layout
  // MlpModel uses.
  std::vector<ParamBlock> Blocks() const override {
    std::vector<ParamBlock> blocks;
    const auto& sizes = model_.layer_sizes();
    size_t offset = 0;
    for (size_t l = 0; l + 1 < sizes.size(); ++l) {
      const size_t in = sizes[l], out = sizes[l + 1];
      Initializer w;
      w.kind = InitKind::kUniform;
      const float limit = std::sqrt(6.0f / static_cast<float>(in));
      w.low = -limit;
      w.high = limit;
      w.seed = 1000 + l;
      blocks.push_back({"mlp.w" + std::to_string(l), offset, in * out, w});
      offset += in * out;
      blocks.push_back(
          {"mlp.b" + std::to_string(l), offset, out, Initializer{}});
      offset += out;
    }
    return blocks;
  }

 private:
  MlpClassifier(std::unique_ptr<ComputeBackend> backend, MlpModel model)
      : BackendOwner{std::move(backend)}, ModelClassifier(std::move(model)) {}
};

// Parameter blocks as tensors on the servers, pulled and pushed together.
class ParamTensors {
 public:
  Status Register(Client& client, const TrainerOptions& o,
                  const std::vector<ParamBlock>& blocks,
                  int64_t batches_per_epoch, int world) {
    for (const ParamBlock& b : blocks) {
      TableOptions t;
      t.name = b.name;
      t.rule = o.optimizer;
      t.learning_rate = LearningRateForBatch(o);
      t.lr_schedule =
          TableSchedule(client, b.name, o, batches_per_epoch, world);
      t.batch_scaling = BatchScalingOf(o, world);
      t.init = b.init;
      t.consistency = o.consistency;
      Result<Tensor> tensor =
          MakeTable(client, t, [&](const TableOptions& options) {
            return client.RegisterTensor(options, b.size,
                                         TensorChunkFloats(b.size));
          });
      DUCTILE_RETURN_IF_ERROR(tensor.status());
      blocks_.push_back(b);
      tensors_.push_back(std::move(*tensor));
    }
    return Status::Ok();
  }
  Status Pull(Client& client, std::span<float> params) {
    std::vector<Handle> handles = PullAsync(client, params);
    return WaitAll(handles);
  }
  // Starts pulling every block into `params`; WaitAll() the handles.
  std::vector<Handle> PullAsync(Client& client, std::span<float> params) {
    std::vector<Handle> handles;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      handles.push_back(client.PullTensorAsync(
          tensors_[i], params.subspan(blocks_[i].offset, blocks_[i].size)));
    }
    return handles;
  }
  // Starts pushing the blocks of `grad` that lie within [begin, begin +
  // count) and are not in `pushed` yet (all of them for count = SIZE_MAX);
  // marks them and adds their handles to `handles`. `grad` must outlive
  // them (WaitAll).
  void PushWithin(Client& client, std::span<const float> grad, size_t begin,
                  size_t count, std::vector<bool>* pushed,
                  std::vector<Handle>* handles) {
    pushed->resize(tensors_.size(), false);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const ParamBlock& b = blocks_[i];
      if ((*pushed)[i] || b.offset < begin ||
          (count != SIZE_MAX && b.offset + b.size > begin + count)) {
        continue;
      }
      (*pushed)[i] = true;
      handles->push_back(
          client.PushTensorAsync(tensors_[i], grad.subspan(b.offset, b.size)));
    }
  }

  // Waits for the handles (of PullAsync) of the blocks that overlap
  // [begin, begin + count); the first error.
  Status WaitWithin(std::vector<Handle>& handles, size_t begin,
                    size_t count) const {
    Status first;
    for (size_t i = 0; i < handles.size() && i < blocks_.size(); ++i) {
      const ParamBlock& b = blocks_[i];
      if (b.offset + b.size <= begin || b.offset >= begin + count) continue;
      Status s = handles[i].Wait();
      if (first.ok() && !s.ok()) first = s;
    }
    return first;
  }
  // Waits for every handle; the first error.
  static Status WaitAll(std::vector<Handle>& handles) {
    Status first;
    for (Handle& h : handles) {
      Status s = h.Wait();
      if (first.ok() && !s.ok()) first = s;
    }
    return first;
  }

 private:
  std::vector<ParamBlock> blocks_;
  std::vector<Tensor> tensors_;
};

Status RunClassifier(Client& client, const TrainerOptions& o, int rank,
                     int world) {
  const bool lead = rank == 0;
  Result<Dataset> train = LoadFashionMnist(o.data_dir, /*train=*/true);
  DUCTILE_RETURN_IF_ERROR(train.status());
  Result<Dataset> test = LoadFashionMnist(o.data_dir, /*train=*/false);
  DUCTILE_RETURN_IF_ERROR(test.status());

  std::unique_ptr<Classifier> model;
  std::string backend = "cpu";
  if (o.app == "fmnist-logreg") {
    model = std::make_unique<LogRegClassifier>(train->num_features,
                                               train->num_classes, o.l2);
  } else {
    if (o.layers.size() < 2 || o.layers.front() != train->num_features ||
        o.layers.back() != static_cast<size_t>(train->num_classes)) {
      return InvalidArgumentError(
          "--layers must start with " + std::to_string(train->num_features) +
          " and end with " + std::to_string(train->num_classes));
    }
    Result<std::unique_ptr<MlpClassifier>> mlp =
        MlpClassifier::Create(o.device, o.layers, o.l2);
    DUCTILE_RETURN_IF_ERROR(mlp.status());
    backend = (*mlp)->backend_name();
    model = std::move(*mlp);
  }
  ParamTensors tensors;
  DUCTILE_RETURN_IF_ERROR(StartUp(client, [&] {
    tensors = ParamTensors();
    return tensors.Register(
        client, o, model->Blocks(),
        (static_cast<int64_t>(train->num_samples) + o.batch_size - 1) /
            o.batch_size,
        world);
  }));
  DataPosition data(client, train->num_samples, o.seed, o.batch_size, o.epochs);

  // Page-locked on a GPU, so that the model's uploads and downloads go
  // straight between them and the device.
  DUCTILE_ASSIGN_OR_RETURN(HostBuffer params,
                           model->HostVector(model->num_params()));
  DUCTILE_ASSIGN_OR_RETURN(HostBuffer grad,
                           model->HostVector(model->num_params()));
  // Where the model allows reads one step old (async, SSP with s >= 1), the
  // next step's parameters are pulled while this step computes.
  const bool prefetch =
      o.prefetch && (o.consistency.mode == ConsistencyMode::kAsync ||
                     (o.consistency.mode == ConsistencyMode::kSsp &&
                      o.consistency.staleness >= 1));
  DUCTILE_ASSIGN_OR_RETURN(
      HostBuffer next_params,
      model->HostVector(prefetch ? model->num_params() : 0));
  std::vector<Handle> next_pull;
  // On every way out (errors too), a prefetch in flight still writes into
  // next_params: wait for it before that buffer goes.
  struct WaitOnExit {
    std::vector<Handle>& handles;
    ~WaitOnExit() {
      for (Handle& h : handles) h.Wait().IgnoreError();
    }
  } wait_on_exit{next_pull};
  Progress progress(lead, o.epochs,
                    (data.batches_per_epoch() * o.epochs + world - 1) / world,
                    world);
  DUCTILE_RETURN_IF_ERROR(progress.OpenLog(o.csv_log));
  if (lead) {
    std::printf(
        "training %s on Fashion-MNIST (%s): %zu train / %zu test "
        "samples, %d worker(s), %s, batch %d, %s lr %.3g, %d "
        "epoch(s), %zu parameters\n",
        model->name(), backend.c_str(), train->num_samples, test->num_samples,
        world, ToString(o.consistency).c_str(), o.batch_size,
        RuleName(o.optimizer), LearningRateForBatch(o), o.epochs,
        model->num_params());
    std::fflush(stdout);
  }
  progress.Start();
  auto step = [&](std::span<const size_t> batch, int epoch) -> Result<float> {
    // The pulls of the parameters this step reads.
    std::vector<Handle> pulls;
    if (!prefetch) {
      pulls = tensors.PullAsync(client, params);
    } else {
      if (next_pull.empty()) next_pull = tensors.PullAsync(client, next_params);
      std::swap(params, next_params);
      pulls = std::move(next_pull);
      // Issued at this clock, before this step's push: a pull this model
      // allows, overlapping the gradient computation below.
      next_pull = tensors.PullAsync(client, next_params);
    }
    // With layered_pulls the forward pass takes each layer as its blocks
    // arrive; else it starts once all have.
    MlpModel::ParamsReady arrived;
    if (o.layered_pulls) {
      arrived = [&](size_t begin, size_t count) {
        return tensors.WaitWithin(pulls, begin, count);
      };
    } else {
      DUCTILE_RETURN_IF_ERROR(ParamTensors::WaitAll(pulls));
    }
    // With overlap_push each layer's gradient goes out as the backward pass
    // finishes it, while the layers before it are computed; whatever was
    // not handed out goes after the pass.
    std::vector<bool> pushed;
    std::vector<Handle> pushes;
    MlpModel::GradientReady ready;
    if (o.overlap_push) {
      ready = [&](size_t begin, size_t count) {
        tensors.PushWithin(client, grad, begin, count, &pushed, &pushes);
      };
    }
    Result<float> loss =
        model->LossAndGradient(params, *train, batch, grad, ready, arrived);
    // Every pull is done before `params` is touched again (an error may
    // have ended the pass before it waited for them all).
    const Status pulled = ParamTensors::WaitAll(pulls);
    Status s = loss.status();
    if (s.ok()) s = pulled;
    // A non-finite loss found after layers went out: the servers refuse
    // non-finite gradients (TableOptions::reject_non_finite), so those
    // pushes fail and change nothing.
    if (s.ok()) s = CheckLoss(*loss, epoch, client.clock());
    if (s.ok()) {
      tensors.PushWithin(client, grad, 0, SIZE_MAX, &pushed, &pushes);
    }
    const Status pushed_all = ParamTensors::WaitAll(pushes);
    DUCTILE_RETURN_IF_ERROR(s);
    DUCTILE_RETURN_IF_ERROR(pushed_all);
    return loss;
  };
  auto test_accuracy = [&]() -> Result<double> {
    DUCTILE_RETURN_IF_ERROR(tensors.Pull(client, params));
    return model->Accuracy(params, *test);
  };
  // A prefetch in flight belongs to the step that failed.
  auto abandon = [&] {
    ParamTensors::WaitAll(next_pull).IgnoreError();
    next_pull.clear();
  };
  DUCTILE_RETURN_IF_ERROR(RunSteps(client, o, data, progress, step,
                                   "test accuracy", test_accuracy, abandon));
  // The prefetch in flight reads into next_params: finish it first.
  if (!next_pull.empty())
    DUCTILE_RETURN_IF_ERROR(ParamTensors::WaitAll(next_pull));
  if (data.left || !IsLead(client)) return Status::Ok();
  Result<double> accuracy = test_accuracy();
  DUCTILE_RETURN_IF_ERROR(accuracy.status());
  const ClientStats stats = client.stats();
  std::printf(
      "final test accuracy: %.4f after %llu steps per worker, %.1fs "
      "(worker 0: blocked %.1fs on the staleness bound, max "
      "staleness %lld)\n",
      *accuracy, static_cast<unsigned long long>(data.steps),
      progress.elapsed(), stats.blocked_us / 1e6,
      static_cast<long long>(stats.max_staleness()));
  std::fflush(stdout);
  if (*accuracy < o.min_accuracy) {
    return FailedPreconditionError(
        "test accuracy " + std::to_string(*accuracy) +
        " is below --min_accuracy " + std::to_string(o.min_accuracy));
  }
  return Status::Ok();
}

// ------------------------------------------------------------------ mf

// Pulls the factor rows `ids` of a table into `f`.
Status PullFactors(Client& client, TableId table, size_t rank,
                   std::vector<uint64_t> ids, SparseFactors* f) {
  f->ids = std::move(ids);
  f->values.resize(f->ids.size() * rank);
  return client.Pull(table, f->ids, f->values);
}

Status RunMf(Client& client, const TrainerOptions& o, int rank, int world) {
  const bool lead = rank == 0;
  // Every worker generates the same data from the same seed.
  const LowRankData data = MakeLowRankData(o.mf_rows, o.mf_cols, o.mf_rank,
                                           o.mf_observed, o.mf_noise, o.seed);
  const MfModel model(o.mf_rank, o.l2);
  TableId tables[2];
  const char* names[2] = {"mf.rows", "mf.cols"};
  auto create_tables = [&]() -> Status {
    for (int i = 0; i < 2; ++i) {
      TableOptions t;
      t.name = names[i];
      t.value_width = static_cast<uint32_t>(o.mf_rank);
      t.rule = o.optimizer;
      t.learning_rate = LearningRateForBatch(o);
      t.lr_schedule = TableSchedule(
          client, names[i], o,
          (static_cast<int64_t>(data.train.size()) + o.batch_size - 1) /
              o.batch_size,
          world);
      t.batch_scaling = BatchScalingOf(o, world);
      t.init.kind = InitKind::kUniform;
      t.init.low = -0.3f;
      t.init.high = 0.3f;
      t.init.seed = o.seed + i;
      t.consistency = o.consistency;
      Result<TableId> id =
          MakeTable(client, t, [&](const TableOptions& options) {
            return client.CreateTable(options);
          });
      DUCTILE_RETURN_IF_ERROR(id.status());
      tables[i] = *id;
    }
    return Status::Ok();
  };
  DUCTILE_RETURN_IF_ERROR(StartUp(client, create_tables));
  DataPosition position(client, data.train.size(), o.seed, o.batch_size,
                        o.epochs);
  Progress progress(
      lead, o.epochs,
      (position.batches_per_epoch() * o.epochs + world - 1) / world, world);
  DUCTILE_RETURN_IF_ERROR(progress.OpenLog(o.csv_log));
  std::vector<uint64_t> test_rows, test_cols;
  MfModel::TouchedKeys(data.test, &test_rows, &test_cols);
  if (lead) {
    std::printf(
        "training matrix factorization: %zu x %zu, rank %zu, %zu "
        "train / %zu test entries, %d worker(s), %s, batch %d, %s lr "
        "%.3g, %d epoch(s)\n",
        data.rows, data.cols, data.rank, data.train.size(), data.test.size(),
        world, ToString(o.consistency).c_str(), o.batch_size,
        RuleName(o.optimizer), LearningRateForBatch(o), o.epochs);
    std::fflush(stdout);
  }
  progress.Start();
  std::vector<Rating> batch;
  std::vector<uint64_t> rows, cols;
  SparseFactors u, v, u_grad, v_grad;
  auto test_rmse = [&]() -> Result<double> {
    SparseFactors tu, tv;
    DUCTILE_RETURN_IF_ERROR(
        PullFactors(client, tables[0], o.mf_rank, test_rows, &tu));
    DUCTILE_RETURN_IF_ERROR(
        PullFactors(client, tables[1], o.mf_rank, test_cols, &tv));
    return model.Rmse(data.test, tu, tv);
  };
  auto step = [&](std::span<const size_t> indices, int epoch) -> Result<float> {
    batch.clear();
    for (size_t i : indices) batch.push_back(data.train[i]);
    MfModel::TouchedKeys(batch, &rows, &cols);
    DUCTILE_RETURN_IF_ERROR(
        PullFactors(client, tables[0], o.mf_rank, rows, &u));
    DUCTILE_RETURN_IF_ERROR(
        PullFactors(client, tables[1], o.mf_rank, cols, &v));
    Result<float> loss = model.LossAndGradient(batch, u, v, &u_grad, &v_grad);
    DUCTILE_RETURN_IF_ERROR(loss.status());
    DUCTILE_RETURN_IF_ERROR(CheckLoss(*loss, epoch, client.clock()));
    Handle pu = client.PushAsync(tables[0], u_grad.ids, u_grad.values);
    Handle pv = client.PushAsync(tables[1], v_grad.ids, v_grad.values);
    Status su = pu.Wait(), sv = pv.Wait();
    DUCTILE_RETURN_IF_ERROR(su);
    DUCTILE_RETURN_IF_ERROR(sv);
    return loss;
  };
  DUCTILE_RETURN_IF_ERROR(RunSteps(client, o, position, progress, step,
                                   "test RMSE", test_rmse, [] {}));
  if (position.left || !IsLead(client)) return Status::Ok();
  Result<double> rmse = test_rmse();
  DUCTILE_RETURN_IF_ERROR(rmse.status());
  std::printf(
      "final test RMSE: %.4f after %llu steps per worker, %.1fs (noise "
      "level %.3g)\n",
      *rmse, static_cast<unsigned long long>(position.steps),
      progress.elapsed(), o.mf_noise);
  std::fflush(stdout);
  if (o.max_rmse > 0 && *rmse > o.max_rmse) {
    return FailedPreconditionError("test RMSE " + std::to_string(*rmse) +
                                   " is above --max_rmse " +
                                   std::to_string(o.max_rmse));
  }
  return Status::Ok();
}

}  // namespace

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
  if (o.app == "mf" && (o.mf_rows < 1 || o.mf_cols < 1 || o.mf_rank < 1 ||
                        !(o.mf_observed > 0 && o.mf_observed <= 1))) {
    return InvalidArgumentError(
        "mf needs --mf_rows, --mf_cols, --mf_rank >= 1 and --mf_observed in "
        "(0, 1]");
  }
  return Status::Ok();
}

Status RunTrainingWorker(Client& client, const TrainerOptions& options) {
  DUCTILE_RETURN_IF_ERROR(Validate(options));
  const int rank = client.worker_id();
  if (rank < 0) {
    return FailedPreconditionError("this client is not registered as a worker");
  }
  // The workers the job started with; a worker that joined later counts
  // itself too (the data is split among the live workers each epoch).
  const int world = std::max(client.num_workers(), rank + 1);
  if (options.app == "fmnist-logreg" || options.app == "fmnist-mlp") {
    return RunClassifier(client, options, rank, world);
  }
  if (options.app == "mf") return RunMf(client, options, rank, world);
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
