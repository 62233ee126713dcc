// What the built-in apps' workers share (train/trainer.cc runs them): the
// step loop over the data plan (RunSteps), start-up and the final barrier,
// recovery from a rollback, progress lines and the CSV log, and table
// creation that agrees with workers that joined earlier. Internal to
// train/.
//
// Thread safety: each function runs on the worker's training thread.
#ifndef DUCTILE_TRAIN_STEP_LOOP_H_
#define DUCTILE_TRAIN_STEP_LOOP_H_

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "ductile/client.h"
#include "ductile/status.h"
#include "train/data_position.h"
#include "train/trainer.h"

namespace ductile::train {

using SteadyClock = std::chrono::steady_clock;

double SecondsSince(SteadyClock::time_point t);

// "sgd", "momentum", "adagrad", "adam".
const char* RuleName(UpdateRule rule);

// The schedule of the tables `o` makes, for `world` workers that take
// `batches_per_epoch` batches an epoch between them; a table that exists
// already (made before this worker joined) keeps its own.
LearningRateSchedule TableSchedule(Client& client, const std::string& table,
                                   const TrainerOptions& o,
                                   int64_t batches_per_epoch, int world);

// Makes table `t` with `make` (CreateTable or RegisterTensor). Workers that
// counted different numbers of workers compute different schedules: when
// the table exists (or is being made) with other options, this takes its
// schedule, once it can be read, and makes it again.
template <typename Make>
auto MakeTable(Client& client, TableOptions t, Make make) -> decltype(make(t)) {
  auto made = make(t);
  for (int attempt = 0; attempt < 100 && !made.ok() &&
                        made.status().code() == StatusCode::kAlreadyExists;
       ++attempt) {
    Result<TableInfo> existing = client.GetTable(t.name);
    if (existing.ok()) {
      t.lr_schedule = existing->options.lr_schedule;
      t.batch_scaling = existing->options.batch_scaling;
      return make(t);
    }
    // Still being made by another worker.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return made;
}

// Progress lines on stdout and the CSV log, from worker 0 only.
class Progress {
 public:
  // `total_batches`: this worker's share of the plan's batches (for the
  // ETA).
  Progress(bool lead, int epochs, uint64_t total_batches, int world)
      : lead_(lead),
        epochs_(epochs),
        total_batches_(total_batches),
        world_(world) {}

  Status OpenLog(const std::string& path) {
    if (!lead_ || path.empty()) return Status::Ok();
    csv_.open(path, std::ios::trunc);
    if (!csv_) {
      return FailedPreconditionError("cannot write the CSV log '" + path + "'");
    }
    // The step split, per step over the window: the wall time between
    // clocks, and of it the waits for pushes, for pulls and (inside those)
    // on the staleness bound; compute is the rest.
    csv_ << "kind,epoch,clock,time_s,loss,samples_per_s,metric,workers,"
            "step_ms,compute_ms,push_wait_ms,pull_wait_ms,blocked_ms\n";
    return Status::Ok();
  }

  void Start() { start_ = window_start_ = SteadyClock::now(); }
  // The lowest live worker leads: another takes over when it dies.
  void set_lead(bool lead) { lead_ = lead; }
  bool lead() const { return lead_; }

  // After each step (this worker's `step`-th, which made its plan batches
  // trained `batches`); prints every `every` steps (and when `force`).
  void Step(const Client& client, int epoch, int64_t clock, double loss,
            size_t samples, uint64_t step, uint64_t batches, int every,
            bool force) {
    window_loss_ += loss;
    ++window_steps_;
    window_samples_ += samples;
    if (!lead_ || (step % every != 0 && !force)) return;
    const double window_s = std::max(1e-9, SecondsSince(window_start_));
    const double elapsed = SecondsSince(start_);
    const double eta = batches == 0 || batches >= total_batches_
                           ? 0.0
                           : elapsed / batches * (total_batches_ - batches);
    const double rate = window_samples_ / window_s;
    const double mean_loss = window_loss_ / window_steps_;
    // The job's workers now (it may have been resized), else the first.
    const size_t live = client.live_workers().size();
    const int workers = live > 0 ? static_cast<int>(live) : world_;
    std::printf(
        "[epoch %d/%d] clock %lld  loss %.4f  samples/s %.0f (all "
        "%d workers ~%.0f)  ETA %.0fs\n",
        epoch + 1, epochs_, static_cast<long long>(clock), mean_loss, rate,
        workers, workers * rate, eta);
    std::fflush(stdout);
    const ClientStats stats = client.stats();
    if (csv_) {
      const double steps =
          static_cast<double>(std::max<uint64_t>(1, stats.steps - last_.steps));
      auto per_step_ms = [&](uint64_t now, uint64_t before) {
        return static_cast<double>(now - before) / 1000.0 / steps;
      };
      const double step_ms = per_step_ms(stats.step_us, last_.step_us);
      const double push_ms =
          per_step_ms(stats.push_wait_us, last_.push_wait_us);
      const double pull_ms =
          per_step_ms(stats.pull_wait_us, last_.pull_wait_us);
      csv_ << "step," << epoch + 1 << "," << clock << "," << elapsed << ","
           << mean_loss << "," << workers * rate << ",," << workers << ","
           << step_ms << "," << std::max(0.0, step_ms - push_ms - pull_ms)
           << "," << push_ms << "," << pull_ms << ","
           << per_step_ms(stats.blocked_us, last_.blocked_us) << "\n";
      csv_.flush();
    }
    last_ = stats;
    window_start_ = SteadyClock::now();
    window_loss_ = 0;
    window_steps_ = 0;
    window_samples_ = 0;
  }

  void Epoch(int epoch, int64_t clock, const char* metric_name, double metric) {
    if (!lead_) return;
    std::printf("epoch %d done: %s %.4f (%.1fs)\n", epoch + 1, metric_name,
                metric, SecondsSince(start_));
    std::fflush(stdout);
    if (csv_) {
      csv_ << "epoch," << epoch + 1 << "," << clock << ","
           << SecondsSince(start_) << ",,," << metric << ",,,,,,\n";
      csv_.flush();
    }
  }

  double elapsed() const { return SecondsSince(start_); }

 private:
  bool lead_;
  int epochs_;
  uint64_t total_batches_;
  int world_;
  std::ofstream csv_;
  SteadyClock::time_point start_, window_start_;
  double window_loss_ = 0;
  uint64_t window_steps_ = 0, window_samples_ = 0;
  ClientStats last_;  // at the previous line
};

Status CheckLoss(double loss, int epoch, int64_t clock);

// A step failed: if it is because the job rolls back (a server died),
// waits for the rollback and restores the data position; otherwise, or if
// no rollback comes, returns the step's error.
Status RecoverOrFail(Client& client, const Status& failed, DataPosition& data,
                     bool lead);

// A worker's start: `create_tables`, then, unless it joins a running job,
// the barrier where every worker starts together. A server dying meanwhile
// aborts these calls as it would a step's: the worker waits for the
// rollback and starts again (tables are created idempotently).
Status StartUp(Client& client, const std::function<Status()>& create_tables);

// Whether this worker is the lowest live one, which reports progress.
bool IsLead(const Client& client);

// One app's step: pull, gradient (its loss checked with CheckLoss before
// anything is pushed) and push for `batch`, indices into its training set
// of epoch `epoch`. Returns the batch's loss.
using StepFn =
    std::function<Result<float>(std::span<const size_t> batch, int epoch)>;

// Runs one worker's training over the data plan (train/step_loop.cc says
// how).
Status RunSteps(Client& client, const TrainerOptions& o, DataPosition& data,
                Progress& progress, const StepFn& step, const char* metric,
                const std::function<Result<double>()>& evaluate,
                const std::function<void()>& abandon);

// The built-in apps, as one worker of the job of `world` workers.
// `data` holds what LoadWorkerData loaded for them.
Status RunClassifier(Client& client, const TrainerOptions& o, int rank,
                     int world, const WorkerData& data);
Status RunMf(Client& client, const TrainerOptions& o, int rank, int world,
             const WorkerData& data);

}  // namespace ductile::train

#endif  // DUCTILE_TRAIN_STEP_LOOP_H_
