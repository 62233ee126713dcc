// A whole cluster in one thread: a coordinator, servers and workers as
// nodes stepped in turn on a simulated network with a fake clock, driven
// by a seed. The workers run the counter workload of the consistency
// contract (docs/consistency.md): once every worker is in (a first
// barrier), each worker adds 1 to its own counter at every clock and reads
// every counter, and the run checks, at every read:
//   - SSP(s): every counter is at least c - s at clock c; async: no bound;
//   - BSP: every counter is exactly c at clock c (all workers read the same);
//   - a worker reads its own counter exactly (c + 1, or c under BSP);
//   - no counter is above the pushes its worker has sent (none applied
//     twice);
// and after a final barrier, every counter equals the number of clocks
// (each push applied exactly once), and, with no rollback, no server clock
// ever moves backwards. Servers may crash and restart from
// their checkpoints; the job then rolls back and the workers redo the
// clocks since, and the checks continue on the rolled-back state.
//
// Workers may join and leave while the job runs (docs/elasticity.md): a
// joiner takes part from the clock its registration returns, S, a leaver
// up to the clock it leaves at, L, and the checks above count each
// worker's clocks in [S, L) only (exactly, under BSP). Servers may join
// and be drained: their slots move, with their keys, under the same
// checks.
//
// The same options and seed give the same run, message for message
// (trace()); a failing seed reproduces exactly.
#ifndef DUCTILE_SIM_SIM_CLUSTER_H_
#define DUCTILE_SIM_SIM_CLUSTER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ductile/table.h"
#include "sim/sim_network.h"

