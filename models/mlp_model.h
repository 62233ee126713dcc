// A multilayer perceptron classifier: fully connected layers with ReLU
// between them and softmax cross-entropy on the last, trained through the
// parameter server like LogRegModel, with its matrix products on a
// ComputeBackend (OpenBLAS on the CPU, or cuBLAS on a GPU).
//
// For layer sizes {n0, n1, ..., nL} (input features first, classes last)
// the parameters are one flat float vector, layer after layer:
//
//   [ W1 (n1 x n0, row-major) | b1 (n1) | W2 (n2 x n1) | b2 (n2) | ... ]
//
// so that layer l computes z_l = W_l a_{l-1} + b_l and a_l = relu(z_l)
// (no ReLU on the last layer, whose z are the logits). This layout is what
// workers push and pull: changing it breaks compatibility between workers
// and saved checkpoints. The default {784, 256, 128, 10} has 235146
// parameters.
//
// Example (SGD steps on minibatches):
//   Result<std::unique_ptr<ComputeBackend>> backend =
//       MakeComputeBackend("auto");
//   Result<MlpModel> model = MlpModel::Create(backend->get(), MlpOptions{});
//   std::vector<float> params = model->InitParams(/*seed=*/1);
//   std::vector<float> grad(model->num_params());
//   Result<float> loss = model->LossAndGradient(params, data, batch, grad);
//   if (!loss.ok()) return loss.status();
//   for (size_t j = 0; j < params.size(); ++j) params[j] -= lr * grad[j];
//
// The model keeps its backend buffers between calls: parameters, gradient,
// and activations for the largest batch seen so far, so that a training
// loop with a fixed batch size allocates nothing after its first step.
//
// Thread safety: not thread-safe (the calls share the backend buffers);
// use one MlpModel from one thread at a time. The backend must outlive the
// model.
#ifndef DUCTILE_MODELS_MLP_MODEL_H_
#define DUCTILE_MODELS_MLP_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "ductile/status.h"
#include "models/compute_backend.h"
#include "models/fmnist_data.h"

namespace ductile::models {

struct MlpOptions {
  // Widths of the layers, input features first and classes last; at least
  // two entries, each >= 1, the last at most 256 (labels are bytes). The
  // default is Fashion-MNIST's 784 features, hidden layers of 256 and 128,
  // and 10 classes.
  std::vector<size_t> layer_sizes = {784, 256, 128, 10};
  // >= 0, default 0: adds (l2_weight_decay / 2) * |W|^2 over all weight
  // matrices to the loss (biases are not decayed).
  float l2_weight_decay = 0.0f;
};

class MlpModel {
 public:
  // A model running on `backend` (not owned; must outlive the model).
  // InvalidArgument if the options are out of range; ResourceExhausted if
  // the backend cannot hold the parameters.
  static Result<MlpModel> Create(ComputeBackend* backend,
                                 const MlpOptions& options);

  MlpModel(MlpModel&&) = default;
  MlpModel& operator=(MlpModel&&) = default;

  // Length of the parameter vector: sum over layers of n_l * (n_{l-1} + 1);
  // 0 if there are fewer than two layers.
  static size_t NumParams(std::span<const size_t> layer_sizes);

  const std::vector<size_t>& layer_sizes() const { return layer_sizes_; }
  size_t num_features() const { return layer_sizes_.front(); }
  int num_classes() const { return static_cast<int>(layer_sizes_.back()); }
  float l2_weight_decay() const { return l2_weight_decay_; }
  size_t num_params() const { return NumParams(layer_sizes_); }

  // Initial parameters, computed on the host, deterministic in `seed` on
  // every platform. Weights are uniform in [-limit, limit]: He
  // (limit = sqrt(6 / fan_in)) for layers followed by ReLU, Glorot
  // (sqrt(6 / (fan_in + fan_out))) for the last; biases are 0.
  std::vector<float> InitParams(uint64_t seed) const;

  // OK if `params` and `data` fit the model: params.size() == num_params(),
  // data.num_features == num_features(), data.num_classes ==
  // num_classes(), and the data's vectors have the sizes its counts say.
  // InvalidArgument (with the mismatch) otherwise. Does not scan labels.
  [[nodiscard]] Status CheckCompatible(std::span<const float> params,
                                       const Dataset& data) const;

