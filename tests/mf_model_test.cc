#include "models/mf_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace ductile::models {
namespace {

std::vector<uint64_t> Range(uint64_t n) {
  std::vector<uint64_t> ids(n);
  std::iota(ids.begin(), ids.end(), uint64_t{0});
  return ids;
}

double StdDev(const std::vector<Rating>& ratings) {
  double sum = 0.0, sum_sq = 0.0;
  for (const Rating& r : ratings) {
    sum += r.value;
    sum_sq += static_cast<double>(r.value) * r.value;
  }
  const double n = static_cast<double>(ratings.size());
  return std::sqrt(sum_sq / n - (sum / n) * (sum / n));
}

TEST(MakeLowRankData, IsDeterministicAndSplitsTheObservedEntries) {
  const LowRankData data = MakeLowRankData(50, 40, 3, 0.5, 0.1, 7);
  EXPECT_EQ(data.rows, 50u);
  EXPECT_EQ(data.cols, 40u);
  EXPECT_EQ(data.rank, 3u);
  const size_t observed = data.train.size() + data.test.size();
  // About half of 2000 entries, about a tenth of them for testing.
  EXPECT_GT(observed, 850u);
  EXPECT_LT(observed, 1150u);
  EXPECT_GT(data.test.size(), observed / 20);
  EXPECT_LT(data.test.size(), observed / 5);
  for (const std::vector<Rating>* part : {&data.train, &data.test}) {
    for (const Rating& r : *part) {
      EXPECT_LT(r.row, 50u);
      EXPECT_LT(r.col, 40u);
    }
  }
  // Noiseless entries have variance 1 by construction.
  EXPECT_NEAR(StdDev(data.train), 1.0, 0.25);

  const LowRankData again = MakeLowRankData(50, 40, 3, 0.5, 0.1, 7);
  ASSERT_EQ(again.train.size(), data.train.size());
  for (size_t i = 0; i < data.train.size(); ++i) {
    EXPECT_EQ(again.train[i].row, data.train[i].row);
    EXPECT_EQ(again.train[i].col, data.train[i].col);
    EXPECT_EQ(again.train[i].value, data.train[i].value);
  }
}

TEST(MakeLowRankData, BadArgumentsGiveEmptyData) {
  EXPECT_EQ(MakeLowRankData(0, 4, 2, 0.5, 0.1, 1).rows, 0u);
  EXPECT_EQ(MakeLowRankData(4, 4, 0, 0.5, 0.1, 1).rows, 0u);
  EXPECT_EQ(MakeLowRankData(4, 4, 2, 1.5, 0.1, 1).rows, 0u);
  EXPECT_EQ(MakeLowRankData(4, 4, 2, 0.5, -1.0, 1).rows, 0u);
  EXPECT_TRUE(MakeLowRankData(4, 4, 2, 0.5, 0.1, 1, 2.0).train.empty());
}

TEST(MfModel, TouchedKeysAreSortedAndUnique) {
  const std::vector<Rating> batch = {{5, 2, 1.0f}, {1, 2, 0.0f}, {5, 0, 2.0f}};
  std::vector<uint64_t> rows, cols;
  MfModel::TouchedKeys(batch, &rows, &cols);
  EXPECT_EQ(rows, (std::vector<uint64_t>{1, 5}));
  EXPECT_EQ(cols, (std::vector<uint64_t>{0, 2}));
}

TEST(MfModel, InitFactorsDependOnlyOnSeedAndKey) {
  const MfModel model(4, 0.0f, 0.3f);
  const SparseFactors some = model.InitFactors(std::vector<uint64_t>{3, 9}, 1);
  const SparseFactors more =
      model.InitFactors(std::vector<uint64_t>{1, 3, 5, 9}, 1);
  ASSERT_EQ(some.values.size(), 8u);
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(some.values[k], more.values[4 + k]);       // key 3
    EXPECT_EQ(some.values[4 + k], more.values[12 + k]);  // key 9
  }
  for (float x : more.values) EXPECT_LE(std::abs(x), 0.3f);
  EXPECT_NE(model.InitFactors(std::vector<uint64_t>{3}, 2).values,
            model.InitFactors(std::vector<uint64_t>{3}, 1).values);
}

