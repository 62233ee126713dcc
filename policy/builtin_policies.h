// The built-in policies (ductile/policy.h, MakeBuiltinPolicy), exposed for
// their tests and for embedders that want their parameters as a struct.
#ifndef DUCTILE_POLICY_BUILTIN_POLICIES_H_
#define DUCTILE_POLICY_BUILTIN_POLICIES_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ductile/policy.h"

namespace ductile {

// `autoscale`: Or, Zhang and Freedman's heuristic (MLSys'20). From the size
// the job has, it measures the throughput R_k (the job's samples per
// second, averaged over `measure_ms` once the size has held for
// `settle_ms`), grows by `step` workers and measures again, and keeps
// growing while the scaling efficiency
//   s = ((R_{k+d} - R_k) / d) / (R_k / k)
// (what a worker added brings, against what one brought on average) stays
// above `threshold`. When it does not, it shrinks back to k and stays
// there. It never asks for more than `max_workers`, stops where the job
// refuses a size, and gives up (asks for the size the job has, and stays)
// if a size it asked for is not reached within `wait_ms`. Until it has
// asked for a size, it measures whatever size the job has.
struct AutoscaleOptions {
  int32_t step = 1;           // d: 1 - 1024
  double threshold = 0.1;     // 0 - 1
  int32_t max_workers = 16;   // 1 - 1048576
  int64_t settle_ms = 10000;  // 0 - 1 day
  int64_t measure_ms = 10000;
  int64_t wait_ms = 300000;
};

class AutoscalePolicy final : public Policy {
 public:
  explicit AutoscalePolicy(const AutoscaleOptions& options);
  std::string name() const override { return "autoscale"; }
  void OnStatus(const PolicyEvent& event, PolicyActions& actions) override;

  // One measured size: its throughput and, from the second on, the
  // scaling efficiency of the step that reached it.
  struct Measured {
    int32_t workers = 0;
    double samples_per_s = 0;
    double efficiency = 0;  // 0 for the first
  };
  const std::vector<Measured>& measured() const { return measured_; }
  // The size it settled on (0: still searching).
  int32_t settled() const { return settled_; }

 private:
  enum class Phase { kStart, kSettling, kMeasuring, kDone };
  enum class Ask { kDone, kRefused, kRetry };
  void Decide(double rate, int64_t now_ms, PolicyActions& actions);
  Ask Resize(int32_t workers, PolicyActions& actions);
  void Settle(int32_t workers, const char* why);

  const AutoscaleOptions options_;
  Phase phase_ = Phase::kStart;
  int32_t size_ = 0;      // the size being settled or measured
  bool asked_ = false;    // it has asked for a size
  int64_t since_ms_ = 0;  // the size has held since then
  int64_t asked_ms_ = 0;  // when size_ was asked for
  double rate_sum_ = 0;   // throughput readings being averaged
  int64_t readings_ = 0;
  int64_t measure_from_ms_ = 0;
  std::vector<Measured> measured_;
  int32_t settled_ = 0;
};

// `stragglers`: a worker whose samples per second of its own work (the
// time it waited on the staleness bound for others left out), as a
// fraction of the median of the active workers', average below `ratio`
// over its last `window` readings is replaced (PolicyActions::ReplaceWorker: a
// new worker starts, and the slow one is drained once it is active). Averaging
// rides out a dip (a worker evaluating at an epoch's end, the others waiting
// for the epoch to end). Workers that report no samples yet (just joined) are
// left out, as are workers in their first `warmup_steps` steps, and a
// worker's readings start over when it is; fewer than two rated workers
// compare nothing.
struct StragglerOptions {
  double ratio = 0.8;   // (0, 1)
  int32_t window = 10;  // readings: 1 - 100000
  // A worker is rated from its this-many'th step on: its first steps (the
  // model's first pulls, a cold start) say nothing of its speed, and a
  // replacement would otherwise look like a straggler itself.
  int64_t warmup_steps = 20;  // 0 - 2^40
};

class StragglerPolicy final : public Policy {
 public:
  explicit StragglerPolicy(const StragglerOptions& options);
  std::string name() const override { return "stragglers"; }
  void OnStatus(const PolicyEvent& event, PolicyActions& actions) override;

  // Workers it asked to replace so far.
  const std::set<int32_t>& replaced() const { return replaced_; }

