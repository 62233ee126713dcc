#include "models/mlp_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "models/compute_backend.h"
#include "models/fmnist_data.h"
#include "models/logreg_model.h"

namespace ductile::models {
namespace {

std::unique_ptr<ComputeBackend> CpuBackend() {
  Result<std::unique_ptr<ComputeBackend>> backend = MakeComputeBackend("cpu");
  EXPECT_TRUE(backend.ok()) << backend.status();
  return std::move(*backend);
}

MlpModel MakeModel(ComputeBackend* backend, std::vector<size_t> layers,
                   float l2 = 0.0f) {
  MlpOptions options;
  options.layer_sizes = std::move(layers);
  options.l2_weight_decay = l2;
  Result<MlpModel> model = MlpModel::Create(backend, options);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

std::vector<size_t> AllIndices(size_t n) {
  std::vector<size_t> indices(n);
  std::iota(indices.begin(), indices.end(), size_t{0});
  return indices;
}

// Random biases too, so that the gradient check covers them.
std::vector<float> RandomParams(size_t size, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-scale, scale);
  std::vector<float> params(size);
  for (float& p : params) p = uniform(rng);
  return params;
}

// |a - b| / (|a| + |b|) over whole vectors, in double.
double RelativeDifference(const std::vector<float>& a,
                          const std::vector<float>& b) {
  double diff = 0.0, norm_a = 0.0, norm_b = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (a[i] - b[i]);
    norm_a += static_cast<double>(a[i]) * a[i];
    norm_b += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff) / (std::sqrt(norm_a) + std::sqrt(norm_b) + 1e-12);
}

TEST(MlpModel, NumParamsCountsWeightsAndBiasesOfEveryLayer) {
  const std::vector<size_t> fmnist = {784, 256, 128, 10};
  EXPECT_EQ(MlpModel::NumParams(fmnist), 235146u);
  const std::vector<size_t> tiny = {6, 5, 4, 3};
  EXPECT_EQ(MlpModel::NumParams(tiny), 5u * 7 + 4 * 6 + 3 * 5);
  const std::vector<size_t> one = {6};
  EXPECT_EQ(MlpModel::NumParams(one), 0u);
  std::unique_ptr<ComputeBackend> backend = CpuBackend();
  EXPECT_EQ(MakeModel(backend.get(), fmnist).num_params(), 235146u);
}

TEST(MlpModel, CreateRejectsBadOptions) {
  std::unique_ptr<ComputeBackend> backend = CpuBackend();
  MlpOptions options;
  options.layer_sizes = {10};
  EXPECT_EQ(MlpModel::Create(backend.get(), options).status().code(),
            StatusCode::kInvalidArgument);
  options.layer_sizes = {10, 0, 3};
  EXPECT_EQ(MlpModel::Create(backend.get(), options).status().code(),
            StatusCode::kInvalidArgument);
  options.layer_sizes = {10, 300};
  EXPECT_EQ(MlpModel::Create(backend.get(), options).status().code(),
            StatusCode::kInvalidArgument);
  options.layer_sizes = {10, 3};
  options.l2_weight_decay = -1.0f;
  EXPECT_EQ(MlpModel::Create(backend.get(), options).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MlpModel::Create(nullptr, MlpOptions{}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(MlpModel, InitParamsIsDeterministicWithinLimitsAndZeroBiases) {
  std::unique_ptr<ComputeBackend> backend = CpuBackend();
  const MlpModel model = MakeModel(backend.get(), {6, 5, 4, 3});
  const std::vector<float> params = model.InitParams(7);
  EXPECT_EQ(params, model.InitParams(7));
  EXPECT_NE(params, model.InitParams(8));
  ASSERT_EQ(params.size(), model.num_params());
  // Layer by layer: W (out x in) then b.
  size_t offset = 0;
  const std::vector<size_t>& sizes = model.layer_sizes();
  for (size_t l = 1; l < sizes.size(); ++l) {
    const double limit = l + 1 < sizes.size()
                             ? std::sqrt(6.0 / sizes[l - 1])
                             : std::sqrt(6.0 / (sizes[l - 1] + sizes[l]));
    for (size_t j = 0; j < sizes[l] * sizes[l - 1]; ++j) {
      EXPECT_LE(std::abs(params[offset + j]), limit);
    }
    offset += sizes[l] * sizes[l - 1];
    for (size_t j = 0; j < sizes[l]; ++j) EXPECT_EQ(params[offset + j], 0.0f);
    offset += sizes[l];
  }
}

void ExpectGradientMatchesFiniteDifferences(float l2) {
  const Dataset data = MakeSeparableData(12, 6, 3, 5);
  std::unique_ptr<ComputeBackend> backend = CpuBackend();
  MlpModel model = MakeModel(backend.get(), {6, 5, 4, 3}, l2);
  std::vector<float> params = RandomParams(model.num_params(), 0.8f, 11);
  // A batch with a repeated sample: repeats count twice in the mean.
  const std::vector<size_t> batch = {0, 3, 4, 4, 7, 8, 10, 11};

  std::vector<float> grad(model.num_params());
  Result<float> loss = model.LossAndGradient(params, data, batch, grad);
  ASSERT_TRUE(loss.ok()) << loss.status();
  Result<float> loss_only = model.Loss(params, data, batch);
  ASSERT_TRUE(loss_only.ok());
  EXPECT_FLOAT_EQ(*loss_only, *loss);

  // Central differences, one parameter at a time, in float like the model.
  const float eps = 1e-2f;
  std::vector<float> numeric(params.size());
  for (size_t j = 0; j < params.size(); ++j) {
    const float saved = params[j];
    params[j] = saved + eps;
    Result<float> up = model.Loss(params, data, batch);
    params[j] = saved - eps;
    Result<float> down = model.Loss(params, data, batch);
    params[j] = saved;
    ASSERT_TRUE(up.ok() && down.ok());
    numeric[j] = (*up - *down) / (2 * eps);
  }
  EXPECT_LT(RelativeDifference(grad, numeric), 1e-2);
  // And no component far off (a ReLU kink within eps would show here).
  for (size_t j = 0; j < params.size(); ++j) {
    EXPECT_NEAR(grad[j], numeric[j], 2e-3) << "parameter " << j;
  }
}

TEST(MlpModel, GradientMatchesFiniteDifferences) {
  ExpectGradientMatchesFiniteDifferences(0.0f);
}

TEST(MlpModel, GradientWithWeightDecayMatchesFiniteDifferences) {
  ExpectGradientMatchesFiniteDifferences(0.1f);
}

TEST(MlpModel, WithoutHiddenLayersItIsLogisticRegression) {
  // {features, classes} has LogRegModel's parameter layout and function.
  const Dataset data = MakeSeparableData(40, 6, 4, 2);
  std::unique_ptr<ComputeBackend> backend = CpuBackend();
  MlpModel mlp = MakeModel(backend.get(), {6, 4}, 0.05f);
  const LogRegModel logreg(6, 4, 0.05f);
  ASSERT_EQ(mlp.num_params(), logreg.num_params());
  const std::vector<float> params = RandomParams(mlp.num_params(), 0.5f, 3);
  const std::vector<size_t> batch = {1, 5, 9, 9, 30};

  std::vector<float> mlp_grad(mlp.num_params()), logreg_grad(mlp.num_params());
  Result<float> mlp_loss = mlp.LossAndGradient(params, data, batch, mlp_grad);
  ASSERT_TRUE(mlp_loss.ok()) << mlp_loss.status();
  const float logreg_loss =
      logreg.LossAndGradient(params, data, batch, logreg_grad);
  EXPECT_NEAR(*mlp_loss, logreg_loss, 1e-5);
  for (size_t j = 0; j < mlp_grad.size(); ++j) {
    EXPECT_NEAR(mlp_grad[j], logreg_grad[j], 1e-5) << "parameter " << j;
  }
  Result<double> accuracy = mlp.Accuracy(params, data);
  ASSERT_TRUE(accuracy.ok());
  EXPECT_DOUBLE_EQ(*accuracy, logreg.Accuracy(params, data));
}

TEST(MlpModel, ChangingBatchSizesGivesTheSameResultsAsAFreshModel) {
  // The model grows its buffers for a bigger batch and keeps them for
  // smaller ones; neither may leak into results.
  const Dataset data = MakeSeparableData(100, 6, 3, 9);
  std::unique_ptr<ComputeBackend> backend = CpuBackend();
  MlpModel reused = MakeModel(backend.get(), {6, 5, 4, 3});
  const std::vector<float> params = reused.InitParams(1);
  const std::vector<size_t> small = {3, 1, 4};
  const std::vector<size_t> big = AllIndices(100);
  std::vector<float> grad(reused.num_params());
  for (const std::vector<size_t>* batch : {&small, &big, &small}) {
    MlpModel fresh = MakeModel(backend.get(), {6, 5, 4, 3});
    std::vector<float> fresh_grad(fresh.num_params());
    Result<float> loss = reused.LossAndGradient(params, data, *batch, grad);
    Result<float> fresh_loss =
        fresh.LossAndGradient(params, data, *batch, fresh_grad);
    ASSERT_TRUE(loss.ok() && fresh_loss.ok());
    EXPECT_EQ(*loss, *fresh_loss);
    EXPECT_EQ(grad, fresh_grad);
  }
}

// With `ready`, each layer's W and b are handed out as the backward pass
// finishes them, last layer first, in ranges that tile the gradient; what
// a range holds when it is handed out is final, and the whole gradient and
// the loss are those of a call without `ready`.
TEST(MlpModel, EachLayersGradientIsHandedOutFinalLastLayerFirst) {
  const Dataset data = MakeSeparableData(40, 6, 3, 9);
  std::unique_ptr<ComputeBackend> backend = CpuBackend();
  MlpModel model = MakeModel(backend.get(), {6, 5, 4, 3}, /*l2=*/0.01f);
  const std::vector<float> params = RandomParams(model.num_params(), 0.5f, 3);
  const std::vector<size_t> batch = AllIndices(40);
  std::vector<float> plain(model.num_params());
  Result<float> plain_loss = model.LossAndGradient(params, data, batch, plain);
  ASSERT_TRUE(plain_loss.ok()) << plain_loss.status();

  std::vector<float> grad(model.num_params(), std::nanf(""));
  std::vector<std::pair<size_t, size_t>> ranges;
  std::vector<std::vector<float>> at_handout;
  Result<float> loss = model.LossAndGradient(
      params, data, batch, grad, [&](size_t begin, size_t count) {
        ranges.emplace_back(begin, count);
        at_handout.emplace_back(grad.begin() + begin,
                                grad.begin() + begin + count);
      });
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(*loss, *plain_loss);
  EXPECT_EQ(grad, plain);
  // Layers 3, 2, 1 of {6, 5, 4, 3}: W3 + b3 at 30 + 5 + 20 + 4 = 59 (12
  // + 3 floats), W2 + b2 at 35 (20 + 4), W1 + b1 at 0 (30 + 5).
  const std::vector<std::pair<size_t, size_t>> expected = {
      {59, 15}, {35, 24}, {0, 35}};
  EXPECT_EQ(ranges, expected);
  ASSERT_EQ(model.num_params(), 74u);
  for (size_t i = 0; i < ranges.size() && i < at_handout.size(); ++i) {
    EXPECT_EQ(
        at_handout[i],
        std::vector<float>(plain.begin() + ranges[i].first,
                           plain.begin() + ranges[i].first + ranges[i].second))
        << "layer range " << i;
  }
}

// The parameters arrive layer by layer: each range holds NaN until the
// callback fills it, so a layer read before its callback would poison the
// loss and the gradient.
TEST(MlpModel, ParametersAreReadLayerByLayerOnlyOnceTheyHaveArrived) {
  const Dataset data = MakeSeparableData(40, 6, 3, 9);
  std::unique_ptr<ComputeBackend> backend = CpuBackend();
  MlpModel model = MakeModel(backend.get(), {6, 5, 4, 3}, /*l2=*/0.01f);
  const std::vector<float> params = RandomParams(model.num_params(), 0.5f, 3);
  const std::vector<size_t> batch = AllIndices(40);
  std::vector<float> plain(model.num_params());
  Result<float> plain_loss = model.LossAndGradient(params, data, batch, plain);
  ASSERT_TRUE(plain_loss.ok()) << plain_loss.status();

  std::vector<float> arriving(model.num_params(), std::nanf(""));
  std::vector<std::pair<size_t, size_t>> ranges;
  auto arrive = [&](size_t begin, size_t count) {
    ranges.emplace_back(begin, count);
    std::copy(params.begin() + begin, params.begin() + begin + count,
              arriving.begin() + begin);
    return Status::Ok();
  };
  std::vector<float> grad(model.num_params());
  Result<float> loss =
      model.LossAndGradient(arriving, data, batch, grad, nullptr, arrive);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(*loss, *plain_loss);
  EXPECT_EQ(grad, plain);
  // Layers 1, 2, 3 of {6, 5, 4, 3}, in the forward pass's order.
  const std::vector<std::pair<size_t, size_t>> expected = {
      {0, 35}, {35, 24}, {59, 15}};
  EXPECT_EQ(ranges, expected);

  // With the gradient handed out too, and for an empty batch (the L2 term
  // alone reads every layer).
  std::fill(arriving.begin(), arriving.end(), std::nanf(""));
  ranges.clear();
  std::vector<float> handed(model.num_params());
  loss = model.LossAndGradient(
      arriving, data, batch, handed, [](size_t, size_t) {}, arrive);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(handed, plain);
  std::fill(arriving.begin(), arriving.end(), std::nanf(""));
  ranges.clear();
  Result<float> decay = model.LossAndGradient(params, data, {}, plain);
  loss = model.LossAndGradient(arriving, data, {}, grad, nullptr, arrive);
  ASSERT_TRUE(loss.ok() && decay.ok());
  EXPECT_EQ(*loss, *decay);
  EXPECT_EQ(ranges, expected);
}

TEST(MlpModel, AParameterRangeThatFailsToArriveEndsTheCall) {
  const Dataset data = MakeSeparableData(10, 6, 3, 1);
  std::unique_ptr<ComputeBackend> backend = CpuBackend();
  MlpModel model = MakeModel(backend.get(), {6, 5, 4, 3});
  const std::vector<float> params = RandomParams(model.num_params(), 0.5f, 3);
  std::vector<float> grad(model.num_params(), 7.0f);
  int calls = 0;
  Result<float> loss = model.LossAndGradient(
      params, data, AllIndices(10), grad, nullptr, [&](size_t begin, size_t) {
        ++calls;
        return begin == 0 ? Status::Ok()
                          : UnavailableError("server 1 did not answer");
      });
  EXPECT_EQ(loss.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(calls, 2);  // the second layer's failed: no third
  EXPECT_EQ(grad, std::vector<float>(model.num_params(), 0.0f));
}

TEST(MlpModel, SgdOnSeparableDataReachesHighAccuracy) {
  const Dataset data = MakeSeparableData(600, 20, 4, 3);
  std::unique_ptr<ComputeBackend> backend = CpuBackend();
  MlpModel model = MakeModel(backend.get(), {20, 32, 16, 4});
  std::vector<float> params = model.InitParams(1);
  std::vector<float> grad(model.num_params());
  // Batches of 32 in each epoch's shuffle; the last of an epoch may be short.
  std::vector<size_t> order;
  size_t position = 0;
  uint64_t epoch = 0;
  std::vector<size_t> batch;
  const float lr = 0.1f;
  for (int step = 0; step < 300; ++step) {
    if (position == order.size()) {
      order = PartitionIndices(data.num_samples, 0, 1, 5, epoch++);
      position = 0;
    }
    const size_t end = std::min(position + 32, order.size());
    batch.assign(order.begin() + position, order.begin() + end);
    position = end;
    Result<float> loss = model.LossAndGradient(params, data, batch, grad);
    ASSERT_TRUE(loss.ok()) << loss.status();
    for (size_t j = 0; j < params.size(); ++j) params[j] -= lr * grad[j];
  }
  Result<double> accuracy = model.Accuracy(params, data);
  ASSERT_TRUE(accuracy.ok());
  EXPECT_GT(*accuracy, 0.9);
}

TEST(MlpModel, EmptyBatchGivesTheWeightDecayAlone) {
  const Dataset data = MakeSeparableData(10, 6, 3, 1);
  std::unique_ptr<ComputeBackend> backend = CpuBackend();
  MlpModel model = MakeModel(backend.get(), {6, 5, 3}, 0.5f);
  const std::vector<float> params = RandomParams(model.num_params(), 1.0f, 4);
  std::vector<float> grad(model.num_params(), 9.0f);
  Result<float> loss = model.LossAndGradient(params, data, {}, grad);
  ASSERT_TRUE(loss.ok());
  double norm_sq = 0.0;
  // W1 is params[0, 30), b1 [30, 35), W2 [35, 50), b2 [50, 53).
  for (size_t j = 0; j < 53; ++j) {
    const bool weight = j < 30 || (j >= 35 && j < 50);
    if (weight) norm_sq += static_cast<double>(params[j]) * params[j];
    EXPECT_FLOAT_EQ(grad[j], weight ? 0.5f * params[j] : 0.0f) << j;
  }
  EXPECT_NEAR(*loss, 0.25 * norm_sq, 1e-5);
}

TEST(MlpModel, BadInputsAreErrorsAndZeroTheGradient) {
  const Dataset data = MakeSeparableData(10, 6, 3, 1);
  std::unique_ptr<ComputeBackend> backend = CpuBackend();
  MlpModel model = MakeModel(backend.get(), {6, 5, 3});
  const std::vector<float> params = model.InitParams(1);
  std::vector<float> grad(model.num_params(), 9.0f);
  const std::vector<float> zeros(model.num_params(), 0.0f);

  const std::vector<size_t> out_of_range = {0, 10};
  const std::vector<size_t> first = {0}, third = {2}, two = {0, 1};
  EXPECT_EQ(
      model.LossAndGradient(params, data, out_of_range, grad).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(grad, zeros);

  std::fill(grad.begin(), grad.end(), 9.0f);
  const std::vector<float> short_params(params.begin(), params.end() - 1);
  EXPECT_EQ(
      model.LossAndGradient(short_params, data, first, grad).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(grad, zeros);

  std::vector<float> short_grad(model.num_params() - 1, 9.0f);
  EXPECT_EQ(
      model.LossAndGradient(params, data, first, short_grad).status().code(),
      StatusCode::kInvalidArgument);

  Dataset bad_label = data;
  bad_label.labels[2] = 3;
  std::fill(grad.begin(), grad.end(), 9.0f);
  EXPECT_EQ(
      model.LossAndGradient(params, bad_label, third, grad).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(grad, zeros);
  EXPECT_EQ(model.Accuracy(params, bad_label).status().code(),
            StatusCode::kInvalidArgument);

  const Dataset other_shape = MakeSeparableData(10, 7, 3, 1);
  EXPECT_EQ(model.Accuracy(params, other_shape).status().code(),
            StatusCode::kInvalidArgument);

  // Still usable after the errors.
  EXPECT_TRUE(model.LossAndGradient(params, data, two, grad).ok());
}

TEST(MlpModel, CpuAndCudaAgreeOnLossAndGradient) {
  Result<std::unique_ptr<ComputeBackend>> cuda = MakeComputeBackend("cuda");
  if (!cuda.ok()) {
    GTEST_SKIP() << "no usable CUDA backend here: " << cuda.status();
  }
  std::unique_ptr<ComputeBackend> cpu = CpuBackend();
  const Dataset data = MakeSeparableData(300, 50, 10, 4);
  MlpModel on_cpu = MakeModel(cpu.get(), {50, 64, 32, 10}, 1e-3f);
  MlpModel on_cuda = MakeModel(cuda->get(), {50, 64, 32, 10}, 1e-3f);
  const std::vector<float> params = on_cpu.InitParams(2);
  std::vector<float> cpu_grad(on_cpu.num_params()),
      cuda_grad(on_cpu.num_params());
  const std::vector<size_t> all = AllIndices(300);
  for (size_t batch_size : {1, 64, 300}) {
    const std::vector<size_t> batch(all.begin(), all.begin() + batch_size);
    Result<float> cpu_loss =
        on_cpu.LossAndGradient(params, data, batch, cpu_grad);
    Result<float> cuda_loss =
        on_cuda.LossAndGradient(params, data, batch, cuda_grad);
    ASSERT_TRUE(cpu_loss.ok()) << cpu_loss.status();
    ASSERT_TRUE(cuda_loss.ok()) << cuda_loss.status();
    EXPECT_NEAR(*cuda_loss, *cpu_loss, 1e-4 * std::abs(*cpu_loss));
    EXPECT_LT(RelativeDifference(cpu_grad, cuda_grad), 1e-4);
  }
  Result<double> cpu_accuracy = on_cpu.Accuracy(params, data);
  Result<double> cuda_accuracy = on_cuda.Accuracy(params, data);
  ASSERT_TRUE(cpu_accuracy.ok() && cuda_accuracy.ok());
  EXPECT_NEAR(*cpu_accuracy, *cuda_accuracy, 1.0 / 300);
}

}  // namespace
}  // namespace ductile::models
