// What a client has observed of the consistency models (ClientStats),
// recorded by the I/O thread (pull replies) and the callers (cache hits
// and misses), read by anyone.
//
// Thread-safe.
#ifndef DUCTILE_CLIENT_STATS_RECORDER_H_
#define DUCTILE_CLIENT_STATS_RECORDER_H_

#include <cstdint>

#include "ductile/client.h"
#include "proto/ductile.pb.h"
#include "util/mutex.h"

namespace ductile {

class StatsRecorder {
 public:
  // Staleness histogram buckets (the last holds larger values too).
  static constexpr size_t kStalenessBuckets = 64;

  StatsRecorder() { stats_.staleness.assign(kStalenessBuckets, 0); }

  // A pull reply with data of server clock `data_clock` for a call made at
  // `clock`. `waited_us`: how much longer than any earlier reply of the
  // same call it waited at its server (parts wait side by side).
  void RecordPull(int64_t clock, int64_t data_clock, uint64_t waited_us)
      EXCLUDES(mu_);
  void RecordCacheHit() EXCLUDES(mu_);
  void RecordCacheMiss() EXCLUDES(mu_);

  ClientStats Snapshot() const EXCLUDES(mu_);
  // The heartbeat's metrics.
  void Fill(wire::WorkerMetrics* metrics) const EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  ClientStats stats_ GUARDED_BY(mu_);
};

}  // namespace ductile

#endif  // DUCTILE_CLIENT_STATS_RECORDER_H_
