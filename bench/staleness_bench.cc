// staleness_bench: the experiment of the SSP paper (Ho et al., "More
// Effective Distributed ML via a Stale Synchronous Parallel Parameter
// Server", NIPS 2013) at the size of one small machine: how fast each
// consistency model drives a training objective down, in clocks and in
// wall-clock time, with and without transient stragglers.
//
// Everything runs in this one process: a coordinator, --servers servers and
// --workers worker threads, each worker with its own Client and its own
// shard of the data. Each run (one workload, one straggler setting, one
// consistency mode) gets a fresh cluster, so every worker starts at clock 0
// from the same initial parameters. Per clock a worker pulls the parameters
// its mini-batch needs, computes, pushes its update and calls Clock().
//
// Workloads (--workload):
//   mf      matrix factorization on synthetic low-rank data
//           (models::MakeLowRankData): U (rows x rank) and V (cols x rank)
//           are two kSgd tables, one key per row or column. A worker pulls
//           the rows of U and V its mini-batch (a tenth of its shard)
//           touches, computes the gradient of squared error + L2
//           (models::MfModel) and pushes it for the same rows. Objective: RMSE
//           on a fixed sample of 10000 training entries.
//   logreg  softmax regression on Fashion-MNIST (models::LogRegModel): the
//           parameters are one dense tensor in chunks over the servers; a
//           worker pulls it, computes the mean gradient of its mini-batch
//           and pushes it (a kSgd table). Objective: the cross-entropy on a
//           fixed 5000-sample subset of the training set.
// Every push is applied as it is: BSP combines a clock's pushes with kSum,
// so every mode applies the same total update per clock, and the modes
// differ only in how stale the parameters are that the updates are
// computed from.
//
// Objective: worker 0 keeps a copy of the full parameters it pulled every
// --eval_every clocks (with its clock and the wall time) and, once every
// worker is done, once more after a barrier. Those copies are evaluated
// after the run, so sampling costs the timed run only the copy (and for mf
// a pull of all rows instead of the touched ones, about 8% more data).
//
// Stragglers (--stragglers=transient): after a clock's work and before
// Clock(), each worker sleeps with probability --straggler_p for
// --straggler_k times the compute time it just measured for that clock (the
// gradient work, not the pull and push). The draws come from a generator
// seeded by (--seed, repeat, worker), so within a repeat every mode sees the
// same straggler events at the same clocks.
//
// A run ends after --clocks clocks per worker or, past --seconds, at the
// highest clock any worker has begun (all workers finish that clock, so no
// pull waits on a worker that has stopped).
//
// Output: one summary table per workload and straggler setting, with the
// medians over --repeats runs of: time and clocks to reach --target,
// clocks per second, shares of the run time blocked, pulling, computing
// and sleeping, and the observed staleness; a CSV of every objective
// sample (--csv); with --plots_dir, PNG plots of the objective against
// wall-clock time and against clocks, drawn by gnuplot (Debian package
// gnuplot-nox).
//
// 4 workers share this machine's cores with the servers' and clients' I/O
// threads, so there are stragglers even without injected ones, and the
// timings move with whatever else runs on the machine: compare modes within
// one invocation (runs of a repeat go back to back, mode after mode).
//
//   staleness_bench --quick --plots_dir=/tmp/q --csv=/tmp/q/s.csv  # ~40 s
//   staleness_bench --plots_dir=out --csv=out/staleness.csv  # ~6 min, 2 cores
//   staleness_bench --workload=logreg --modes=bsp,ssp3 --stragglers=transient
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/in_process_cluster.h"
#include "ductile/client.h"
#include "ductile/coordinator.h"
#include "ductile/server.h"
#include "ductile/status.h"
#include "ductile/table.h"
#include "gflags/gflags.h"
#include "models/fmnist_data.h"
#include "models/logreg_model.h"
#include "models/mf_model.h"

DEFINE_string(workload, "mf,logreg", "Workloads to run: mf, logreg.");
DEFINE_string(modes, "bsp,ssp1,ssp2,ssp3,ssp5,ssp10,async",
              "Consistency modes, comma-separated: bsp, sspN (N >= 0), async.");
DEFINE_string(stragglers, "none,transient",
              "Straggler settings to run each mode under: none, transient.");
DEFINE_int32(workers, 4, "Worker threads, each with a Client and a shard.");
DEFINE_int32(servers, 2, "Servers in this process.");
DEFINE_int32(clocks, 0,
             "Clocks per worker per run; 0: the workload's default "
             "(300 for both workloads).");
DEFINE_double(seconds, 60,
              "Cap on a run's wall time: when a worker passes it, every "
              "worker stops at the same clock (the highest any has begun).");
DEFINE_int32(repeats, 3,
             "Runs of every configuration (1 with --quick); the tables show "
             "medians. Each repeat draws other straggler events.");
DEFINE_int32(eval_every, 0,
             "Clocks between worker 0's objective samples; 0: clocks / 60.");
DEFINE_double(straggler_p, 0.1,
              "Probability that a worker straggles in a clock (transient).");
DEFINE_double(straggler_k, 4,
              "A straggling worker sleeps this many times the compute time "
              "of its clock.");
DEFINE_double(target, 0,
              "Objective to reach; 0: BSP's final objective x 1.05, per "
              "workload and straggler setting (without a BSP run, the "
              "largest final objective x 1.05).");
DEFINE_string(csv, "staleness.csv", "Where to write every objective sample.");
DEFINE_string(plots_dir, "",
              "Write PNG plots (and their gnuplot script and data) here; "
              "empty: no plots.");
DEFINE_bool(quick, false,
            "A run of about a minute: modes bsp,ssp3,async (unless --modes "
            "is given) and one repeat (unless --repeats is given).");
DEFINE_uint64(seed, 1, "Seed of the data, the shards and the stragglers.");
DEFINE_string(ipc_dir, "/tmp", "Directory for the servers' ipc:// sockets.");

DEFINE_int32(mf_rows, 2000, "MF: rows of the matrix.");
DEFINE_int32(mf_cols, 2000, "MF: columns of the matrix.");
DEFINE_int32(mf_rank, 10, "MF: rank of the data and of the model.");
DEFINE_double(mf_density, 0.05, "MF: fraction of the entries observed.");
DEFINE_double(mf_noise, 0.1, "MF: standard deviation of the entries' noise.");
DEFINE_int32(mf_batch, 0,
             "MF: observed entries per worker per clock; 0: a tenth of the "
             "worker's shard.");
