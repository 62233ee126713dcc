#include "coordinator/policy_loop.h"

#include <algorithm>
#include <utility>

namespace ductile {

PolicyLoop::PolicyLoop(Env* env, std::vector<std::shared_ptr<Policy>> policies,
                       std::chrono::milliseconds interval,
                       PolicyActions* actions,
                       std::function<void(const Policy&)> before)
    : env_(env),
      interval_(interval),
      actions_(actions),
      before_(std::move(before)),
      runner_(std::move(policies)),
      next_(env->Now() + interval) {}

std::chrono::steady_clock::duration PolicyLoop::TimeToNextTick() const {
  return std::max<std::chrono::steady_clock::duration>(
      next_ - env_->Now(), std::chrono::steady_clock::duration::zero());
}

bool PolicyLoop::Tick(const StatusQuery& query) {
  next_ += interval_;
  Result<ClusterStatus> status = query();
  if (!status.ok()) {
    // The loop is busy: the next interval reads again.
    return status.status().code() != StatusCode::kCancelled;
  }
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             env_->Now().time_since_epoch())
                             .count();
  runner_.Run(*status, now_ms, *actions_, before_);
  next_ = std::max(next_, env_->Now());
  return true;
}

}  // namespace ductile
