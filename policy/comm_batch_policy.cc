// The `comm-batch` built-in worker policy, and the factory of the built-in
// worker policies (ductile/policy.h, MakeBuiltinWorkerPolicies).
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "glog/logging.h"
#include "policy/builtin_policies.h"

namespace ductile {

void CommBatchPolicy::AfterStep(const WorkerPolicyEvent& event,
                                WorkerPolicyActions& actions) {
  if (stopped_) return;
  // The size the step took: the job's may be more than this policy asked.
  batches_ = std::max({batches_, event.batches_per_step, 1});
  const ClientStats& s = event.stats;
  const uint64_t wait_us = s.push_wait_us + s.pull_wait_us;
  // Trained steps (the client's own count has its waiting clocks too).
  const bool counted = have_previous_ && event.steps > previous_steps_ &&
                       s.step_us >= previous_step_us_ &&
                       wait_us >= previous_wait_us_;
  if (counted) {
    window_steps_ += event.steps - previous_steps_;
    window_step_us_ += static_cast<double>(s.step_us - previous_step_us_);
    window_wait_us_ += static_cast<double>(wait_us - previous_wait_us_);
  }
  have_previous_ = true;
  previous_steps_ = event.steps;
  previous_step_us_ = s.step_us;
  previous_wait_us_ = wait_us;
  if (window_steps_ < static_cast<uint64_t>(options_.window)) return;
  const double fraction = window_step_us_ > 0
                              ? std::min(1.0, window_wait_us_ / window_step_us_)
                              : 0.0;
  last_fraction_ = fraction;
  window_steps_ = 0;
  window_step_us_ = 0;
  window_wait_us_ = 0;
  if (fraction <= options_.above) return;
  if (batches_ >= options_.max) {
    stopped_ = true;
    LOG(INFO) << "worker " << event.worker_id << ": comm-batch: waits are "
              << fraction << " of the step at " << batches_
              << " batches a step, its max; stopping";
    return;
  }
  const int32_t next = std::min(options_.max, batches_ + options_.step);
  Status st = actions.SetBatchesPerStep(next);
  if (!st.ok()) {
    stopped_ = true;
    LOG(WARNING) << "worker " << event.worker_id << ": comm-batch: " << next
                 << " batches a step refused (" << st << "); stopping";
    return;
  }
  LOG(INFO) << "worker " << event.worker_id << ": comm-batch: waits were "
            << fraction << " of the step over the last " << options_.window
            << " steps: " << batches_ << " -> " << next << " batches a step";
  batches_ = next;
  grown_.push_back(Growth{event.steps, next, fraction});
}

namespace {

Result<std::shared_ptr<WorkerPolicy>> MakeCommBatch(
    const std::map<std::string, std::string>& params) {
  CommBatchOptions o;
  const std::string name = "comm-batch";
  for (const auto& [key, value] : params) {
    if (key == "above") {
      DUCTILE_ASSIGN_OR_RETURN(o.above, PolicyNumber(name, key, value, 0, 1));
      if (o.above <= 0) {
        return InvalidArgumentError("comm-batch: above must be in (0, 1]");
      }
    } else if (key == "window") {
      DUCTILE_ASSIGN_OR_RETURN(o.window,
                               PolicyInteger(name, key, value, 1, 100000));
    } else if (key == "step") {
      DUCTILE_ASSIGN_OR_RETURN(
          o.step, PolicyInteger(name, key, value, 1, kMaxBatchesPerStep));
    } else if (key == "max") {
      DUCTILE_ASSIGN_OR_RETURN(
          o.max, PolicyInteger(name, key, value, 1, kMaxBatchesPerStep));
    } else {
      return InvalidArgumentError("comm-batch has no parameter '" + key +
                                  "' (above, window, step, max)");
    }
  }
  return std::shared_ptr<WorkerPolicy>(std::make_shared<CommBatchPolicy>(o));
}

}  // namespace

Result<std::shared_ptr<WorkerPolicy>> MakeBuiltinWorkerPolicy(
    const std::string& spec) {
  std::string name;
  std::map<std::string, std::string> params;
  DUCTILE_RETURN_IF_ERROR(SplitPolicySpec(spec, &name, &params));
  if (name == "comm-batch") return MakeCommBatch(params);
  return InvalidArgumentError("unknown worker policy '" + name +
                              "' (built-in: comm-batch)");
}

Result<std::vector<std::shared_ptr<WorkerPolicy>>> MakeBuiltinWorkerPolicies(
    const std::string& specs) {
  std::vector<std::shared_ptr<WorkerPolicy>> policies;
  for (const std::string& spec : SplitPolicySpecs(specs)) {
    DUCTILE_ASSIGN_OR_RETURN(std::shared_ptr<WorkerPolicy> p,
                             MakeBuiltinWorkerPolicy(spec));
    policies.push_back(std::move(p));
  }
  return policies;
}

}  // namespace ductile