DEFINE_double(mf_lr, 0.02, "MF: SGD step size per entry.");
DEFINE_double(mf_l2, 0.02, "MF: L2 penalty per entry on the two rows.");
DEFINE_int32(mf_eval_samples, 10000,
             "MF: training entries the RMSE is computed on.");

DEFINE_string(data_dir, "/usr/share/datasets/fashion-mnist",
              "logreg: Fashion-MNIST directory.");
DEFINE_int32(logreg_batch, 1024, "logreg: samples per worker per clock.");
DEFINE_double(logreg_lr, 0.04, "logreg: SGD step size (server side).");
DEFINE_int32(logreg_eval_samples, 5000,
             "logreg: training samples the loss is computed on.");

namespace ductile::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

// How long a worker waits at a barrier for the others (a failed worker
// fails the run after this rather than hanging it).
constexpr int64_t kBarrierTimeoutMs = 120000;

double SecondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

bool FlagIsDefault(const char* name) {
  return gflags::GetCommandLineFlagInfoOrDie(name).is_default;
}

// ------------------------------------------------------------------ options

struct Mode {
  std::string name;  // "bsp", "ssp3", "async"
  Consistency consistency;
};

Result<Mode> ParseMode(const std::string& name) {
  Mode mode{name, {}};
  if (name == "bsp") {
    mode.consistency.mode = ConsistencyMode::kBsp;
    mode.consistency.combine = BspCombine::kSum;
  } else if (name == "async") {
    mode.consistency.mode = ConsistencyMode::kAsync;
  } else if (name.size() > 3 && name.compare(0, 3, "ssp") == 0 &&
             name.find_first_not_of("0123456789", 3) == std::string::npos &&
             name.size() <= 10) {
    mode.consistency.mode = ConsistencyMode::kSsp;
    mode.consistency.staleness = std::stoi(name.substr(3));
  } else {
    return InvalidArgumentError("unknown mode '" + name +
                                "' (bsp, sspN or async)");
  }
  return mode;
}

struct BenchOptions {
  std::vector<std::string> workloads;
  std::vector<Mode> modes;
  std::vector<bool> straggler_settings;  // false: none, true: transient
  int workers = 4;
  int servers = 2;
  int clocks = 0;  // 0: per workload
  int repeats = 1;
  double seconds = 60;
  int eval_every = 0;
  double straggler_p = 0.1;
  double straggler_k = 4;
  double target = 0;
  uint64_t seed = 1;
  std::string ipc_dir;
};

Result<BenchOptions> OptionsFromFlags() {
  BenchOptions o;
  o.workloads = Split(FLAGS_workload);
  for (const std::string& w : o.workloads) {
    if (w != "mf" && w != "logreg") {
      return InvalidArgumentError("unknown workload '" + w + "' (mf, logreg)");
    }
  }
  std::string modes = FLAGS_modes;
  if (FLAGS_quick && FlagIsDefault("modes")) modes = "bsp,ssp3,async";
  for (const std::string& name : Split(modes)) {
    Result<Mode> mode = ParseMode(name);
    DUCTILE_RETURN_IF_ERROR(mode.status());
    o.modes.push_back(*mode);
  }
  for (const std::string& s : Split(FLAGS_stragglers)) {
    if (s != "none" && s != "transient") {
      return InvalidArgumentError("unknown straggler setting '" + s +
                                  "' (none, transient)");
    }
    o.straggler_settings.push_back(s == "transient");
  }
  if (o.workloads.empty() || o.modes.empty() || o.straggler_settings.empty()) {
    return InvalidArgumentError(
        "--workload, --modes and --stragglers must each name one or more");
  }
  o.workers = FLAGS_workers;
  o.servers = FLAGS_servers;
  if (o.workers < 1 || o.workers > 64 || o.servers < 1 || o.servers > 16) {
    return InvalidArgumentError("--workers must be 1-64, --servers 1-16");
  }
  o.clocks = FLAGS_clocks;
  o.seconds = FLAGS_seconds;
  o.eval_every = FLAGS_eval_every;
  if (o.clocks < 0 || o.eval_every < 0 || !(o.seconds > 0)) {
    return InvalidArgumentError(
        "--clocks and --eval_every must be >= 0, --seconds > 0");
  }
  o.repeats = FLAGS_repeats;
  if (FLAGS_quick && FlagIsDefault("repeats")) o.repeats = 1;
  if (o.repeats < 1) return InvalidArgumentError("--repeats must be >= 1");
  o.straggler_p = FLAGS_straggler_p;
  o.straggler_k = FLAGS_straggler_k;
  if (!(o.straggler_p >= 0 && o.straggler_p <= 1) || !(o.straggler_k >= 0)) {
    return InvalidArgumentError(
        "--straggler_p must be in [0, 1], --straggler_k >= 0");
  }
  o.target = FLAGS_target;
  o.seed = FLAGS_seed;
  o.ipc_dir = FLAGS_ipc_dir;
  return o;
}

// ---------------------------------------------------------------- workloads

// One worker's side of a workload, used on that worker's thread only.
class WorkerTask {
 public:
  virtual ~WorkerTask() = default;
  // Creates or looks up the tables (every worker calls it).
  [[nodiscard]] virtual Status Setup(Client& client) = 0;
  // One clock's work: pull, compute, push. Adds the seconds spent in pulls
  // and in computing to `pull_s` and `compute_s`. With `snapshot`, also
  // copies the full parameters it read this clock into it.
  [[nodiscard]] virtual Status Step(Client& client,
                                    std::vector<float>* snapshot,
                                    double* pull_s, double* compute_s) = 0;
  // Pulls the full parameters.
  [[nodiscard]] virtual Status PullAll(Client& client,
                                       std::vector<float>* params) = 0;
};

// A workload: its data (shared by all workers, read-only while they run)
// and the objective.
class Workload {
 public:
  virtual ~Workload() = default;
  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  virtual std::string objective_name() const = 0;
  virtual int default_clocks() const = 0;
  virtual std::unique_ptr<WorkerTask> MakeTask(int rank, int world,
                                               const Consistency& c,
                                               uint64_t seed) const = 0;
  // The objective of a full parameter vector. Thread-safe.
  virtual double Objective(std::span<const float> params) const = 0;
};

