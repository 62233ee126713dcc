// Matrix factorization for rating-style data: approximate a sparsely
// observed rows x cols matrix Y by U V^T, with a factor vector of `rank`
// floats per row (U) and per column (V), trained through the parameter
// server with sparse pushes and pulls.
//
// Rows and columns are two key spaces: the key of row r's vector is r in
// the row space, the key of column c's vector is c in the column space
// (two tables, or one with an offset: the training loop decides). A
// minibatch of observed entries touches few rows and columns, so a worker
// pulls only those vectors (TouchedKeys), computes the loss and gradient
// on them, and pushes gradients for the same keys.
//
// Loss on a batch B of observed entries (r, c, y), with l2 = l2_weight_decay:
//   (1/|B|) sum_B [ 0.5 * (u_r . v_c - y)^2 + 0.5 * l2 * (|u_r|^2 + |v_c|^2) ]
// (the usual SGD form of the L2 term: a vector is decayed each time one of
// its entries is seen).
//
// Example (one SGD step):
//   MfModel model(/*rank=*/8, /*l2_weight_decay=*/0.01f);
//   SparseFactors u, v, u_grad, v_grad;
//   MfModel::TouchedKeys(batch, &u.ids, &v.ids);
//   ... pull u.values and v.values for those keys (or InitFactors) ...
//   Result<float> loss = model.LossAndGradient(batch, u, v, &u_grad, &v_grad);
//   ... push u_grad and v_grad (same keys as u and v) ...
//
// Thread safety: MfModel is immutable; all methods are const and may run
// concurrently. The free functions share no state.
#ifndef DUCTILE_MODELS_MF_MODEL_H_
#define DUCTILE_MODELS_MF_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ductile/status.h"

namespace ductile::models {

// One observed entry of the matrix: Y[row][col] = value.
struct Rating {
  uint32_t row = 0;
  uint32_t col = 0;
  float value = 0.0f;
};

// A synthetic low-rank matrix, observed in part.
struct LowRankData {
  size_t rows = 0;
  size_t cols = 0;
  size_t rank = 0;
  // Observed entries, in row-major order, split at random between
  // training and testing.
  std::vector<Rating> train;
  std::vector<Rating> test;
};

// Makes Y = U* V*^T + noise: U* (rows x rank) and V* (cols x rank) have
// entries uniform in [-a, a], with a chosen so that a noiseless entry has
// variance 1; each entry is observed with probability `observed_fraction`
// and gets Gaussian noise of standard deviation `noise`; each observed
// entry goes to `test` with probability `test_fraction`, else to `train`.
// Deterministic in `seed` on every platform.
//
// Requires rows and cols in [1, 2^32), rank >= 1, fractions in [0, 1] and
// noise >= 0; otherwise returns an empty LowRankData (all zero).
LowRankData MakeLowRankData(size_t rows, size_t cols, size_t rank,
                            double observed_fraction, double noise,
                            uint64_t seed, double test_fraction = 0.1);

// The factor vectors of some keys of one key space.
//
// Invariants (checked by the model's methods, which return InvalidArgument
// if they do not hold): ids are strictly increasing; values.size() ==
// ids.size() * rank, the vector of ids[i] at values[i * rank].
struct SparseFactors {
  std::vector<uint64_t> ids;
  std::vector<float> values;
};

class MfModel {
 public:
  // `rank` >= 1 floats per vector; `l2_weight_decay` >= 0 (see the loss
  // above); `init_scale` > 0 bounds InitFactors' values.
  explicit MfModel(size_t rank, float l2_weight_decay = 0.0f,
                   float init_scale = 0.1f);

  size_t rank() const { return rank_; }
  float l2_weight_decay() const { return l2_weight_decay_; }

  // The row and column keys that `batch` touches, sorted and unique: what
  // to pull before LossAndGradient.
  static void TouchedKeys(std::span<const Rating> batch,
                          std::vector<uint64_t>* row_ids,
                          std::vector<uint64_t>* col_ids);

  // Initial vectors for `ids` (sorted, unique), uniform in [-init_scale,
  // init_scale]. A key's vector depends only on (seed, id), so workers
  // that initialize overlapping keys agree; use different seeds for the row
  // and column spaces.
  SparseFactors InitFactors(std::span<const uint64_t> ids, uint64_t seed) const;

  // Mean loss over `batch` (see above), and its gradient with respect to
  // the vectors in `u` (rows) and `v` (columns): *u_grad gets u's ids and
  // values of the same size (zero for keys the batch does not touch),
  // likewise *v_grad. An empty batch gives 0 and zero gradients.
  //
  // InvalidArgument (gradients then empty) if the model's options are out
  // of range, u or v breaks SparseFactors' invariants, or the batch names a
  // row missing from u or a column missing from v.
  Result<float> LossAndGradient(std::span<const Rating> batch,
                                const SparseFactors& u, const SparseFactors& v,
                                SparseFactors* u_grad,
                                SparseFactors* v_grad) const;

  // Root mean squared error of u_r . v_c against the values of `data`; 0
  // for no data. Same errors as LossAndGradient.
  Result<double> Rmse(std::span<const Rating> data, const SparseFactors& u,
                      const SparseFactors& v) const;

 private:
  // OK if the options are valid and `factors` keeps its invariants.
  Status CheckFactors(const SparseFactors& factors, const char* what) const;

  size_t rank_;
  float l2_weight_decay_;
  float init_scale_;
};

}  // namespace ductile::models

#endif  // DUCTILE_MODELS_MF_MODEL_H_
