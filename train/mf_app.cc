// Matrix factorization's worker (mf): factor rows pulled and pushed by id
// for each batch of ratings, the test RMSE after each epoch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "models/mf_model.h"
#include "train/step_loop.h"

namespace ductile::train {

using models::LowRankData;
using models::MfModel;
using models::Rating;
using models::SparseFactors;

namespace {

// Pulls the factor rows `ids` of a table into `f`.
Status PullFactors(Client& client, TableId table, size_t rank,
                   std::vector<uint64_t> ids, SparseFactors* f) {
  f->ids = std::move(ids);
  f->values.resize(f->ids.size() * rank);
  return client.Pull(table, f->ids, f->values);
}

}  // namespace

Status RunMf(Client& client, const TrainerOptions& o, int rank, int world,
             const WorkerData& worker_data) {
  const bool lead = rank == 0;
  if (!worker_data.ratings) {
    return FailedPreconditionError("mf's matrix is not generated");
  }
  const LowRankData& data = *worker_data.ratings;
  const MfModel model(o.mf_rank, o.l2);
  TableId tables[2];
  const char* names[2] = {"mf.rows", "mf.cols"};
  auto create_tables = [&]() -> Status {
    for (int i = 0; i < 2; ++i) {
      TableOptions t;
      t.name = names[i];
      t.value_width = static_cast<uint32_t>(o.mf_rank);
      t.rule = o.optimizer;
      t.learning_rate = LearningRateForBatch(o);
      t.lr_schedule = TableSchedule(
          client, names[i], o,
          (static_cast<int64_t>(data.train.size()) + o.batch_size - 1) /
              o.batch_size,
          world);
      t.batch_scaling = BatchScalingOf(o, world);
      t.init.kind = InitKind::kUniform;
      t.init.low = -0.3f;
      t.init.high = 0.3f;
      t.init.seed = o.seed + i;
      t.consistency = o.consistency;
      t.rows = o.rows;
      Result<TableId> id =
          MakeTable(client, t, [&](const TableOptions& options) {
            return client.CreateTable(options);
          });
      DUCTILE_RETURN_IF_ERROR(id.status());
      tables[i] = *id;
    }
    return Status::Ok();
  };
  DUCTILE_RETURN_IF_ERROR(StartUp(client, create_tables));
  DataPosition position(client, data.train.size(), o.seed, o.batch_size,
                        o.epochs);
  Progress progress(
      lead, o.epochs,
      (position.batches_per_epoch() * o.epochs + world - 1) / world, world);
  DUCTILE_RETURN_IF_ERROR(progress.OpenLog(o.csv_log));
  std::vector<uint64_t> test_rows, test_cols;
  MfModel::TouchedKeys(data.test, &test_rows, &test_cols);
  if (lead) {
    std::printf(
        "training matrix factorization: %zu x %zu, rank %zu, %zu "
        "train / %zu test entries, %d worker(s), %s, batch %d, %s lr "
        "%.3g, %d epoch(s)\n",
        data.rows, data.cols, data.rank, data.train.size(), data.test.size(),
        world, ToString(o.consistency).c_str(), o.batch_size,
        RuleName(o.optimizer), LearningRateForBatch(o), o.epochs);
    std::fflush(stdout);
  }
  progress.Start();
  std::vector<Rating> batch;
  std::vector<uint64_t> rows, cols;
  SparseFactors u, v, u_grad, v_grad;
  auto test_rmse = [&]() -> Result<double> {
    SparseFactors tu, tv;
    DUCTILE_RETURN_IF_ERROR(
        PullFactors(client, tables[0], o.mf_rank, test_rows, &tu));
    DUCTILE_RETURN_IF_ERROR(
        PullFactors(client, tables[1], o.mf_rank, test_cols, &tv));
    return model.Rmse(data.test, tu, tv);
  };
  auto step = [&](std::span<const size_t> indices, int epoch) -> Result<float> {
    batch.clear();
    for (size_t i : indices) batch.push_back(data.train[i]);
    MfModel::TouchedKeys(batch, &rows, &cols);
    DUCTILE_RETURN_IF_ERROR(
        PullFactors(client, tables[0], o.mf_rank, rows, &u));
    DUCTILE_RETURN_IF_ERROR(
        PullFactors(client, tables[1], o.mf_rank, cols, &v));
    Result<float> loss = model.LossAndGradient(batch, u, v, &u_grad, &v_grad);
    DUCTILE_RETURN_IF_ERROR(loss.status());
    DUCTILE_RETURN_IF_ERROR(CheckLoss(*loss, epoch, client.clock()));
    Handle pu = client.PushAsync(tables[0], u_grad.ids, u_grad.values);
    Handle pv = client.PushAsync(tables[1], v_grad.ids, v_grad.values);
    Status su = pu.Wait(), sv = pv.Wait();
    DUCTILE_RETURN_IF_ERROR(su);
    DUCTILE_RETURN_IF_ERROR(sv);
    return loss;
  };
  DUCTILE_RETURN_IF_ERROR(RunSteps(client, o, position, progress, step,
                                   "test RMSE", test_rmse, [] {}));
  if (position.left || !IsLead(client)) return Status::Ok();
  Result<double> rmse = test_rmse();
  DUCTILE_RETURN_IF_ERROR(rmse.status());
  std::printf(
      "final test RMSE: %.4f after %llu steps per worker, %.1fs (noise "
      "level %.3g)\n",
      *rmse, static_cast<unsigned long long>(position.steps),
      progress.elapsed(), o.mf_noise);
  std::fflush(stdout);
  if (o.max_rmse > 0 && *rmse > o.max_rmse) {
    return FailedPreconditionError("test RMSE " + std::to_string(*rmse) +
                                   " is above --max_rmse " +
                                   std::to_string(o.max_rmse));
  }
  return Status::Ok();
}

}  // namespace ductile::train
