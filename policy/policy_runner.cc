#include "policy/policy_runner.h"

#include <algorithm>

namespace ductile {

PolicyEvent MakePolicyEvent(const ClusterStatus& status, int64_t now_ms) {
  PolicyEvent e;
  e.status = &status;
  e.now_ms = now_ms;
  e.epoch = status.data_epoch;
  for (const MemberStatus& m : status.members) {
    if (m.state != "active") continue;
    if (m.role == "server") {
      ++e.active_servers;
    } else if (m.role == "worker") {
      ++e.active_workers;
      e.clock = e.clock < 0 ? m.clock : std::min(e.clock, m.clock);
    }
  }
  return e;
}

PolicyRunner::PolicyRunner(std::vector<std::shared_ptr<Policy>> policies)
    : policies_(std::move(policies)) {}

void PolicyRunner::Run(const ClusterStatus& status, int64_t now_ms,
                       PolicyActions& actions,
                       const std::function<void(const Policy&)>& before) {
  const PolicyEvent event = MakePolicyEvent(status, now_ms);
  std::set<std::pair<bool, int32_t>> active;
  for (const MemberStatus& m : status.members) {
    if (m.state == "active") active.emplace(m.role == "server", m.id);
  }
  const bool membership = !first_ && active != active_;
  const bool epoch = !first_ && event.epoch > epoch_;
  // A clock that went back (a rollback, the slowest worker left) is no
  // step: the next one counts from it.
  const bool step = !first_ && event.clock > clock_ && clock_ >= 0;
  for (const std::shared_ptr<Policy>& policy : policies_) {
    if (before) before(*policy);
    if (membership) policy->OnMembershipChange(event, actions);
    if (epoch) policy->AfterEpoch(epoch_, event, actions);
    if (step) policy->AfterStep(clock_, event, actions);
    policy->OnStatus(event, actions);
  }
  first_ = false;
  active_ = std::move(active);
  epoch_ = event.epoch;
  clock_ = event.clock;
}

}  // namespace ductile
