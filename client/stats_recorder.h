// What a client has observed of the consistency models and of its steps
// (ClientStats), recorded by the I/O thread (pull replies) and the callers
// (cache hits and misses, waits, steps, samples), read by anyone.
//
// Thread-safe.
#ifndef DUCTILE_CLIENT_STATS_RECORDER_H_
#define DUCTILE_CLIENT_STATS_RECORDER_H_

#include <chrono>
#include <cstdint>
#include <optional>

#include "ductile/client.h"
#include "proto/ductile.pb.h"
#include "util/mutex.h"

namespace ductile {

class StatsRecorder {
 public:
  StatsRecorder() { stats_.staleness.assign(kStalenessBuckets, 0); }

  // A pull reply with data of server clock `data_clock` for a call made at
  // `clock`. `waited_us`: how much longer than any earlier reply of the
  // same call it waited at its server (parts wait side by side).
  void RecordPull(int64_t clock, int64_t data_clock, uint64_t waited_us)
      EXCLUDES(mu_);
  void RecordCacheHit() EXCLUDES(mu_);
  void RecordCacheMiss() EXCLUDES(mu_);
  // A caller waited `us` for a pull (or push-pull) or a push.
  void RecordWait(bool pull, uint64_t us) EXCLUDES(mu_);
  // `samples` trained in the current step.
  void RecordSamples(uint64_t samples) EXCLUDES(mu_);
  // A step's training loss (non-finite ones are ignored).
  void RecordLoss(double loss) EXCLUDES(mu_);
  // A step ends (Clock()) at `now`; the first call only starts the first
  // step (what was waited for before it is not counted).
  void RecordStep(std::chrono::steady_clock::time_point now) EXCLUDES(mu_);

  ClientStats Snapshot() const EXCLUDES(mu_);
  // The heartbeat's metrics.
  void Fill(wire::WorkerMetrics* metrics) const EXCLUDES(mu_);

  // Weight of the newest step in the smoothed values.
  static constexpr double kRecentWeight = 0.1;
  // Time constant of the recent samples per second: what happened this
  // many seconds before counts 1/e as much as what happened last.
  static constexpr double kRecentRateSeconds = 1.0;

 private:
  mutable Mutex mu_;
  ClientStats stats_ GUARDED_BY(mu_);
  // The current step: when it started (none before the first step) and
  // what it has waited and trained so far.
  std::optional<std::chrono::steady_clock::time_point> step_start_
      GUARDED_BY(mu_);
  uint64_t step_push_wait_us_ GUARDED_BY(mu_) = 0;
  uint64_t step_pull_wait_us_ GUARDED_BY(mu_) = 0;
  uint64_t step_samples_ GUARDED_BY(mu_) = 0;
  // Samples and seconds of the steps so far, decayed by their age
  // (kRecentRateSeconds).
  double recent_samples_ GUARDED_BY(mu_) = 0;
  double recent_seconds_ GUARDED_BY(mu_) = 0;
};

}  // namespace ductile

#endif  // DUCTILE_CLIENT_STATS_RECORDER_H_
