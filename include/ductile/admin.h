// Cluster inspection and control from outside a job (`ductile status`).
#ifndef DUCTILE_ADMIN_H_
#define DUCTILE_ADMIN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ductile/client.h"
#include "ductile/security.h"
#include "ductile/server.h"
#include "ductile/status.h"

namespace ductile {

struct MemberStatus {
  int32_t id = -1;
  std::string role;     // "server" or "worker"
  std::string address;  // servers: tcp address
  int64_t last_heartbeat_ms_ago = 0;
  // Not declared dead, and heard from within the heartbeat timeout (or,
  // a server, silent while it writes or restores a checkpoint it
  // announced).
  bool alive = false;
  bool finished = false;  // workers: called Finish()
  // The process that registered as this member now: its id on its host
  // (0: it gave none), and the coordinator's number for its registration,
  // never given twice in a cluster's life (a restarted member gets a new
  // one). A launcher names the process with them in ReportMemberExit.
  int32_t pid = 0;
  uint64_t incarnation = 0;
  // Workers: joining (admission under way), active, draining (asked to
  // leave), left, finished or dead; servers: active, draining, drained,
  // rejoining (declared dead while alive, back at the job's generation
  // soon) or dead.
  std::string state;
  int32_t slots = 0;        // servers: slots owned
  ServerCounters counters;  // servers: as of the last heartbeat
  // Servers: the live workers' requests to it in flight (sent, not
  // answered yet), summed over their last heartbeats: those waiting in
  // its socket, the one it handles, pulls parked on a bound
  // (counters.parked_pulls) and replies on their way back. Requests wait
  // in a ZeroMQ socket uncounted: this is the count of its queue of
  // workers' requests (other servers' slot moves are not in it).
  uint64_t in_flight_requests = 0;
  // Workers, as of the last heartbeat: clock, pulls, time blocked on the
  // staleness bound, and observed staleness.
  int64_t clock = 0;
  uint64_t pulls = 0;
  uint64_t blocked_ms = 0;
  int64_t max_staleness = -1;
  double mean_staleness = 0;
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  // Workers: staleness[i] = pulls that read with staleness i (bucket
  // kStalenessBuckets - 1: that or more), since the worker started; up to
  // the largest staleness seen.
  std::vector<uint64_t> staleness;
  // Workers: steps (Clock() calls) and samples reported, the steps' time
  // and of it the time waited for pushes and pulls (ClientStats), since
  // the worker started; and per step over about the last ten steps, with
  // the samples per second they make.
  uint64_t steps = 0;
  uint64_t samples = 0;
  double step_seconds = 0;
  double push_wait_seconds = 0;
  double pull_wait_seconds = 0;
  double recent_step_ms = 0;
  double recent_push_wait_ms = 0;
  double recent_pull_wait_ms = 0;
  double samples_per_s = 0;
  // The training loss it reported (Client::RecordLoss), smoothed, and how
  // many reports (0: none).
  double recent_loss = 0;
  uint64_t losses = 0;
};

// What the coordinator refused or dropped, since it started, to bound what
// a peer costs it: as ServerCounters' fields of the same names count them
// for a server (docs/security.md, "Counts of refusals").
struct CoordinatorRefusals {
  uint64_t refused_connections = 0;
  uint64_t failed_accepts = 0;
  uint64_t failed_handshakes = 0;
  uint64_t refused_replies = 0;
  uint64_t dropped_replies = 0;
};

struct ClusterStatus {
  uint64_t epoch = 0;
  int32_t num_slots = 0;
  int32_t expected_servers = 0;
  std::vector<MemberStatus> members;
  std::vector<std::string> tables;
  // Each table's consistency model now (changed by Client::SetConsistency
  // or a policy), in the order of `tables`.
  std::vector<Consistency> table_consistency;
  uint64_t generation = 0;             // rollbacks after failures so far
  int64_t last_checkpoint_clock = -1;  // -1: none yet
  int32_t checkpoints = 0;             // complete checkpoints kept
  bool recovering = false;             // a rollback is under way
  // What holds the job up or fails its checkpoints, with the reason (a
  // server that cannot restore a checkpoint, checkpoints failing in a
  // row); empty when nothing does.
  std::string problem;
  int32_t slots_moving = 0;  // slots moving between servers now
  // Copies of each slot the job keeps (--replicas); with 2, the slots
  // whose backup is missing or has no whole copy yet (a server's death
  // there rolls the job back), and the deaths whose slots backups took
  // over with no rollback so far.
  int32_t replicas = 1;
  int32_t slots_without_copy = 0;
  uint64_t takeovers = 0;
  // Bytes of those moves the targets have not acknowledged yet, as the
  // sources last reported them (heartbeats).
  uint64_t move_bytes_left = 0;
  // The size `ductile resize` asked for (0: none asked): a launcher that
  // manages the job starts or drains members to match.
  int32_t target_workers = 0;
  int32_t target_servers = 0;
  // Workers a policy asked to replace (PolicyActions::ReplaceWorker) that
  // are still live: a launcher starts one more worker for each and drains
  // it once the new one is active.
  std::vector<int32_t> replace_workers;
  // The shared data plan (Client::NextBatch; data_epochs 0: none yet):
  // the lowest epoch not done in full and its batches done.
  int64_t data_epochs = 0;
  int64_t data_batches_per_epoch = 0;
  int64_t data_epoch = 0;
  int64_t data_batches_done = 0;
  // Batches of the plan each worker trains in one step
  // (PolicyActions::SetBatchesPerStep; 1 unless a policy changed it).
  int32_t data_batches_per_step = 1;
  // The gradient noise scale B_simple (McCandlish et al. 2018) the servers
  // estimate from the workers' pushes, in units of one worker's batch (of
  // one step: data_batches_per_step of the plan's batches): multiply by
  // its size for samples. A batch well below it wastes
  // steps; well above, samples. 0 until known (two workers and a few
  // clocks); over the clocks noise_scale_clocks says (the most any live
  // server has folded in).
  double noise_scale = 0;
  uint64_t noise_scale_clocks = 0;
  // What the estimate cost those servers: their request threads' time in
  // it (ServerCounters::gns_us), summed, so far.
  uint64_t noise_scale_us = 0;
  // The staleness histogram of the whole job: the workers' (members')
  // histograms summed, [i] = pulls with staleness i (bucket
  // kStalenessBuckets - 1: that or more).
  std::vector<uint64_t> staleness;
  // The job's recent throughput: the live workers' samples_per_s summed.
  double samples_per_s = 0;
  // The job's recent training loss: the mean of the active workers'
  // recent_loss (those that reported one); 0 when none did.
  double loss = 0;
  CoordinatorRefusals coordinator_refusals;
};

// Each call takes the cluster's keys (LoadClusterKeys; empty in plain
// mode). Shutdown, checkpoint, drain, resize and reports of a member's exit
// need the admin key on a cluster with keys: without it they fail with
// kPermissionDenied.

// Asks the coordinator at `address` for the cluster's state.
Result<ClusterStatus> QueryClusterStatus(const std::string& address,
                                         int64_t timeout_ms,
                                         const Security& security = {});
// Asks the coordinator to shut the whole cluster down.
Status RequestShutdown(const std::string& address, int64_t timeout_ms,
                       const Security& security = {});
// Asks the coordinator for a checkpoint now; returns its clock once it is
// complete (`ductile checkpoint`).
Result<int64_t> RequestCheckpoint(const std::string& address,
                                  int64_t timeout_ms,
                                  const Security& security = {});
// Asks worker `worker_id` of the job to leave (`ductile drain worker:N`):
// the worker is told at once and leaves at its next step (a training loop
// checks Client::leave_requested()). Returns once the worker is told.
Status RequestDrainWorker(const std::string& address, int32_t worker_id,
                          int64_t timeout_ms, const Security& security = {});
// Moves every slot of server `server_id`, with its keys, to the other
// servers while the job runs, then stops it (`ductile drain server:N`).
// Returns once the server is out of the job.
Status RequestDrainServer(const std::string& address, int32_t server_id,
                          int64_t timeout_ms, const Security& security = {});
// Sets the job's target size (`ductile resize`): `workers` and `servers`
// (0: unchanged; at least one of them set). The coordinator records it and
// shows it in the status; `ductile local` starts or drains members to
// match, and other launchers act on it likewise. kInvalidArgument beyond
// the job's --max_workers.
Status RequestResize(const std::string& address, int32_t workers,
                     int32_t servers, int64_t timeout_ms,
                     const Security& security = {});
// One process of a member, as a report of its exit names it: the member's
// role and id, and the process by its pid (as it registered:
// MemberStatus::pid; the launcher's child's pid when the launcher execs
// the member directly), its incarnation (MemberStatus::incarnation), or
// both (both must then fit).
struct MemberProcess {
  std::string role;  // "server" or "worker"
  int32_t id = -1;
  int32_t pid = 0;           // 0: not named
  uint64_t incarnation = 0;  // 0: not named
};
// Tells the coordinator that `process` has exited (`ductile exited`): a
// launcher that sees its child end (`ductile local`: killed by a signal;
// Slurm: its step ended; Kubernetes: its pod failed) reports it, and the
// member is declared dead at once, exactly as when its heartbeat times
// out: a worker leaves the clock vectors and barriers, so BSP and SSP go
// on without it; a server's death rolls the job back as usual. Without a
// report, silence past the heartbeat timeout stays the rule.
//
// The rule against stale reports: a report applies only while the
// member's current registration is the process named. A restarted member
// (a server restarted with its id, a worker taking a dead one's id)
// registers as a new process, with a new incarnation and its own pid; a
// report about the process it replaced (late, or sent again) is refused
// with kFailedPrecondition and changes nothing. Name the process by its
// pid where the launcher started it itself (a pid is not given to another
// process on the host before its parent has reaped it, and the launcher
// reports before it starts a replacement); where pids repeat (containers,
// whose first process is often pid 1, several hosts), by the incarnation
// the status showed while it ran.
//
// Needs the admin key on a cluster with keys (kPermissionDenied without
// it). kNotFound: no such member ever registered; kInvalidArgument: no
// role, or no process named. OK, changing nothing, for a member already
// dead, left or finished.
Status ReportMemberExit(const std::string& address,
                        const MemberProcess& process, int64_t timeout_ms,
                        const Security& security = {});
// A human-readable table of `status`.
std::string FormatClusterStatus(const ClusterStatus& status);
// `status` in Prometheus' text exposition format (version 0.0.4), as the
// coordinator's /metrics serves it: job-wide gauges (ductile_*), each
// server's counters (ductile_server_*{server="ID"}), each worker's
// (ductile_worker_*{worker="ID"}) and the staleness histogram
// (ductile_staleness_bucket{le="I"}). Counters that only grow end in
// _total.
std::string FormatPrometheus(const ClusterStatus& status);

}  // namespace ductile

#endif  // DUCTILE_ADMIN_H_
