#include "models/mlp_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>

#include "models/uniform.h"

namespace ductile::models {
namespace {

// Accuracy runs the data through the model this many samples at a time.
constexpr size_t kEvalRows = 1024;

}  // namespace

MlpModel::MlpModel(ComputeBackend* backend, const MlpOptions& options)
    : backend_(backend),
      layer_sizes_(options.layer_sizes),
      l2_weight_decay_(options.l2_weight_decay) {}

Result<MlpModel> MlpModel::Create(ComputeBackend* backend,
                                  const MlpOptions& options) {
  if (backend == nullptr) {
    return InvalidArgumentError("MlpModel needs a compute backend");
  }
  const std::vector<size_t>& sizes = options.layer_sizes;
  if (sizes.size() < 2) {
    return InvalidArgumentError(
        "MlpModel needs at least two layer sizes (features and classes), "
        "got " +
        std::to_string(sizes.size()));
  }
  for (size_t size : sizes) {
    if (size < 1) {
      return InvalidArgumentError("MlpModel layer sizes must be >= 1");
    }
  }
  if (sizes.back() > 256) {
    return InvalidArgumentError(
        "MlpModel supports at most 256 classes (labels are bytes), got " +
        std::to_string(sizes.back()));
  }
  if (!(options.l2_weight_decay >= 0.0f) ||
      !std::isfinite(options.l2_weight_decay)) {
    return InvalidArgumentError(
        "MlpModel l2_weight_decay must be finite and >= 0, is " +
        std::to_string(options.l2_weight_decay));
  }
  MlpModel model(backend, options);
  Result<DeviceBuffer> params = backend->Allocate(model.num_params());
  if (!params.ok()) return params.status();
  Result<DeviceBuffer> grad = backend->Allocate(model.num_params());
  if (!grad.ok()) return grad.status();
  model.params_ = std::move(*params);
  model.grad_ = std::move(*grad);
  model.activations_.resize(model.num_layers());
  model.deltas_.resize(model.num_layers() - 1);
  return model;
}

size_t MlpModel::NumParams(std::span<const size_t> layer_sizes) {
  size_t total = 0;
  for (size_t l = 1; l < layer_sizes.size(); ++l) {
    total += layer_sizes[l] * (layer_sizes[l - 1] + 1);
  }
  return total;
}

size_t MlpModel::WeightOffset(size_t layer) const {
  return NumParams(std::span(layer_sizes_).first(layer));
}

size_t MlpModel::BiasOffset(size_t layer) const {
  return WeightOffset(layer) + layer_sizes_[layer] * layer_sizes_[layer - 1];
}

std::vector<float> MlpModel::InitParams(uint64_t seed) const {
  std::vector<float> params(num_params(), 0.0f);
  std::mt19937_64 rng(seed);
  for (size_t l = 1; l <= num_layers(); ++l) {
    const double fan_in = static_cast<double>(layer_sizes_[l - 1]);
    const double fan_out = static_cast<double>(layer_sizes_[l]);
    const double limit = l < num_layers() ? std::sqrt(6.0 / fan_in)
                                          : std::sqrt(6.0 / (fan_in + fan_out));
    float* w = params.data() + WeightOffset(l);
    const size_t count = layer_sizes_[l] * layer_sizes_[l - 1];
    for (size_t j = 0; j < count; ++j) {
      w[j] = static_cast<float>(limit * (2.0 * Uniform01(rng) - 1.0));
    }
    // Biases stay 0.
  }
  return params;
}

Status MlpModel::CheckCompatible(std::span<const float> params,
                                 const Dataset& data) const {
  if (params.size() != num_params()) {
    return InvalidArgumentError(
        "MlpModel expects " + std::to_string(num_params()) +
        " parameters, got " + std::to_string(params.size()));
  }
  if (data.num_features != num_features() ||
      data.num_classes != num_classes()) {
    return InvalidArgumentError(
        "data set has " + std::to_string(data.num_features) + " features and " +
        std::to_string(data.num_classes) + " classes, the model " +
        std::to_string(num_features()) + " and " +
        std::to_string(num_classes()));
  }
  if (data.labels.size() != data.num_samples ||
      data.images.size() / num_features() != data.num_samples ||
      data.images.size() % num_features() != 0) {
    return InvalidArgumentError(
        "data set is inconsistent: num_samples is " +
        std::to_string(data.num_samples) + " but it holds " +
        std::to_string(data.labels.size()) + " labels and " +
        std::to_string(data.images.size()) + " feature values");
  }
  return Status::Ok();
}

Status MlpModel::Reserve(size_t rows) {
  if (rows <= capacity_rows_) return Status::Ok();
  // Grow by at least half, so that slowly growing batches do not allocate
  // on every call.
  const size_t capacity = std::max(rows, capacity_rows_ + capacity_rows_ / 2);
  auto allocate = [&](size_t count, DeviceBuffer* buffer) -> Status {
    *buffer = DeviceBuffer();  // free first: keep the peak down
    Result<DeviceBuffer> fresh = backend_->Allocate(count);
    if (!fresh.ok()) return fresh.status();
    *buffer = std::move(*fresh);
    return Status::Ok();
  };
  capacity_rows_ = 0;  // until every buffer has been replaced
  DUCTILE_RETURN_IF_ERROR(allocate(capacity * layer_sizes_.front(), &x_));
  DUCTILE_RETURN_IF_ERROR(allocate(capacity * layer_sizes_.back(), &targets_));
  DUCTILE_RETURN_IF_ERROR(allocate(capacity, &row_loss_));
  for (size_t l = 1; l <= num_layers(); ++l) {
    DUCTILE_RETURN_IF_ERROR(
        allocate(capacity * layer_sizes_[l], &activations_[l - 1]));
    if (l < num_layers()) {
      DUCTILE_RETURN_IF_ERROR(
          allocate(capacity * layer_sizes_[l], &deltas_[l - 1]));
    }
  }
  capacity_rows_ = capacity;
  return Status::Ok();
}

Status MlpModel::UploadBatch(const Dataset& data,
                             std::span<const size_t> batch_indices) {
  const size_t rows = batch_indices.size();
  const size_t features = num_features();
  const size_t classes = layer_sizes_.back();
  x_host_.resize(rows * features);
  targets_host_.assign(rows * classes, 0.0f);
  for (size_t i = 0; i < rows; ++i) {
    const size_t index = batch_indices[i];
    if (index >= data.num_samples) {
      return InvalidArgumentError("sample index " + std::to_string(index) +
                                  " out of range: the data set has " +
                                  std::to_string(data.num_samples));
    }
    const size_t label = data.labels[index];
    if (label >= classes) {
      return InvalidArgumentError("sample " + std::to_string(index) +
                                  " has label " + std::to_string(label) +
                                  ", the model " + std::to_string(classes) +
                                  " classes");
    }
    std::copy_n(&data.images[index * features], features,
                &x_host_[i * features]);
    targets_host_[i * classes + label] = 1.0f;
  }
  DUCTILE_RETURN_IF_ERROR(Reserve(rows));
  DUCTILE_RETURN_IF_ERROR(backend_->Upload(x_host_, x_));
  return backend_->Upload(targets_host_, targets_);
}

Status MlpModel::Forward(size_t rows, std::span<const float> params,
                         const ParamsReady& params_ready) {
  for (size_t l = 1; l <= num_layers(); ++l) {
    const size_t in = layer_sizes_[l - 1];
    const size_t out = layer_sizes_[l];
    if (params_ready) {
      const size_t begin = WeightOffset(l), count = out * in + out;
      DUCTILE_RETURN_IF_ERROR(params_ready(begin, count));
      DUCTILE_RETURN_IF_ERROR(backend_->Upload(params.subspan(begin, count),
                                               params_.Subspan(begin, count)));
    }
    DeviceSpan input = l == 1 ? x_.span() : activations_[l - 2].span();
    DeviceSpan output = activations_[l - 1];
    // z = a W^T + b, for the rows of a.
    DUCTILE_RETURN_IF_ERROR(backend_->Gemm(
        Transpose::kNo, Transpose::kYes, rows, out, in, 1.0f, input,
        params_.Subspan(WeightOffset(l), out * in), 0.0f, output));
    DUCTILE_RETURN_IF_ERROR(backend_->AddRowVector(
        rows, out, params_.Subspan(BiasOffset(l), out), output));
    if (l < num_layers())
      DUCTILE_RETURN_IF_ERROR(backend_->Relu(rows * out, output));
  }
  return Status::Ok();
}

double MlpModel::L2Term(std::span<const float> params) const {
  if (l2_weight_decay_ == 0.0f) return 0.0;
  double norm_sq = 0.0;
  for (size_t l = 1; l <= num_layers(); ++l) {
    const float* w = params.data() + WeightOffset(l);
    const size_t count = layer_sizes_[l] * layer_sizes_[l - 1];
    for (size_t j = 0; j < count; ++j) {
      norm_sq += static_cast<double>(w[j]) * w[j];
    }
  }
  return 0.5 * l2_weight_decay_ * norm_sq;
}

Status MlpModel::EvaluateOnBackend(std::span<const float> params,
                                   const Dataset& data,
                                   std::span<const size_t> batch_indices,
                                   std::span<float> grad,
                                   const GradientReady& ready,
                                   const ParamsReady& params_ready,
                                   double* loss_sum) {
  const bool want_grad = !grad.empty();
  const size_t rows = batch_indices.size();
  const size_t classes = layer_sizes_.back();
  if (!params_ready) DUCTILE_RETURN_IF_ERROR(backend_->Upload(params, params_));
  DUCTILE_RETURN_IF_ERROR(UploadBatch(data, batch_indices));
  DUCTILE_RETURN_IF_ERROR(Forward(rows, params, params_ready));

  // The logits' gradient replaces the logits: d loss / d z_L, already
  // divided by the batch size.
  DeviceSpan logits = activations_.back();
  DUCTILE_RETURN_IF_ERROR(backend_->SoftmaxCrossEntropy(
      rows, classes, logits, targets_, 1.0f / static_cast<float>(rows),
      row_loss_, logits));

  if (want_grad) {
    for (size_t l = num_layers(); l >= 1; --l) {
      const size_t in = layer_sizes_[l - 1];
      const size_t out = layer_sizes_[l];
      DeviceSpan delta = l == num_layers() ? logits : deltas_[l - 1].span();
      DeviceSpan input = l == 1 ? x_.span() : activations_[l - 2].span();
      DeviceSpan weights = params_.Subspan(WeightOffset(l), out * in);
      DeviceSpan grad_weights = grad_.Subspan(WeightOffset(l), out * in);
      // dW = delta^T a_{l-1}; db = column sums of delta.
      DUCTILE_RETURN_IF_ERROR(backend_->Gemm(Transpose::kYes, Transpose::kNo,
                                             out, in, rows, 1.0f, delta, input,
                                             0.0f, grad_weights));
      DUCTILE_RETURN_IF_ERROR(backend_->ColumnSums(
          rows, out, delta, grad_.Subspan(BiasOffset(l), out)));
      if (l2_weight_decay_ != 0.0f) {
        DUCTILE_RETURN_IF_ERROR(
            backend_->Axpy(out * in, l2_weight_decay_, weights, grad_weights));
      }
      if (ready) {
        // W and b of this layer, contiguous: out to the caller now.
        const size_t begin = WeightOffset(l), count = out * in + out;
        DUCTILE_RETURN_IF_ERROR(backend_->Download(grad_.Subspan(begin, count),
                                                   grad.subspan(begin, count)));
        ready(begin, count);
      }
      if (l > 1) {
        // d loss / d a_{l-1} = delta W, then through the ReLU.
        DeviceSpan previous_delta = deltas_[l - 2];
        DUCTILE_RETURN_IF_ERROR(backend_->Gemm(Transpose::kNo, Transpose::kNo,
                                               rows, in, out, 1.0f, delta,
                                               weights, 0.0f, previous_delta));
        DUCTILE_RETURN_IF_ERROR(backend_->ReluBackward(
            rows * in, activations_[l - 2], previous_delta));
      }
    }
    if (!ready) DUCTILE_RETURN_IF_ERROR(backend_->Download(grad_, grad));
  }
  row_loss_host_.resize(rows);
  DUCTILE_RETURN_IF_ERROR(backend_->Download(row_loss_, row_loss_host_));
  *loss_sum = 0.0;
  for (float loss : row_loss_host_) *loss_sum += loss;
  return Status::Ok();
}

Result<float> MlpModel::Evaluate(std::span<const float> params,
                                 const Dataset& data,
                                 std::span<const size_t> batch_indices,
                                 std::span<float> grad,
                                 const GradientReady& ready,
                                 const ParamsReady& params_ready) {
  Status status = CheckCompatible(params, data);
  double loss_sum = 0.0;
  if (status.ok() && !batch_indices.empty()) {
    status = EvaluateOnBackend(params, data, batch_indices, grad, ready,
                               params_ready, &loss_sum);
  } else if (status.ok() && params_ready) {
    // No forward pass: the L2 term reads every layer.
    for (size_t l = 1; status.ok() && l <= num_layers(); ++l) {
      status =
          params_ready(WeightOffset(l),
                       layer_sizes_[l] * layer_sizes_[l - 1] + layer_sizes_[l]);
    }
  }
  if (!status.ok()) {
    // Layers handed out already stay as they were sent.
    if (!ready) std::fill(grad.begin(), grad.end(), 0.0f);
    return status;
  }
  if (batch_indices.empty()) {
    // The L2 term alone: its gradient is l2 * W, and 0 for the biases.
    std::fill(grad.begin(), grad.end(), 0.0f);
    if (!grad.empty()) {
      for (size_t l = 1; l <= num_layers(); ++l) {
        const size_t begin = WeightOffset(l);
        const size_t end = BiasOffset(l);
        for (size_t j = begin; j < end; ++j) {
          grad[j] = l2_weight_decay_ * params[j];
        }
      }
    }
    return static_cast<float>(L2Term(params));
  }
  return static_cast<float>(
      loss_sum / static_cast<double>(batch_indices.size()) + L2Term(params));
}

Result<float> MlpModel::LossAndGradient(std::span<const float> params,
                                        const Dataset& data,
                                        std::span<const size_t> batch_indices,
                                        std::span<float> grad,
                                        const GradientReady& ready,
                                        const ParamsReady& params_ready) {
  if (grad.size() != num_params()) {
    std::fill(grad.begin(), grad.end(), 0.0f);
    return InvalidArgumentError("MlpModel gradient buffer holds " +
                                std::to_string(grad.size()) +
                                " floats, the model has " +
                                std::to_string(num_params()) + " parameters");
  }
  return Evaluate(params, data, batch_indices, grad, ready, params_ready);
}

Result<float> MlpModel::Loss(std::span<const float> params, const Dataset& data,
                             std::span<const size_t> batch_indices) {
  return Evaluate(params, data, batch_indices, {}, nullptr, nullptr);
}

Result<double> MlpModel::Accuracy(std::span<const float> params,
                                  const Dataset& data) {
  DUCTILE_RETURN_IF_ERROR(CheckCompatible(params, data));
  if (data.num_samples == 0) return 0.0;
  DUCTILE_RETURN_IF_ERROR(backend_->Upload(params, params_));
  const size_t classes = layer_sizes_.back();
  std::vector<size_t> chunk;
  chunk.reserve(kEvalRows);
  size_t correct = 0;
  for (size_t begin = 0; begin < data.num_samples; begin += kEvalRows) {
    const size_t end = std::min(data.num_samples, begin + kEvalRows);
    chunk.clear();
    for (size_t i = begin; i < end; ++i) chunk.push_back(i);
    DUCTILE_RETURN_IF_ERROR(UploadBatch(data, chunk));
    DUCTILE_RETURN_IF_ERROR(Forward(chunk.size()));
    logits_host_.resize(chunk.size() * classes);
    DUCTILE_RETURN_IF_ERROR(
        backend_->Download(activations_.back(), logits_host_));
    for (size_t i = 0; i < chunk.size(); ++i) {
      const float* z = &logits_host_[i * classes];
      // max_element returns the first maximum: ties go to the lower class.
      const size_t predicted =
          static_cast<size_t>(std::max_element(z, z + classes) - z);
      if (predicted == data.labels[chunk[i]]) ++correct;
    }
  }
  return static_cast<double>(correct) / static_cast<double>(data.num_samples);
}

}  // namespace ductile::models
