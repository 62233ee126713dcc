// The one reconcile loop of every launcher: `ductile local` (local
// processes or Slurm jobs) and `ductile k8s-controller` (a Kubernetes
// Job's pods) both run it. Each step compares the job the coordinator
// reports (ClusterStatus: its members, the target size `ductile resize` or
// a policy set, the workers a policy asked to replace) with what the
// Provider runs, and decides:
//  - grow: a target above the members counted starts new members, with
//    ids past any started (Provider::Grow);
//  - shrink: a target below drains the newest members first: a worker
//    leaves at its next step, a server's slots move away first
//    (Drainer, Provider::Shrink); a member the coordinator refuses to
//    drain (the only server) stays (Provider::Keep);
//  - replace: a worker a policy asked to replace gets a new worker started
//    in its place, and is drained once the new one is active, so the job
//    never runs with fewer workers. A worker being replaced and its
//    replacement count as one member, and neither is drained by a shrink.
//    A replacement that is gone for good before it was active is started
//    again, kReplaceTries times in all; then the old worker stays and is
//    not replaced again.
// Each new target is acted on once; one the provider could not carry out
// (a kubectl call that failed) is tried again at the next step. A drain
// answered NotFound (the member has not registered yet) is asked again at
// the next steps while the member may still come, up to kDrainAttempts.
//
// Example (a launcher's loop):
//   Reconciler reconciler(&provider, &drainer, log);
//   while (job runs) {
//     Result<ClusterStatus> status = QueryClusterStatus(...);
//     if (status.ok()) DUCTILE_RETURN_IF_ERROR(reconciler.Step(*status));
//   }
//
// Deterministic: it keeps no clock and starts no thread (drains run in
// the Drainer), so it is tested with a scripted provider and drainer.
// Thread safety: not thread-safe; one launcher thread steps it.
#ifndef DUCTILE_LAUNCH_RECONCILER_H_
#define DUCTILE_LAUNCH_RECONCILER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ductile/admin.h"
#include "ductile/status.h"
#include "launch/provider.h"

namespace ductile::launch {

// The job's clock as the coordinator last heard it: the furthest any
// worker, or any server's slowest worker, has got.
int64_t JobClock(const ClusterStatus& status);

// Ids of the members of `role` that are in the job or on their way in
// (joining, active, rejoining), ascending.
std::vector<int32_t> LiveMembers(const ClusterStatus& status, MemberRole role);

class Reconciler {
 public:
  // Replacements started for one worker before it is kept.
  static constexpr int kReplaceTries = 3;
  // Times a drain answered NotFound is asked again.
  static constexpr int kDrainAttempts = 300;

  // What it decided, one line each, and where from: "resize" (a target),
  // "resize-schedule" (Resize), "replace".
  using Log =
      std::function<void(const std::string& source, const std::string& line)>;

  // `provider` and `drainer` must outlive it.
  Reconciler(Provider* provider, Drainer* drainer, Log log);

  // One look at `status`: the drains answered since the last step, a new
  // target, replacements. An error only where the provider failed in a
  // way the launch cannot go on from (a child that cannot be started).
  Status Step(const ClusterStatus& status);

  // Makes `role` `count` members now, as a new target would, logged under
  // `source` (the launcher's own resize schedule); `status` is the job as
  // last seen.
  Status Resize(MemberRole role, int32_t count, const std::string& source,
                const ClusterStatus& status);

  // Whether drains or replacements are under way, so that the launcher
  // looks at the job more often.
  bool Busy() const;

 private:
  struct Replacement {
    int32_t new_id = -1;
    bool draining = false;  // the old one is being drained
    int tries = 1;
  };
  struct PendingDrain {
    MemberRole role;
    int32_t id;
    std::string source;
    int attempts = 1;
  };

  void AskDrain(MemberRole role, int32_t id, const std::string& source);
  void TakeDrainOutcomes();
  Status Replace(const ClusterStatus& status);

  Provider* const provider_;
  Drainer* const drainer_;
  const Log log_;
  // Per role (MemberRole as index): the last target acted on (0: none).
  int32_t applied_[2] = {0, 0};
  // Old worker -> its replacement; workers not to be replaced again.
  std::map<int32_t, Replacement> replacing_;
  std::set<int32_t> kept_;
  // Drains asked and not answered.
  std::vector<PendingDrain> drains_;
};

}  // namespace ductile::launch

#endif  // DUCTILE_LAUNCH_RECONCILER_H_
