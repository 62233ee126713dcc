// The coordinator (membership manager): one per cluster.
//
// It registers servers and workers and gives them ids, assigns slots evenly
// to servers once the expected number has registered, publishes the routing
// table (slot -> server) with an epoch that grows on every change, creates
// tables on every server, runs barriers, records heartbeats and each server's
// counters, and shuts the cluster down when every worker has finished.
// It runs on one thread of its own; all methods are thread-safe.
#ifndef DUCTILE_COORDINATOR_H_
#define DUCTILE_COORDINATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ductile/admin.h"
#include "ductile/policy.h"
#include "ductile/security.h"
#include "ductile/status.h"

namespace ductile {

struct CoordinatorOptions {
  // Where to listen: "tcp://host:port" (port 0 picks a free one) or
  // "ipc:///path".
  std::string bind_address = "tcp://127.0.0.1:7000";
  // Servers to wait for before slots are assigned and workers admitted. >= 1.
  int32_t num_servers = 1;
  // Workers in the job; the cluster shuts down when this many have
  // finished (workers declared dead do not count: they may come back).
  // 0: shut down once every worker that registered has finished.
  int32_t num_workers = 0;
  // Most workers in the job at once (live ones: not finished, left or
  // dead); a registration beyond it is refused with kResourceExhausted.
  // 0 = no bound. Workers may join and leave at any time
  // (docs/elasticity.md).
  int32_t max_workers = 0;
  // Slots keys hash into; fixed for the cluster's life. 1 - 1048576.
  int32_t num_slots = 4096;
  // A member silent this long is not alive. A worker is then dropped from
  // every server's clock vector (nobody waits for it at a staleness bound
  // or a barrier) until it is heard from again. Workers send a heartbeat
  // every second. 100 ms - 1 day.
  int64_t heartbeat_timeout_ms = 5000;
  // A drained server, once its slots have moved, answers requests sent
  // under older routing tables this long (at most heartbeat_timeout_ms),
  // then stops. Requests it left unanswered go to their keys' new owners,
  // which know whether it applied them (its exactly-once window moved with
  // its slots): a short linger costs resends, never an update.
  // 0 - 60000.
  int64_t drain_linger_ms = 2000;
  // The job fails when no worker has been live for this long while the job
  // is not done (the workers that registered died or left, or finished
  // short of num_workers, and none joined since): the cluster shuts down,
  // so its servers stop too, and Wait() returns kAborted. 0: wait for new
  // workers forever. 0 or 1 s - 7 days.
  int64_t no_worker_timeout_ms = 600000;
  // Messages queued for one peer that does not read them (a member, or
  // anyone asking for the status, say, without reading the answers): at
  // most `max_queued_replies` of them (1 - 10^7; more are dropped, as
  // ZeroMQ's send high-water mark does), and of more than 4 KiB each, at
  // most `max_queued_reply_mb` MiB (1 - 2^20; one more is dropped too).
  // The members' own messages are acknowledged and sent again, so a
  // member that catches up loses nothing. When such a peer goes, what
  // was queued for it is dropped and its memory goes back to the system.
  int64_t max_queued_replies = 10000;
  int64_t max_queued_reply_mb = 256;
  // Requests of one peer that wait to be read, 1 - 10^7: past it the
  // coordinator reads nothing more from that peer until it has taken
  // some, so a peer sending faster than the coordinator answers (STATUS
  // requests, say) keeps its backlog at home. Each at most about 2x
  // kControlMessageBytes (64 MiB).
  int64_t max_queued_requests = 1000;

  // Fault tolerance (docs/fault_tolerance.md).
  // Directory of the coordinator's own RocksDB (members, routing, tables,
  // the checkpoint catalog). A coordinator started on a directory that
  // holds a cluster's state resumes that cluster: its servers and workers
  // reconnect and continue. "" = nothing is kept (and no checkpoints).
  // The store takes a few MiB. Start fails, naming the directory and the
  // space needed and free, if the directory has less than 4 MiB free above
  // disk_reserve_mb, or if the cluster's state cannot be saved there.
  std::string state_dir;
  // Space the store leaves free on state_dir's disk: a save of the state
  // that would leave less fails with ResourceExhausted and writes nothing
  // (RocksDB can abort the process on a write that fails on a full disk).
  // While the state cannot be saved, every message to the members is held
  // and registering workers and observers are refused with that error.
  // 0 - 1048576 (0: no check).
  int64_t disk_reserve_mb = 64;
  // Take a checkpoint each time the server clock has advanced this many
  // clocks past the previous one. 0 = not by clock.
  int64_t checkpoint_every_clocks = 0;
  // Take a checkpoint when this many seconds have passed since the
  // previous one. 0 = not by time.
  double checkpoint_interval_s = 0;
  // How long servers may take to write a checkpoint or restore one before
  // the attempt is abandoned (and, for a restore, retried). >= 1000.
  int64_t checkpoint_timeout_ms = 120000;
  // Copies of each slot (docs/fault_tolerance.md, "Replication"). 1: no
  // copies (a server's death rolls the job back to the last checkpoint);
  // 2: each slot also kept on a backup server, and a server's death is
  // taken over by the backups with no rollback. Backups are assigned when
  // the slots are (a server joining later backs up nothing); a death that
  // leaves some slot with no live copy rolls back as with 1. 1 or 2.
  int32_t replicas = 1;

  // The cluster's keys (ductile/security.h). With them, only peers holding
  // the cluster's keys reach the coordinator, and shutdown, checkpoints,
  // resizes, drains and consistency changes need the admin key (others
  // get kPermissionDenied). Plain mode without them: `bind_address` must
  // then be loopback or ipc:// unless allow_plain_network.
  Security security;
  // Policies that watch the job and change it while it trains
  // (ductile/policy.h): every policy_interval_ms the coordinator reads the
  // job's status on a thread of its own and runs each one's hooks in
  // order. None by default.
  std::vector<std::shared_ptr<Policy>> policies;
  // 100 ms - 1 hour.
  int64_t policy_interval_ms = 1000;
};

// Checks every field of `options` against the range its comment gives and
// against the others (checkpoints need a state_dir); an InvalidArgument
// error names the field. Coordinator::Start calls it first.
[[nodiscard]] Status Validate(const CoordinatorOptions& options);

class Coordinator {
 public:
  // Validate(options), then starts the coordinator.
  static Result<std::unique_ptr<Coordinator>> Start(
      const CoordinatorOptions& options);

  virtual ~Coordinator() = default;
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Blocks until the cluster has shut down (or Stop()).
  virtual Status Wait() = 0;
  virtual void Stop() = 0;
  // The address it listens on (with the real port when 0 was asked).
  virtual std::string address() const = 0;

  // Moves one slot's ownership to another server and publishes the new
  // routing table (epoch + 1). Only the routing moves: the slot's keys are
  // not copied (resharding with data movement builds on this).
  virtual Status MoveSlot(int32_t slot, int32_t server_id) = 0;

  // Takes a checkpoint now and returns its clock once every server has
  // written it and every live worker has reported its resume state.
  // FailedPrecondition without a state_dir; kAborted if a failure or
  // another checkpoint interfered.
  virtual Result<int64_t> Checkpoint(int64_t timeout_ms) = 0;

  // The cluster's state, as `ductile status` (QueryClusterStatus) would
  // read it, from within this process: for monitors embedded with the
  // coordinator (the /metrics endpoint). Safe from any thread.
  virtual Result<ClusterStatus> QueryStatus(int64_t timeout_ms) = 0;

 protected:
  Coordinator() = default;
};

}  // namespace ductile

#endif  // DUCTILE_COORDINATOR_H_