// ---- matrix factorization

struct MfConfig {
  int rows = 2000;
  int cols = 2000;
  int rank = 10;
  double density = 0.05;
  double noise = 0.1;
  int batch = 0;  // 0: shard / 10
  float lr = 0.02f;
  float l2 = 0.02f;
  int eval_samples = 10000;
};

class MfTask : public WorkerTask {
 public:
  MfTask(const MfConfig& config, const models::MfModel& model,
         const std::vector<models::Rating>& ratings, std::vector<size_t> shard,
         const Consistency& consistency, uint64_t seed)
      : config_(config),
        model_(model),
        ratings_(ratings),
        shard_(std::move(shard)),
        consistency_(consistency),
        rng_(seed) {
    batch_size_ = config.batch > 0 ? static_cast<size_t>(config.batch)
                                   : std::max<size_t>(1, shard_.size() / 10);
    batch_size_ = std::min(batch_size_, shard_.size());
    std::shuffle(shard_.begin(), shard_.end(), rng_);
    all_rows_.resize(config.rows);
    std::iota(all_rows_.begin(), all_rows_.end(), Key{0});
    all_cols_.resize(config.cols);
    std::iota(all_cols_.begin(), all_cols_.end(), Key{0});
  }

  Status Setup(Client& client) override {
    TableOptions t;
    t.value_width = static_cast<uint32_t>(config_.rank);
    t.rule = UpdateRule::kSgd;
    // The model's gradient is of the batch's mean loss: scaled by the batch
    // size, a step is lr per entry, as in plain SGD.
    t.learning_rate = config_.lr * static_cast<float>(batch_size_);
    t.init.kind = InitKind::kUniform;
    t.init.low = -0.1f;
    t.init.high = 0.1f;
    t.consistency = consistency_;
    t.name = "mf.u";
    t.init.seed = 11;
    Result<TableId> u = client.CreateTable(t);
    DUCTILE_RETURN_IF_ERROR(u.status());
    t.name = "mf.v";
    t.init.seed = 12;
    Result<TableId> v = client.CreateTable(t);
    DUCTILE_RETURN_IF_ERROR(v.status());
    u_table_ = *u;
    v_table_ = *v;
    return Status::Ok();
  }

  Status Step(Client& client, std::vector<float>* snapshot, double* pull_s,
              double* compute_s) override {
    const size_t rank = config_.rank;
    // The mini-batch: the next entries of the shard, in a new order every
    // pass.
    batch_.clear();
    for (size_t n = 0; n < batch_size_; ++n) {
      if (next_ == shard_.size()) {
        std::shuffle(shard_.begin(), shard_.end(), rng_);
        next_ = 0;
      }
      batch_.push_back(ratings_[shard_[next_++]]);
    }
    models::MfModel::TouchedKeys(batch_, &u_.ids, &v_.ids);
    u_.values.resize(u_.ids.size() * rank);
    v_.values.resize(v_.ids.size() * rank);

    const auto pull_start = SteadyClock::now();
    if (snapshot != nullptr) {
      // Worker 0 on a sampling clock: read every row, use the touched ones.
      DUCTILE_RETURN_IF_ERROR(PullAll(client, snapshot));
      const float* v_all = snapshot->data() + all_rows_.size() * rank;
      for (size_t n = 0; n < u_.ids.size(); ++n) {
        std::copy_n(snapshot->data() + u_.ids[n] * rank, rank,
                    u_.values.data() + n * rank);
      }
      for (size_t n = 0; n < v_.ids.size(); ++n) {
        std::copy_n(v_all + v_.ids[n] * rank, rank,
                    v_.values.data() + n * rank);
      }
    } else {
      Handle hu = client.PullAsync(u_table_, u_.ids, u_.values);
      Handle hv = client.PullAsync(v_table_, v_.ids, v_.values);
      Status su = hu.Wait();
      Status sv = hv.Wait();
      DUCTILE_RETURN_IF_ERROR(su);
      DUCTILE_RETURN_IF_ERROR(sv);
    }
    *pull_s += SecondsSince(pull_start);

    const auto compute_start = SteadyClock::now();
    Result<float> loss =
        model_.LossAndGradient(batch_, u_, v_, &u_grad_, &v_grad_);
    *compute_s += SecondsSince(compute_start);
    DUCTILE_RETURN_IF_ERROR(loss.status());
    if (!std::isfinite(*loss)) {
      return FailedPreconditionError("mf diverged (loss " +
                                     std::to_string(*loss) + ")");
    }
    Handle hu = client.PushAsync(u_table_, u_grad_.ids, u_grad_.values);
    Handle hv = client.PushAsync(v_table_, v_grad_.ids, v_grad_.values);
    Status su = hu.Wait();
    Status sv = hv.Wait();
    DUCTILE_RETURN_IF_ERROR(su);
    return sv;
  }

  // Full parameters: U (rows x rank), then V (cols x rank).
  Status PullAll(Client& client, std::vector<float>* params) override {
    const size_t rank = config_.rank;
    params->resize((all_rows_.size() + all_cols_.size()) * rank);
    std::span<float> all(*params);
    Handle hu = client.PullAsync(u_table_, all_rows_,
                                 all.subspan(0, all_rows_.size() * rank));
    Handle hv = client.PullAsync(v_table_, all_cols_,
                                 all.subspan(all_rows_.size() * rank));
    Status su = hu.Wait();
    Status sv = hv.Wait();
    DUCTILE_RETURN_IF_ERROR(su);
    return sv;
  }

 private:
  const MfConfig config_;
  const models::MfModel& model_;
  const std::vector<models::Rating>& ratings_;
  std::vector<size_t> shard_;  // indices into ratings_, in this pass's order
  const Consistency consistency_;
  std::mt19937_64 rng_;
  size_t batch_size_ = 0;
  size_t next_ = 0;  // next position in shard_
  TableId u_table_ = 0;
  TableId v_table_ = 0;
  std::vector<Key> all_rows_, all_cols_;
  // Scratch of one clock.
  std::vector<models::Rating> batch_;
  models::SparseFactors u_, v_, u_grad_, v_grad_;
};

