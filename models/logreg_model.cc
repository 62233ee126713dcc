#include "models/logreg_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace ductile::models {
namespace {

constexpr float kFloatNaN = std::numeric_limits<float>::quiet_NaN();

// a . b accumulated in double. Four independent partial sums let the CPU
// overlap the additions; the order is fixed, so results are reproducible.
double Dot(const float* a, const float* b, size_t n) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += static_cast<double>(a[i]) * b[i];
    s1 += static_cast<double>(a[i + 1]) * b[i + 1];
    s2 += static_cast<double>(a[i + 2]) * b[i + 2];
    s3 += static_cast<double>(a[i + 3]) * b[i + 3];
  }
  for (; i < n; ++i) s0 += static_cast<double>(a[i]) * b[i];
  return (s0 + s1) + (s2 + s3);
}

}  // namespace

LogRegModel::LogRegModel(size_t num_features, int num_classes,
                         float l2_weight_decay)
    : num_features_(num_features),
      num_classes_(num_classes),
      l2_weight_decay_(l2_weight_decay) {}

size_t LogRegModel::NumParams(size_t num_features, int num_classes) {
  if (num_classes <= 0) return 0;
  return static_cast<size_t>(num_classes) * (num_features + 1);
}

Status LogRegModel::CheckCompatible(std::span<const float> params,
                                    const Dataset& data) const {
  if (num_classes_ < 1 || num_features_ < 1) {
    return InvalidArgumentError(
        "LogRegModel needs at least one feature and one class, has " +
        std::to_string(num_features_) + " features and " +
        std::to_string(num_classes_) + " classes");
  }
  if (!(l2_weight_decay_ >= 0.0f) || !std::isfinite(l2_weight_decay_)) {
    return InvalidArgumentError(
        "LogRegModel l2_weight_decay must be finite "
        "and >= 0, is " +
        std::to_string(l2_weight_decay_));
  }
  if (params.size() != num_params()) {
    return InvalidArgumentError(
        "LogRegModel expects " + std::to_string(num_params()) +
        " parameters (" + std::to_string(num_classes_) + " classes x (" +
        std::to_string(num_features_) + " features + 1)), got " +
        std::to_string(params.size()));
  }
  if (data.num_features != num_features_ || data.num_classes != num_classes_) {
    return InvalidArgumentError(
        "data set has " + std::to_string(data.num_features) + " features and " +
        std::to_string(data.num_classes) + " classes, the model " +
        std::to_string(num_features_) + " and " + std::to_string(num_classes_));
  }
  if (data.labels.size() != data.num_samples ||
      data.images.size() / num_features_ != data.num_samples ||
      data.images.size() % num_features_ != 0) {
    return InvalidArgumentError(
        "data set is inconsistent: num_samples is " +
        std::to_string(data.num_samples) + " but it holds " +
        std::to_string(data.labels.size()) + " labels and " +
        std::to_string(data.images.size()) + " feature values");
  }
  return Status::Ok();
}

void LogRegModel::ComputeLogits(std::span<const float> params, const float* x,
                                double* logits) const {
  const size_t num_classes = static_cast<size_t>(num_classes_);
  const float* weights = params.data();
  const float* bias = weights + num_classes * num_features_;
  for (size_t k = 0; k < num_classes; ++k) {
    logits[k] = bias[k] + Dot(weights + k * num_features_, x, num_features_);
  }
}

float LogRegModel::LossAndGradient(std::span<const float> params,
                                   const Dataset& data,
                                   std::span<const size_t> batch_indices,
                                   std::span<float> grad) const {
  if (grad.size() != num_params()) {
    std::fill(grad.begin(), grad.end(), 0.0f);
    return kFloatNaN;
  }
  return Evaluate(params, data, batch_indices, grad);
}

float LogRegModel::Loss(std::span<const float> params, const Dataset& data,
                        std::span<const size_t> batch_indices) const {
  return Evaluate(params, data, batch_indices, {});
}

float LogRegModel::Evaluate(std::span<const float> params, const Dataset& data,
                            std::span<const size_t> batch_indices,
                            std::span<float> grad) const {
  const bool want_grad = !grad.empty();
  auto fail = [&] {
    std::fill(grad.begin(), grad.end(), 0.0f);
    return kFloatNaN;
  };
  if (!CheckCompatible(params, data).ok()) return fail();

  const size_t num_classes = static_cast<size_t>(num_classes_);
  const size_t num_weights = num_classes * num_features_;
  // Gradient sums over the batch, in double: W part then b part, the same
  // layout as params.
  std::vector<double> grad_sum(want_grad ? num_params() : 0, 0.0);
  std::vector<double> logits(num_classes);
  double loss_sum = 0.0;

  for (size_t index : batch_indices) {
    if (index >= data.num_samples) return fail();
    const size_t label = data.labels[index];
    if (label >= num_classes) return fail();
    const float* x = &data.images[index * num_features_];
    ComputeLogits(params, x, logits.data());

    // Stable softmax: shift by the largest logit so exp() cannot overflow.
    const double max_logit = *std::max_element(logits.begin(), logits.end());
    const double shifted_label_logit = logits[label] - max_logit;
    double sum_exp = 0.0;
    for (double& z : logits) {
      z = std::exp(z - max_logit);  // logits now hold unnormalised probs
      sum_exp += z;
    }
    // -log p[label] = log(sum_exp) - (z[label] - max_logit); sum_exp >= 1.
    loss_sum += std::log(sum_exp) - shifted_label_logit;
    if (!want_grad) continue;

    // d loss / d z[k] = p[k] - [k == label].
    for (size_t k = 0; k < num_classes; ++k) {
      const double delta = logits[k] / sum_exp - (k == label ? 1.0 : 0.0);
      double* grad_row = &grad_sum[k * num_features_];
      for (size_t f = 0; f < num_features_; ++f) grad_row[f] += delta * x[f];
      grad_sum[num_weights + k] += delta;
    }
  }

  const double scale = batch_indices.empty()
                           ? 0.0
                           : 1.0 / static_cast<double>(batch_indices.size());
  const double l2 = l2_weight_decay_;
  double weight_norm_sq = 0.0;
  if (l2 != 0.0) {
    for (size_t j = 0; j < num_weights; ++j) {
      weight_norm_sq += static_cast<double>(params[j]) * params[j];
    }
  }
  if (want_grad) {
    for (size_t j = 0; j < num_weights; ++j) {
      grad[j] = static_cast<float>(grad_sum[j] * scale + l2 * params[j]);
    }
    for (size_t k = 0; k < num_classes; ++k) {
      grad[num_weights + k] =
          static_cast<float>(grad_sum[num_weights + k] * scale);
    }
  }
  return static_cast<float>(loss_sum * scale + 0.5 * l2 * weight_norm_sq);
}

double LogRegModel::Accuracy(std::span<const float> params,
                             const Dataset& data) const {
  if (!CheckCompatible(params, data).ok()) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  if (data.num_samples == 0) return 0.0;
  const size_t num_classes = static_cast<size_t>(num_classes_);
  std::vector<double> logits(num_classes);
  size_t correct = 0;
  for (size_t i = 0; i < data.num_samples; ++i) {
    const size_t label = data.labels[i];
    if (label >= num_classes) return std::numeric_limits<double>::quiet_NaN();
    ComputeLogits(params, &data.images[i * num_features_], logits.data());
    // max_element returns the first maximum: ties go to the lower class.
    const size_t predicted = static_cast<size_t>(
        std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (predicted == label) ++correct;
  }
  return static_cast<double>(correct) / static_cast<double>(data.num_samples);
}

}  // namespace ductile::models
