// Members the coordinator declared dead while the launcher's process for
// them still runs: a process stopped (SIGSTOP) or hung, or a Slurm task
// whose job step was lost (when slurmstepd dies, srun waits on and squeue
// still lists the job and its step as running). Nothing would end such a
// process, and a job waiting for it (its workers done, a server's slots)
// would wait forever. `ductile local` kills a member found here and
// handles it as a crash: a server is restarted, a worker dropped.
//
// A member is lost once the coordinator has listed it as dead (a server
// busy with a checkpoint it announced is not) for `grace_ms` without a
// break, under its current process's registration: one last heard from
// after the process started, and newer than every registration listed
// for the member before (a coordinator's restart or pause moves a dead
// registration's last heartbeat forward). A restarted member is not
// blamed for its predecessor's death while it starts and registers,
// however long that takes. A member
// declared dead comes back by itself when heard from again (a short
// pause): the grace is that chance. A look after a gap (the coordinator
// did not answer for a while: restarting, say) starts every grace again.
//
// Example (the launcher's loop):
//   LostMembers lost(5 * heartbeat_timeout_ms);
//   for (const auto& m : lost.Step(status, asked_ms, now_ms, process_of))
//     Kill(m);
//
// Deterministic: the caller passes the times and the processes.
// Thread safety: not thread-safe; the launcher's thread steps it.
#ifndef DUCTILE_LAUNCH_LOST_MEMBERS_H_
#define DUCTILE_LAUNCH_LOST_MEMBERS_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "ductile/admin.h"
#include "launch/provider.h"

namespace ductile::launch {

class LostMembers {
 public:
  using Member = std::pair<MemberRole, int32_t>;
  // The process running a member now: its pid (-1: none runs) and when it
  // started, on the clock of Step's times.
  struct Process {
    pid_t pid = -1;
    int64_t started_ms = 0;
  };
  using ProcessOf = std::function<Process(const Member& member)>;
  // Looks further apart than this start every grace again (by default;
  // a caller whose looks take longer gives its own).
  static constexpr int64_t kGapMs = 3000;

  explicit LostMembers(int64_t grace_ms, int64_t gap_ms = kGapMs)
      : grace_ms_(grace_ms), gap_ms_(gap_ms) {}

  int64_t grace_ms() const { return grace_ms_; }

  // One look at `status`, asked for at `asked_ms` (before the question
  // went: its members' last heartbeats are at least that far back), at
  // `now_ms`: the members lost now, each once per process (in status
  // order).
  std::vector<Member> Step(const ClusterStatus& status, int64_t asked_ms,
                           int64_t now_ms, const ProcessOf& process_of);

  // How long `member` has been listed dead under its current process's
  // registration, as of the last Step; nullopt when it is not.
  std::optional<int64_t> DeadForMs(const Member& member) const;

  // The workers the last Step found listed finished for the grace under
  // their current process's registration while that process runs on
  // (each once per process): a script saving its results, or one that
  // hangs at exit (a thread that never ends). Not killed: the launcher
  // says it waits for them.
  const std::vector<Member>& lingering() const { return lingering_; }

  // The caller missed looks (the coordinator did not answer): each grace
  // starts again at the next Step, as after a gap.
  void StartGracesAgain() {
    for (auto& [member, w] : watches_) w.dead_since.reset();
  }

  // The caller could not kill `member`, returned by Step: the next Step
  // that finds it lost returns it again.
  void Unreport(const Member& member) {
    if (auto it = watches_.find(member); it != watches_.end()) {
      it->second.reported = false;
    }
  }

 private:
  struct Watch {
    pid_t pid = -1;
    // The newest registration listed before `pid` started: not its own.
    uint64_t before = 0;
    std::optional<int64_t> dead_since;
    int64_t dead_for = 0;
    bool reported = false;  // returned by Step already
    std::optional<int64_t> finished_since;
    bool lingering = false;  // in lingering() already
  };

  const int64_t grace_ms_;
  const int64_t gap_ms_;
  std::map<Member, Watch> watches_;
  // The newest registration listed for each member.
  std::map<Member, uint64_t> newest_;
  std::optional<int64_t> last_step_ms_;
  std::vector<Member> lingering_;
};

}  // namespace ductile::launch

#endif  // DUCTILE_LAUNCH_LOST_MEMBERS_H_