class MfWorkload : public Workload {
 public:
  MfWorkload(const MfConfig& config, uint64_t seed)
      : config_(config),
        model_(config.rank, config.l2),
        data_(models::MakeLowRankData(config.rows, config.cols, config.rank,
                                      config.density, config.noise, seed,
                                      /*test_fraction=*/0.0)) {
    std::mt19937_64 rng(seed + 5);
    for (int n = 0; n < config.eval_samples && !data_.train.empty(); ++n) {
      eval_.push_back(data_.train[rng() % data_.train.size()]);
    }
    eval_u_.ids.resize(config.rows);
    std::iota(eval_u_.ids.begin(), eval_u_.ids.end(), uint64_t{0});
    eval_v_.ids.resize(config.cols);
    std::iota(eval_v_.ids.begin(), eval_v_.ids.end(), uint64_t{0});
  }

  std::string name() const override { return "mf"; }
  std::string description() const override {
    char text[200];
    std::snprintf(text, sizeof(text),
                  "MF %dx%d rank %d, %zu ratings (%.1f%%), noise %.2f, "
                  "SGD lr %.3g per entry, l2 %.3g",
                  config_.rows, config_.cols, config_.rank, data_.train.size(),
                  100 * config_.density, config_.noise, config_.lr, config_.l2);
    return text;
  }
  std::string objective_name() const override { return "train RMSE"; }
  int default_clocks() const override { return 300; }
  size_t num_ratings() const { return data_.train.size(); }

  std::unique_ptr<WorkerTask> MakeTask(int rank, int world,
                                       const Consistency& c,
                                       uint64_t seed) const override {
    // Shard: rating n goes to worker n % world (ratings are in row order,
    // so every worker gets about an equal share of every row).
    std::vector<size_t> shard;
    for (size_t n = rank; n < data_.train.size(); n += world) {
      shard.push_back(n);
    }
    return std::make_unique<MfTask>(config_, model_, data_.train,
                                    std::move(shard), c, seed);
  }

  double Objective(std::span<const float> params) const override {
    const size_t u_floats = eval_u_.ids.size() * config_.rank;
    models::SparseFactors u = eval_u_, v = eval_v_;
    u.values.assign(params.begin(), params.begin() + u_floats);
    v.values.assign(params.begin() + u_floats, params.end());
    Result<double> rmse = model_.Rmse(eval_, u, v);
    return rmse.ok() ? *rmse : NAN;
  }

 private:
  const MfConfig config_;
  const models::MfModel model_;
  const models::LowRankData data_;
  std::vector<models::Rating> eval_;
  models::SparseFactors eval_u_, eval_v_;  // ids of every row and column
};

// ---- logistic regression

struct LogRegConfig {
  std::string data_dir;
  int batch = 1024;
  float lr = 0.04f;
  int eval_samples = 5000;
};

class LogRegTask : public WorkerTask {
 public:
  LogRegTask(const LogRegConfig& config, const models::Dataset& data,
             const models::LogRegModel& model, int rank, int world,
             const Consistency& consistency, uint64_t seed)
      : config_(config),
        data_(data),
        model_(model),
        rank_(rank),
        world_(world),
        consistency_(consistency),
        seed_(seed),
        params_(model.num_params()),
        grad_(model.num_params()) {}

  Status Setup(Client& client) override {
    TableOptions t;
    t.name = "logreg.params";
    t.rule = UpdateRule::kSgd;
    t.learning_rate = config_.lr;
    t.init.kind = InitKind::kZeros;
    t.consistency = consistency_;
    // Chunks of 1024 floats, so that the tensor spreads over the servers.
    Result<Tensor> tensor =
        client.RegisterTensor(t, model_.num_params(), /*chunk_floats=*/1024);
    DUCTILE_RETURN_IF_ERROR(tensor.status());
    tensor_ = std::move(*tensor);
    return Status::Ok();
  }

  Status Step(Client& client, std::vector<float>* snapshot, double* pull_s,
              double* compute_s) override {
    if (next_ + config_.batch > indices_.size()) {
      // A new epoch of this worker's shard.
      indices_ = models::PartitionIndices(data_.num_samples, rank_, world_,
                                          seed_, epoch_++);
      next_ = 0;
    }
    const size_t size = std::min<size_t>(config_.batch, indices_.size());
    std::span<const size_t> batch(indices_.data() + next_, size);
    next_ += size;

    const auto pull_start = SteadyClock::now();
    DUCTILE_RETURN_IF_ERROR(client.PullTensor(tensor_, params_));
    *pull_s += SecondsSince(pull_start);
    if (snapshot != nullptr) *snapshot = params_;

    const auto compute_start = SteadyClock::now();
    const float loss = model_.LossAndGradient(params_, data_, batch, grad_);
    *compute_s += SecondsSince(compute_start);
    if (!std::isfinite(loss)) {
      return FailedPreconditionError("logreg diverged (loss " +
                                     std::to_string(loss) + ")");
    }
    return client.PushTensor(tensor_, grad_);
  }

  Status PullAll(Client& client, std::vector<float>* params) override {
    params->resize(model_.num_params());
    return client.PullTensor(tensor_, *params);
  }

 private:
  const LogRegConfig config_;
  const models::Dataset& data_;
  const models::LogRegModel& model_;
  const int rank_;
  const int world_;
  const Consistency consistency_;
  const uint64_t seed_;
  Tensor tensor_;
  std::vector<size_t> indices_;
  size_t next_ = 0;
  uint64_t epoch_ = 0;
  std::vector<float> params_, grad_;
};

class LogRegWorkload : public Workload {
 public:
  static Result<std::unique_ptr<LogRegWorkload>> Load(
      const LogRegConfig& config, uint64_t seed) {
    Result<models::Dataset> train =
        models::LoadFashionMnist(config.data_dir, /*train=*/true);
    DUCTILE_RETURN_IF_ERROR(train.status());
    return std::unique_ptr<LogRegWorkload>(
        new LogRegWorkload(config, std::move(*train), seed));
  }

