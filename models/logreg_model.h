// Multinomial logistic regression (softmax cross-entropy), the model the
// built-in training apps fit through the parameter server.
//
// The model holds only its shape; the parameters live in a flat float vector
// that the caller owns (in practice, a copy pulled from a ductile table):
//
//   [ W (num_classes x num_features, row-major) | b (num_classes) ]
//
// so W[k][f] is params[k * num_features + f] and b[k] is
// params[num_classes * num_features + k]. This layout is what workers push
// and pull: changing it breaks compatibility between workers and saved
// checkpoints.
//
// Example (one SGD step on a minibatch):
//   LogRegModel model(data.num_features, data.num_classes);
//   std::vector<float> params(model.num_params()), grad(model.num_params());
//   float loss = model.LossAndGradient(params, data, batch, grad);
//   for (size_t j = 0; j < params.size(); ++j) params[j] -= lr * grad[j];
//
// Thread safety: a LogRegModel is immutable after construction; all methods
// are const and may be called concurrently (each call allocates its own
// scratch space).
#ifndef DUCTILE_MODELS_LOGREG_MODEL_H_
#define DUCTILE_MODELS_LOGREG_MODEL_H_

#include <cstddef>
#include <span>

#include "ductile/status.h"
#include "models/fmnist_data.h"

namespace ductile::models {

class LogRegModel {
 public:
  // `l2_weight_decay` (>= 0, default 0) adds (l2_weight_decay / 2) * |W|^2
  // to the loss and l2_weight_decay * W to the gradient; the bias is not
  // decayed.
  LogRegModel(size_t num_features, int num_classes,
              float l2_weight_decay = 0.0f);

  // Length of the parameter vector: num_classes * (num_features + 1), or 0
  // if num_classes <= 0.
  static size_t NumParams(size_t num_features, int num_classes);

  size_t num_features() const { return num_features_; }
  int num_classes() const { return num_classes_; }
  float l2_weight_decay() const { return l2_weight_decay_; }
  size_t num_params() const { return NumParams(num_features_, num_classes_); }

  // OK if the model's shape is valid and `params` and `data` fit it:
  // params.size() == num_params(), data.num_features == num_features(),
  // data.num_classes == num_classes() and the data's vectors have the sizes
  // its counts say. InvalidArgument (with the mismatch) otherwise. Cheap:
  // it does not scan the labels.
  [[nodiscard]] Status CheckCompatible(std::span<const float> params,
                                       const Dataset& data) const;

  // Returns the mean softmax cross-entropy over the samples
  // data[batch_indices] (plus the L2 term) and writes its gradient with
  // respect to params into `grad` (overwritten, not accumulated). An empty
  // batch gives the L2 term alone.
  //
  // Returns NaN and fills `grad` with zeros (so that an unchecked result
  // cannot corrupt a shared model) if CheckCompatible fails, if
  // grad.size() != num_params(), or if an index or a label is out of range.
  float LossAndGradient(std::span<const float> params, const Dataset& data,
                        std::span<const size_t> batch_indices,
                        std::span<float> grad) const;

  // The loss LossAndGradient returns, without the gradient. NaN on the same
  // errors.
  float Loss(std::span<const float> params, const Dataset& data,
             std::span<const size_t> batch_indices) const;

  // Fraction of all samples of `data` whose highest logit (ties to the lower
  // class) is their label. 0 for an empty data set; NaN if CheckCompatible
  // fails or a label is out of range.
  double Accuracy(std::span<const float> params, const Dataset& data) const;

 private:
  // Shared body of Loss and LossAndGradient; `grad` is empty for Loss.
  float Evaluate(std::span<const float> params, const Dataset& data,
                 std::span<const size_t> batch_indices,
                 std::span<float> grad) const;

  // logits[k] = b[k] + W[k] . x, for k in [0, num_classes).
  void ComputeLogits(std::span<const float> params, const float* x,
                     double* logits) const;

  size_t num_features_;
  int num_classes_;
  float l2_weight_decay_;
};

}  // namespace ductile::models

#endif  // DUCTILE_MODELS_LOGREG_MODEL_H_
