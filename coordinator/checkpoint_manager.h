// Checkpoint rounds on the coordinator (docs/fault_tolerance.md).
//
// A round: PREPARE to every server owning slots (each holds pushes beyond
// the largest timestamp it let through and reports it); once all have
// answered, COMMIT at C = one past the largest report, to those servers
// and to every live worker; complete once every server has written its
// state at C and every live worker has reported its resume state at C.
// The complete checkpoint enters the catalog (the oldest beyond what every
// server keeps leave it). One round at a time; a failure, a deadline or a
// rollback ends it. After k failures in a row, the next round by clock or
// time waits 2^(k-1) s (at most 60 s); one asked for is started at once.
//
// Not thread-safe: owned by the coordinator's loop.
#ifndef DUCTILE_COORDINATOR_CHECKPOINT_MANAGER_H_
#define DUCTILE_COORDINATOR_CHECKPOINT_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/ack_round.h"
#include "coordinator/coordinator_context.h"

namespace ductile {

class CheckpointManager {
 public:
  using Callback = std::function<void(const Result<int64_t>&)>;

  explicit CheckpointManager(CoordinatorContext* ctx)
      : ctx_(*ctx), last_started_(ctx->Now()) {}

  // Starts a round unless one is under way, no state is kept, the job is
  // rolling back or shutting down, or there is nothing new to save (not
  // `on_demand` and no server clock moved since the last checkpoint).
  void MaybeStart(bool on_demand);
  // CHECKPOINT from a tool: answered when the round completes or fails.
  void HandleRequest(const std::string& identity, const wire::Header& h);
  // Coordinator::Checkpoint: `done` runs when the round ends.
  void Request(Callback done);
  void HandleAck(const wire::Header& h);   // CHECKPOINT_ACK (prepare)
  void HandleDone(const wire::Header& h);  // CHECKPOINT_DONE
  // Timers: the round's deadline, and checkpoints by time.
  void CheckTimers();
  // The coordinator did not run for `pause`: the round's deadline moves
  // that much later (its answers may still be on their way in).
  void Postpone(std::chrono::steady_clock::duration pause);
  // A server's heartbeat reports its server clock: a checkpoint by clock
  // may be due.
  void OnServerClock(int64_t server_clock);
  // Workers no longer live will not report their resume state.
  void ForgetGoneWorkers();
  // A member that reconnected after a coordinator restart may have missed
  // the round's message.
  void Resend(const Member& member);
  // Ends the round with `status`; servers that prepared release their
  // holds. `counts`: a failure of the checkpoint (false when a rollback or
  // shutdown ends it), which delays the next round.
  void Fail(const Status& status, bool counts = true);
  // "3 checkpoint(s) failed in a row; the last: ..." or empty.
  const std::string& problem() const { return problem_; }
  bool in_progress() const { return round_.has_value(); }
  // A rollback restarts the interval.
  void RestartInterval() { last_started_ = ctx_.Now(); }

 private:
  struct Round {
    uint64_t id = 0;
    int64_t clock = -1;      // -1 until committed
    int64_t max_clock = -1;  // largest push timestamp the servers let in
    AckRound servers;        // prepare acks, then written states
    AckRound workers;        // resume states, after the commit
    std::map<int32_t, std::string> resume_states;
    std::vector<Waiter> waiters;  // CHECKPOINT requests
    std::vector<Callback> callbacks;
  };

  void Commit();
  void MaybeComplete();

  CoordinatorContext& ctx_;
  std::optional<Round> round_;
  uint64_t next_round_ = 1;
  CoordinatorContext::TimePoint last_started_;
  int failures_in_a_row_ = 0;
  CoordinatorContext::TimePoint retry_after_{};
  std::string problem_;
};

}  // namespace ductile

#endif  // DUCTILE_COORDINATOR_CHECKPOINT_MANAGER_H_