TEST(MfModel, GradientMatchesFiniteDifferences) {
  const size_t rank = 3;
  const MfModel model(rank, 0.2f, 1.0f);
  // Repeated rows and columns: their gradients add up.
  const std::vector<Rating> batch = {
      {0, 1, 0.5f}, {2, 1, -1.0f}, {2, 3, 2.0f}, {0, 0, 0.25f}, {2, 1, 1.5f}};
  std::vector<uint64_t> row_ids, col_ids;
  MfModel::TouchedKeys(batch, &row_ids, &col_ids);
  // One extra row that the batch does not touch: a zero gradient.
  row_ids.push_back(7);
  SparseFactors u = model.InitFactors(row_ids, 1);
  SparseFactors v = model.InitFactors(col_ids, 2);

  SparseFactors u_grad, v_grad;
  Result<float> loss = model.LossAndGradient(batch, u, v, &u_grad, &v_grad);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(u_grad.ids, u.ids);
  EXPECT_EQ(v_grad.ids, v.ids);
  for (size_t k = 0; k < rank; ++k) {
    EXPECT_EQ(u_grad.values[2 * rank + k], 0.0f);  // row 7
  }

  const float eps = 1e-3f;
  SparseFactors scratch_u, scratch_v;
  for (SparseFactors* factors : {&u, &v}) {
    const SparseFactors& grad = factors == &u ? u_grad : v_grad;
    for (size_t j = 0; j < factors->values.size(); ++j) {
      const float saved = factors->values[j];
      factors->values[j] = saved + eps;
      Result<float> up =
          model.LossAndGradient(batch, u, v, &scratch_u, &scratch_v);
      factors->values[j] = saved - eps;
      Result<float> down =
          model.LossAndGradient(batch, u, v, &scratch_u, &scratch_v);
      factors->values[j] = saved;
      ASSERT_TRUE(up.ok() && down.ok());
      const double numeric = (*up - *down) / (2.0 * eps);
      EXPECT_NEAR(grad.values[j], numeric, 1e-2 * std::abs(numeric) + 2e-3)
          << (factors == &u ? "u" : "v") << " value " << j;
    }
  }
}

TEST(MfModel, SgdDrivesTestRmseWellBelowTheDataSpread) {
  const LowRankData data = MakeLowRankData(60, 50, 3, 0.4, 0.05, 11);
  const double spread = StdDev(data.test);
  const MfModel model(data.rank, 1e-3f, 0.5f);
  SparseFactors u = model.InitFactors(Range(data.rows), 1);
  SparseFactors v = model.InitFactors(Range(data.cols), 2);

  Result<double> initial = model.Rmse(data.test, u, v);
  ASSERT_TRUE(initial.ok());
  EXPECT_GT(*initial, 0.8 * spread);

  // Minibatch SGD, in the sparse push/pull shape a worker uses: pull the
  // touched vectors, compute, push gradients for the same keys.
  const size_t batch_size = 32;
  const float lr = 0.1f * batch_size;  // the loss is a mean over the batch
  std::mt19937_64 rng(3);
  std::vector<Rating> order = data.train;
  SparseFactors bu, bv, gu, gv;
  for (int epoch = 0; epoch < 30; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t begin = 0; begin < order.size(); begin += batch_size) {
      const std::span<const Rating> batch(
          order.data() + begin, std::min(batch_size, order.size() - begin));
      MfModel::TouchedKeys(batch, &bu.ids, &bv.ids);
      for (auto [local, global] : {std::pair{&bu, &u}, std::pair{&bv, &v}}) {
        local->values.resize(local->ids.size() * data.rank);
        for (size_t i = 0; i < local->ids.size(); ++i) {
          std::copy_n(&global->values[local->ids[i] * data.rank], data.rank,
                      &local->values[i * data.rank]);
        }
      }
      ASSERT_TRUE(model.LossAndGradient(batch, bu, bv, &gu, &gv).ok());
      for (auto [grad, global] : {std::pair{&gu, &u}, std::pair{&gv, &v}}) {
        for (size_t i = 0; i < grad->ids.size(); ++i) {
          for (size_t k = 0; k < data.rank; ++k) {
            global->values[grad->ids[i] * data.rank + k] -=
                lr * grad->values[i * data.rank + k];
          }
        }
      }
    }
  }
  Result<double> rmse = model.Rmse(data.test, u, v);
  ASSERT_TRUE(rmse.ok());
  EXPECT_LT(*rmse, 0.3 * spread) << "data spread " << spread;
}

TEST(MfModel, BadFactorsAndMissingKeysAreInvalidArguments) {
  const MfModel model(2);
  const std::vector<Rating> batch = {{0, 1, 1.0f}};
  SparseFactors u = model.InitFactors(std::vector<uint64_t>{0}, 1);
  SparseFactors v = model.InitFactors(std::vector<uint64_t>{1}, 2);
  SparseFactors gu, gv;
  EXPECT_TRUE(model.LossAndGradient(batch, u, v, &gu, &gv).ok());

  SparseFactors missing = model.InitFactors(std::vector<uint64_t>{0}, 2);
  EXPECT_EQ(model.LossAndGradient(batch, u, missing, &gu, &gv).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(gu.ids.empty() && gv.ids.empty());
  EXPECT_EQ(model.Rmse(batch, u, missing).status().code(),
            StatusCode::kInvalidArgument);

  SparseFactors unsorted = model.InitFactors(std::vector<uint64_t>{1, 0}, 1);
  EXPECT_EQ(model.LossAndGradient(batch, unsorted, v, &gu, &gv).status().code(),
            StatusCode::kInvalidArgument);
  SparseFactors wrong_size = u;
  wrong_size.values.pop_back();
  EXPECT_EQ(
      model.LossAndGradient(batch, wrong_size, v, &gu, &gv).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(MfModel(0).Rmse({}, {}, {}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ductile::models