  std::string name() const override { return "logreg"; }
  std::string description() const override {
    char text[200];
    std::snprintf(text, sizeof(text),
                  "softmax regression on Fashion-MNIST (%zu samples), batch "
                  "%d per worker, SGD lr %.3g",
                  data_.num_samples, config_.batch, config_.lr);
    return text;
  }
  std::string objective_name() const override { return "train loss"; }
  int default_clocks() const override { return 300; }

  std::unique_ptr<WorkerTask> MakeTask(int rank, int world,
                                       const Consistency& c,
                                       uint64_t seed) const override {
    return std::make_unique<LogRegTask>(config_, data_, model_, rank, world, c,
                                        seed);
  }

  double Objective(std::span<const float> params) const override {
    return model_.Loss(params, data_, eval_);
  }

 private:
  LogRegWorkload(const LogRegConfig& config, models::Dataset data,
                 uint64_t seed)
      : config_(config),
        data_(std::move(data)),
        model_(data_.num_features, data_.num_classes) {
    // A fixed subset: the first eval_samples of a shuffled order.
    eval_ = models::PartitionIndices(data_.num_samples, 0, 1, seed + 99, 0);
    eval_.resize(std::min<size_t>(eval_.size(), config.eval_samples));
  }

  const LogRegConfig config_;
  const models::Dataset data_;
  const models::LogRegModel model_;
  std::vector<size_t> eval_;
};

// ---------------------------------------------------------------- one run

Result<std::unique_ptr<InProcessCluster>> StartCluster(int servers, int workers,
                                                       const std::string& ipc) {
  InProcessClusterOptions o;
  o.servers = servers;
  o.workers = workers;
  o.coordinator.num_slots = 256;
  o.server.ipc_dir = ipc;
  o.server.connect_timeout_ms = 20000;
  o.client.connect_timeout_ms = 20000;
  // A straggler may sleep long; a parked pull must outlast it.
  o.client.request_timeout_ms = 300000;
  // Every worker registers before any starts (Start() connects them all),
  // so that the servers count all of them from clock 0.
  return InProcessCluster::Start(o);
}

struct Sample {
  double time_s = 0;
  int64_t clock = 0;
  std::vector<float> params;  // cleared once evaluated
  double objective = 0;
};

struct WorkerResult {
  Status status;
  int64_t clocks = 0;
  double run_s = 0;
  double pull_s = 0;
  double compute_s = 0;
  double straggle_s = 0;
  int64_t straggles = 0;
  ClientStats stats;
};

struct RunResult {
  std::string workload;
  bool stragglers = false;
  std::string mode;
  int repeat = 0;
  std::vector<WorkerResult> workers;
  std::vector<Sample> samples;  // worker 0's, in clock order
  double run_s = 0;             // until the last worker's last clock
};

// Shared by the workers of one run.
struct RunControl {
  // Every worker runs clocks [0, stop_clock); lowered by --seconds.
  std::atomic<int64_t> stop_clock{0};
  std::vector<std::atomic<int64_t>> started;  // clocks each worker has begun
  std::mutex mu;
  explicit RunControl(int workers) : started(workers) {}

  // Called by a worker past the time cap: stop every worker at the highest
  // clock any has begun, which none has passed, so nobody waits on a
  // worker that stopped behind it.
  void StopSoon() {
    std::lock_guard<std::mutex> lock(mu);
    int64_t highest = 0;
    for (const auto& s : started) highest = std::max(highest, s.load());
    if (highest < stop_clock.load()) stop_clock.store(highest);
  }
};

Status RunWorker(const BenchOptions& options, const Workload& workload,
                 const Mode& mode, bool stragglers, int repeat, int rank,
                 Client& client, RunControl& control, int eval_every,
                 WorkerResult* result, std::vector<Sample>* samples) {
  std::unique_ptr<WorkerTask> task = workload.MakeTask(
      rank, options.workers, mode.consistency, options.seed * 1000 + rank);
  DUCTILE_RETURN_IF_ERROR(task->Setup(client));
  DUCTILE_RETURN_IF_ERROR(client.Barrier(kBarrierTimeoutMs));
  // The same straggler events in every mode; other ones in each repeat.
  std::mt19937_64 straggle_rng((options.seed * 7919 + repeat) * 131 + rank);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const auto start = SteadyClock::now();
  int64_t c = 0;
  for (; c < control.stop_clock.load(); ++c) {
    control.started[rank].store(c + 1);
    const bool sample = rank == 0 && c % eval_every == 0;
    std::vector<float> params;
    double compute_s = 0;
    DUCTILE_RETURN_IF_ERROR(task->Step(client, sample ? &params : nullptr,
                                       &result->pull_s, &compute_s));
    if (sample) {
      samples->push_back({SecondsSince(start), c, std::move(params), 0});
    }
    result->compute_s += compute_s;
    // The straggler draw is made whether or not stragglers are on, so that
    // the generator's sequence is the same in every setting.
    const bool straggle = unit(straggle_rng) < options.straggler_p;
    if (stragglers && straggle) {
      const double sleep_s = options.straggler_k * compute_s;
      std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
      result->straggle_s += sleep_s;
      ++result->straggles;
    }
    client.Clock();
    if (SecondsSince(start) > options.seconds) control.StopSoon();
  }
  result->clocks = c;
  result->run_s = SecondsSince(start);
  result->stats = client.stats();
  // Every worker's last push is in (BSP: combined and applied) before the
  // final sample.
  DUCTILE_RETURN_IF_ERROR(client.Barrier(kBarrierTimeoutMs));
  if (rank == 0) {
    std::vector<float> params;
    DUCTILE_RETURN_IF_ERROR(task->PullAll(client, &params));
    samples->push_back({result->run_s, c, std::move(params), 0});
  }
  return Status::Ok();
}

