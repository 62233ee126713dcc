// Policies: code that watches a running job and changes its configuration
// while it trains (docs/adaptation.md).
//
// A cluster-wide policy runs in the coordinator's process: every policy
// interval the coordinator reads the job's status (the ClusterStatus that
// `ductile status` shows) and calls each policy's hooks with it, in the
// order they were given. Hooks act through PolicyActions. Embedders
// register their own in CoordinatorOptions::policies; the built-in ones are
// picked by name (`--policy=NAME[,NAME]` on `ductile coordinator` and
// `ductile local`, MakeBuiltinPolicy here).
//
// Hooks run on the coordinator's policy thread, one at a time, never on its
// message loop: a slow policy delays other policies, never the job. A
// policy keeps whatever state it needs between calls. Times are in
// milliseconds of a steady clock (`now_ms`), so a test can drive a policy
// with made-up statuses and times.
//
// Example (a policy that stops growing at 8 workers):
//
//   class AtMostEight final : public ductile::Policy {
//    public:
//     std::string name() const override { return "at-most-eight"; }
//     void OnMembershipChange(const ductile::PolicyEvent& e,
//                             ductile::PolicyActions& act) override {
//       if (e.active_workers > 8) act.Resize(8, 0).IgnoreError();
//     }
//   };
//   options.policies.push_back(std::make_shared<AtMostEight>());
#ifndef DUCTILE_POLICY_H_
#define DUCTILE_POLICY_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "ductile/admin.h"
#include "ductile/client.h"
#include "ductile/status.h"

