// The `autoscale` built-in policy (policy/builtin_policies.h).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>

#include "glog/logging.h"
#include "policy/builtin_policies.h"

namespace ductile {

AutoscalePolicy::AutoscalePolicy(const AutoscaleOptions& options)
    : options_(options) {}

// A refusal (kInvalidArgument: beyond the job's max_workers, say) ends the
// search where it is; another failure (the coordinator's loop did not
// answer in time, and nothing was changed) is tried again later.
AutoscalePolicy::Ask AutoscalePolicy::Resize(int32_t workers,
                                             PolicyActions& actions) {
  const Status s = actions.Resize(workers, 0);
  if (s.ok()) return Ask::kDone;
  return s.code() == StatusCode::kInvalidArgument ? Ask::kRefused : Ask::kRetry;
}

void AutoscalePolicy::Settle(int32_t workers, const char* why) {
  settled_ = workers;
  size_ = workers;
  phase_ = Phase::kDone;
  LOG(INFO) << "autoscale: settled on " << settled_ << " worker(s)" << why;
}

void AutoscalePolicy::Decide(double rate, int64_t now_ms,
                             PolicyActions& actions) {
  Measured m;
  m.workers = size_;
  m.samples_per_s = rate;
  if (!measured_.empty()) {
    // The last size that paid: the one this step grew from.
    const Measured& from = measured_.back();
    const double added = size_ - from.workers;
    const double per_worker = from.samples_per_s / from.workers;
    m.efficiency = per_worker > 0 && added > 0
                       ? ((rate - from.samples_per_s) / added) / per_worker
                       : 0;
    LOG(INFO) << "autoscale: " << size_ << " worker(s) make " << rate
              << " samples/s; scaling efficiency from " << from.workers << ": "
              << m.efficiency << " (threshold " << options_.threshold << ")";
    if (!(m.efficiency > options_.threshold)) {
      // Not worth its workers: back to the size that paid, for good.
      const int32_t back = from.workers;
      switch (Resize(back, actions)) {
        case Ask::kRetry:
          return;  // measured again, and decided again, at the next reading
        case Ask::kRefused:
          measured_.push_back(m);
          return Settle(size_, " (the job refused to shrink back)");
        case Ask::kDone:
          measured_.push_back(m);
          return Settle(back, "");
      }
    }
  } else {
    LOG(INFO) << "autoscale: " << size_ << " worker(s) make " << rate
              << " samples/s";
  }
  const int32_t next = size_ + options_.step;
  if (next > options_.max_workers) {
    measured_.push_back(m);
    return Settle(size_, " (its limit)");
  }
  switch (Resize(next, actions)) {
    case Ask::kRetry:
      return;
    case Ask::kRefused:
      measured_.push_back(m);
      return Settle(size_, " (the job refused to grow)");
    case Ask::kDone:
      measured_.push_back(m);
      asked_ = true;
      size_ = next;
      asked_ms_ = now_ms;
      since_ms_ = now_ms;
      phase_ = Phase::kSettling;
      return;
  }
}

void AutoscalePolicy::OnStatus(const PolicyEvent& event,
                               PolicyActions& actions) {
  const int64_t now = event.now_ms;
  switch (phase_) {
    case Phase::kDone:
      return;
    case Phase::kStart:
      if (event.active_workers < 1) return;
      size_ = event.active_workers;
      asked_ms_ = now;
      since_ms_ = now;
      phase_ = Phase::kSettling;
      return;
    case Phase::kSettling:
      if (event.active_workers != size_) {
        since_ms_ = now;  // not there yet, or changed again: start over
        if (!asked_) {
          // Nothing asked yet: the size is whatever the job has (its
          // first workers still joining, one replaced).
          size_ = std::max(event.active_workers, 1);
        } else if (now - asked_ms_ > options_.wait_ms) {
          LOG(WARNING) << "autoscale: the job did not reach " << size_
                       << " worker(s) within " << options_.wait_ms
                       << " ms; it stays as it is";
          // The target it cannot reach is taken back.
          if (event.active_workers > 0) {
            Resize(event.active_workers, actions);
          }
          Settle(event.active_workers, " (gave up)");
        }
        return;
      }
      if (now - since_ms_ < options_.settle_ms) return;
      phase_ = Phase::kMeasuring;
      rate_sum_ = 0;
      readings_ = 0;
      measure_from_ms_ = now;
      [[fallthrough]];
    case Phase::kMeasuring:
      if (event.active_workers != size_) {
        phase_ = Phase::kSettling;
        since_ms_ = now;
        return;
      }
      rate_sum_ += event.status->samples_per_s;
      ++readings_;
      if (now - measure_from_ms_ < options_.measure_ms) return;
      Decide(rate_sum_ / readings_, now, actions);
      return;
  }
}

}  // namespace ductile
