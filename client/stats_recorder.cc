#include "client/stats_recorder.h"

#include <algorithm>

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
}

}  // namespace ductile
