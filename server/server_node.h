// Everything a parameter server decides, with no thread of its own: the
// request loop's body and its components.
//
// Step() reads whatever the server's two sockets hold (requests on its
// router, messages from the coordinator on its dealer), dispatches each to
// a component, and handles the timers that are due (heartbeats, deadlines
// of parked pulls and checkpoint rounds). The components, each testable
// without sockets:
//   RequestAdmission       checks a request and keeps exactly-once;
//   ReplySender            answers requests;
//   TableSet               the tables, applied to and read;
//   ConsistencyController  clocks, the staleness gate, BSP, model changes;
//   Checkpointer           consistent-cut checkpoints;
//   Restorer               rollbacks to a checkpoint;
//   SlotMover              slots moving away to another server, or
//                          arriving from one (live migration).
// ServerImpl runs Step() on its request thread; the simulation runs it on
// its one thread, with a simulated Env.
//
// Not thread-safe, except counters() and id(): one thread steps a node.
#ifndef DUCTILE_SERVER_SERVER_NODE_H_
#define DUCTILE_SERVER_SERVER_NODE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "consistency/consistency_controller.h"
#include "ductile/server.h"
#include "env/env.h"
#include "proto/ductile.pb.h"
#include "routing/routing_table.h"
#include "server/checkpointer.h"
#include "server/coordinator_link.h"
#include "server/live_counters.h"
#include "server/noise_monitor.h"
#include "server/replica_store.h"
#include "server/replicator.h"
#include "server/reply_sender.h"
#include "server/request_admission.h"
#include "server/restorer.h"
#include "server/shm_value_regions.h"
#include "server/slot_mover.h"
#include "server/table_set.h"
#include "transport/message.h"
#include "transport/socket.h"

namespace ductile {

class ServerNode final : private CoordinatorLink {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // `env` must outlive the node.
  ServerNode(const ServerOptions& options, Env* env);
  ~ServerNode() override;
  ServerNode(const ServerNode&) = delete;
  ServerNode& operator=(const ServerNode&) = delete;

  // Binds, connects to the coordinator and asks to register; Step() takes
  // the answer, and asks again every kRegisterResend while there is none
  // (a coordinator that died with the request, and was restarted, never
  // answers it; the coordinator answers a repeated request from the same
  // process as the first).
  Status Start();
  // Handles what the sockets hold, then the timers due.
  void Step();
  // Called from another thread when Step() has work that no socket shows
  // (a checkpoint write finished beside the stepping thread, a slot move's
  // chunk encoded); must be thread-safe. Set before Start().
  void set_wakeup(std::function<void()> wakeup) {
    wakeup_ = wakeup;
    checkpointer_.set_wakeup(std::move(wakeup));
  }

  // Registered: serving. A refused registration leaves failed() set.
  bool registered() const { return registered_; }
  const Status& failure() const { return failure_; }
  // The coordinator shut the cluster down.
  bool shut_down() const { return shut_down_; }
  // When Step() has timers to handle next (the next heartbeat at the
  // latest).
  TimePoint NextWakeup() const;
  // The sockets Step() reads, to wait on (the list changes while slots
  // move away: ask again after each Step()).
  std::vector<Socket*> sockets() const;
  Transport* transport() const { return transport_.get(); }

  int32_t id() const { return id_.load(); }
  const std::string& address() const { return tcp_address_; }
  const std::string& ipc_address() const { return ipc_address_; }
  // Any thread.
  ServerCounters counters() const { return counters_.Snapshot(); }
  // For tests only: a copy of one key's value (call only while the node is
  // not stepping).
  bool GetForTesting(TableId table, Key key, std::vector<float>* value);

 private:
  // CoordinatorLink.
  void Send(const wire::Header& header) override;
  void Heartbeat(int64_t busy_ms) override;

