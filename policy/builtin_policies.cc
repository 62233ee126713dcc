#include "policy/builtin_policies.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>

#include "glog/logging.h"

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

Result<std::map<std::string, std::string>> ParsePolicyParameters(
    const std::string& text) {
  std::map<std::string, std::string> params;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    size_t end = text.find(':', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgumentError("policy parameter '" + item +
                                  "' is not KEY=VALUE");
    }
    if (!params.emplace(item.substr(0, eq), item.substr(eq + 1)).second) {
      return InvalidArgumentError("policy parameter '" + item.substr(0, eq) +
                                  "' given twice");
    }
    start = end + 1;
    if (end == text.size()) break;
  }
  return params;
}

Result<double> PolicyNumber(const std::string& policy, const std::string& key,
                            const std::string& text, double lo, double hi) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 ||
      !std::isfinite(v) || v < lo || v > hi) {
    char range[64];
    std::snprintf(range, sizeof(range), "[%g, %g]", lo, hi);
    return InvalidArgumentError(policy + ": " + key + "=" + text +
                                " must be a number in " + range);
  }
  return v;
}

Result<int64_t> PolicyInteger(const std::string& policy, const std::string& key,
                              const std::string& text, int64_t lo, int64_t hi) {
  DUCTILE_ASSIGN_OR_RETURN(double v, PolicyNumber(policy, key, text, lo, hi));
  if (v != std::floor(v)) {
    return InvalidArgumentError(policy + ": " + key + "=" + text +
                                " must be a whole number");
  }
  return static_cast<int64_t>(v);
}

namespace {

Result<std::shared_ptr<Policy>> MakeAutoscale(
    const std::map<std::string, std::string>& params) {
  AutoscaleOptions o;
  const std::string name = "autoscale";
  constexpr double kDayS = 86400;
  for (const auto& [key, value] : params) {
    if (key == "step") {
      DUCTILE_ASSIGN_OR_RETURN(o.step,
                               PolicyInteger(name, key, value, 1, 1024));
    } else if (key == "threshold") {
      DUCTILE_ASSIGN_OR_RETURN(o.threshold,
                               PolicyNumber(name, key, value, 0, 1));
    } else if (key == "max") {
      DUCTILE_ASSIGN_OR_RETURN(o.max_workers,
                               PolicyInteger(name, key, value, 1, 1 << 20));
    } else if (key == "settle_s" || key == "measure_s" || key == "wait_s") {
      DUCTILE_ASSIGN_OR_RETURN(double s,
                               PolicyNumber(name, key, value, 0, kDayS));
      const int64_t ms = static_cast<int64_t>(s * 1000);
      (key == "settle_s"    ? o.settle_ms
       : key == "measure_s" ? o.measure_ms
                            : o.wait_ms) = ms;
    } else {
      return InvalidArgumentError(
          "autoscale has no parameter '" + key +
          "' (step, threshold, max, settle_s, measure_s, wait_s)");
    }
  }
  return std::shared_ptr<Policy>(std::make_shared<AutoscalePolicy>(o));
}

Result<std::shared_ptr<Policy>> MakeStragglers(
    const std::map<std::string, std::string>& params) {
  StragglerOptions o;
  const std::string name = "stragglers";
  for (const auto& [key, value] : params) {
    if (key == "ratio") {
      DUCTILE_ASSIGN_OR_RETURN(o.ratio, PolicyNumber(name, key, value, 0, 1));
      if (o.ratio <= 0 || o.ratio >= 1) {
        return InvalidArgumentError("stragglers: ratio must be in (0, 1)");
      }
    } else if (key == "window") {
      DUCTILE_ASSIGN_OR_RETURN(o.window,
                               PolicyInteger(name, key, value, 1, 100000));
    } else if (key == "warmup_steps") {
      DUCTILE_ASSIGN_OR_RETURN(
          o.warmup_steps, PolicyInteger(name, key, value, 0,
                                        static_cast<double>(int64_t{1} << 40)));
    } else {
      return InvalidArgumentError("stragglers has no parameter '" + key +
                                  "' (ratio, window, warmup_steps)");
    }
  }
  return std::shared_ptr<Policy>(std::make_shared<StragglerPolicy>(o));
}

Result<std::shared_ptr<Policy>> MakeStaleness(
    const std::map<std::string, std::string>& params) {
  StalenessOptions o;
  const std::string name = "staleness";
  for (const auto& [key, value] : params) {
    if (key == "raise_above") {
      DUCTILE_ASSIGN_OR_RETURN(o.raise_above,
                               PolicyNumber(name, key, value, 0, 1));
    } else if (key == "lower_below") {
      DUCTILE_ASSIGN_OR_RETURN(o.lower_below,
                               PolicyNumber(name, key, value, 0, 1));
    } else if (key == "window") {
      DUCTILE_ASSIGN_OR_RETURN(o.window,
                               PolicyInteger(name, key, value, 1, 100000));
    } else if (key == "step") {
      DUCTILE_ASSIGN_OR_RETURN(o.step,
                               PolicyInteger(name, key, value, 1, 1000));
    } else if (key == "min") {
      DUCTILE_ASSIGN_OR_RETURN(o.min_bound,
                               PolicyInteger(name, key, value, 0, 1000000));
    } else if (key == "max") {
      DUCTILE_ASSIGN_OR_RETURN(o.max_bound,
                               PolicyInteger(name, key, value, 0, 1000000));
    } else if (key == "loss_rise") {
      DUCTILE_ASSIGN_OR_RETURN(o.loss_rise,
                               PolicyNumber(name, key, value, 0, 10));
    } else {
      return InvalidArgumentError(
          "staleness has no parameter '" + key +
          "' (raise_above, lower_below, window, step, min, max, loss_rise)");
    }
  }
  if (o.raise_above <= 0) {
    return InvalidArgumentError("staleness: raise_above must be in (0, 1]");
  }
  if (o.lower_below >= o.raise_above) {
    return InvalidArgumentError(
        "staleness: lower_below must be below raise_above");
  }
  if (o.max_bound < o.min_bound) {
    return InvalidArgumentError("staleness: max must be at least min");
  }
  if (o.loss_rise <= 0) {
    return InvalidArgumentError("staleness: loss_rise must be in (0, 10]");
  }
  return std::shared_ptr<Policy>(std::make_shared<StalenessPolicy>(o));
}

Result<std::shared_ptr<Policy>> MakeGnsBatch(
    const std::map<std::string, std::string>& params) {
  GnsBatchOptions o;
  const std::string name = "gns-batch";
  for (const auto& [key, value] : params) {
    if (key == "grow_above") {
      DUCTILE_ASSIGN_OR_RETURN(o.grow_above,
                               PolicyNumber(name, key, value, 0, 1000));
      if (o.grow_above <= 0) {
        return InvalidArgumentError(
            "gns-batch: grow_above must be in (0, 1000]");
      }
    } else if (key == "step") {
      DUCTILE_ASSIGN_OR_RETURN(o.step,
                               PolicyInteger(name, key, value, 1, 1024));
    } else if (key == "max") {
      DUCTILE_ASSIGN_OR_RETURN(o.max,
                               PolicyInteger(name, key, value, 1, 1 << 20));
    } else if (key == "window") {
      DUCTILE_ASSIGN_OR_RETURN(o.window,
                               PolicyInteger(name, key, value, 1, 100000));
    } else if (key == "by") {
      if (value != "workers" && value != "batch") {
        return InvalidArgumentError(
            "gns-batch: by must be workers or batch, "
            "not '" +
            value + "'");
      }
      o.by = value == "batch" ? GnsBatchOptions::By::kBatch
                              : GnsBatchOptions::By::kWorkers;
    } else if (key == "settle_clocks") {
      DUCTILE_ASSIGN_OR_RETURN(
          o.settle_clocks,
          PolicyInteger(name, key, value, 0,
                        static_cast<double>(int64_t{1} << 40)));
    } else if (key == "min_clocks") {
      DUCTILE_ASSIGN_OR_RETURN(
          o.min_clocks, PolicyInteger(name, key, value, 0,
                                      static_cast<double>(int64_t{1} << 40)));
    } else if (key == "wait_s") {
      DUCTILE_ASSIGN_OR_RETURN(double s,
                               PolicyNumber(name, key, value, 0, 86400));
      o.wait_ms = static_cast<int64_t>(s * 1000);
    } else {
      return InvalidArgumentError("gns-batch has no parameter '" + key +
                                  "' (by, grow_above, step, max, window, "
                                  "min_clocks, settle_clocks, wait_s)");
    }
  }
  if (o.by == GnsBatchOptions::By::kBatch) {
    if (!params.contains("max")) o.max = 8;
    if (o.max > 64) {
      return InvalidArgumentError(
          "gns-batch: by=batch takes max up to 64 batches a step");
    }
  }
  return std::shared_ptr<Policy>(std::make_shared<GnsBatchPolicy>(o));
}

}  // namespace

