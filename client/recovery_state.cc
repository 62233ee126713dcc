#include "client/recovery_state.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace ductile {
namespace {

// Resume states kept: a checkpoint is never far behind the current clock
// (its clock lies above every clock the servers had seen).
constexpr size_t kStatesKept = 4096;

Status RolledBack(int64_t clock) {
  return AbortedError("the job rolled back to the checkpoint at clock " +
                      std::to_string(clock) +
                      "; call AwaitRecovery() and resume from there");
}

}  // namespace

Status ShutDownError() { return UnavailableError("cluster is shutting down"); }

bool RecoveryState::IsNews(const wire::Header& resume) const {
  MutexLock lock(&mu_);
  const uint64_t known = pending_ ? pending_->generation : generation();
  return resume.generation() > known;
}

void RecoveryState::Announce(const wire::Header& resume) {
  {
    MutexLock lock(&mu_);
    Client::Recovery r;
    r.clock = resume.clock();
    r.generation = resume.generation();
    r.resume_state = resume.resume_state();
    pending_ = std::move(r);
  }
  cv_.SignalAll();
}

bool RecoveryState::OnCheckpointCommit(int64_t clock, uint64_t generation,
                                       int64_t worker_clock) {
  MutexLock lock(&mu_);
  if (generation != this->generation()) return false;
  const bool now =
      !uses_resume_state_ || states_.count(clock) > 0 || worker_clock > clock;
  if (!now) report_clock_ = clock;
  return now;
}

void RecoveryState::SetLiveWorkers(std::vector<int32_t> live) {
  MutexLock lock(&mu_);
  live_workers_ = std::move(live);
}

void RecoveryState::MarkShutDown() {
  MutexLock lock(&mu_);
  shut_down_.store(true);
  cv_.SignalAll();
}

Status RecoveryState::RefuseIfPending() const {
  if (shut_down_.load()) return ShutDownError();
  MutexLock lock(&mu_);
  return pending_ ? RolledBack(pending_->clock) : Status::Ok();
}

Result<Client::Recovery> RecoveryState::Await(int64_t timeout_ms) {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0));
  MutexLock lock(&mu_);
  while (!pending_) {
    if (shut_down_.load()) return ShutDownError();
    if (!cv_.WaitUntil(&mu_, deadline) && !pending_) {
      return DeadlineExceededError("no rollback was announced within " +
                                   std::to_string(timeout_ms) + " ms");
    }
  }
  Client::Recovery r = std::move(*pending_);
  pending_.reset();
  // States recorded past the checkpoint belong to the abandoned timeline.
  states_.erase(states_.upper_bound(r.clock), states_.end());
  report_clock_.reset();
  generation_.store(r.generation);
  return r;
}

std::optional<int64_t> RecoveryState::OnClock(int64_t clock, bool* pending) {
  MutexLock lock(&mu_);
  *pending = pending_.has_value();
  std::optional<int64_t> report;
  // Past a committed checkpoint's clock without a resume state for it (or
  // one this worker does not keep): report what there is.
  if (report_clock_ && *report_clock_ < clock) {
    report = report_clock_;
    report_clock_.reset();
  }
  return report;
}

std::optional<int64_t> RecoveryState::Record(int64_t clock, std::string state) {
  MutexLock lock(&mu_);
  uses_resume_state_ = true;
  states_[clock] = std::move(state);
  while (states_.size() > kStatesKept) states_.erase(states_.begin());
  std::optional<int64_t> report;
  if (report_clock_ && *report_clock_ <= clock) {
    report = report_clock_;
    report_clock_.reset();
  }
  return report;
}

std::string RecoveryState::StateAt(int64_t clock) const {
  MutexLock lock(&mu_);
  auto it = states_.find(clock);
  return it == states_.end() ? std::string() : it->second;
}

std::vector<int32_t> RecoveryState::live_workers() const {
  MutexLock lock(&mu_);
  return live_workers_;
}

}  // namespace ductile
