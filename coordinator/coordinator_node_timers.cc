// A CoordinatorNode's timers: its own pauses forgiven (PauseCredit), the
// members' and rounds' timeouts checked each turn, and a job whose workers
// are all gone (the rest of the node is in coordinator_node.cc).
#include <chrono>
#include <string>

#include "coordinator/coordinator_node.h"
#include "glog/logging.h"

namespace ductile {

using std::chrono::milliseconds;

void CoordinatorNode::ForgiveAPause(TimePoint now) {
  // The loop wakes every kTimerPeriod (coordinator_node.cc): a gap of over
  // a second is a pause.
  const auto gap =
      last_ran_ == TimePoint{} ? TimePoint::duration{} : now - last_ran_;
  last_ran_ = now;
  const auto pause = pause_credit_.Forgive(gap);
  if (gap <= PauseCredit::kPause) return;
  // This node did not run: the members' silence meanwhile (their
  // heartbeats may still be on the way in) and the rounds' lateness are not
  // theirs, as far as the credit goes; the shutdown's wait moves too.
  membership_.ForgivePause(pause);
  checkpoints_.Postpone(pause);
  tables_.Postpone(pause);
  recovery_.Postpone(pause);
  if (ctx_.shutting_down) shutdown_deadline_ += pause;
  const int64_t gap_ms = std::chrono::duration_cast<milliseconds>(gap).count();
  if (pause < gap) {
    // The credit runs short (a loop slow at every turn): every 100th.
    LOG_EVERY_N(WARNING, 100)
        << "coordinator: did not run for " << gap_ms
        << " ms; its credit for pauses forgives only "
        << std::chrono::duration_cast<milliseconds>(pause).count()
        << " ms of it: the members' silence over the rest counts";
    return;
  }
  LOG(WARNING) << "coordinator: did not run for " << gap_ms
               << " ms; the members' silence and the rounds' lateness over "
                  "that time are not held against them";
}

void CoordinatorNode::CheckTimeouts() {
  if (recovery_.TakeInterruptedByRestart()) {
    StartRecovery("the coordinator restarted during a rollback");
  }
  // A worker silent past the heartbeat timeout is dead: nobody waits for
  // it any more (clock vectors, barriers, shutdown).
  if (membership_.DetectDeadWorkers()) OnWorkersChanged();
  // A request ends with its worker (a new process may take its id later).
  state_.ForgetReplacedWorkers();
  migrations_.CheckTimers();
  if (!ctx_.shutting_down && !state_.recovering && membership_.JobOver()) {
    BeginShutdown();
  }
  CheckWorkersGone();
  // A server silent past the timeout is dead: its backups take its slots
  // over, or the job rolls back to the latest checkpoint with its slots on
  // the survivors.
  OnServersDead(membership_.DetectDeadServers(), "died");
  // Slots left without a copy (a takeover with no server to spare, a
  // rollback, a drain) get one as servers come.
  if (routing_.MaybeFillBackups()) backups_whole_ = false;
  recovery_.RetryFailed();
  if (recovery_.Expired()) {
    StartRecovery("servers did not finish restoring in time");
  }
  checkpoints_.CheckTimers();
  tables_.CheckDeadlines();
}

void CoordinatorNode::CheckWorkersGone() {
  const int64_t timeout = ctx_.options.no_worker_timeout_ms;
  // (A job whose workers are all done has begun its shutdown already.)
  if (timeout <= 0 || ctx_.shutting_down || state_.workers.empty() ||
      !state_.LiveWorkers().empty()) {
    no_worker_since_.reset();
    return;
  }
  const TimePoint now = env_->Now();
  if (!no_worker_since_) {
    no_worker_since_ = now;
    LOG(WARNING) << "coordinator: no worker is live and the job is not done; "
                    "it fails unless one joins within "
                 << timeout << " ms";
    return;
  }
  if (now - *no_worker_since_ < milliseconds(timeout)) return;
  int finished = 0;
  for (const auto& [id, m] : state_.workers) finished += m.finished();
  failure_ = AbortedError(
      "the job failed: no worker was live for " + std::to_string(timeout) +
      " ms and the job is not done (" + std::to_string(finished) + " of " +
      std::to_string(state_.workers.size()) +
      " worker(s) finished; the others died or left)");
  LOG(ERROR) << "coordinator: " << failure_.message()
             << "; shutting the cluster down";
  BeginShutdown();
}

}  // namespace ductile
