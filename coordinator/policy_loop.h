// The policy thread's schedule and work (CoordinatorImpl::RunPolicies): a
// reading of the job's status every policy interval, and the policies'
// hooks run on it (PolicyRunner). Its time comes from the Env, as the
// rest of the coordinator's does, so a test with a simulated clock drives
// it tick by tick; the thread that runs it only waits until the Env says
// the next reading is due (TimeToNextTick), or until it is stopped.
//
//   PolicyLoop loop(env, options.policies, interval, &actions);
//   while (!stopped) {
//     wait up to loop.TimeToNextTick();
//     if (loop.Due() && !loop.Tick(query)) break;
//   }
//
// Not thread-safe: owned by the policy thread.
#ifndef DUCTILE_COORDINATOR_POLICY_LOOP_H_
#define DUCTILE_COORDINATOR_POLICY_LOOP_H_

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "ductile/policy.h"
#include "ductile/status.h"
#include "env/env.h"
#include "policy/policy_runner.h"

namespace ductile {

class PolicyLoop {
 public:
  using TimePoint = Env::TimePoint;
  // Reads the job's status (CoordinatorImpl::QueryStatus).
  using StatusQuery = std::function<Result<ClusterStatus>()>;

  // The first reading is due one interval from now. `actions` outlives
  // the loop; `before` runs before each policy's hooks (PolicyRunner::Run).
  PolicyLoop(Env* env, std::vector<std::shared_ptr<Policy>> policies,
             std::chrono::milliseconds interval, PolicyActions* actions,
             std::function<void(const Policy&)> before = nullptr);

  TimePoint next_tick() const { return next_; }
  // Whether the next reading is due by the Env's clock.
  bool Due() const { return env_->Now() >= next_; }
  // How long until it is (zero once due).
  std::chrono::steady_clock::duration TimeToNextTick() const;

  // Reads the status and runs the hooks on it; the next reading is due an
  // interval after this one was (at once if this one took longer: no
  // burst to catch up). A status that cannot be read skips this reading;
  // false when that is because the coordinator stopped (kCancelled), and
  // the loop is over.
  bool Tick(const StatusQuery& query);

 private:
  Env* const env_;
  const std::chrono::milliseconds interval_;
  PolicyActions* const actions_;
  const std::function<void(const Policy&)> before_;
  PolicyRunner runner_;
  TimePoint next_;
};

}  // namespace ductile

#endif  // DUCTILE_COORDINATOR_POLICY_LOOP_H_
