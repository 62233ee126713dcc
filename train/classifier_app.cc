// The Fashion-MNIST classifiers' worker (fmnist-logreg, fmnist-mlp): the
// parameters as dense tensors on the servers, a step's pull, gradient and
// push, the test accuracy after each epoch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "models/compute_backend.h"
#include "models/fmnist_data.h"
#include "models/logreg_model.h"
#include "models/mlp_model.h"
#include "train/step_loop.h"

namespace ductile::train {

using models::ComputeBackend;
using models::Dataset;
using models::HostBuffer;
using models::LogRegModel;
using models::MakeComputeBackend;
using models::MlpModel;
using models::MlpOptions;

namespace {

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

}  // namespace

Status RunClassifier(Client& client, const TrainerOptions& o, int rank,
                     int world, const WorkerData& worker_data) {
  const bool lead = rank == 0;
  const std::optional<Dataset>& train = worker_data.train;
  const std::optional<Dataset>& test = worker_data.test;
  if (!train || !test) {
    return FailedPreconditionError("the Fashion-MNIST sets are not loaded");
  }

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

}  // namespace ductile::train
