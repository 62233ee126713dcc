// Everything the coordinator decides, with no thread of its own: the loop
// body and its managers.
//
// Step() handles every message waiting on the coordinator's socket and the
// timers due, dispatching to one manager per responsibility:
//   MembershipManager  registration, heartbeats, failure detection, the end
//                      of the job;
//   RoutingManager     slot assignment and publication;
//   MigrationManager   live slot moves: a server joining or drained,
//                      MoveSlot;
//   TableCatalog       tables and consistency changes;
//   BarrierManager     barriers;
//   CheckpointManager  checkpoint rounds and the catalog;
//   RecoveryManager    rollbacks after a server failure (with replicas,
//                      only when the backups cannot take over: TakeOver).
// They share the ClusterState, which persists itself after each message or
// timer handled, before the Outbox sends anything.
//
// CoordinatorImpl steps it on its loop thread; the simulation steps it on
// its one thread with a simulated Env. Not thread-safe.
#ifndef DUCTILE_COORDINATOR_COORDINATOR_NODE_H_
#define DUCTILE_COORDINATOR_COORDINATOR_NODE_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator/barrier_manager.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/cluster_state.h"
#include "coordinator/coordinator_context.h"
#include "coordinator/membership_manager.h"
#include "coordinator/migration_manager.h"
#include "coordinator/pause_credit.h"
#include "coordinator/recovery_manager.h"
#include "coordinator/routing_manager.h"
#include "coordinator/table_catalog.h"
#include "ductile/coordinator.h"
#include "ductile/table.h"
#include "env/env.h"
#include "transport/message.h"
#include "transport/socket.h"

namespace ductile {

class CoordinatorNode {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // `env` must outlive the node.
  CoordinatorNode(const CoordinatorOptions& options, Env* env);
  CoordinatorNode(const CoordinatorNode&) = delete;
  CoordinatorNode& operator=(const CoordinatorNode&) = delete;

  // Binds and loads a previous run's state (options.state_dir).
  Status Start();
  // Handles the waiting messages and the timers due.
  void Step();
  // Runs `task` on the node (the caller steps it); for work that other
  // threads ask for (MoveSlot, Checkpoint), then persists and sends.
  void Run(const std::function<void()>& task);

  void MoveSlot(int32_t slot, int32_t server_id,
                std::function<void(const Status&)> done);
  void Checkpoint(std::function<void(const Result<int64_t>&)> done);
  // The cluster's state as a STATUS request is answered.
  wire::ClusterState ClusterStateNow() const;
  // Sets the job's target size (`ductile resize`, a policy): 0 leaves one
  // unchanged; kInvalidArgument for none set, a negative one or more
  // workers than max_workers.
  Status SetTargetSize(int32_t workers, int32_t servers);
  // A policy asks for worker `id` to be replaced (PolicyActions): listed
  // in the status while the worker is live. kNotFound unless it is an
  // active worker.
  Status RequestReplacement(int32_t id);
  // A policy changes table `table`'s consistency model (as
  // Client::SetConsistency does): OK once the change has started.
  // kFailedPrecondition while the job ends or rolls back.
  Status ChangeConsistency(const std::string& table,
                           const Consistency& consistency);
  // A policy sets how many of the data plan's batches each worker trains
  // in one step (DataPlan::SetBatchesPerStep); workers learn it with their
  // next grant. kInvalidArgument out of range, kFailedPrecondition while
  // the job ends.
  Status SetBatchesPerStep(int32_t batches);
  // The cluster is shutting down (every worker finished, or asked to).
  bool finishing() const { return ctx_.shutting_down; }
  // Moves every slot of `server` away, then stops it (`ductile drain
  // server:N`); `done` runs once it is out.
  void DrainServer(int32_t server, std::function<void(const Status&)> done);
  // Ends the waits of MoveSlot (the coordinator stops).
  void CancelWaits(const Status& status);

  // The cluster has shut down and the notices had time to leave.
  bool finished() const;
  // Why the job failed (OK unless it did): every worker gone for
  // no_worker_timeout_ms.
  const Status& failure() const { return failure_; }
  TimePoint NextWakeup() const;
  Socket* socket() const { return socket_.get(); }
  // The cluster as the coordinator sees it (read between steps).
  const ClusterState& state() const { return state_; }
  Transport* transport() const { return transport_.get(); }
  const std::string& address() const { return address_; }

