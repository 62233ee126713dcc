// The supervisor of `ductile local`: owns a launch's child processes
// (the coordinator, servers and workers, as processes or through srun as
// Slurm jobs), starts them, reaps them, restarts the crashed servers and
// coordinator, and delivers scheduled kills (launch/local_launcher.h says
// how failures are told apart). Each child leads a process group of its
// own, and its signals go to the group: a worker command's own children
// (DataLoader workers, a shell's pipeline) are killed with it, and what a
// child leaves running when it exits is killed as it is reaped.
//
// Thread safety: not thread-safe; used from the launching thread only,
// which blocks SIGCHLD and takes it synchronously (WaitSignal).
#ifndef DUCTILE_LAUNCH_SUPERVISOR_H_
#define DUCTILE_LAUNCH_SUPERVISOR_H_

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ductile/status.h"
#include "launch/local_launcher.h"
#include "launch/stderr_tail.h"

namespace ductile::launch {

// The supervisor's view of one role instance ("server 1"). A server or the
// coordinator keeps its Child across restarts; only the pid changes.
struct Child {
  KillEvent::Role role = KillEvent::Role::kWorker;
  int id = 0;
  std::string name;               // "coordinator", "server 0", "worker 1"
  std::vector<std::string> args;  // the command line, reused on restart
  std::vector<std::string> env;   // added to its environment ("NAME=VALUE")
  // Its stderr passes through a StderrTail (one per process started), so
  // that its failure is reported with what it wrote last.
  bool keeps_stderr_tail = false;
  std::shared_ptr<StderrTail> stderr_tail;
  // The Slurm job's name when it runs through srun (Provider::kSlurm), "".
  std::string slurm_job;
  // A scheduled kill of a Slurm task not running yet is tried again then.
  std::chrono::steady_clock::time_point next_slurm_kill{};
  pid_t pid = -1;  // the running process; -1 when none
  std::chrono::steady_clock::time_point started{};  // when it was started
  bool finished = false;        // a worker that exited with status 0
  bool dropped = false;         // a worker that was killed: not restarted
  bool scheduled_kill = false;  // the schedule killed the running process
  bool drained = false;         // resized away (drained; exits by itself)
  bool lost = false;  // killed as lost (launch/lost_members.h): a crash
};

// Owns the children. Used from the launching thread only.
class Supervisor {
 public:
  Supervisor(const sigset_t& blocked, const LocalClusterOptions& options)
      : blocked_(blocked),
        slurm_(options.provider == LocalClusterOptions::Provider::kSlurm),
        slurm_bin_dir_(options.slurm_bin_dir),
        srun_flags_(options.srun_flags) {}
  ~Supervisor() { KillAll(0); }

  // Starts `args` with `env` ("NAME=VALUE") added to the environment;
  // with `keep_stderr_tail`, its failure is reported with the end of its
  // stderr (which reaches the launcher's as ever).
  Status Start(KillEvent::Role role, int id, std::vector<std::string> args,
               std::vector<std::string> env = {},
               bool keep_stderr_tail = false);

  // The coordinator's restarts must listen where the first one does.
  void SetCoordinatorAddress(const std::string& address);

  // Reaps exited children and restarts crashed servers and coordinators.
  // Returns the first failure that ends the launch, if any.
  Status Reap();

  // SIGKILLs the target of `event`, if it is running. The reaping
  // (Reap) restarts it or drops it. False (the event stays due) while the
  // target was killed and has not been restarted yet.
  bool Kill(const KillEvent& event, int64_t clock);

  // SIGKILLs child `id` of `role`, which the coordinator declared dead
  // `dead_for_ms` ago while its process still runs (a stopped or hung
  // process, a lost Slurm job step; launch/lost_members.h), and cancels
  // its Slurm job. The reaping handles it as a crash. False if it does not
  // run.
  bool KillLost(KillEvent::Role role, int id, int64_t dead_for_ms);
  // The pid of the process running child `id` of `role` now (srun's where
  // it runs through srun); -1 when none runs.
  pid_t Pid(KillEvent::Role role, int id) const;
  // When that process was started (the epoch when none runs).
  std::chrono::steady_clock::time_point StartedAt(KillEvent::Role role,
                                                  int id) const;

  // Every worker has finished or was killed.
  bool WorkersDone() const;
  // Children of `role` still in the job (not finished, dropped or
  // drained), highest id first.
  std::vector<int> Active(KillEvent::Role role) const;
  // The id the next child of `role` gets.
  int NextId(KillEvent::Role role) const;
  // Sets whether child `id` of `role` is being drained (resized or
  // replaced away: it leaves by itself, and is no longer counted).
  void MarkDrained(KillEvent::Role role, int id, bool drained = true);
  // Whether child `id` of `role` is gone for good: finished, or killed and
  // not to be restarted (a worker), or never started.
  bool Gone(KillEvent::Role role, int id) const;
  int WorkersFinished() const;
  int WorkersDropped() const;
  bool AllDone() const { return by_pid_.empty(); }

  // Called (from Reap) for each server or worker that died of a signal,
  // before a server is restarted: its role, id, the pid that died and
  // whether that was srun's (the member ran as a Slurm job).
  using CrashHook = std::function<void(KillEvent::Role role, int id, pid_t pid,
                                       bool via_srun)>;
  void OnCrash(CrashHook hook) { on_crash_ = std::move(hook); }

  // From now on a child's death is only recorded: nothing is restarted and
  // nothing fails the launch (the job is over, or being stopped).
  void StopRestarting() { stopping_ = true; }

  // `signal` (SIGTERM, or the SIGINT or SIGHUP the launcher got) to every
  // live child's process group, then SIGKILL to what is left after
  // `grace_ms`; reaps them all. A group whose child exits within the
  // grace is killed then.
  void KillAll(int grace_ms, int signal = SIGTERM);

 private:
  std::string SlurmTool(const char* name) const;
  // SIGKILL to the task of Slurm job `job` (its step 0, which srun runs);
  // false if the job is not running yet.
  bool KillSlurmTask(const std::string& job);
  void CancelSlurmJob(const std::string& job);

  Status Restart(size_t index, bool scheduled);
  // Starts `c`'s process (and its StderrTail); -1 when that fails.
  pid_t SpawnChild(Child& c);

  sigset_t blocked_;
  const bool slurm_;
  const std::string slurm_bin_dir_;
  const std::vector<std::string> srun_flags_;
  std::vector<Child> children_;
  std::map<pid_t, size_t> by_pid_;  // running processes -> children_ index
  int restarts_[3] = {0, 0, 0};     // per KillEvent::Role
  bool stopping_ = false;
  bool killing_ = false;  // KillAll: children end as it asked
  CrashHook on_crash_;
};

// Prints a line of the kill schedule's log on stdout, where tests and
// users read the job's own output.
void KillLog(const std::string& line);

// Waits for a signal among `set` for up to `ms`; returns it, or 0.
int WaitSignal(const sigset_t& set, int ms);

}  // namespace ductile::launch

#endif  // DUCTILE_LAUNCH_SUPERVISOR_H_
