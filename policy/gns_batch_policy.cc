// The `gns-batch` built-in policy (policy/builtin_policies.h).
#include <algorithm>
#include <cmath>
#include <string>

#include "glog/logging.h"
#include "policy/builtin_policies.h"

namespace ductile {

GnsBatchPolicy::GnsBatchPolicy(const GnsBatchOptions& options)
    : options_(options) {}

void GnsBatchPolicy::Stop(const std::string& why) {
  stopped_ = true;
  readings_.clear();
  LOG(INFO) << "gns-batch: stops growing the job (" << why << ")";
}

void GnsBatchPolicy::OnStatus(const PolicyEvent& event,
                              PolicyActions& actions) {
  if (stopped_ || event.active_workers < 1) return;
  const ClusterStatus& status = *event.status;
  for (const MemberStatus& m : status.members) {
    if (m.role == "worker" && m.state == "finished") {
      // The job is ending (a worker finished the data): nothing to grow,
      // and a size not reached now never will be.
      return Stop("a worker finished: the job is ending");
    }
  }
  if (asked_ > 0) {
    if (event.active_workers >= asked_) {
      asked_ = 0;  // reached: the readings start over from here
    } else if (event.now_ms - asked_ms_ > options_.wait_ms) {
      // The target it cannot reach is taken back.
      actions.Resize(event.active_workers, 0).IgnoreError();
      return Stop("the job did not reach " + std::to_string(asked_) +
                  " worker(s) within " + std::to_string(options_.wait_ms) +
                  " ms");
    } else {
      return;
    }
  }
  if (!(status.noise_scale > 0) || !std::isfinite(status.noise_scale) ||
      status.noise_scale_clocks < static_cast<uint64_t>(options_.min_clocks)) {
    return;
  }
  if (status.noise_scale_clocks < settle_until_) return;
  readings_.push_back(status.noise_scale);
  if (readings_.size() > static_cast<size_t>(options_.window)) {
    readings_.pop_front();
  }
  if (readings_.size() < static_cast<size_t>(options_.window)) return;
  double sum = 0;
  for (double r : readings_) sum += r;
  const double mean = sum / readings_.size();
  // The size the job is to have: workers that finished or died at its
  // end are not room to grow into (asking for fewer than the target
  // would drain workers).
  const int32_t workers = std::max(event.active_workers, status.target_workers);
  if (!(mean > options_.grow_above * workers)) return;
  if (options_.by == GnsBatchOptions::By::kBatch) {
    return GrowBatch(event, mean, actions);
  }
  if (workers >= options_.max) {
    return Stop("its limit of " + std::to_string(options_.max) +
                " worker(s), with a noise scale of " + std::to_string(mean) +
                " worker batches");
  }
  const int32_t next = std::min(workers + options_.step, options_.max);
  const Status s = actions.Resize(next, 0);
  if (s.code() == StatusCode::kInvalidArgument) {
    return Stop("the job refused " + std::to_string(next) +
                " worker(s): " + s.ToString());
  }
  if (!s.ok()) return;  // the coordinator did not answer: asked again later
  LOG(INFO) << "gns-batch: the noise scale averaged " << mean
            << " worker batches over " << readings_.size()
            << " readings, above " << options_.grow_above << " x " << workers
            << " worker(s): growing to " << next << " at clock " << event.clock;
  grown_.push_back({event.clock, workers, next, mean});
  asked_ = next;
  asked_ms_ = event.now_ms;
  readings_.clear();
}

void GnsBatchPolicy::GrowBatch(const PolicyEvent& event, double mean,
                               PolicyActions& actions) {
  const ClusterStatus& status = *event.status;
  const int32_t per_step = std::max(1, status.data_batches_per_step);
  if (per_step >= options_.max) {
    return Stop("its limit of " + std::to_string(options_.max) +
                " batches a step, with a noise scale of " +
                std::to_string(mean) + " worker steps' batches");
  }
  const int32_t next = std::min(per_step + options_.step, options_.max);
  const Status s = actions.SetBatchesPerStep(next);
  if (s.code() == StatusCode::kInvalidArgument ||
      s.code() == StatusCode::kFailedPrecondition) {
    return Stop("the job refused " + std::to_string(next) +
                " batches a step: " + s.ToString());
  }
  if (!s.ok()) return;  // the coordinator did not answer: asked again later
  LOG(INFO) << "gns-batch: the noise scale averaged " << mean
            << " worker steps' batches over " << readings_.size()
            << " readings, above " << options_.grow_above << " x "
            << std::max(event.active_workers, status.target_workers)
            << " worker(s): " << next << " batches a step (were " << per_step
            << ") at clock " << event.clock;
  grown_.push_back({event.clock, per_step, next, mean});
  settle_until_ =
      status.noise_scale_clocks + static_cast<uint64_t>(options_.settle_clocks);
  readings_.clear();
}

}  // namespace ductile