Result<RunResult> RunOne(const BenchOptions& options, const Workload& workload,
                         const Mode& mode, bool stragglers, int repeat) {
  Result<std::unique_ptr<InProcessCluster>> cluster =
      StartCluster(options.servers, options.workers, options.ipc_dir);
  DUCTILE_RETURN_IF_ERROR(cluster.status());
  const int clocks =
      options.clocks > 0 ? options.clocks : workload.default_clocks();
  const int eval_every =
      options.eval_every > 0 ? options.eval_every : std::max(1, clocks / 60);
  RunControl control(options.workers);
  control.stop_clock.store(clocks);
  RunResult run;
  run.workload = workload.name();
  run.stragglers = stragglers;
  run.mode = mode.name;
  run.repeat = repeat;
  run.workers.resize(options.workers);
  std::vector<std::thread> threads;
  for (int w = 0; w < options.workers; ++w) {
    threads.emplace_back([&, w] {
      run.workers[w].status = RunWorker(
          options, workload, mode, stragglers, repeat, w, (*cluster)->client(w),
          control, eval_every, &run.workers[w], &run.samples);
    });
  }
  for (std::thread& t : threads) t.join();
  cluster->reset();
  for (const WorkerResult& w : run.workers) {
    DUCTILE_RETURN_IF_ERROR(w.status);
    run.run_s = std::max(run.run_s, w.run_s);
  }
  // The objective of worker 0's samples, on two threads.
  std::vector<std::thread> evaluators;
  constexpr int kEvalThreads = 2;
  for (int t = 0; t < kEvalThreads; ++t) {
    evaluators.emplace_back([&, t] {
      for (size_t n = t; n < run.samples.size(); n += kEvalThreads) {
        Sample& s = run.samples[n];
        s.objective = workload.Objective(s.params);
        s.params.clear();
        s.params.shrink_to_fit();
      }
    });
  }
  for (std::thread& t : evaluators) t.join();
  return run;
}

// ---------------------------------------------------------------- reporting

std::string SettingName(bool stragglers) {
  return stragglers ? "transient" : "none";
}

double FinalObjective(const RunResult& run) {
  return run.samples.empty() ? NAN : run.samples.back().objective;
}

// One run's numbers, as the table shows them.
struct Summary {
  int64_t clocks = 0;       // fewest any worker ran
  double run_s = 0;         // until the last worker's last clock
  double clocks_per_s = 0;  // per worker
  double final_objective = 0;
  double blocked_frac = 0;   // ClientStats.blocked_us / run time
  double pull_frac = 0;      // time inside pull calls / run time
  double compute_frac = 0;   // time computing / run time
  double straggle_frac = 0;  // time sleeping as a straggler / run time
  double staleness_mean = 0;
  int64_t staleness_max = -1;
  // When worker 0's samples first reached the target; infinity if never.
  double target_s = INFINITY;
  double target_clock = INFINITY;
};

Summary Summarize(const RunResult& run, double target) {
  Summary s;
  s.clocks = INT64_MAX;
  s.run_s = run.run_s;
  s.final_objective = FinalObjective(run);
  double run_sum = 0, blocked = 0, pull = 0, compute = 0, straggle = 0;
  std::vector<uint64_t> hist;
  int64_t clocks_sum = 0;
  for (const WorkerResult& w : run.workers) {
    s.clocks = std::min(s.clocks, w.clocks);
    clocks_sum += w.clocks;
    run_sum += w.run_s;
    blocked += w.stats.blocked_us / 1e6;
    pull += w.pull_s;
    compute += w.compute_s;
    straggle += w.straggle_s;
    hist.resize(std::max(hist.size(), w.stats.staleness.size()));
    for (size_t i = 0; i < w.stats.staleness.size(); ++i) {
      hist[i] += w.stats.staleness[i];
    }
  }
  s.clocks_per_s = clocks_sum / run_sum;
  s.blocked_frac = blocked / run_sum;
  s.pull_frac = pull / run_sum;
  s.compute_frac = compute / run_sum;
  s.straggle_frac = straggle / run_sum;
  uint64_t pulls = 0;
  double weighted = 0;
  for (size_t i = 0; i < hist.size(); ++i) {
    pulls += hist[i];
    weighted += static_cast<double>(i) * hist[i];
    if (hist[i] > 0) s.staleness_max = static_cast<int64_t>(i);
  }
  s.staleness_mean = pulls > 0 ? weighted / pulls : 0;
  for (const Sample& sample : run.samples) {
    if (sample.objective <= target) {
      s.target_s = sample.time_s;
      s.target_clock = static_cast<double>(sample.clock);
      break;
    }
  }
  return s;
}