namespace ductile::sim {

struct SimOptions {
  uint64_t seed = 1;
  int servers = 2;
  int workers = 3;
  int clocks = 10;  // each worker's
  Consistency consistency;
  bool cache = false;  // the workers' SSP cache
  // Workers push with a push-pull of their key (its pull gated by the
  // staleness bound, as a pull is) instead of a push.
  bool push_pull = false;
  NetworkFaults faults;
  // Checkpoints every this many clocks (0: none kept).
  int64_t checkpoint_every = 0;
  // CoordinatorOptions::replicas: 2 gives every slot a backup server, which
  // takes it over when its owner dies (no rollback).
  int replicas = 1;
  // Server crashes: server `server` is killed once every worker has passed
  // `at_clock`, and restarted on its state `down_ms` later. With `pause`,
  // it is not killed but stops running for `down_ms` (as on SIGSTOP):
  // what is sent to it waits, and it goes on with all it had.
  //
  // With another `trigger`, the crash (or pause) comes during the workers'
  // start, while their table is being created, and `at_clock` is not
  // used: kTableCreateArrives, when the coordinator's TABLE_CREATE reaches
  // the server, before the server has read it (so before it acknowledges);
  // kTableAckArrives, when the server's TABLE_CREATE_ACK reaches the
  // coordinator (after it acknowledged). The first such message only.
  // With `after_rebuilt_backups` (kAtClock), the crash also waits for the
  // coordinator to have taken a death over and to see every slot with a
  // whole backup copy again (the rebuilt backups' case).
  enum class Trigger { kAtClock, kTableCreateArrives, kTableAckArrives };
  struct Crash {
    int server = 0;
    int64_t at_clock = 0;
    int64_t down_ms = 100;
    bool pause = false;
    Trigger trigger = Trigger::kAtClock;
    bool after_rebuilt_backups = false;
  };
  std::vector<Crash> crashes;
  // Disk faults: once every worker has passed `at_clock`, writes to server
  // `server`'s store (-1: the coordinator's) fail as on a read-only (or,
  // with `full`, a full) disk, for `for_ms`.
  struct DiskFault {
    int server = 0;
    int64_t at_clock = 0;
    int64_t for_ms = 1000;
    bool full = false;
  };
  std::vector<DiskFault> disk_faults;
  // Coordinator crashes: `delay_ms` after every worker has passed
  // `at_clock`, the coordinator is killed, and restarted on its state
  // `down_ms` later. (Not with server drains.)
  struct CoordinatorCrash {
    int64_t at_clock = 0;
    int64_t delay_ms = 0;
    int64_t down_ms = 100;
  };
  std::vector<CoordinatorCrash> coordinator_crashes;
  // Workers joining: a new worker registers once every worker in the job
  // has passed `after_clock`, and runs to the end (or its leave).
  struct Join {
    int64_t after_clock = 0;
  };
  std::vector<Join> joins;  // joiner k has index workers + k
  // Workers leaving: worker `worker` (an index, joiners included) leaves
  // once it reaches `at_clock`.
  struct Leave {
    int worker = 0;
    int64_t at_clock = 0;
  };
  std::vector<Leave> leaves;
  // Servers joining: a new server starts once every worker has passed
  // `after_clock`; the coordinator moves it its share of the slots.
  struct ServerJoin {
    int64_t after_clock = 0;
  };
  std::vector<ServerJoin> server_joins;  // joiner k has index servers + k
  // Servers drained: server `server`'s slots move to the others once every
  // worker has passed `after_clock`, then it stops.
  struct ServerDrain {
    int server = 0;
    int64_t after_clock = 0;
  };
  std::vector<ServerDrain> server_drains;
  // How long a drained server answers after its slots moved, before it
  // stops (CoordinatorOptions::drain_linger_ms); 0: requests on their way
  // to it are lost, and their clients re-route them.
  int64_t drain_linger_ms = 2000;
  // Workers killed (as by SIGKILL): worker `worker` (an index) sends
  // nothing more once it reaches `at_clock` (its pushes of the clocks
  // before are in) and its process ends `after_ms` later, with whatever it
  // had on its way. With `reported`, its launcher then tells the
  // coordinator at once (MEMBER_EXIT naming the process's pid); without,
  // the coordinator learns of it by its silence. (Not with server
  // crashes.)
  struct WorkerKill {
    int worker = 0;
    int64_t at_clock = 0;
    int64_t after_ms = 50;
    bool reported = true;
  };
  std::vector<WorkerKill> worker_kills;
  // Give up (and fail) after this much simulated time.
  int64_t time_limit_ms = 600000;
  // Once the workload is done, the cluster runs on idle (workers still
  // connected, sending no requests) for this long before the run ends.
  int64_t idle_after_ms = 0;
  // ServerOptions::client_idle_expiry_s of the servers.
  int64_t client_idle_expiry_s = 600;
  // Each worker stops for `pause_ms` (sending no request, its client still
  // heartbeating) when it reaches clock `pause_at_clock`.
  int64_t pause_at_clock = 0;
  int64_t pause_ms = 0;
};

struct SimResult {
  bool ok = false;
  // The first property violated, or why the run could not finish.
  std::string failure;
  uint64_t trace = 0;  // SimNetwork::trace() at the end
  int64_t simulated_ms = 0;
  uint64_t messages = 0, dropped = 0, duplicated = 0;
  int rollbacks = 0;  // rollbacks the workers resumed from
  // The clock each of those resumed at (0: the start, nothing kept).
  std::vector<int64_t> resume_clocks;
  int joined = 0, left = 0;  // workers that joined and left mid-job
  int killed = 0;            // workers killed (SimOptions::worker_kills)
  int server_crashes = 0;    // SimOptions::crashes that came (or pauses)
  // The status codes of the coordinator's answers to the reports of
  // killed workers, in the order answered.
  std::vector<int> exit_reports;
  int servers_joined = 0, servers_drained = 0;
  // The slots each server owns at the end (the coordinator's routing).
  std::vector<int> slots_at_end;
  // Per server at the end: the clients its exactly-once window holds, and
  // those it forgot for being idle (ServerCounters::window_*).
  std::vector<uint64_t> window_clients, window_expired;
  // Per server at the end: ServerCounters::queued_requests.
  std::vector<uint64_t> queued_requests;
  // The highest ServerCounters::busy_run_peak any server reported in the run.
  uint64_t busy_run_peak = 0;
  uint64_t reads_checked = 0;
  // The longest a worker went without its clock moving (simulated ms),
  // from its start to its end: how long a membership change or a fault
  // held anyone up.
  int64_t longest_stall_ms = 0;
};

// Runs the cluster to the end of the workload (or the first violation).
SimResult RunSimulation(const SimOptions& options);

// "seed=7 servers=2 workers=3 clocks=10 ssp(2) cache=0 faults=..." for
// messages: enough to run the same simulation again.
std::string Describe(const SimOptions& options);

}  // namespace ductile::sim

#endif  // DUCTILE_SIM_SIM_CLUSTER_H_