  Status SendRegistration();
  void HandleRegistration(const wire::Header& reply);
  // `replay`: a held request handled again (already counted).
  void HandleRequest(InMessage& message, bool replay = false);
  // A push whose values are in the worker's shared memory: copies them
  // out now, on arrival (the worker reuses the region once answered), and
  // rebuilds the message as if they had come in a frame. False if it was
  // refused (answered; nothing applied).
  bool TakeShmValues(InMessage& message);
  void HandleClock(const wire::Header& header);
  // A request's values, applied or buffered.
  // Tells the coordinator first when serving `request`, or other work on
  // `keys` keys and `bytes` bytes of values, will take a while.
  void AnnounceLongWork(const RequestAdmission::Request& request);
  void AnnounceLongWork(uint64_t keys, uint64_t bytes);
  Status ApplyValues(const RequestAdmission::Request& request);
  // Gives a worker's push to the noise monitor if it is a gradient.
  void NoteGradient(const RequestAdmission::Request& request);
  void ServePull(const InMessage& message,
                 const RequestAdmission::Request& request, uint64_t blocked_us,
                 bool duplicate);
  void HandleCoordinator(InMessage& message);
  void InstallRouting(const wire::RoutingTable& routing);
  // False for a routing that lists another process under this server's id:
  // an older one (made before this one registered: not installed), or a
  // newer one (this one was replaced: it stops, with failure()).
  bool ListsThisProcess(const RoutingTable& routing);
  // Stops this process, replaced by registration `by` under its id.
  void StopReplaced(uint64_t by);
  // Stopped with an error (replaced): it does nothing more.
  bool StoppedFailing() const { return shut_down_ && !failure_.ok(); }
  void CreateTable(const wire::Header& header);
  void SetWorkers(const wire::Header& header);
  void PrepareChange(const wire::Header& header);
  void CommitChange(const wire::Header& header);
  void Recover(const wire::Header& header);  // server_node_recovery.cc
  void Rejoin(const wire::Header& header);   // server_node_recovery.cc
  // A chunk of keys moving here (MIGRATE_DATA from another server).
  void InstallMoved(InMessage& message, const wire::Header& header);
  // Reports finished moves to the coordinator (once their slots' records
  // are at their backups).
  void StepMoves();
  // ---- Replication (server_node_replication.cc).
  // REPLICATE from a primary of slots this server backs: its records kept.
  void InstallReplica(InMessage& message, const wire::Header& header);
  // After a routing change from `old`: takes over the slots whose primary
  // died and whose copy is here, and drops the copies no longer backed.
  void OnReplicaRouting(const RoutingTable& old);
  // Runs `free` (dropping rows: their memory goes back) on freer_, beside
  // the request thread; in line where there is none (a simulation).
  void FreeBeside(std::function<void()> free);
  // Frees `held` (rows, sums: many allocations) beside, as above.
  template <typename T>
  void FreeHeldBeside(T held) {
    auto p = std::make_shared<T>(std::move(held));
    FreeBeside([p = std::move(p)]() mutable { p.reset(); });
  }
  // Reads the backups' answers, sends the replies they let go, and sends
  // what changed with no reply to wait for it.
  void StepReplication();
  // Forgets the copies, the replies waiting for backups and the records
  // under way (a rollback, or a rejoin).
  void DropReplicas();
  // The copies of `slots` (their primary died) become their rows here.
  void TakeOver(const std::set<int32_t>& slots);
  // A backup refused this server's records: its slots were taken over.
  // Drops what waits for them and its keys.
  void Fenced();
  // The counters of moves under way: slots, bytes left.
  void SetMoveCounters();
  // Handles again the requests held for a newer routing table.
  void ReplayBehind();
  static constexpr std::chrono::milliseconds kBehindWait{1000};
  static constexpr std::chrono::milliseconds kRegisterResend{1000};
  // Whether every key of `request` is in a slot this server serves now.
  bool ServesAll(const RequestAdmission::Request& request) const;

  // After the server clock may have moved: apply the finished BSP clocks,
  // write the checkpoints due, release the pulls the clock allows.
  void OnServerClock();
  // Sets the noise scale of AdaScale tables: the job's, else this
  // server's own once it has kAdaScaleMinClocks clocks, else 0.
  void SetAdaScaleNoise();
  void WriteDueCheckpoints();
  void ReplayCheckpointHeld();
  void HandleTimers();  // server_node_timers.cc, as are the next three
  // Answers each of `pulls` with the error `why` gives for it.
  void FailParked(
      std::vector<ConsistencyController::ParkedPull> pulls,
      const std::function<Status(const ConsistencyController::ParkedPull&)>&
          why);
  // Forgets the exactly-once windows of clients idle past their requests'
  // timeout and ServerOptions::client_idle_expiry_s (RequestDedup::Sweep).
  void SweepIdleClients();
  // The exactly-once window's clock: this server's steady time less the
  // time it did not run (paused_).
  TimePoint DedupNow() const;
  // Microseconds from `start` to now (0 if the clock went back).
  uint64_t MicrosSince(TimePoint start);
  void SetKeysStored() {
    counters_.Set(&ServerCounters::keys_stored, tables_.keys());
    const ParameterTable::RowCounts rows = tables_.row_counts();
    counters_.Set(&ServerCounters::rows_admitted, rows.admitted);
    counters_.Set(&ServerCounters::row_pushes_dropped, rows.dropped_pushes);
    counters_.Set(&ServerCounters::rows_evicted_idle, rows.evicted_idle);
    counters_.Set(&ServerCounters::rows_evicted_budget, rows.evicted_budget);
  }

