// Runs policies' hooks (ductile/policy.h) on successive readings of a job's
// status: works out what changed since the previous reading (the active
// members, the job's clock, the data plan's epoch) and calls each policy's
// hooks for it. No threads and no clock of its own: the caller reads the
// status and gives the time (the coordinator's policy thread; tests with
// made-up statuses).
#ifndef DUCTILE_POLICY_POLICY_RUNNER_H_
#define DUCTILE_POLICY_POLICY_RUNNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "ductile/policy.h"

namespace ductile {

// The event a reading makes (PolicyEvent's counts, clock and epoch).
PolicyEvent MakePolicyEvent(const ClusterStatus& status, int64_t now_ms);

class PolicyRunner {
 public:
  explicit PolicyRunner(std::vector<std::shared_ptr<Policy>> policies);

  // One reading. For each policy in order: OnMembershipChange if the
  // active members changed, AfterEpoch if the epoch moved on, AfterStep if
  // the job's clock did, then OnStatus. The first reading only sets what
  // later ones are compared with (and runs OnStatus). `before` runs before
  // each policy's hooks (the caller names the policy in its log).
  void Run(const ClusterStatus& status, int64_t now_ms, PolicyActions& actions,
           const std::function<void(const Policy&)>& before = nullptr);

 private:
  const std::vector<std::shared_ptr<Policy>> policies_;
  bool first_ = true;
  std::set<std::pair<bool, int32_t>> active_;  // (server?, id)
  int64_t clock_ = -1;
  int64_t epoch_ = 0;
};

}  // namespace ductile

#endif  // DUCTILE_POLICY_POLICY_RUNNER_H_