 private:
  void Handle(InMessage& message);
  // Whether a message whose member_id names its sender (an ack, a
  // heartbeat, a worker's barrier or finish) comes from that member:
  // kPermissionDenied when it comes from another member's connection,
  // names a member connected elsewhere, or names a member bound to a
  // member key that `key` (the one its connection proved) is not.
  Status CheckSender(const Member* member, const wire::Header& h,
                     const std::string& key) const;
  void HandleHeartbeat(const std::string& identity, const wire::Header& h);
  // A server's heartbeat from a process that a newer registration under
  // its id replaced: told so (kAborted, naming that registration), and it
  // stops. True when told.
  bool TellReplaced(const Member* sender, const std::string& identity,
                    const std::string& key, const wire::Header& h);
  // A server declared dead while alive, whose `heartbeat` came: told to
  // rejoin until it is at the job's generation with no keys (what it held
  // is of an abandoned timeline, or its slots were taken over), then
  // given its share of the slots.
  void Rejoin(Member& server, const wire::Header& heartbeat);

  void HandleRegister(const std::string& identity, const std::string& key,
                      const std::string& key_name, const wire::Header& h);
  void HandleFinish(const std::string& identity, const wire::Header& h);
  void HandleLeave(const std::string& identity, const wire::Header& h);
  void HandleDrainServer(const std::string& identity, const wire::Header& h);
  void HandleDataClaim(const std::string& identity, const wire::Header& h);
  // `ductile resize`: records the target size launchers act on.
  void HandleResize(const std::string& identity, const wire::Header& h);
  // MEMBER_EXIT (an administrator's): a member's process exited; it is
  // dead at once, as at the end of its heartbeat timeout.
  void HandleMemberExit(const std::string& identity, const wire::Header& h);
  // Servers just declared dead (`how`: "died" of silence, "exited" as
  // reported): their backups take their slots over (TakeOver), or else
  // the job rolls back to the latest checkpoint with their slots on the
  // survivors.
  void OnServersDead(const std::vector<int32_t>& dead, const std::string& how);
  // With options.replicas 2: the processes of `dead` are gone (`how`: "died",
  // "exited", "restarted"), and each slot they owned has a backup on a
  // live server. The backups take those slots over (one routing change,
  // published to servers and workers) with no rollback: the checkpoint
  // round under way and the slot moves that involve them are abandoned,
  // and no epoch wait waits for them. False, changing nothing, when
  // replicas is 1, a rollback is under way, or some slot of theirs has no
  // live backup.
  bool TakeOver(const std::set<int32_t>& dead, const std::string& how);
  // With --replicas=2, after a server's heartbeat: says once when every
  // slot's backup holds a whole copy again.
  void NoteBackupsWhole();
  // Batches held by workers no longer live go back to the data plan.
  void ReleaseGoneWorkersData();
  // A gap of over a second since this node last read its inbox (`now`) was
  // a pause of its own: the members' silence over it is forgiven, as far
  // as pause_credit_ allows. (It, CheckTimeouts and CheckWorkersGone:
  // coordinator_node_timers.cc.)
  void ForgiveAPause(TimePoint now);
  void CheckTimeouts();
  // The live workers changed: tell the servers, release a barrier that no
  // longer waits for anyone gone, and stop awaiting their resume states.
  void OnWorkersChanged();
  void StartRecovery(const std::string& why);
  void BeginShutdown();
  // Fails the job when no worker has been live for no_worker_timeout_ms.
  void CheckWorkersGone();
  void PersistAndSend();

  const CoordinatorOptions options_;
  Env* const env_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Socket> socket_;
  std::string address_;
  InMessage message_;  // reused by Step()

  ClusterState state_;
  Outbox out_;
  CoordinatorContext ctx_;
  MembershipManager membership_;
  RoutingManager routing_;
  TableCatalog tables_;
  BarrierManager barriers_;
  CheckpointManager checkpoints_;
  RecoveryManager recovery_;
  MigrationManager migrations_;
  TimePoint shutdown_at_{};
  // Past this, the coordinator ends without servers it could not tell.
  TimePoint shutdown_deadline_{};
  TimePoint last_ran_{};  // when Step() last read its inbox
  PauseCredit pause_credit_;
  Status failure_;
  // Since when no worker has been live, none having finished (unset while
  // one is).
  std::optional<TimePoint> no_worker_since_;
  // Every slot's backup held a whole copy at the last look (NoteBackupsWhole).
  bool backups_whole_ = true;
  // The last failure to save the state (OK: saved), and when to try again.
  Status save_error_;
  TimePoint save_retry_at_{};
};

}  // namespace ductile

#endif  // DUCTILE_COORDINATOR_COORDINATOR_NODE_H_