 private:
  const StragglerOptions options_;
  // Of the time between a worker's last two heartbeats that told of new
  // steps, the fraction it waited on the staleness bound: the pulls' time
  // parked at their servers, but no more than its callers waited for
  // pulls (pulls side by side each count their parked time, and a
  // prefetch waits while the worker computes) (at most
  // kMaxBlocked: a worker that did nothing else reads as 20 times its
  // wall rate, fast enough).
  static constexpr double kMaxBlocked = 0.95;
  struct Progress {
    double step_ms = 0;  // MemberStatus::step_seconds, in ms
    uint64_t blocked_ms = 0;
    double pull_wait_ms = 0;  // MemberStatus::pull_wait_seconds, in ms
    double blocked_fraction = 0;
  };
  std::map<int32_t, Progress> progress_;
  // Worker -> its last `window` rates as fractions of the median.
  std::map<int32_t, std::deque<double>> ratios_;
  std::set<int32_t> replaced_;
};

// `staleness`: tunes the bound of every SSP table to the time workers
// spend blocked on it. At each reading it takes the fraction of the
// active workers' step time, since the previous reading, that they spent
// blocked on the staleness bound (MemberStatus::blocked_ms against
// step_seconds), and averages it over the last `window` readings:
//   - above `raise_above`: the bound holds the job up; it is raised by
//     `step` (up to `max`), and the bound it left is remembered as one that
//     blocks;
//   - below `lower_below`: the bound costs nothing, and a lower one would
//     read fresher values; it is lowered by `step` (down to `min`), unless
//     that bound was found to block before.
// After a change the readings start over; a reading without new step time
// (no heartbeat since the last) counts for nothing.
// Async tables are left as they are. While the job has a BSP table the
// policy changes nothing: blocked time is reported per worker, not per
// table, and BSP's waits would read as an SSP bound that blocks. Each SSP
// table is changed by itself, from its own bound.
// The loss: a raise is a trial when the job reports a training loss
// (ClusterStatus::loss). If the mean loss over the `window` readings after
// it is more than `loss_rise` (relative) above the mean over the `window`
// readings before it, the staleness hurt: the bound goes back, and the
// policy never raises a table to that bound again.
struct StalenessOptions {
  double raise_above = 0.2;   // (0, 1]
  double lower_below = 0.02;  // [0, raise_above)
  int32_t window = 5;         // readings: 1 - 100000
  int32_t step = 1;           // 1 - 1000
  int32_t min_bound = 0;      // 0 - 1000000
  int32_t max_bound = 16;     // min_bound - 1000000
  double loss_rise = 0.05;    // (0, 10]
};

class StalenessPolicy final : public Policy {
 public:
  explicit StalenessPolicy(const StalenessOptions& options);
  std::string name() const override { return "staleness"; }
  void OnStatus(const PolicyEvent& event, PolicyActions& actions) override;

  // The averaged blocked fraction of the last complete window (-1: none
  // yet since the last change).
  double blocked_fraction() const { return last_fraction_; }
  // Bounds found to block (the job was held up at them).
  const std::set<int32_t>& blocking() const { return blocking_; }
  // Bounds found to hurt the loss (raised to, then taken back).
  const std::set<int32_t>& hurting() const { return hurting_; }

 private:
  const StalenessOptions options_;
  // Per active worker: blocked ms and step ms at the previous reading.
  std::map<int32_t, std::pair<double, double>> previous_;
  std::deque<double> fractions_;
  std::set<int32_t> blocking_;
  std::set<int32_t> hurting_;
  // The job's loss at the last `window` readings that had one.
  std::deque<double> losses_;
  // A raise being judged by the loss after it.
  struct Trial {
    std::string table;
    Consistency from;
    int32_t to = 0;
    double loss_before = 0;
    double loss_sum = 0;
    int32_t readings = 0;
  };
  std::vector<Trial> trials_;
  // Judges the trials with this reading's loss; true if a bound went back.
  bool JudgeTrials(const ClusterStatus& status, PolicyActions& actions);
  double last_fraction_ = -1;
  bool bsp_reported_ = false;
};

// `gns-batch`: grows the job's global batch with the gradient noise scale
// (McCandlish et al. 2018): a global batch near the noise scale B_simple
// spends samples and steps in balance, one well below it wastes steps. The
// servers' estimate (ClusterStatus::noise_scale, in units of one worker's
// step batch) is averaged over `window` readings; while that average is
// above `grow_above` times the active workers (the global batch in those
// units), the policy grows the global batch by `step`:
//   - by = kWorkers: `step` more workers (PolicyActions::Resize, up to
//     `max` workers), then it waits for the job to reach the size;
//   - by = kBatch: `step` more of the data plan's batches in each worker's
//     step (PolicyActions::SetBatchesPerStep, up to `max` a step), then it
//     waits until the estimate has folded in `settle_clocks` more clocks
//     (its moving average forgets the smaller batches slowly).
// Readings start over after each growth. It never shrinks the job: the
// noise scale grows as training goes on; it never asks for fewer workers
// than the job's target, and stops once a worker has finished (the job
// ends). It ignores the estimate until the
// servers have folded in `min_clocks` clocks, and stops (asking for the
// size the job has) when a size it asked for is not reached within
// `wait_ms` or the job refuses it. The estimate needs two workers: a job
// of one never grows. Under BSP with the tables' batch_scaling
// (`--lr_scaling`), the learning rate follows the global batch it grows.
struct GnsBatchOptions {
  enum class By { kWorkers, kBatch };
  By by = By::kWorkers;
  double grow_above = 1.0;      // (0, 1000]
  int32_t step = 1;             // 1 - 1024
  int32_t max = 16;             // workers, or batches a step (1 - 64)
  int32_t window = 5;           // readings: 1 - 100000
  int64_t min_clocks = 50;      // 0 - 2^40
  int64_t settle_clocks = 200;  // 0 - 2^40
  int64_t wait_ms = 300000;     // 0 - 1 day
};

class GnsBatchPolicy final : public Policy {
 public:
  explicit GnsBatchPolicy(const GnsBatchOptions& options);
  std::string name() const override { return "gns-batch"; }
  void OnStatus(const PolicyEvent& event, PolicyActions& actions) override;

