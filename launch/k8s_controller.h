// Carries a job's target size and its replacement requests out on
// Kubernetes (`ductile k8s-controller`) with the reconcile loop
// `ductile local` runs (launch/reconciler.h), a Kubernetes Job as its
// provider.
//
// The job is the one `ductile k8s` describes: the workers and servers are
// the pods of the Indexed Jobs NAME-worker and NAME-server, member N the
// pod of completion index N. The controller reads the coordinator's status
// (ClusterStatus::target_workers/target_servers, set by `ductile resize`
// or a policy, and replace_workers) and acts through kubectl:
// - a larger target raises the Job's parallelism and completions: new
//   indexes, new members (up to max_workers / max_servers, the indexes
//   that have member keys);
// - a smaller one drains the newest live members first (`ductile drain`:
//   a worker leaves at its next step, a server moves its slots away) and,
//   once no member at or past the new size is left, lowers the Job's size
//   to the highest id that stays + 1, so that Kubernetes does not start
//   them again (their pods succeeded; indexes below that stay as they
//   are). A pod that registers past the new size meanwhile (its index
//   made by an earlier grow) is drained too. A member the coordinator
//   refuses to drain (the only server) stays, and the Job with it;
// - a replacement adds one index to the worker Job and drains the old
//   worker once the new one is active. As `ductile local` does, a resize
//   counts the two as one and drains neither; no replacement starts while
//   a shrink is under way.
// A member the coordinator has listed dead for `lost_after_ms` while its
// pod runs on (a process stopped or hung: Kubernetes sees a running
// container) has that pod deleted, so that its Job starts the index again
// (launch/lost_members.h decides, as for `ductile local` and Slurm). The
// pods are listed (kubectl get pods) only when a member is listed dead or
// a new registration appears.
// Each new target is acted on once; a kubectl call that fails (or takes
// longer than tool_timeout_ms) is logged and tried again at the next
// poll. Drains are asked on threads of their own and answered at later
// steps. The controller's own state (replacements under way, the last
// target) is in memory: a restarted controller acts on the coordinator's
// target again and may start a second replacement for one under way.
#ifndef DUCTILE_LAUNCH_K8S_CONTROLLER_H_
#define DUCTILE_LAUNCH_K8S_CONTROLLER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ductile/admin.h"
#include "ductile/security.h"
#include "ductile/status.h"
#include "launch/lost_members.h"
#include "launch/provider.h"
#include "launch/reconciler.h"

namespace ductile::launch {

struct K8sControllerOptions {
  std::string coordinator;  // the coordinator's address
  Security security;        // with the admin key on a cluster with keys
  std::string job_name = "ductile";   // `ductile k8s --job_name`
  std::string kube_namespace;         // "" = kubectl's current one
  std::string kubectl = "kubectl";    // found on PATH without a '/'
  int64_t poll_ms = 1000;             // between two looks at the status
  int64_t status_timeout_ms = 5000;   // one status query
  int64_t drain_timeout_ms = 120000;  // a server's drain
  // Indexes past these have no member keys (`ductile k8s --max_workers`,
  // --max_servers): the Jobs never grow past them (0: no bound).
  int32_t max_workers = 0;
  int32_t max_servers = 0;
  int64_t tool_timeout_ms = 30000;  // one kubectl call
  // A member listed dead this long while its pod runs has the pod deleted
  // (5 heartbeat timeouts, as `ductile local`); 0: never.
  int64_t lost_after_ms = 25000;
  // RunK8sController ends once the coordinator has not answered for this
  // long (the job is over, or it is lost); 0: never.
  int64_t give_up_ms = 60000;
};

class K8sController {
 public:
  // Runs `args` (kubectl's arguments, without the program) and returns its
  // exit status, its standard output in `out`; -1 if it could not run.
  using Tool = std::function<int(const std::vector<std::string>& args,
                                 std::string* out)>;

  // `tool`: kubectl by default (options.kubectl, tool_timeout_ms).
  // `drainer`: the coordinator's drains (CoordinatorDrainer) by default.
  explicit K8sController(K8sControllerOptions options, Tool tool = nullptr,
                         std::unique_ptr<Drainer> drainer = nullptr);
  ~K8sController();

  // One look at `status` and what it asks for done (or started: drains
  // are answered at later steps). Errors are logged; the step goes on.
  // `asked_ms` (when the status was asked for) and `now_ms` are on one
  // steady clock of the caller's; without them, both are now.
  void Step(const ClusterStatus& status, int64_t asked_ms, int64_t now_ms);
  void Step(const ClusterStatus& status);

  // What it did, one line each ("patched NAME-worker to 3", the reconcile
  // loop's lines), for the log and for tests.
  const std::vector<std::string>& actions() const { return actions_; }

 private:
  class JobProvider;
  // A running pod of the job: its name, its container's run (the name and
  // restart count), and that run's start on the caller's steady clock (a
  // margin late).
  struct Pod {
    std::string name;
    std::string process;
    int64_t started_ms = 0;
  };
  void Act(const std::string& line);
  // Deletes the pods of members lost (LostMembers) by this look.
  void DeleteLost(const ClusterStatus& status, int64_t asked_ms, int64_t now_ms,
                  int64_t wall_ms);
  // The running pods of the job's two Jobs by member (kubectl get pods);
  // `wall_ms` is the wall clock at `now_ms`.
  Result<std::map<LostMembers::Member, Pod>> RunningPods(int64_t now_ms,
                                                         int64_t wall_ms);

  const K8sControllerOptions options_;
  Tool tool_;
  LostMembers lost_;
  std::map<LostMembers::Member, Pod> pods_;  // as last listed
  std::set<uint64_t> registrations_;         // incarnations seen when listed
  std::set<uint64_t> dead_;                  // registrations listed dead then
  // When the last look ended, on the caller's clock.
  std::optional<int64_t> last_look_end_ms_;
  bool pods_failing_ = false;  // the last listing failed
  std::vector<std::string> actions_;
  std::unique_ptr<JobProvider> provider_;
  std::unique_ptr<Drainer> drainer_;
  std::unique_ptr<Reconciler> reconciler_;
};

// Steps a controller every poll_ms until `stop` is set or the coordinator
// has not answered for give_up_ms. Ok if the last status it read showed
// no live worker still training (the job ended), else Unavailable.
Status RunK8sController(const K8sControllerOptions& options,
                        const std::atomic<bool>& stop);

}  // namespace ductile::launch

#endif  // DUCTILE_LAUNCH_K8S_CONTROLLER_H_