Status SplitPolicySpec(const std::string& spec, std::string* name,
                       std::map<std::string, std::string>* params) {
  const size_t colon = spec.find(':');
  *name = spec.substr(0, colon);
  params->clear();
  if (colon == std::string::npos) return Status::Ok();
  DUCTILE_ASSIGN_OR_RETURN(*params,
                           ParsePolicyParameters(spec.substr(colon + 1)));
  return Status::Ok();
}

std::vector<std::string> SplitPolicySpecs(const std::string& specs) {
  std::vector<std::string> out;
  if (specs.empty()) return out;
  size_t start = 0;
  while (true) {
    size_t end = specs.find(',', start);
    if (end == std::string::npos) end = specs.size();
    out.push_back(specs.substr(start, end - start));
    if (end == specs.size()) return out;
    start = end + 1;  // "a," names an empty policy last
  }
}

Result<std::shared_ptr<Policy>> MakeBuiltinPolicy(const std::string& spec) {
  std::string name;
  std::map<std::string, std::string> params;
  DUCTILE_RETURN_IF_ERROR(SplitPolicySpec(spec, &name, &params));
  if (name == "autoscale") return MakeAutoscale(params);
  if (name == "stragglers") return MakeStragglers(params);
  if (name == "staleness") return MakeStaleness(params);
  if (name == "gns-batch") return MakeGnsBatch(params);
  return InvalidArgumentError(
      "unknown policy '" + name +
      "' (built-in: autoscale, stragglers, staleness, gns-batch)");
}

Result<std::vector<std::shared_ptr<Policy>>> MakeBuiltinPolicies(
    const std::string& specs) {
  std::vector<std::shared_ptr<Policy>> policies;
  for (const std::string& spec : SplitPolicySpecs(specs)) {
    DUCTILE_ASSIGN_OR_RETURN(std::shared_ptr<Policy> p,
                             MakeBuiltinPolicy(spec));
    policies.push_back(std::move(p));
  }
  return policies;
}

}  // namespace ductile
