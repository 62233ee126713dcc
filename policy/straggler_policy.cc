// The `stragglers` built-in policy (policy/builtin_policies.h).
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

StragglerPolicy::StragglerPolicy(const StragglerOptions& options)
    : options_(options) {}

void StragglerPolicy::OnStatus(const PolicyEvent& event,
                               PolicyActions& actions) {
  const ClusterStatus& status = *event.status;
  std::map<int32_t, double> rates;
  for (const MemberStatus& m : status.members) {
    if (m.role != "worker" || m.state != "active") continue;
    // Under BSP, or at an SSP bound, the slowest worker paces the others:
    // all make the same samples per second of wall time, and only the
    // time they wait on the bound for it tells them apart. Rated is the
    // rate of the time a worker did not wait.
    Progress& p = progress_[m.id];
    const double step_ms = m.step_seconds * 1000;
    const double pull_wait_ms = m.pull_wait_seconds * 1000;
    if (step_ms < p.step_ms || m.blocked_ms < p.blocked_ms ||
        pull_wait_ms < p.pull_wait_ms) {
      p = Progress{};  // a new process under the same id: start over
    }
    if (step_ms > p.step_ms) {
      const double waited =
          std::min(static_cast<double>(m.blocked_ms - p.blocked_ms),
                   pull_wait_ms - p.pull_wait_ms);
      p.blocked_fraction =
          std::min(waited / (step_ms - p.step_ms), kMaxBlocked);
      p.step_ms = step_ms;
      p.blocked_ms = m.blocked_ms;
      p.pull_wait_ms = pull_wait_ms;
    }
    if (m.samples_per_s > 0 &&
        m.steps >= static_cast<uint64_t>(options_.warmup_steps)) {
      rates[m.id] = m.samples_per_s / (1 - p.blocked_fraction);
    }
  }
  // The readings of workers no longer rated start over.
  std::erase_if(ratios_,
                [&](const auto& w) { return !rates.contains(w.first); });
  std::erase_if(progress_, [&](const auto& w) {
    return std::none_of(status.members.begin(), status.members.end(),
                        [&](const MemberStatus& m) { return m.id == w.first; });
  });
  if (rates.size() < 2) {
    ratios_.clear();
    return;
  }
  std::vector<double> sorted;
  for (const auto& [id, rate] : rates) sorted.push_back(rate);
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median =
      n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  const std::set<int32_t> asked(status.replace_workers.begin(),
                                status.replace_workers.end());
  for (const auto& [id, rate] : rates) {
    std::deque<double>& window = ratios_[id];
    window.push_back(rate / median);
    if (window.size() > static_cast<size_t>(options_.window)) {
      window.pop_front();
    }
    if (window.size() < static_cast<size_t>(options_.window) ||
        asked.contains(id) || replaced_.contains(id)) {
      continue;
    }
    double sum = 0;
    for (double r : window) sum += r;
    const double mean = sum / window.size();
    if (mean >= options_.ratio) continue;
    LOG(INFO) << "stragglers: worker " << id << " made " << mean
              << " of the median samples/s (of time not waited on the "
                 "staleness bound) over its last "
              << window.size() << " readings (now " << rate << " against "
              << median << "): replacing it";
    if (actions.ReplaceWorker(id).ok()) replaced_.insert(id);
  }
}

}  // namespace ductile
