#include "models/mf_model.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <string>

#include "models/uniform.h"
#include "util/split_mix.h"

namespace ductile::models {
namespace {

// A standard normal draw (Box-Muller), platform-independent unlike
// std::normal_distribution.
double StandardNormal(std::mt19937_64& rng) {
  const double u1 = 1.0 - Uniform01(rng);  // in (0, 1]: log is finite
  const double u2 = Uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// Position of `id` in the sorted `ids`, or ids.size() if absent.
size_t Find(const std::vector<uint64_t>& ids, uint64_t id) {
  const auto it = std::lower_bound(ids.begin(), ids.end(), id);
  return it != ids.end() && *it == id ? static_cast<size_t>(it - ids.begin())
                                      : ids.size();
}

}  // namespace

LowRankData MakeLowRankData(size_t rows, size_t cols, size_t rank,
                            double observed_fraction, double noise,
                            uint64_t seed, double test_fraction) {
  constexpr size_t kMaxIds = size_t{1} << 32;
  if (rows < 1 || rows >= kMaxIds || cols < 1 || cols >= kMaxIds || rank < 1 ||
      !(observed_fraction >= 0.0 && observed_fraction <= 1.0) ||
      !(test_fraction >= 0.0 && test_fraction <= 1.0) || !(noise >= 0.0) ||
      !std::isfinite(noise)) {
    return LowRankData{};
  }
  std::mt19937_64 rng(seed);
  // u . v sums `rank` products of independent uniforms on [-a, a], each of
  // variance (a^2 / 3)^2: a^2 = 3 / sqrt(rank) makes the sum's variance 1.
  const double a = std::sqrt(3.0 / std::sqrt(static_cast<double>(rank)));
  auto factors = [&](size_t n) {
    std::vector<double> f(n * rank);
    for (double& x : f) x = a * (2.0 * Uniform01(rng) - 1.0);
    return f;
  };
  const std::vector<double> u = factors(rows);
  const std::vector<double> v = factors(cols);

  LowRankData data;
  data.rows = rows;
  data.cols = cols;
  data.rank = rank;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) {
      if (!(Uniform01(rng) < observed_fraction)) continue;
      double value = 0.0;
      for (size_t k = 0; k < rank; ++k)
        value += u[r * rank + k] * v[c * rank + k];
      value += noise * StandardNormal(rng);
      const Rating rating{static_cast<uint32_t>(r), static_cast<uint32_t>(c),
                          static_cast<float>(value)};
      (Uniform01(rng) < test_fraction ? data.test : data.train)
          .push_back(rating);
    }
  }
  return data;
}

MfModel::MfModel(size_t rank, float l2_weight_decay, float init_scale)
    : rank_(rank), l2_weight_decay_(l2_weight_decay), init_scale_(init_scale) {}

void MfModel::TouchedKeys(std::span<const Rating> batch,
                          std::vector<uint64_t>* row_ids,
                          std::vector<uint64_t>* col_ids) {
  row_ids->clear();
  col_ids->clear();
  for (const Rating& rating : batch) {
    row_ids->push_back(rating.row);
    col_ids->push_back(rating.col);
  }
  for (std::vector<uint64_t>* ids : {row_ids, col_ids}) {
    std::sort(ids->begin(), ids->end());
    ids->erase(std::unique(ids->begin(), ids->end()), ids->end());
  }
}

SparseFactors MfModel::InitFactors(std::span<const uint64_t> ids,
                                   uint64_t seed) const {
  SparseFactors factors;
  factors.ids.assign(ids.begin(), ids.end());
  factors.values.resize(ids.size() * rank_);
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint64_t key_seed = SplitMix64(seed ^ SplitMix64(ids[i]));
    for (size_t k = 0; k < rank_; ++k) {
      const double u01 =
          static_cast<double>(SplitMix64(key_seed + k) >> 11) * 0x1.0p-53;
      factors.values[i * rank_ + k] =
          static_cast<float>(init_scale_ * (2.0 * u01 - 1.0));
    }
  }
  return factors;
}