  // Constant after construction.
  const ServerOptions options_;
  // Floats the tables may hold (ServerOptions::max_stored_mb).
  uint64_t max_stored_floats_ = 0;
  Env* const env_;

  // Set by Start(), then constant.
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Socket> router_;
  std::unique_ptr<Socket> coordinator_;
  std::string tcp_address_;
  std::string ipc_address_;
  std::atomic<int32_t> id_{-1};

  // Owned by the stepping thread.
  bool registered_ = false;
  std::string registration_;  // the REGISTER request, sent until answered
  TimePoint next_register_{};
  bool shut_down_ = false;
  TimePoint last_heard_{};         // the coordinator's last message
  TimePoint last_timers_{};        // HandleTimers() last ran
  TimePoint next_window_sweep_{};  // forgets idle clients' windows then
  TimePoint::duration paused_{};   // time this server did not run
  Status failure_;
  RoutingTable routing_;
  // This process's registration, as the coordinator numbers it (0: not
  // told): a routing that lists another under this server's id predates
  // it, and is not installed.
  uint64_t incarnation_ = 0;
  uint64_t generation_ = 0;
  int64_t heartbeat_interval_ms_ = 500;
  TimePoint next_heartbeat_{};
  // A rollback's generation once restored: a RECOVER sent again for it is
  // only acknowledged.
  std::optional<uint64_t> restored_generation_;
  // The routing epoch of the last REJOIN taken (another for the same
  // takeover, delayed, names no newer one).
  uint64_t rejoined_at_epoch_ = 0;
  // Moves with a lower id were planned by a coordinator process that has
  // restarted since (MIGRATE_ABORT of every move names its floor).
  uint64_t moves_from_ = 0;
  // Whether the server clock has been the job's since this server started
  // or rejoined: a server joining a running job starts at 0 and learns the
  // workers' clocks after its first rows may have moved in, and its first
  // move past clock 1 restarts the rows' idle clocks there
  // (TableSet::RestartClock) rather than counting the jump as clocks they
  // were idle. A rollback sets it.
  bool clock_learned_ = false;
  InMessage message_;  // reused by Step()
  // Requests read back to back so far (0: the socket was found empty
  // last), and the longest such run less its first in this heartbeat
  // interval (ServerCounters::busy_run_peak), which ends at
  // run_peak_until_.
  uint64_t run_ = 0;
  uint64_t busy_run_peak_ = 0;
  TimePoint run_peak_until_{};
  LiveCounters counters_;
  ReplySender replies_;
  // Workers' shared memory that pushes' values come from and pulls' go
  // into.
  ShmValueRegions shm_regions_;
  RequestAdmission admission_;
  // Applies large pushes' pieces (null: one thread).
  std::unique_ptr<ParallelRunner> runner_;
  TableSet tables_;
  ConsistencyController consistency_;
  GradientNoiseMonitor noise_;
  // The job's noise scale in data-plan batches, as the coordinator last
  // sent it (0: none yet): AdaScale's gain then comes from every server's
  // keys, one for the whole model.
  double job_noise_scale_ = 0;
  Checkpointer checkpointer_;
  Restorer restorer_;
  std::function<void()> wakeup_;      // set_wakeup
  std::unique_ptr<SlotMover> mover_;  // made by Start()
  // Replication: this server's copies of other servers' slots, and the
  // primary's side for its own (made by Start()). Moves finished, to be
  // reported once the replicator is idle.
  ReplicaStore replicas_;
  // Frees the rows a routing change drops, copies and slots moved away
  // (null in a simulation: they are freed in line).
  std::unique_ptr<BackgroundThread> freer_;
  std::unique_ptr<Replicator> replicator_;
  std::vector<std::pair<wire::Header, uint64_t>> moves_done_;  // ticket
  // The stream each primary's records come in, and the next record's seq.
  struct ReplicaStream {
    uint64_t stream = 0;
    uint64_t next_seq = 1;
    uint64_t gap_reported = 0;  // the next_seq a gap was reported at
  };
  std::map<int32_t, ReplicaStream> replica_streams_;
  // Requests held, in arrival order, behind one that named a routing epoch
  // newer than this server's (until it arrives, or kBehindWait passes).
  std::deque<InMessage> behind_;
  TimePoint behind_since_{};
  bool refuse_behind_ = false;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_SERVER_NODE_H_