  // One growth it asked for: at which clock, from and to how many workers
  // (or batches a step), and the averaged noise scale that called for it.
  struct Growth {
    int64_t clock = -1;
    int32_t from = 0;
    int32_t to = 0;
    double noise_scale = 0;
  };
  const std::vector<Growth>& grown() const { return grown_; }
  // True once it has stopped for good (its limit, a refusal, a size not
  // reached in time).
  bool stopped() const { return stopped_; }

 private:
  void Stop(const std::string& why);
  // The batch step: SetBatchesPerStep.
  void GrowBatch(const PolicyEvent& event, double mean, PolicyActions& actions);

  const GnsBatchOptions options_;
  std::deque<double> readings_;
  int32_t asked_ = 0;  // the size asked for and not yet reached (0: none)
  int64_t asked_ms_ = 0;
  // By batch: the estimate's clocks to wait for before reading again.
  uint64_t settle_until_ = 0;
  std::vector<Growth> grown_;
  bool stopped_ = false;
};

// "KEY=VALUE:KEY=VALUE" after a spec's "NAME:" into a map; kInvalidArgument
// for an item without '=' or a key given twice.
Result<std::map<std::string, std::string>> ParsePolicyParameters(
    const std::string& text);
// A spec ("NAME" or "NAME:KEY=VALUE:...") into its name and parameters
// (ParsePolicyParameters' errors).
Status SplitPolicySpec(const std::string& spec, std::string* name,
                       std::map<std::string, std::string>* params);
// A comma-separated list of specs ("" gives none; "a," names an empty one
// last, which no policy has).
std::vector<std::string> SplitPolicySpecs(const std::string& specs);

// A policy parameter's value: a number in [lo, hi], all of `text`
// (kInvalidArgument naming `policy`, `key` and the range otherwise), and a
// whole one.
Result<double> PolicyNumber(const std::string& policy, const std::string& key,
                            const std::string& text, double lo, double hi);
Result<int64_t> PolicyInteger(const std::string& policy, const std::string& key,
                              const std::string& text, int64_t lo, int64_t hi);

// `comm-batch` (a worker policy): grows the worker's batches a step by
// `step` while the time it waits for its pushes and pulls (ClientStats::
// push_wait_us + pull_wait_us; under BSP and SSP that includes waiting for
// the others) is above `above` of its step time, averaged over `window`
// trained steps, up to `max`. It grows from the size the last step took
// (the job's may be more than it asked). Each window after a change
// measures the new size. Never shrinks; stops at `max` or when the worker
// refuses a size.
struct CommBatchOptions {
  double above = 0.5;   // (0, 1]
  int32_t window = 20;  // steps: 1 - 100000
  int32_t step = 1;     // 1 - 64
  int32_t max = 8;      // 1 - 64
};

class CommBatchPolicy final : public WorkerPolicy {
 public:
  explicit CommBatchPolicy(const CommBatchOptions& options)
      : options_(options) {}
  std::string name() const override { return "comm-batch"; }
  void AfterStep(const WorkerPolicyEvent& event,
                 WorkerPolicyActions& actions) override;

  // The waiting fraction of the last complete window (-1: none yet).
  double wait_fraction() const { return last_fraction_; }
  struct Growth {
    uint64_t step = 0;  // the worker's steps when it grew
    int32_t batches = 0;
    double wait_fraction = 0;
  };
  const std::vector<Growth>& grown() const { return grown_; }
  bool stopped() const { return stopped_; }

 private:
  const CommBatchOptions options_;
  bool have_previous_ = false;
  uint64_t previous_steps_ = 0;
  uint64_t previous_step_us_ = 0, previous_wait_us_ = 0;
  uint64_t window_steps_ = 0;
  double window_step_us_ = 0, window_wait_us_ = 0;
  int32_t batches_ = 0;  // the size now (as the last step took it)
  double last_fraction_ = -1;
  std::vector<Growth> grown_;
  bool stopped_ = false;
};

}  // namespace ductile

#endif  // DUCTILE_POLICY_BUILTIN_POLICIES_H_
