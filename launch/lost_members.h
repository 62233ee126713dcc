// Members the coordinator declared dead while the launcher's process for
// them still runs: a process stopped (SIGSTOP) or hung, or a Slurm task
// whose job step was lost (when slurmstepd dies, srun waits on and squeue
// still lists the job and its step as running). Nothing would end such a
// process, and a job waiting for it (its workers done, a server's slots)
// would wait forever. `ductile local` kills a member found here and
// handles it as a crash: a server is restarted, a worker dropped.
//
// A member is lost once the coordinator has listed it as dead for
// `grace_ms` without a break, under a registration (incarnation) newer
// than any seen before its current process started: a restarted member
// is not blamed for its predecessor's death while it starts and
// registers. A member declared dead comes back by itself when heard from
// again (a short pause): the grace is that chance.
//
// Example (the launcher's loop):
//   LostMembers lost(5 * heartbeat_timeout_ms);
//   for (const auto& [role, id] : lost.Step(status, NowMs(), pid_of)) Kill(..);
//
// Deterministic: the caller passes the time and the processes.
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
  // The pid of the process running `member` now, or -1 if none runs.
  using ProcessOf = std::function<pid_t(const Member& member)>;

  explicit LostMembers(int64_t grace_ms) : grace_ms_(grace_ms) {}

  int64_t grace_ms() const { return grace_ms_; }

  // One look at the job at `now_ms`: the members lost now, each once per
  // process (ascending).
  std::vector<Member> Step(const ClusterStatus& status, int64_t now_ms,
                           const ProcessOf& process_of);

  // How long `member` has been listed dead under its current process's
  // registration, as of the last Step; nullopt when it is not.
  std::optional<int64_t> DeadForMs(const Member& member) const;

 private:
  struct Watch {
    pid_t pid = -1;
    // The newest registration seen before `pid` started: not its own.
    uint64_t before = 0;
    std::optional<int64_t> dead_since;
    int64_t dead_for = 0;
    bool reported = false;  // returned by Step already
  };

  const int64_t grace_ms_;
  std::map<Member, Watch> watches_;
  // The newest registration the coordinator listed for each member.
  std::map<Member, uint64_t> newest_;
};

}  // namespace ductile::launch

#endif  // DUCTILE_LAUNCH_LOST_MEMBERS_H_
