#include "client/stats_recorder.h"

#include <algorithm>
#include <cmath>

namespace ductile {

void StatsRecorder::RecordPull(int64_t clock, int64_t data_clock,
                               uint64_t waited_us) {
  MutexLock lock(&mu_);
  ++stats_.pulls;
  stats_.blocked_us += waited_us;
  const int64_t staleness = std::max<int64_t>(0, clock - data_clock);
  ++stats_.staleness[std::min<size_t>(staleness, kStalenessBuckets - 1)];
}

void StatsRecorder::RecordCacheHit() {
  MutexLock lock(&mu_);
  ++stats_.cache_hits;
}

void StatsRecorder::RecordCacheMiss() {
  MutexLock lock(&mu_);
  ++stats_.cache_misses;
}

void StatsRecorder::RecordWait(bool pull, uint64_t us) {
  MutexLock lock(&mu_);
  (pull ? step_pull_wait_us_ : step_push_wait_us_) += us;
}

void StatsRecorder::RecordSamples(uint64_t samples) {
  MutexLock lock(&mu_);
  step_samples_ += samples;
}

void StatsRecorder::RecordLoss(double loss) {
  if (!std::isfinite(loss)) return;
  MutexLock lock(&mu_);
  ++stats_.losses;
  stats_.recent_loss =
      stats_.losses == 1
          ? loss
          : stats_.recent_loss + kRecentWeight * (loss - stats_.recent_loss);
}

void StatsRecorder::RecordStep(std::chrono::steady_clock::time_point now) {
  MutexLock lock(&mu_);
  if (step_start_) {
    const uint64_t step_us = static_cast<uint64_t>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::microseconds>(now -
                                                                 *step_start_)
               .count()));
    // Waits overlap (a caller may wait for several calls side by side on
    // threads of its own): a step's waits count at most its length.
    const uint64_t push = std::min(step_push_wait_us_, step_us);
    const uint64_t pull = std::min(step_pull_wait_us_, step_us - push);
    ++stats_.steps;
    stats_.step_us += step_us;
    stats_.push_wait_us += push;
    stats_.pull_wait_us += pull;
    stats_.samples += step_samples_;
    const bool first = stats_.steps == 1;
    const auto smooth = [first](double* recent, double value) {
      *recent = first ? value : *recent + kRecentWeight * (value - *recent);
    };
    smooth(&stats_.recent_step_us, static_cast<double>(step_us));
    smooth(&stats_.recent_push_wait_us, static_cast<double>(push));
    smooth(&stats_.recent_pull_wait_us, static_cast<double>(pull));
    // The rate weighs each step by its length (decayed totals of samples
    // and seconds): a worker stopped for long spells between fast steps
    // reads as slow, as its samples over wall time are.
    const double seconds = static_cast<double>(step_us) / 1e6;
    const double decay = std::exp(-seconds / kRecentRateSeconds);
    recent_samples_ =
        recent_samples_ * decay + static_cast<double>(step_samples_);
    recent_seconds_ = recent_seconds_ * decay + seconds;
    stats_.recent_samples_per_s =
        recent_seconds_ > 0 ? recent_samples_ / recent_seconds_ : 0;
  }
  step_start_ = now;
  step_push_wait_us_ = step_pull_wait_us_ = step_samples_ = 0;
}

ClientStats StatsRecorder::Snapshot() const {
  MutexLock lock(&mu_);
  return stats_;
}

void StatsRecorder::Fill(wire::WorkerMetrics* metrics) const {
  MutexLock lock(&mu_);
  metrics->set_pulls(stats_.pulls);
  metrics->set_blocked_us(stats_.blocked_us);
  const int64_t max = stats_.max_staleness();
  for (int64_t i = 0; i <= max; ++i)
    metrics->add_staleness(stats_.staleness[i]);
  metrics->set_cache_hits(stats_.cache_hits);
  metrics->set_cache_misses(stats_.cache_misses);
  metrics->set_steps(stats_.steps);
  metrics->set_step_us(stats_.step_us);
  metrics->set_push_wait_us(stats_.push_wait_us);
  metrics->set_pull_wait_us(stats_.pull_wait_us);
  metrics->set_samples(stats_.samples);
  metrics->set_recent_step_us(stats_.recent_step_us);
  metrics->set_recent_push_wait_us(stats_.recent_push_wait_us);
  metrics->set_recent_pull_wait_us(stats_.recent_pull_wait_us);
  metrics->set_recent_samples_per_s(stats_.recent_samples_per_s);
  metrics->set_recent_loss(stats_.recent_loss);
  metrics->set_losses(stats_.losses);
}

}  // namespace ductile