Status MfModel::CheckFactors(const SparseFactors& factors,
                             const char* what) const {
  if (rank_ < 1 || !(l2_weight_decay_ >= 0.0f) ||
      !std::isfinite(l2_weight_decay_) || !(init_scale_ > 0.0f)) {
    return InvalidArgumentError(
        "MfModel needs rank >= 1, a finite l2_weight_decay >= 0 and "
        "init_scale > 0; has rank " +
        std::to_string(rank_) + ", l2_weight_decay " +
        std::to_string(l2_weight_decay_) + ", init_scale " +
        std::to_string(init_scale_));
  }
  if (factors.values.size() != factors.ids.size() * rank_) {
    return InvalidArgumentError(
        std::string(what) + " has " + std::to_string(factors.ids.size()) +
        " ids but " + std::to_string(factors.values.size()) +
        " values; rank is " + std::to_string(rank_));
  }
  for (size_t i = 1; i < factors.ids.size(); ++i) {
    if (factors.ids[i - 1] >= factors.ids[i]) {
      return InvalidArgumentError(std::string(what) +
                                  " ids are not strictly increasing");
    }
  }
  return Status::Ok();
}

Result<float> MfModel::LossAndGradient(std::span<const Rating> batch,
                                       const SparseFactors& u,
                                       const SparseFactors& v,
                                       SparseFactors* u_grad,
                                       SparseFactors* v_grad) const {
  u_grad->ids.clear();
  u_grad->values.clear();
  v_grad->ids.clear();
  v_grad->values.clear();
  DUCTILE_RETURN_IF_ERROR(CheckFactors(u, "row factors"));
  DUCTILE_RETURN_IF_ERROR(CheckFactors(v, "column factors"));
  // Positions first, so that a bad batch leaves the gradients empty.
  std::vector<size_t> u_pos(batch.size()), v_pos(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    u_pos[i] = Find(u.ids, batch[i].row);
    v_pos[i] = Find(v.ids, batch[i].col);
    if (u_pos[i] == u.ids.size() || v_pos[i] == v.ids.size()) {
      return InvalidArgumentError(
          "batch entry (" + std::to_string(batch[i].row) + ", " +
          std::to_string(batch[i].col) + ") has no " +
          (u_pos[i] == u.ids.size() ? "row" : "column") + " factor vector");
    }
  }
  u_grad->ids = u.ids;
  u_grad->values.assign(u.values.size(), 0.0f);
  v_grad->ids = v.ids;
  v_grad->values.assign(v.values.size(), 0.0f);
  if (batch.empty()) return 0.0f;

  const double scale = 1.0 / static_cast<double>(batch.size());
  const double l2 = l2_weight_decay_;
  double loss_sum = 0.0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const float* ur = &u.values[u_pos[i] * rank_];
    const float* vc = &v.values[v_pos[i] * rank_];
    double prediction = 0.0, u_norm_sq = 0.0, v_norm_sq = 0.0;
    for (size_t k = 0; k < rank_; ++k) {
      prediction += static_cast<double>(ur[k]) * vc[k];
      u_norm_sq += static_cast<double>(ur[k]) * ur[k];
      v_norm_sq += static_cast<double>(vc[k]) * vc[k];
    }
    const double error = prediction - batch[i].value;
    loss_sum += 0.5 * error * error + 0.5 * l2 * (u_norm_sq + v_norm_sq);
    float* gu = &u_grad->values[u_pos[i] * rank_];
    float* gv = &v_grad->values[v_pos[i] * rank_];
    for (size_t k = 0; k < rank_; ++k) {
      gu[k] += static_cast<float>(scale * (error * vc[k] + l2 * ur[k]));
      gv[k] += static_cast<float>(scale * (error * ur[k] + l2 * vc[k]));
    }
  }
  return static_cast<float>(loss_sum * scale);
}

Result<double> MfModel::Rmse(std::span<const Rating> data,
                             const SparseFactors& u,
                             const SparseFactors& v) const {
  DUCTILE_RETURN_IF_ERROR(CheckFactors(u, "row factors"));
  DUCTILE_RETURN_IF_ERROR(CheckFactors(v, "column factors"));
  if (data.empty()) return 0.0;
  double sum_sq = 0.0;
  for (const Rating& rating : data) {
    const size_t r = Find(u.ids, rating.row);
    const size_t c = Find(v.ids, rating.col);
    if (r == u.ids.size() || c == v.ids.size()) {
      return InvalidArgumentError("entry (" + std::to_string(rating.row) +
                                  ", " + std::to_string(rating.col) +
                                  ") has no factor vector");
    }
    double prediction = 0.0;
    for (size_t k = 0; k < rank_; ++k) {
      prediction += static_cast<double>(u.values[r * rank_ + k]) *
                    v.values[c * rank_ + k];
    }
    const double error = prediction - rating.value;
    sum_sq += error * error;
  }
  return std::sqrt(sum_sq / static_cast<double>(data.size()));
}

}  // namespace ductile::models