// The median of `values` (the mean of the middle two for an even count).
double Median(std::vector<double> values) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Field-wise medians over the repeats of one mode (the largest staleness
// and the fewest clocks).
Summary MedianOf(const std::vector<Summary>& runs) {
  Summary m;
  auto median = [&](double Summary::*field) {
    std::vector<double> v;
    for (const Summary& s : runs) v.push_back(s.*field);
    return Median(v);
  };
  m.clocks = INT64_MAX;
  for (const Summary& s : runs) {
    m.clocks = std::min(m.clocks, s.clocks);
    m.staleness_max = std::max(m.staleness_max, s.staleness_max);
  }
  m.run_s = median(&Summary::run_s);
  m.clocks_per_s = median(&Summary::clocks_per_s);
  m.final_objective = median(&Summary::final_objective);
  m.blocked_frac = median(&Summary::blocked_frac);
  m.pull_frac = median(&Summary::pull_frac);
  m.compute_frac = median(&Summary::compute_frac);
  m.straggle_frac = median(&Summary::straggle_frac);
  m.staleness_mean = median(&Summary::staleness_mean);
  m.target_s = median(&Summary::target_s);
  m.target_clock = median(&Summary::target_clock);
  return m;
}

double TargetFor(const std::vector<RunResult>& runs, double flag_target) {
  if (flag_target > 0) return flag_target;
  std::vector<double> bsp;
  double worst = 0;
  for (const RunResult& run : runs) {
    if (run.mode == "bsp") bsp.push_back(FinalObjective(run));
    worst = std::max(worst, FinalObjective(run));
  }
  return (bsp.empty() ? worst : Median(bsp)) * 1.05;
}

std::string Format(const char* format, double value) {
  if (!std::isfinite(value)) return "-";
  char text[32];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

void PrintTable(const Workload& workload, bool stragglers,
                const BenchOptions& options, const std::vector<RunResult>& runs,
                double target) {
  std::printf("\n== %s, stragglers: %s", workload.name().c_str(),
              SettingName(stragglers).c_str());
  if (stragglers) {
    std::printf(" (p %.2f, k %.1f)", options.straggler_p, options.straggler_k);
  }
  std::printf(" -- %s\n", workload.description().c_str());
  std::printf("target %s %.4f%s", workload.objective_name().c_str(), target,
              options.target > 0 ? "" : " (BSP final x 1.05)");
  if (options.repeats > 1) {
    std::printf(
        "; medians of %d repeats, t_range: fastest and slowest "
        "time to target",
        options.repeats);
  }
  std::printf("\n%-7s %6s %7s %8s %9s %8s %8s", "mode", "clocks", "run_s",
              "clock/s", "final", "t_target", "c_target");
  if (options.repeats > 1) std::printf(" %13s", "t_range");
  std::printf(" %8s %8s %8s %8s %6s %4s\n", "blocked", "in_pull", "compute",
              "straggle", "stale", "max");
  for (const Mode& mode : options.modes) {
    std::vector<Summary> summaries;
    for (const RunResult& run : runs) {
      if (run.mode == mode.name) summaries.push_back(Summarize(run, target));
    }
    if (summaries.empty()) continue;
    const Summary s = MedianOf(summaries);
    std::printf("%-7s %6lld %7.2f %8.1f %9.4f %8s %8s", mode.name.c_str(),
                static_cast<long long>(s.clocks), s.run_s, s.clocks_per_s,
                s.final_objective, Format("%.2f", s.target_s).c_str(),
                Format("%.0f", s.target_clock).c_str());
    if (options.repeats > 1) {
      double lo = INFINITY, hi = 0;
      for (const Summary& r : summaries) {
        lo = std::min(lo, r.target_s);
        hi = std::max(hi, r.target_s);
      }
      const std::string range = Format("%.2f", lo) + "-" + Format("%.2f", hi);
      std::printf(" %13s", range.c_str());
    }
    std::printf(" %7.1f%% %7.1f%% %7.1f%% %7.1f%% %6.2f %4lld\n",
                100 * s.blocked_frac, 100 * s.pull_frac, 100 * s.compute_frac,
                100 * s.straggle_frac, s.staleness_mean,
                static_cast<long long>(s.staleness_max));
  }
  std::fflush(stdout);
}

void AppendCsv(std::ofstream& csv, const RunResult& run) {
  for (const Sample& s : run.samples) {
    csv << run.workload << ',' << SettingName(run.stragglers) << ',' << run.mode
        << ",0," << s.time_s << ',' << s.clock << ',' << s.objective << ','
        << run.repeat << '\n';
  }
  csv.flush();
}

// Writes each run's samples and a gnuplot script into `dir`, and runs
// gnuplot there: two PNGs per workload and straggler setting, with one line
// per mode: of its repeats, the one with the median time to the target (the
// data of every repeat is in dir/data and in the CSV).
Status WritePlots(const std::string& dir,
                  const std::vector<const Workload*>& workloads,
                  const std::map<std::pair<std::string, bool>,
                                 std::vector<RunResult>>& groups,
                  const std::map<std::pair<std::string, bool>, double>& targets,
                  const BenchOptions& options) {
  if (std::system(("mkdir -p '" + dir + "/data'").c_str()) != 0) {
    return UnavailableError("cannot create " + dir + "/data");
  }
  std::ofstream gp(dir + "/staleness.gp");
  gp << "# Written by staleness_bench; run with: cd " << dir
     << " && gnuplot staleness.gp\n"
     << "set terminal pngcairo size 1000,650 font 'DejaVu Sans,11'\n"
     << "set grid xtics ytics\nset key top right\n"
     << "set logscale y\nset autoscale yfix\n"
     << "set offsets 0, 0, graph 0.03, graph 0.03\n"
     // Labelled ticks between the decades too (gnuplot labels only 1, 10,
     // ... on a log axis by default); those outside the range are left out.
     << "set ytics (0.01, 0.02, 0.05, 0.1, 0.12, 0.15, 0.2, 0.25, 0.3, 0.4, "
        "0.5, 0.6, 0.7, 0.8, 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10, 20, 50, "
        "100)\n";
  for (const Workload* workload : workloads) {
    for (bool stragglers : options.straggler_settings) {
      auto it = groups.find({workload->name(), stragglers});
      if (it == groups.end()) continue;
      const std::string base = workload->name() + "_" + SettingName(stragglers);
      auto data_file = [&](const RunResult& run) {
        return "data/" + base + "_" + run.mode + "_" +
               std::to_string(run.repeat) + ".dat";
      };
      for (const RunResult& run : it->second) {
        std::ofstream dat(dir + "/" + data_file(run));
        dat << "# time_s clock objective\n";
        for (const Sample& s : run.samples) {
          dat << s.time_s << ' ' << s.clock << ' ' << s.objective << '\n';
        }
      }
      const double target = targets.at({workload->name(), stragglers});
      std::string title =
          workload->name() + ", stragglers: " + SettingName(stragglers);
      if (stragglers) {
        char extra[64];
        std::snprintf(extra, sizeof(extra), " (p=%.2f, k=%.1f)",
                      options.straggler_p, options.straggler_k);
        title += extra;
      }
      title += ", " + std::to_string(options.workers) + " workers, " +
               std::to_string(options.servers) + " servers";
      // Each mode's run with the median time to the target.
      std::vector<const RunResult*> shown;
      for (const Mode& mode : options.modes) {
        std::vector<std::pair<double, const RunResult*>> by_time;
        for (const RunResult& run : it->second) {
          if (run.mode != mode.name) continue;
          by_time.push_back({Summarize(run, target).target_s, &run});
        }
        if (by_time.empty()) continue;
        std::stable_sort(
            by_time.begin(), by_time.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
        shown.push_back(by_time[(by_time.size() - 1) / 2].second);
      }
      if (options.repeats > 1) {
        title += " (each mode's median run of " +
                 std::to_string(options.repeats) + ")";
      }
      for (int by_clock = 0; by_clock < 2; ++by_clock) {
        gp << "set output '" << base << (by_clock ? "_clock" : "_time")
           << ".png'\n"
           << "set title \"" << title << "\\n"
           << workload->description() << "\" noenhanced\n"
           << "set xlabel '"
           << (by_clock ? "clock (worker 0)" : "wall-clock time (s)")
           << "'\nset ylabel '" << workload->objective_name() << "'\n"
           << "plot ";
        for (const RunResult* run : shown) {
          gp << "'" << data_file(*run) << "' using " << (by_clock ? 2 : 1)
             << ":3 with linespoints pt 7 ps 0.4 title '" << run->mode << "', ";
        }
        gp << target << " with lines dt 2 lc rgb 'gray40' title 'target'\n";
      }
    }
  }
  gp.close();
  const std::string command = "cd '" + dir + "' && gnuplot staleness.gp";
  if (std::system(command.c_str()) != 0) {
    return UnavailableError("gnuplot failed: " + command);
  }
  return Status::Ok();
}

Status RunBench(const BenchOptions& options) {
  std::vector<std::unique_ptr<Workload>> workloads;
  for (const std::string& name : options.workloads) {
    const auto load_start = SteadyClock::now();
    if (name == "mf") {
      MfConfig c;
      c.rows = FLAGS_mf_rows;
      c.cols = FLAGS_mf_cols;
      c.rank = FLAGS_mf_rank;
      c.density = FLAGS_mf_density;
      c.noise = FLAGS_mf_noise;
      c.batch = FLAGS_mf_batch;
      c.lr = static_cast<float>(FLAGS_mf_lr);
      c.l2 = static_cast<float>(FLAGS_mf_l2);
      c.eval_samples = FLAGS_mf_eval_samples;
      if (c.rows < 1 || c.cols < 1 || c.rank < 1 || c.rank > 4096 ||
          !(c.density > 0 && c.density <= 1) || c.batch < 0 ||
          c.eval_samples < 1) {
        return InvalidArgumentError(
            "--mf_rows, --mf_cols, --mf_rank, --mf_eval_samples must be "
            ">= 1, --mf_density in (0, 1], --mf_batch >= 0");
      }
      auto mf = std::make_unique<MfWorkload>(c, options.seed);
      if (mf->num_ratings() < static_cast<size_t>(options.workers)) {
        return InvalidArgumentError("MF: fewer ratings than workers");
      }
      workloads.push_back(std::move(mf));
    } else {
      LogRegConfig c;
      c.data_dir = FLAGS_data_dir;
      c.batch = FLAGS_logreg_batch;
      c.lr = static_cast<float>(FLAGS_logreg_lr);
      c.eval_samples = FLAGS_logreg_eval_samples;
      if (c.batch < 1 || c.eval_samples < 1) {
        return InvalidArgumentError(
            "--logreg_batch and --logreg_eval_samples must be >= 1");
      }
      Result<std::unique_ptr<LogRegWorkload>> logreg =
          LogRegWorkload::Load(c, options.seed);
      DUCTILE_RETURN_IF_ERROR(logreg.status());
      workloads.push_back(std::move(*logreg));
    }
    std::printf("%s: %s (ready in %.1fs)\n", name.c_str(),
                workloads.back()->description().c_str(),
                SecondsSince(load_start));
  }
  std::ofstream csv(FLAGS_csv);
  if (!csv) return UnavailableError("cannot write " + FLAGS_csv);
  csv << "workload,stragglers,mode,worker,time_s,clock,objective,repeat\n";

  std::printf(
      "%d workers, %d servers; columns: clocks per worker, run time, "
      "clocks per second per worker, final objective, time and worker 0's "
      "clock when the objective first reached the target, then shares of "
      "the workers' run time: blocked at servers (ClientStats.blocked_us, "
      "summed over the servers a pull waits on), inside Pull calls, "
      "computing, sleeping as a straggler; observed staleness (clocks), "
      "mean and max\n",
      options.workers, options.servers);
  std::map<std::pair<std::string, bool>, std::vector<RunResult>> groups;
  std::map<std::pair<std::string, bool>, double> targets;
  std::vector<const Workload*> workload_list;
  for (const auto& workload : workloads) {
    workload_list.push_back(workload.get());
    for (bool stragglers : options.straggler_settings) {
      std::vector<RunResult>& runs = groups[{workload->name(), stragglers}];
      // Repeats outermost, so that a slow spell of the machine falls on
      // every mode alike.
      for (int repeat = 0; repeat < options.repeats; ++repeat) {
        for (const Mode& mode : options.modes) {
          const auto run_start = SteadyClock::now();
          Result<RunResult> run =
              RunOne(options, *workload, mode, stragglers, repeat);
          if (!run.ok()) {
            return Status(run.status().code(),
                          workload->name() + " " + mode.name + " (stragglers " +
                              SettingName(stragglers) +
                              "): " + run.status().message());
          }
          std::fprintf(stderr,
                       "  %s / %s / %s / repeat %d: %.1fs, final %.4f (%.1fs "
                       "with setup and evaluation)\n",
                       workload->name().c_str(),
                       SettingName(stragglers).c_str(), mode.name.c_str(),
                       repeat, run->run_s, FinalObjective(*run),
                       SecondsSince(run_start));
          AppendCsv(csv, *run);
          runs.push_back(std::move(*run));
        }
      }
      const double target = TargetFor(runs, options.target);
      targets[{workload->name(), stragglers}] = target;
      PrintTable(*workload, stragglers, options, runs, target);
    }
  }
  if (!FLAGS_plots_dir.empty()) {
    DUCTILE_RETURN_IF_ERROR(
        WritePlots(FLAGS_plots_dir, workload_list, groups, targets, options));
    std::printf("\nplots: %s/*.png (script %s/staleness.gp)\n",
                FLAGS_plots_dir.c_str(), FLAGS_plots_dir.c_str());
  }
  std::printf("samples: %s\n", FLAGS_csv.c_str());
  return Status::Ok();
}

}  // namespace
}  // namespace ductile::bench

int main(int argc, char** argv) {
  // The library logs through glog; keep its INFO lines out of the tables
  // unless --minloglevel=0 is given.
  gflags::SetCommandLineOptionWithMode("minloglevel", "1",
                                       gflags::SET_FLAGS_DEFAULT);
  gflags::SetUsageMessage(
      "convergence of BSP, SSP(s) and async with and without stragglers");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  auto options = ductile::bench::OptionsFromFlags();
  if (!options.ok()) {
    std::cerr << "staleness_bench: " << options.status() << "\n";
    return 2;
  }
  ductile::Status s = ductile::bench::RunBench(*options);
  std::fflush(stdout);
  if (!s.ok()) {
    std::cerr << "staleness_bench: " << s << "\n";
    return 1;
  }
  return 0;
}
