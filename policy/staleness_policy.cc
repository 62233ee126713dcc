// The `staleness` built-in policy (policy/builtin_policies.h).
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

StalenessPolicy::StalenessPolicy(const StalenessOptions& options)
    : options_(options) {}

void StalenessPolicy::OnStatus(const PolicyEvent& event,
                               PolicyActions& actions) {
  const ClusterStatus& status = *event.status;
  std::map<int32_t, std::pair<double, double>> now;
  double blocked_ms = 0;
  double step_ms = 0;
  for (const MemberStatus& m : status.members) {
    if (m.role != "worker" || m.state != "active") continue;
    const std::pair<double, double> reading = {
        static_cast<double>(m.blocked_ms), m.step_seconds * 1000};
    now[m.id] = reading;
    auto it = previous_.find(m.id);
    if (it == previous_.end()) continue;
    const double blocked = reading.first - it->second.first;
    const double step = reading.second - it->second.second;
    if (blocked < 0 || step <= 0) continue;  // restarted, or no new step
    blocked_ms += std::min(blocked, step);
    step_ms += step;
  }
  previous_ = std::move(now);
  if (JudgeTrials(status, actions)) {
    fractions_.clear();
    return;
  }
  if (step_ms <= 0) return;
  fractions_.push_back(blocked_ms / step_ms);
  if (fractions_.size() > static_cast<size_t>(options_.window)) {
    fractions_.pop_front();
  }
  if (fractions_.size() < static_cast<size_t>(options_.window)) return;
  double sum = 0;
  for (double f : fractions_) sum += f;
  last_fraction_ = sum / static_cast<double>(fractions_.size());
  // Blocked time is counted per worker, not per table: with a BSP table
  // in the job, its waits would read as an SSP bound that blocks.
  for (const Consistency& model : status.table_consistency) {
    if (model.mode != ConsistencyMode::kBsp) continue;
    if (!bsp_reported_) {
      LOG(WARNING) << "staleness: a BSP table's waits count as time blocked "
                      "too; nothing is changed while the job has one";
      bsp_reported_ = true;
    }
    return;
  }
  bool changed = false;
  for (size_t i = 0;
       i < status.tables.size() && i < status.table_consistency.size(); ++i) {
    const Consistency& model = status.table_consistency[i];
    if (model.mode != ConsistencyMode::kSsp) continue;
    const int32_t bound = model.staleness;
    int32_t next = bound;
    if (last_fraction_ > options_.raise_above && bound < options_.max_bound) {
      next = std::min(options_.max_bound, bound + options_.step);
      if (hurting_.contains(next)) continue;  // it raised the loss
    } else if (last_fraction_ < options_.lower_below &&
               bound > options_.min_bound) {
      next = std::max(options_.min_bound, bound - options_.step);
      if (blocking_.contains(next)) continue;  // it held the job up
    } else {
      continue;
    }
    Consistency to = model;
    to.staleness = next;
    LOG(INFO) << "staleness: workers spent " << last_fraction_
              << " of their step time blocked on table '" << status.tables[i]
              << "''s bound " << bound << " over the last " << options_.window
              << " readings: " << (next > bound ? "raising" : "lowering")
              << " it to " << next;
    if (actions.SetConsistency(status.tables[i], to).ok()) {
      if (next > bound) {
        blocking_.insert(bound);
        // Judged by the loss when the job reports one.
        if (losses_.size() == static_cast<size_t>(options_.window)) {
          double sum = 0;
          for (double l : losses_) sum += l;
          trials_.push_back(Trial{status.tables[i], model, next,
                                  sum / static_cast<double>(losses_.size())});
        }
      }
      changed = true;
    }
  }
  if (changed) fractions_.clear();
}

bool StalenessPolicy::JudgeTrials(const ClusterStatus& status,
                                  PolicyActions& actions) {
  const bool have_loss = status.loss > 0 && std::isfinite(status.loss);
  if (have_loss) {
    losses_.push_back(status.loss);
    if (losses_.size() > static_cast<size_t>(options_.window)) {
      losses_.pop_front();
    }
  }
  bool lowered = false;
  for (auto it = trials_.begin(); it != trials_.end();) {
    Trial& t = *it;
    // The table's bound now; a trial whose table was changed by someone
    // else (or is gone) is over.
    const Consistency* now = nullptr;
    for (size_t i = 0;
         i < status.tables.size() && i < status.table_consistency.size(); ++i) {
      if (status.tables[i] == t.table) now = &status.table_consistency[i];
    }
    if (now == nullptr || now->mode != ConsistencyMode::kSsp ||
        now->staleness != t.to) {
      it = trials_.erase(it);
      continue;
    }
    if (have_loss) {
      t.loss_sum += status.loss;
      ++t.readings;
    }
    if (t.readings < options_.window) {
      ++it;
      continue;
    }
    const double after = t.loss_sum / t.readings;
    if (after > t.loss_before * (1 + options_.loss_rise)) {
      LOG(INFO) << "staleness: the training loss rose from " << t.loss_before
                << " to " << after << " after table '" << t.table
                << "''s bound was raised to " << t.to << ": lowering it to "
                << t.from.staleness << " again";
      if (actions.SetConsistency(t.table, t.from).ok()) {
        hurting_.insert(t.to);
        lowered = true;
      }
    }
    it = trials_.erase(it);
  }
  return lowered;
}

}  // namespace ductile
