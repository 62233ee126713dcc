// Rollbacks after a server failure (docs/fault_tolerance.md).
//
// The job moves to a new generation and back to its latest complete
// checkpoint C: the dead servers' slots go to the least-loaded survivors,
// no slot keeps a backup (the copies are of the abandoned timeline), every
// live server restores its slots' state at C (RECOVER), and once all
// have, every live worker resumes at C with its resume state (RESUME). A
// checkpoint that cannot be restored is dropped and the one before is
// tried. A server that cannot take a checkpoint (its own store failed:
// read-only, full) says nothing about the checkpoint: the catalog is kept
// and the server is asked again, 1 s later, then 2 s, ... up to 60 s. A
// member that missed the message (its heartbeat shows an older
// generation) gets it again; a coordinator restarted during a rollback
// starts it again.
//
// Not thread-safe: owned by the coordinator's loop.
#ifndef DUCTILE_COORDINATOR_RECOVERY_MANAGER_H_
#define DUCTILE_COORDINATOR_RECOVERY_MANAGER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "coordinator/ack_round.h"
#include "coordinator/coordinator_context.h"

namespace ductile {

class RecoveryManager {
 public:
  explicit RecoveryManager(CoordinatorContext* ctx) : ctx_(*ctx) {}

  // After the state was loaded from a previous run: remembers the last
  // rollback's RESUME for workers that missed it, or notes that a rollback
  // was under way (ResumeAfterRestart restarts it).
  void Load();
  // True once: a rollback was under way when the coordinator stopped.
  bool TakeInterruptedByRestart();

  bool in_progress() const { return round_.has_value(); }
  // A rollback waits for any server to register (none was left).
  bool waiting_for_a_server() const {
    return round_.has_value() && round_->round.complete();
  }
  // Starts a rollback (the caller has ended checkpoint rounds and
  // barriers first). No-op before the first routing table or while
  // shutting down.
  void Start(const std::string& why);
  // RECOVER_ACK. True when it finished the rollback: every live worker
  // but the `joining` ones (registered, not yet admitted: they join in the
  // new generation) was told to resume.
  bool HandleAck(const wire::Header& h, const std::set<int32_t>& joining);
  // A rollback not finished by its deadline starts again.
  bool Expired() const;
  // The coordinator did not run for `pause`: the round's deadline moves
  // that much later.
  void Postpone(std::chrono::steady_clock::duration pause);
  // Asks the servers that failed to restore again once their wait is over.
  void RetryFailed();
  // Why the rollback is held up ("server 1 cannot take ..."), or empty.
  const std::string& problem() const { return problem_; }
  // `member` is behind the job's generation: send it what it missed.
  void ResendIfBehind(const Member& member, uint64_t member_generation);
  // A server reconnected after a coordinator restart.
  void Resend(const Member& member);

 private:
  struct Round {
    int64_t clock = 0;
    AckRound round;  // servers restoring
    // Servers that failed to take the checkpoint: when to ask again.
    std::map<int32_t, CoordinatorContext::TimePoint> retry_at;
  };

  void Finish(const std::set<int32_t>& joining);

  CoordinatorContext& ctx_;
  std::optional<Round> round_;
  bool interrupted_ = false;
  // Failed restores of each server since the last finished rollback (the
  // backoff grows with them).
  std::map<int32_t, int> failures_;
  std::string problem_;
  // The last RESUME (without a worker's state) and each worker's state in
  // it: sent again to a worker whose heartbeat shows an older generation.
  std::optional<wire::Header> last_resume_;
  std::map<int32_t, std::string> last_resume_states_;
};

}  // namespace ductile

#endif  // DUCTILE_COORDINATOR_RECOVERY_MANAGER_H_
