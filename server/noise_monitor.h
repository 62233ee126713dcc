// The gradient noise scale, estimated on a server from the pushes it
// already receives (McCandlish et al., "An Empirical Model of Large-Batch
// Training", 2018, appendix A.1). No extra messages: each server reports
// its share in its heartbeat counters.
//
// In clock t each of n workers pushes its gradient g_w, the mean over its
// batch of b samples. Over the keys this server holds (a sample of them:
// one in `sample_one_in`, chosen by a hash of table and key):
//   S = mean_w |g_w|^2     the squared norm at batch b
//   B = |mean_w g_w|^2     the squared norm at batch n*b
// and, per clock,
//   |G|^2          ~ (n B - S) / (n - 1)
//   tr(Sigma) / b  ~ n (S - B) / (n - 1)
// Both are linear in this server's sums, so the servers' values add up to
// those of the whole model (the keys they hold are disjoint). Each is
// smoothed by an exponential moving average over clocks. The noise scale
// is then B_simple = tr(Sigma) / |G|^2 = b * (sum of the servers' traces) /
// (sum of their |G|^2): ClusterStatus::noise_scale gives it in units of a
// worker's batch. Per-clock estimates are noisy, and may be negative; only
// their averages are meaningful (as in the paper).
//
// A clock is folded in once every worker has finished it (the server clock
// passed it). Assumes a worker pushes each key at most once per clock, and
// counts as n the workers that pushed to this server in the clock (for a
// dense model, all of them; for a sparse one, a server's share is biased).
// Only tables of gradients feed it: those of the optimizer rules (SGD,
// momentum, AdaGrad, Adam).
//
// Memory: the sampled keys' values, summed over workers (4 bytes each, plus
// about 64 per key), for each clock not yet folded: at most kMaxOpenClocks
// clocks and kMaxOpenBytes (or the bound given). A clock that would pass either
// is left out whole, from its first push on, so the clocks next to fold are
// kept; a clock whose own sampled keys pass kMaxOpenBytes is never estimated
// (take fewer keys).
//
// Not thread-safe: owned by a server's request thread.
#ifndef DUCTILE_SERVER_NOISE_MONITOR_H_
#define DUCTILE_SERVER_NOISE_MONITOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ductile/table.h"

namespace ductile {

class GradientNoiseMonitor {
  struct TableKey {
    TableId table;
    Key key;
    bool operator==(const TableKey&) const = default;
  };
  struct TableKeyHash {
    size_t operator()(const TableKey& k) const;
  };

 public:
  // One clock's sums of the sampled keys' gradients.
  using Sums = std::unordered_map<TableKey, std::vector<float>, TableKeyHash>;
  static constexpr size_t kMaxOpenClocks = 64;
  // Bytes of sampled gradients kept for open clocks at most.
  static constexpr uint64_t kMaxOpenBytes = uint64_t{256} << 20;
  static constexpr uint64_t kKeyOverheadBytes = 64;
  // The moving averages' weight of the past, per clock.
  static constexpr double kDefaultSmoothing = 0.99;

  // `sample_one_in`: one key in this many is taken (1: all; 0: the monitor
  // is off). `smoothing`: the moving average's weight of the past, [0, 1).
  // `max_open_bytes`: the memory bound (tests make it small).
  GradientNoiseMonitor(uint32_t sample_one_in, double smoothing,
                       uint64_t max_open_bytes = kMaxOpenBytes)
      : sample_one_in_(sample_one_in),
        smoothing_(smoothing),
        max_open_bytes_(max_open_bytes) {}

  bool enabled() const { return sample_one_in_ > 0; }