namespace ductile {

// What a policy may change. Each call takes effect on the coordinator's
// loop before the next hook runs; a refused one returns why (and the
// coordinator logs it).
class PolicyActions {
 public:
  virtual ~PolicyActions() = default;
  // Sets the job's target size as `ductile resize` does (0: unchanged; at
  // least one of them set): `ductile local` starts or drains members to
  // match, other launchers read it from the status. kInvalidArgument
  // beyond the job's max_workers.
  virtual Status Resize(int32_t workers, int32_t servers) = 0;
  // Asks for worker `id` to be replaced: the launcher starts one more
  // worker and drains worker `id` once the new one is active, so the job
  // never runs with fewer workers (`ductile local` does so; the status
  // lists the request in ClusterStatus::replace_workers until worker `id`
  // has left, finished or died). kNotFound for a worker that is not
  // active; asking again while a request stands changes nothing.
  virtual Status ReplaceWorker(int32_t id) = 0;
  // Changes table `table`'s consistency model as Client::SetConsistency
  // does: every server and worker switches at one clock. Returns once the
  // change has started; it ends within a few round trips, and the status
  // then shows the new model (ClusterStatus::table_consistency). A change
  // that fails leaves the old model, and is logged. kNotFound for an
  // unknown table, kInvalidArgument for a bad model, kUnavailable while
  // another change of the table is under way, kFailedPrecondition while
  // the job ends or rolls back. Actions that cannot change models refuse
  // (kFailedPrecondition, the default).
  virtual Status SetConsistency(const std::string& table,
                                const Consistency& consistency) {
    (void)table;
    (void)consistency;
    return FailedPreconditionError(
        "these policy actions cannot change a table's consistency");
  }
  // Sets how many of the shared data plan's batches (Client::NextBatch)
  // each worker trains in one step, 1 - 64: its batch grows that many
  // times. Workers learn it with their next claim on the plan (within a
  // few steps) and say so with their pushes (Client::SetPushWeight), so
  // that under BSP (mean) the tables' batch scaling follows the global
  // batch. The status shows it (ClusterStatus::data_batches_per_step). A
  // rollback keeps it. kInvalidArgument out of range; the default refuses
  // (kFailedPrecondition).
  virtual Status SetBatchesPerStep(int32_t batches) {
    (void)batches;
    return FailedPreconditionError(
        "these policy actions cannot change the batch size");
  }
};

// What a hook is shown: the status just read, the time, and what changed
// since the previous reading.
struct PolicyEvent {
  const ClusterStatus* status = nullptr;
  int64_t now_ms = 0;
  // Active workers and servers now (MemberStatus::state "active").
  int32_t active_workers = 0;
  int32_t active_servers = 0;
  // The job's clock: the lowest clock of the active workers (-1: none).
  int64_t clock = -1;
  // The shared data plan's epoch (ClusterStatus::data_epoch).
  int64_t epoch = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  // Shown in the coordinator's log with each action it takes.
  virtual std::string name() const = 0;
  // At every reading of the status (every policy interval).
  virtual void OnStatus(const PolicyEvent& event, PolicyActions& actions) {
    (void)event;
    (void)actions;
  }
  // The job's clock moved on since the previous reading: steps
  // `from_clock` + 1 to `event.clock` are done, and the next begins. (A
  // reading may cover several steps.)
  virtual void AfterStep(int64_t from_clock, const PolicyEvent& event,
                         PolicyActions& actions) {
    (void)from_clock;
    (void)event;
    (void)actions;
  }
  // The shared data plan moved on to `event.epoch` (epochs from
  // `from_epoch` on are done): before the new epoch's batches.
  virtual void AfterEpoch(int64_t from_epoch, const PolicyEvent& event,
                          PolicyActions& actions) {
    (void)from_epoch;
    (void)event;
    (void)actions;
  }
  // The set of active workers or servers changed (a member joined, left,
  // finished, died or was drained).
  virtual void OnMembershipChange(const PolicyEvent& event,
                                  PolicyActions& actions) {
    (void)event;
    (void)actions;
  }
};

// A built-in policy by its spec: NAME or NAME:KEY=VALUE:KEY=VALUE. The
// names (parameters and defaults in docs/adaptation.md):
//   autoscale   grows the job by `step` workers while the scaling
//               efficiency s = ((R_{k+d} - R_k) / d) / (R_k / k) of the
//               measured throughput R stays above `threshold` (Or, Zhang
//               and Freedman, MLSys'20), then shrinks back to the last size
//               that paid and stays there.
//   stragglers  replaces a worker whose samples per second stay below
//               `ratio` of the active workers' median for `window` readings
//               in a row.
//   staleness   raises the bound of SSP tables while the workers spend more
//               than `raise_above` of their step time blocked on it, and
//               lowers it while they spend less than `lower_below` (never
//               back into a bound that blocked).
//   gns-batch   grows the global batch by `step` workers (by=workers) or
//               by `step` batches in each worker's step (by=batch) while
//               the gradient noise scale the servers estimate (in worker
//               step batches, averaged over `window` readings) stays above
//               `grow_above` times the active workers, up to `max`; never
//               shrinks it.
// kInvalidArgument for an unknown name or parameter, or a bad value.
Result<std::shared_ptr<Policy>> MakeBuiltinPolicy(const std::string& spec);

// MakeBuiltinPolicy for each of a comma-separated list of specs ("" gives
// none).
Result<std::vector<std::shared_ptr<Policy>>> MakeBuiltinPolicies(
    const std::string& specs);

// ---------------------------------------------------------------------
// Policies in a worker.
//
// A worker policy runs in one worker's process, on its training thread,
// between its steps: it reads that worker's own signals (ClientStats: step
// time, time waiting for pushes and pulls, samples, loss) at every step,
// with no round trip, and acts for that worker. The training apps call the
// hooks (`ductile worker --worker_policy=NAME[,NAME]`; `ductile local`
// gives the flag to every worker it starts; embedders of the apps set
// train::TrainerOptions::worker_policies). A loop of one's own calls them
// itself, with actions of its own. Hooks run one at a time, in the order
// the policies were given; a slow hook slows that worker's steps.

// What a worker policy may change. A refused call returns why.
class WorkerPolicyActions {
 public:
  virtual ~WorkerPolicyActions() = default;
  // How many of the shared data plan's batches this worker trains in one
  // step from its next step on, 1 - 64 (its batch grows that many times),
  // where that is more than the job sets for every worker (PolicyActions::
  // SetBatchesPerStep): the worker takes the larger of the two. 0: the
  // job's again. Its pushes say so (Client::SetPushWeight), so that under
  // BSP (mean) the tables' batch scaling counts its batches and a clock's
  // mean weighs them. kInvalidArgument out of range.
  virtual Status SetBatchesPerStep(int32_t batches) = 0;
  // Changes table `table`'s consistency model for the whole job, as
  // Client::SetConsistency does (returns once every member has switched).
  virtual Status SetConsistency(const std::string& table,
                                const Consistency& consistency) = 0;
  // This worker leaves the job before its next step, as when drained: its
  // pushes so far stay, the batches it holds go back to the plan.
  virtual Status Leave() = 0;
};

// What a worker's hook is shown.
struct WorkerPolicyEvent {
  int32_t worker_id = -1;
  int64_t clock = 0;  // Client::clock()
  // The epoch of the step's data (BeforeStep: epochs done so far;
  // AfterEpoch: the new epoch).
  int64_t epoch = 0;
  uint64_t steps = 0;  // steps this worker trained (rolled back with it)
  // The plan's batches the step takes (or, before a step, the last one
  // took).
  int32_t batches_per_step = 1;
  // AfterStep: the step's training loss (NaN in the other hooks).
  double loss = std::numeric_limits<double>::quiet_NaN();
  int64_t now_ms = 0;  // a steady clock
  ClientStats stats;   // Client::stats() when the hook runs
};

class WorkerPolicy {
 public:
  virtual ~WorkerPolicy() = default;
  // Shown in the worker's log with each action it takes.
  virtual std::string name() const = 0;
  // Before each step (before its batches are taken; once, however long
  // the worker then waits for a batch).
  virtual void BeforeStep(const WorkerPolicyEvent& event,
                          WorkerPolicyActions& actions) {
    (void)event;
    (void)actions;
  }
  // After each step: its gradient pushed and the worker clocked.
  virtual void AfterStep(const WorkerPolicyEvent& event,
                         WorkerPolicyActions& actions) {
    (void)event;
    (void)actions;
  }
  // The job's plan finished epochs `from_epoch` .. `event.epoch` - 1 (this
  // worker learned it with its last step).
  virtual void AfterEpoch(int64_t from_epoch, const WorkerPolicyEvent& event,
                          WorkerPolicyActions& actions) {
    (void)from_epoch;
    (void)event;
    (void)actions;
  }
  // The job's live workers changed (Client::live_workers()), before the
  // next step.
  virtual void OnMembershipChange(const std::vector<int32_t>& live_workers,
                                  const WorkerPolicyEvent& event,
                                  WorkerPolicyActions& actions) {
    (void)live_workers;
    (void)event;
    (void)actions;
  }
};

// A built-in worker policy by its spec, NAME or NAME:KEY=VALUE:..., as
// MakeBuiltinPolicy:
//   comm-batch  grows this worker's batches a step by `step` while the time
//               it waits for its pushes and pulls stays above `above` of its
//               step time (over `window` steps), up to `max`: a worker whose
//               compute is short against its round trips (a GPU worker, a
//               small model) does more work per round trip. Never shrinks.
// kInvalidArgument for an unknown name or parameter, or a bad value.
Result<std::shared_ptr<WorkerPolicy>> MakeBuiltinWorkerPolicy(
    const std::string& spec);
// MakeBuiltinWorkerPolicy for each of a comma-separated list ("": none).
Result<std::vector<std::shared_ptr<WorkerPolicy>>> MakeBuiltinWorkerPolicies(
    const std::string& specs);

}  // namespace ductile

#endif  // DUCTILE_POLICY_H_