  // Returns the mean softmax cross-entropy over the samples
  // data[batch_indices] (plus the L2 term) and writes its gradient with
  // respect to params into `grad` (overwritten). An empty batch gives the
  // L2 term alone.
  //
  // Errors (and `grad` is then all zeros, so that an unchecked result
  // cannot corrupt a shared model): InvalidArgument if CheckCompatible
  // fails, grad.size() != num_params(), or an index or a label is out of
  // range; the backend's error if it fails.
  //
  // With `ready`, each layer's gradient (its W then b, contiguous in `grad`)
  // is written to `grad` as soon as the backward pass has it, last layer
  // first, and ready(begin, count) is called with its range, so that a
  // caller can send it while the layers before it are computed. The
  // ranges of the layers written before an error are not zeroed then.
  //
  // With `params_ready`, `params` is read layer by layer, in the order the
  // forward pass needs it: params_ready(begin, count) is called with each
  // layer's range (its W then b, contiguous), first layer first, before
  // anything in it is read, and returns once that range holds the
  // parameters (a caller pulling them can let the pass start on the first
  // layers while the later ones arrive). An error it returns ends the
  // call with that error. By the return, it was called for every layer
  // (the L2 term reads them all), unless an error ended the call.
  using GradientReady = std::function<void(size_t begin, size_t count)>;
  using ParamsReady = std::function<Status(size_t begin, size_t count)>;
  Result<float> LossAndGradient(std::span<const float> params,
                                const Dataset& data,
                                std::span<const size_t> batch_indices,
                                std::span<float> grad,
                                const GradientReady& ready = nullptr,
                                const ParamsReady& params_ready = nullptr);

  // The loss LossAndGradient returns, without the gradient; same errors.
  Result<float> Loss(std::span<const float> params, const Dataset& data,
                     std::span<const size_t> batch_indices);

  // Fraction of all samples of `data` whose highest logit (ties to the
  // lower class) is their label; 0 for an empty data set. Same errors.
  Result<double> Accuracy(std::span<const float> params, const Dataset& data);

 private:
  MlpModel(ComputeBackend* backend, const MlpOptions& options);

  size_t num_layers() const { return layer_sizes_.size() - 1; }
  // Offsets of layer l's (1-based) W and b in the parameter vector.
  size_t WeightOffset(size_t layer) const;
  size_t BiasOffset(size_t layer) const;

  // Grows the per-row buffers to hold `rows` rows (no-op if they do).
  Status Reserve(size_t rows);
  // Checks the batch and uploads its samples to x_ and their one-hot
  // labels to targets_.
  Status UploadBatch(const Dataset& data,
                     std::span<const size_t> batch_indices);
  // z and a of every layer for the `rows` samples in x_, with params_
  // uploaded: hidden activations in activations_[l - 1], logits in
  // activations_.back(). With `params_ready`, each layer's parameters are
  // waited for and uploaded from `params` just before the layer is
  // computed.
  Status Forward(size_t rows, std::span<const float> params = {},
                 const ParamsReady& params_ready = nullptr);
  // Shared body of Loss and LossAndGradient; `grad` empty for Loss.
  Result<float> Evaluate(std::span<const float> params, const Dataset& data,
                         std::span<const size_t> batch_indices,
                         std::span<float> grad, const GradientReady& ready,
                         const ParamsReady& params_ready);
  Status EvaluateOnBackend(std::span<const float> params, const Dataset& data,
                           std::span<const size_t> batch_indices,
                           std::span<float> grad, const GradientReady& ready,
                           const ParamsReady& params_ready, double* loss_sum);
  // 0.5 * l2 * |W|^2 over all layers, from host parameters.
  double L2Term(std::span<const float> params) const;

  // Constant after construction.
  ComputeBackend* backend_;
  std::vector<size_t> layer_sizes_;
  float l2_weight_decay_;

  // Backend buffers, kept between calls.
  DeviceBuffer params_;  // num_params()
  DeviceBuffer grad_;    // num_params()
  // Sized for capacity_rows_ rows:
  size_t capacity_rows_ = 0;
  DeviceBuffer x_;         // rows x n0: the batch's samples
  DeviceBuffer targets_;   // rows x nL: their one-hot labels
  DeviceBuffer row_loss_;  // rows
  // activations_[l - 1]: rows x n_l, a_l for hidden layers, z_L (then its
  // gradient, in place) for the last.
  std::vector<DeviceBuffer> activations_;
  // deltas_[l - 1]: rows x n_l, d loss / d z_l for hidden layers.
  std::vector<DeviceBuffer> deltas_;

  // Host staging, also kept between calls.
  std::vector<float> x_host_;
  std::vector<float> targets_host_;
  std::vector<float> row_loss_host_;
  std::vector<float> logits_host_;
};

}  // namespace ductile::models

#endif  // DUCTILE_MODELS_MLP_MODEL_H_