  // A worker's push of `clock` to `table`, applied (or buffered) here:
  // `values[i]` is key `keys[i]`'s gradient, the mean over `weight` worker
  // batches (Client::SetPushWeight; 1 for one batch a step).
  void OnPush(TableId table, int32_t worker, int64_t clock,
              std::span<const Key> keys,
              std::span<const std::span<const float>> values,
              int32_t weight = 1);
  // Every worker has finished the clocks below `server_clock`: they are
  // folded into the averages. Returns whether they changed.
  bool OnServerClock(int64_t server_clock);
  // Forgets the clocks not folded yet (a rollback starts a new timeline);
  // the averages stay.
  void Reset() {
    for (auto& [clock, c] : open_) Drop(std::move(c.sum));
    open_.clear();
    open_bytes_ = 0;
    skipped_.clear();
    folded_below_ = 0;
  }
  // The sums of a clock of kFreeElsewhereKeys keys or more, once dropped
  // (folded, left out or forgotten), go to `free_elsewhere` to be freed
  // where it likes: a clock left out at kMaxOpenBytes holds millions of
  // small vectors, and freeing them held a server's request thread for
  // seconds. Without one (the default), and for smaller clocks, they are
  // freed in place.
  static constexpr size_t kFreeElsewhereKeys = 4096;
  void set_free_elsewhere(std::function<void(Sums)> free_elsewhere) {
    free_elsewhere_ = std::move(free_elsewhere);
  }

  // The moving averages of this server's share of |G|^2 and tr(Sigma)/b,
  // and the clocks folded into them.
  double gradient_sq() const { return gradient_sq_; }
  double noise_trace() const { return noise_trace_; }
  uint64_t clocks() const { return clocks_; }

  // The noise scale in worker batches, tr(Sigma)/b over |G|^2 with b one
  // data-plan batch whatever the pushes' weights, for AdaScale
  // (BatchScaling::Rule::kAdaScale): a clock whose pushes all stood for m
  // batches counts its trace times m, and one of mixed weights is left
  // out. Moving averages that start at 0, so that their ratio is a
  // weighted mean over every clock folded (the first clock weighs no more
  // than the others); 0 until a clock is folded.
  double worker_noise_scale() const {
    return worker_gradient_sq_ > 0 ? worker_noise_trace_ / worker_gradient_sq_
                                   : 0;
  }
  uint64_t worker_clocks() const { return worker_clocks_; }
  // Its two averages, this server's share of the job's.
  double worker_gradient_sq() const { return worker_gradient_sq_; }
  double worker_noise_trace() const { return worker_noise_trace_; }

  // Whether `key` of `table` is among the keys sampled.
  bool Sampled(TableId table, Key key) const;

 private:
  struct OpenClock {
    std::set<int32_t> workers;   // those that pushed in it
    double sum_sq = 0;           // sum over pushes of |g|^2 (sampled keys)
    int32_t weight = 0;          // the pushes' batch weight (0: none yet)
    bool mixed_weights = false;  // pushes of different weights
    Sums sum;
    uint64_t bytes = 0;
  };
  // Frees `sum` here if small, else hands it to free_elsewhere_.
  void Drop(Sums&& sum) {
    if (free_elsewhere_ && sum.size() >= kFreeElsewhereKeys) {
      free_elsewhere_(std::move(sum));
    }
  }
  // Whether it had two workers or more, and so was counted.
  bool Fold(const OpenClock& c);
  // Leaves `clock` out whole (its sums so far, and its pushes to come).
  void Skip(int64_t clock);

  const uint32_t sample_one_in_;
  const double smoothing_;
  const uint64_t max_open_bytes_;
  std::map<int64_t, OpenClock> open_;
  uint64_t open_bytes_ = 0;
  std::function<void(Sums)> free_elsewhere_;
  std::set<int64_t> skipped_;  // clocks left out, not yet passed
  int64_t folded_below_ = 0;   // clocks below were folded (or dropped)
  double gradient_sq_ = 0;
  double noise_trace_ = 0;
  uint64_t clocks_ = 0;
  double worker_gradient_sq_ = 0;
  double worker_noise_trace_ = 0;
  uint64_t worker_clocks_ = 0;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_NOISE_MONITOR_H_
