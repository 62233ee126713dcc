#include "models/logreg_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "models/fmnist_data.h"

namespace ductile::models {
namespace {

std::vector<float> RandomParams(size_t size, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-scale, scale);
  std::vector<float> params(size);
  for (float& p : params) p = uniform(rng);
  return params;
}

std::vector<size_t> AllIndices(size_t n) {
  std::vector<size_t> indices(n);
  std::iota(indices.begin(), indices.end(), size_t{0});
  return indices;
}

TEST(LogRegModel, NumParamsIsWeightsThenBiases) {
  EXPECT_EQ(LogRegModel::NumParams(784, 10), 7850u);
  EXPECT_EQ(LogRegModel::NumParams(3, 2), 8u);
  EXPECT_EQ(LogRegModel::NumParams(3, 0), 0u);
  EXPECT_EQ(LogRegModel(784, 10).num_params(), 7850u);
}

TEST(LogRegModel, ZeroParametersGiveLogNumClassesLoss) {
  const Dataset data = MakeSeparableData(50, 6, 5, 1);
  const LogRegModel model(6, 5);
  std::vector<float> params(model.num_params(), 0.0f);
  std::vector<float> grad(model.num_params());
  const std::vector<size_t> batch = AllIndices(50);
  EXPECT_NEAR(model.LossAndGradient(params, data, batch, grad), std::log(5.0),
              1e-6);
  EXPECT_NEAR(model.Loss(params, data, batch), std::log(5.0), 1e-6);
}

void ExpectGradientMatchesFiniteDifferences(float l2_weight_decay) {
  const size_t features = 6;
  const int classes = 4;
  const Dataset data = MakeSeparableData(12, features, classes, 5);
  const LogRegModel model(features, classes, l2_weight_decay);
  std::vector<float> params = RandomParams(model.num_params(), 0.7f, 11);
  // A batch with a repeated sample: repeats count twice in the mean.
  const std::vector<size_t> batch = {0, 3, 4, 4, 7, 8, 10, 11};

  std::vector<float> grad(model.num_params());
  const float loss = model.LossAndGradient(params, data, batch, grad);
  EXPECT_FLOAT_EQ(loss, model.Loss(params, data, batch));

  const float eps = 1e-2f;
  double diff_norm_sq = 0.0, norm_sq = 0.0;
  for (size_t j = 0; j < params.size(); ++j) {
    const float saved = params[j];
    params[j] = saved + eps;
    const double plus_step = static_cast<double>(params[j]);
    const double loss_plus = model.Loss(params, data, batch);
    params[j] = saved - eps;
    const double minus_step = static_cast<double>(params[j]);
    const double loss_minus = model.Loss(params, data, batch);
    params[j] = saved;
    const double numeric = (loss_plus - loss_minus) / (plus_step - minus_step);
    const double analytic = grad[j];
    // Relative error, with a floor so that near-zero components are judged
    // by the absolute error the float loss allows.
    const double relative =
        std::abs(analytic - numeric) /
        std::max({std::abs(analytic), std::abs(numeric), 1e-2});
    EXPECT_LT(relative, 1e-2) << "parameter " << j << ": analytic " << analytic
                              << ", numeric " << numeric;
    diff_norm_sq += (analytic - numeric) * (analytic - numeric);
    norm_sq += analytic * analytic;
  }
  EXPECT_LT(std::sqrt(diff_norm_sq / norm_sq), 1e-3);
}

TEST(LogRegModel, GradientMatchesCentralFiniteDifferences) {
  ExpectGradientMatchesFiniteDifferences(0.0f);
}

TEST(LogRegModel, GradientWithWeightDecayMatchesCentralFiniteDifferences) {
  ExpectGradientMatchesFiniteDifferences(0.3f);
}

TEST(LogRegModel, WeightDecayAddsHalfSquaredNormOfWeightsOnly) {
  const Dataset data = MakeSeparableData(20, 3, 2, 2);
  const LogRegModel plain(3, 2);
  const LogRegModel decayed(3, 2, 0.5f);
  // W = all 2, b = all 100: only W counts, (0.5 / 2) * 6 * 4 = 6.
  std::vector<float> params = {2, 2, 2, 2, 2, 2, 100, 100};
  const std::vector<size_t> batch = AllIndices(20);
  EXPECT_NEAR(
      decayed.Loss(params, data, batch) - plain.Loss(params, data, batch), 6.0,
      1e-4);
  std::vector<float> g_plain(8), g_decayed(8);
  plain.LossAndGradient(params, data, batch, g_plain);
  decayed.LossAndGradient(params, data, batch, g_decayed);
  for (size_t j = 0; j < 6; ++j)
    EXPECT_NEAR(g_decayed[j] - g_plain[j], 1.0, 1e-5);
  for (size_t j = 6; j < 8; ++j) EXPECT_FLOAT_EQ(g_decayed[j], g_plain[j]);
}

TEST(LogRegModel, SoftmaxIsStableForHugeLogits) {
  const Dataset data = MakeSeparableData(30, 4, 3, 8);
  const LogRegModel model(4, 3);
  std::vector<float> params = RandomParams(model.num_params(), 1e4f, 3);
  std::vector<float> grad(model.num_params());
  const float loss = model.LossAndGradient(params, data, AllIndices(30), grad);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GE(loss, 0.0f);
  for (float g : grad) EXPECT_TRUE(std::isfinite(g));
}

TEST(LogRegModel, AccuracyCountsArgmaxMatches) {
  Dataset data;
  data.num_samples = 3;
  data.num_features = 2;
  data.num_classes = 2;
  data.images = {1, 0, 0, 1, 1, 0};
  data.labels = {0, 1, 1};
  const LogRegModel model(2, 2);
  // W = identity, b = 0: the prediction is the larger feature.
  const std::vector<float> params = {1, 0, 0, 1, 0, 0};
  EXPECT_DOUBLE_EQ(model.Accuracy(params, data), 2.0 / 3.0);
}

TEST(LogRegModel, SgdOnSeparableDataReachesHighAccuracy) {
  // Few features and many classes, so that centroids are close enough for
  // the problem to need some training (zero parameters predict class 0).
  const size_t features = 5;
  const int classes = 10;
  const Dataset data = MakeSeparableData(2000, features, classes, 7);
  const LogRegModel model(features, classes);
  std::vector<float> params(model.num_params(), 0.0f);
  std::vector<float> grad(model.num_params());
  ASSERT_LT(model.Accuracy(params, data), 0.5);
  const float initial_loss = model.Loss(params, data, AllIndices(2000));

  const size_t batch_size = 32;
  const float learning_rate = 0.5f;
  uint64_t epoch = 0;
  std::vector<size_t> order = PartitionIndices(2000, 0, 1, 1, epoch);
  size_t next = 0;
  for (int step = 0; step < 300; ++step) {
    if (next + batch_size > order.size()) {
      order = PartitionIndices(2000, 0, 1, 1, ++epoch);
      next = 0;
    }
    const std::span<const size_t> batch(order.data() + next, batch_size);
    next += batch_size;
    ASSERT_TRUE(
        std::isfinite(model.LossAndGradient(params, data, batch, grad)));
    for (size_t j = 0; j < params.size(); ++j) {
      params[j] -= learning_rate * grad[j];
    }
  }
  EXPECT_GT(model.Accuracy(params, data), 0.95);
  EXPECT_LT(model.Loss(params, data, AllIndices(2000)), 0.5f * initial_loss);
}

TEST(LogRegModel, MismatchedShapesGiveNaNAndZeroGradient) {
  const Dataset data = MakeSeparableData(10, 4, 3, 1);
  const LogRegModel model(4, 3);
  const std::vector<size_t> batch = {0, 1};

  std::vector<float> short_params(model.num_params() - 1, 1.0f);
  EXPECT_EQ(model.CheckCompatible(short_params, data).code(),
            StatusCode::kInvalidArgument);
  std::vector<float> grad(model.num_params(), 5.0f);
  EXPECT_TRUE(
      std::isnan(model.LossAndGradient(short_params, data, batch, grad)));
  for (float g : grad) EXPECT_EQ(g, 0.0f);
  EXPECT_TRUE(std::isnan(model.Accuracy(short_params, data)));

  const std::vector<float> params(model.num_params(), 1.0f);
  EXPECT_TRUE(model.CheckCompatible(params, data).ok());
  std::vector<float> short_grad(model.num_params() - 1, 5.0f);
  EXPECT_TRUE(
      std::isnan(model.LossAndGradient(params, data, batch, short_grad)));
  for (float g : short_grad) EXPECT_EQ(g, 0.0f);

  const LogRegModel wider(5, 3);
  EXPECT_EQ(wider.CheckCompatible(std::vector<float>(wider.num_params()), data)
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(LogRegModel, OutOfRangeIndexOrLabelGivesNaN) {
  Dataset data = MakeSeparableData(10, 4, 3, 1);
  const LogRegModel model(4, 3);
  const std::vector<float> params(model.num_params(), 0.0f);
  std::vector<float> grad(model.num_params(), 5.0f);
  const std::vector<size_t> out_of_range = {0, 10};
  EXPECT_TRUE(
      std::isnan(model.LossAndGradient(params, data, out_of_range, grad)));
  for (float g : grad) EXPECT_EQ(g, 0.0f);
  EXPECT_TRUE(std::isnan(model.Loss(params, data, out_of_range)));

  data.labels[2] = 3;
  const std::vector<size_t> bad_label = {2};
  EXPECT_TRUE(std::isnan(model.Loss(params, data, bad_label)));
  EXPECT_TRUE(std::isnan(model.Accuracy(params, data)));
}

}  // namespace
}  // namespace ductile::models
