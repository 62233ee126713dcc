// Runs a whole cluster on this machine as child processes of one
// supervisor: a coordinator, servers and workers.
//
// The supervisor never leaves orphans: children die with it (PDEATHSIG),
// and Ctrl-C, SIGTERM or SIGHUP stops them all (the signal passed on to
// each child's process group, then SIGKILL after a grace period). Each
// child leads a process group of its own, with stdin from /dev/null: what
// a worker command starts is stopped with it.
//
// Failures are told apart by how a child ends:
//  - Killed by a signal (SIGKILL, SIGSEGV, SIGABRT, ...): a crash, which
//    the cluster recovers from. A server is restarted at once with the
//    same id and state directory, the coordinator on the same address and
//    state directory; a worker is not restarted, and the surviving workers
//    take over its share of the data. A role restarted more than
//    kMaxRestartsPerRole times stops the cluster, so that a crash loop
//    cannot run forever. (A child ended by SIGINT, SIGTERM or SIGHUP was
//    asked to stop, which is not a crash: see below.)
//  - Declared dead by the coordinator and still running
//    kLostAfterTimeouts heartbeat timeouts later (stopped, hung, a lost
//    Slurm job step; launch/lost_members.h): killed, then a crash.
//  - Exited with a non-zero status, or ended by SIGINT/SIGTERM/SIGHUP
//    while the job runs: a real error. The other children are stopped and
//    the launch fails naming it (a worker command with the end of its
//    stderr).
// The launch succeeds when every worker that was not killed exited with
// status 0, and at least one did.
//
// State: the coordinator keeps its RocksDB in <state_dir>/coordinator and
// server i, started with --server_id=i, its checkpoint store under
// <state_dir>. The coordinator's address is chosen once (a free tcp port
// on 127.0.0.1) and reused when it is restarted, so that the servers and
// workers find it again.
//
// Fault injection: a kill schedule (ParseKillSchedule) names children to
// SIGKILL once the job reaches given clocks. The supervisor learns the
// job's clock by asking the coordinator for the cluster's status every
// 100 ms while a kill is pending, and prints each kill and restart on
// stdout:
//
//   kill-schedule: killed server 1 (pid 1234) at clock 52
//   kill-schedule: restarted server 1 (pid 1240)
//
// RunLocalCluster runs on the calling thread and blocks SIGINT, SIGTERM,
// SIGHUP and SIGCHLD in it, to take them synchronously; it is meant for a
// program's main thread and is not reentrant.
#ifndef DUCTILE_LAUNCH_LOCAL_LAUNCHER_H_
#define DUCTILE_LAUNCH_LOCAL_LAUNCHER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ductile/status.h"
#include "launch/launch_env.h"
#include "launch/schedules.h"

namespace ductile::launch {

struct LocalClusterOptions {
  std::string program;  // path of the ductile binary (children run it)
  int num_servers = 2;
  int num_workers = 2;
  // Extra flags for each role's command line ("--name=value"). Checkpoint
  // settings travel here: --checkpoint_every and --checkpoint_interval_s
  // for the coordinator, --keep_checkpoints for the servers. The launcher
  // adds --state_dir itself, and --server_id to each server.
  std::vector<std::string> coordinator_flags;
  std::vector<std::string> server_flags;
  std::vector<std::string> worker_flags;
  // The command each worker runs instead of `program worker` with
  // worker_flags ({} = that built-in worker), joiners and replacements
  // alike. It learns how to connect from its environment (WorkerEnvironment
  // in launch/launch_env.h): the launcher fills in the coordinator, keys,
  // member key, rank and worker count of `worker_connection`; its other
  // fields (timeout, I/O threads, ...) are taken as they are.
  std::vector<std::string> worker_command;
  WorkerConnection worker_connection;
  // Base directory of the cluster's durable state (see the top of this
  // file). "" = a directory inside the launcher's temporary run directory,
  // removed when the launch ends. A directory given here is kept, and a
  // coordinator started on a previous run's state resumes that run.
  std::string state_dir;
  // SIGKILLs to deliver as the job runs (ParseKillSchedule), in any order.
  std::vector<KillEvent> kill_schedule;
  // Resizes of the job as it runs (ParseResizeSchedule), in clock order.
  std::vector<ResizeEvent> resize_schedule;
  // Directory of the cluster's keys (ductile keygen), admin.key included:
  // every child gets --keys=DIR and the launcher acts as the admin. "" =
  // keys made for this launch in its temporary run directory (the line
  // "ductile local: coordinator at ADDR, ..., keys in DIR" names it, for
  // `ductile status --keys=DIR` from elsewhere while the job runs).
  std::string keys_dir;
  // No keys at all (plain mode): faster, for a host whose every user may
  // act as any member (anyone on it can reach the loopback ports).
  bool plain = false;
  // After the workers finish, how long the coordinator and servers get to
  // exit by themselves before they are killed.
  int shutdown_grace_ms = 10000;
  // The coordinator's --heartbeat_timeout_ms. A member it declared dead
  // whose process still runs kLostAfterTimeouts such timeouts later (a
  // stopped or hung process, a Slurm job step lost) is killed, and
  // handled as a crash (launch/lost_members.h).
  int64_t heartbeat_timeout_ms = 5000;
  // How servers and workers are started (the coordinator is always a child
  // of the launcher: it writes its address to a file the launcher reads).
  //  - kLocal: child processes.
  //  - kSlurm: each server and worker is a Slurm job of its own, started
  //    with `srun --ntasks=1 --job-name=ductile-<pid>-<role>-<id>` (srun
  //    stays the launcher's child and reports the task's end: a task
  //    killed by signal N as exit status 128 + N, which counts as that
  //    signal). A scheduled kill is `scancel --signal=KILL JOB.0`, so the
  //    task dies at once, without cleaning up, as a local kill -9. Jobs
  //    of an enclosing allocation are not used: srun runs with no SLURM_*
  //    variable but SLURM_CONF, so each member is queued as a job of its
  //    own, with none of the allocation's settings. The
  //    members listen on 127.0.0.1: all must run on this node (a
  //    single-node partition, or --srun_flags=--nodelist=HOST).
  enum class Provider { kLocal, kSlurm };
  Provider provider = Provider::kLocal;
  // kSlurm: srun's and scancel's directory ("" = from PATH) and extra srun
  // arguments (e.g. --partition=P).
  std::string slurm_bin_dir;
  std::vector<std::string> srun_flags;
};

// "local" or "slurm"; InvalidArgument for anything else.
Result<LocalClusterOptions::Provider> ParseProvider(const std::string& name);

// Crashes of one role (servers together, or the coordinator) the launcher
// recovers from before it gives up on the launch.
inline constexpr int kMaxRestartsPerRole = 20;

// Heartbeat timeouts a member may stay declared dead, its process still
// running, before it is killed as lost.
inline constexpr int kLostAfterTimeouts = 5;

// Runs the cluster to completion: OK when every worker that was not killed
// exited with status 0 and at least one did. Cancelled on SIGINT, SIGTERM
// or SIGHUP; Aborted naming the child when one fails.
Status RunLocalCluster(const LocalClusterOptions& options);

}  // namespace ductile::launch

#endif  // DUCTILE_LAUNCH_LOCAL_LAUNCHER_H_
