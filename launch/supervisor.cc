#include "launch/supervisor.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <thread>
#include <utility>

#include "launch/child_process.h"
#include "launch/trim.h"

namespace ductile::launch {
namespace {

using SteadyClock = std::chrono::steady_clock;
using Role = KillEvent::Role;

// fork + exec of `args` with the given signals unblocked. The child dies
// with the supervisor (PDEATHSIG), even if the supervisor is killed -9.
// It leads a process group of its own, so that what it starts (a worker
// command's DataLoader workers, a shell's pipeline) is stopped with it
// (KillGroup). `stderr_fd` (>= 0) becomes the child's stderr.
pid_t Spawn(const std::vector<std::string>& args,
            const std::vector<std::string>& env, const sigset_t& blocked,
            bool own_slurm_job, int stderr_fd) {
  const ExecImage image = MakeExecImage(args, own_slurm_job, env);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) {
    // Also here, so that the group exists before the parent signals it
    // (whichever of the two runs first; the second may fail harmlessly).
    if (pid > 0) setpgid(pid, pid);
    return pid;  // parent, or -1
  }
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // Outside the terminal's foreground group, reading it would stop the
  // child (SIGTTIN) and hang the job: no child reads the terminal.
  if (const int null = open("/dev/null", O_RDONLY); null >= 0) {
    dup2(null, STDIN_FILENO);
  }
  if (getppid() != parent) _exit(127);  // the parent died already
  if (stderr_fd >= 0) dup2(stderr_fd, STDERR_FILENO);
  sigprocmask(SIG_UNBLOCK, &blocked, nullptr);
  ExecOrDie(image);
}

// Sends `signal` to child `pid`'s process group: whatever it started that
// is still in the group, and the child itself, alone if it moved to
// another group. Once each: a second SIGINT would interrupt a Python
// command's handler of the first.
int KillGroup(pid_t pid, int signal) {
  if (kill(-pid, signal) == 0 && getpgid(pid) == pid) return 0;
  return kill(pid, signal);
}

// How long a failed child's stderr may take to end (its last words
// still in the pipe) before its tail is reported as it is.
constexpr int kStderrTailWaitMs = 1000;

// `text`'s lines, each indented under the line that introduces them.
std::string Indented(const std::string& text) {
  std::string out;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    out += "\n  | " + text.substr(begin, end - begin);
    begin = end + 1;
  }
  return out;
}

// The signal a child died of, 0 if it exited. srun reports a task killed
// by signal N as exit status 128 + N.
int DeathSignal(int status, bool via_srun) {
  if (WIFSIGNALED(status)) return WTERMSIG(status);
  if (via_srun && WIFEXITED(status) && WEXITSTATUS(status) > 128 &&
      WEXITSTATUS(status) < 128 + 32) {
    return WEXITSTATUS(status) - 128;
  }
  return 0;
}

std::string Describe(int status, bool via_srun = false) {
  if (const int sig = DeathSignal(status, via_srun); via_srun && sig > 0) {
    return std::string("signal ") + strsignal(sig) + " (srun's exit status " +
           std::to_string(WEXITSTATUS(status)) + ")";
  }
  if (WIFEXITED(status))
    return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return std::string("signal ") + strsignal(WTERMSIG(status));
  }
  return "status " + std::to_string(status);
}

// Signals that ask a process to stop, as opposed to crashing it: a child
// ended by one was stopped on purpose (a Ctrl-C the launcher passed on, or
// someone signalling it), so restarting it would fight whoever sent it.
bool IsStopRequest(int signal) {
  return signal == SIGINT || signal == SIGTERM || signal == SIGHUP;
}

// "server 1 (pid 1234)", "worker 0 (Slurm job ductile-9-worker-0, srun
// pid 1235)".
std::string ProcessName(const Child& c, pid_t pid) {
  return c.name +
         (c.slurm_job.empty() ? " (pid "
                              : " (Slurm job " + c.slurm_job + ", srun pid ") +
         std::to_string(pid) + ")";
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kCoordinator:
      return "coordinator";
    case Role::kServer:
      return "server";
    case Role::kWorker:
      return "worker";
  }
  return "?";
}

}  // namespace

// Prints a line of the kill schedule's log on stdout, where tests and
// users read the job's own output.
void KillLog(const std::string& line) {
  std::printf("kill-schedule: %s\n", line.c_str());
  std::fflush(stdout);
}

// Waits for a signal among `set` for up to `ms`; returns it, or 0.
int WaitSignal(const sigset_t& set, int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  const int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

Status Supervisor::Start(Role role, int id, std::vector<std::string> args,
                         std::vector<std::string> env, bool keep_stderr_tail) {
  Child c;
  c.role = role;
  c.id = id;
  c.name = KillTargetName({role, id, 0});
  if (slurm_ && role != Role::kCoordinator) {
    c.slurm_job = "ductile-" + std::to_string(getpid()) + "-" + RoleName(role) +
                  "-" + std::to_string(id);
    std::vector<std::string> srun = {
        SlurmTool("srun"), "--ntasks=1", "--nodes=1",
        "--input=none",    "--quiet",    "--job-name=" + c.slurm_job};
    srun.insert(srun.end(), srun_flags_.begin(), srun_flags_.end());
    srun.push_back("--");
    args.insert(args.begin(), srun.begin(), srun.end());
  }
  c.args = std::move(args);
  c.env = std::move(env);
  c.keeps_stderr_tail = keep_stderr_tail;
  c.pid = SpawnChild(c);
  if (c.pid < 0)
    return UnavailableError("cannot start " + c.name + ": fork failed");
  by_pid_[c.pid] = children_.size();
  children_.push_back(std::move(c));
  return Status::Ok();
}

void Supervisor::SetCoordinatorAddress(const std::string& address) {
  for (Child& c : children_) {
    if (c.role != Role::kCoordinator) continue;
    for (std::string& a : c.args) {
      if (a.rfind("--listen=", 0) == 0) a = "--listen=" + address;
    }
  }
}

Status Supervisor::Reap() {
  while (true) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return Status::Ok();
    auto it = by_pid_.find(pid);
    if (it == by_pid_.end()) continue;
    const size_t index = it->second;
    Child& c = children_[index];
    by_pid_.erase(it);
    c.pid = -1;
    // What it started and left behind goes with it (its group outlives
    // it while any member lives).
    kill(-pid, SIGKILL);
    const bool scheduled = std::exchange(c.scheduled_kill, false);
    const bool lost = std::exchange(c.lost, false);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      if (c.role == Role::kWorker) c.finished = true;
      continue;
    }
    if (stopping_) {
      // Recorded only: a worker that did not finish is out.
      if (c.role == Role::kWorker) {
        c.dropped = true;
        if (!killing_ && !lost) {
          std::fprintf(stderr,
                       "ductile local: %s ended with %s after the job\n",
                       ProcessName(c, pid).c_str(),
                       Describe(status, !c.slurm_job.empty()).c_str());
        }
      }
      continue;
    }
    const bool via_srun = !c.slurm_job.empty();
    const std::string what = ProcessName(c, pid);
    const int signal = DeathSignal(status, via_srun);
    if (!lost && (signal == 0 || (IsStopRequest(signal) && !scheduled))) {
      std::string message = what + " failed with " + Describe(status, via_srun);
      if (c.stderr_tail) {
        const std::string tail = c.stderr_tail->Tail(kStderrTailWaitMs);
        if (!tail.empty())
          message += "\n  its stderr ended with:" + Indented(tail);
      }
      return AbortedError(message);
    }
    if (on_crash_ && c.role != Role::kCoordinator) {
      on_crash_(c.role, c.id, pid, via_srun);
    }
    if (c.role == Role::kWorker) {
      c.dropped = true;
      if (!scheduled && !lost) {
        std::fprintf(stderr,
                     "ductile local: %s died of %s (not scheduled); the "
                     "other workers go on without it\n",
                     what.c_str(), Describe(status, via_srun).c_str());
      }
      continue;
    }
    if (lost) {
      std::fprintf(stderr, "ductile local: restarting %s\n", c.name.c_str());
    } else if (!scheduled) {
      std::fprintf(stderr,
                   "ductile local: %s died of %s (not scheduled); "
                   "restarting it\n",
                   what.c_str(), Describe(status, via_srun).c_str());
    }
    DUCTILE_RETURN_IF_ERROR(Restart(index, scheduled));
  }
}

bool Supervisor::Kill(const KillEvent& event, int64_t clock) {
  const std::string target = KillTargetName(event);
  for (Child& c : children_) {
    if (c.role != event.role || c.id != event.id) continue;
    if (c.scheduled_kill) return false;  // not reaped and restarted yet
    if (c.pid > 0 && !c.slurm_job.empty()) {
      // The task itself, wherever Slurm runs it; srun then reports its
      // death. Not found yet (still queued): tried again at the next
      // poll.
      if (SteadyClock::now() < c.next_slurm_kill) return false;
      if (!KillSlurmTask(c.slurm_job)) {
        c.next_slurm_kill = SteadyClock::now() + std::chrono::seconds(1);
        return false;
      }
      c.scheduled_kill = true;
      KillLog("killed " + target + " (Slurm job " + c.slurm_job +
              ") at clock " + std::to_string(clock));
      return true;
    }
    if (c.pid > 0 && KillGroup(c.pid, SIGKILL) == 0) {
      c.scheduled_kill = true;
      KillLog("killed " + target + " (pid " + std::to_string(c.pid) +
              ") at clock " + std::to_string(clock));
      return true;
    }
  }
  KillLog(target + " is not running at clock " + std::to_string(clock) +
          "; nothing to kill");
  return true;
}

bool Supervisor::KillLost(Role role, int id, int64_t dead_for_ms) {
  for (Child& c : children_) {
    if (c.role != role || c.id != id || c.pid <= 0) continue;
    const bool via_srun = !c.slurm_job.empty();
    const std::string what = ProcessName(c, c.pid);
    std::fprintf(
        stderr,
        "ductile local: %s was declared dead by the coordinator "
        "%.1f s ago and its process still runs (stopped, hung%s); "
        "killing it%s\n",
        what.c_str(), static_cast<double>(dead_for_ms) / 1000.0,
        via_srun ? ", or its Slurm job step lost" : "",
        c.role == Role::kWorker ? "; the other workers go on without it" : "");
    if (KillGroup(c.pid, SIGKILL) != 0) return false;
    c.lost = true;
    // Whatever of the task Slurm can still reach, and the job's entry
    // (a restart runs a job of the same name).
    if (via_srun) CancelSlurmJob(c.slurm_job);
    return true;
  }
  return false;
}

SteadyClock::time_point Supervisor::StartedAt(Role role, int id) const {
  for (const Child& c : children_) {
    if (c.role == role && c.id == id && c.pid > 0) return c.started;
  }
  return {};
}

pid_t Supervisor::Pid(Role role, int id) const {
  for (const Child& c : children_) {
    if (c.role == role && c.id == id) return c.pid;
  }
  return -1;
}

bool Supervisor::WorkersDone() const {
  for (const Child& c : children_) {
    if (c.role == Role::kWorker && !c.finished && !c.dropped) return false;
  }
  return true;
}

std::vector<int> Supervisor::Active(Role role) const {
  std::vector<int> ids;
  for (const Child& c : children_) {
    if (c.role == role && !c.finished && !c.dropped && !c.drained) {
      ids.push_back(c.id);
    }
  }
  std::sort(ids.rbegin(), ids.rend());
  return ids;
}

int Supervisor::NextId(Role role) const {
  int n = 0;
  for (const Child& c : children_) n += c.role == role ? 1 : 0;
  return n;
}

void Supervisor::MarkDrained(Role role, int id, bool drained) {
  for (Child& c : children_) {
    if (c.role == role && c.id == id) c.drained = drained;
  }
}

bool Supervisor::Gone(Role role, int id) const {
  for (const Child& c : children_) {
    if (c.role == role && c.id == id) return c.finished || c.dropped;
  }
  return true;
}

int Supervisor::WorkersFinished() const {
  int n = 0;
  for (const Child& c : children_) n += c.finished ? 1 : 0;
  return n;
}

int Supervisor::WorkersDropped() const {
  int n = 0;
  for (const Child& c : children_) n += c.dropped ? 1 : 0;
  return n;
}

void Supervisor::KillAll(int grace_ms, int signal) {
  stopping_ = true;
  killing_ = true;
  for (const auto& [pid, index] : by_pid_) {
    KillGroup(pid, grace_ms > 0 ? signal : SIGKILL);
  }
  const auto deadline =
      SteadyClock::now() + std::chrono::milliseconds(grace_ms);
  while (!AllDone() && SteadyClock::now() < deadline) {
    Reap().IgnoreError();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (const auto& [pid, index] : by_pid_) {
    KillGroup(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    children_[index].pid = -1;
    // Slurm ended the job of a killed srun within seconds where this
    // was tried, but that is its choice (InactiveLimit): cancel it.
    if (!children_[index].slurm_job.empty()) {
      CancelSlurmJob(children_[index].slurm_job);
    }
  }
  by_pid_.clear();
}

std::string Supervisor::SlurmTool(const char* name) const {
  return slurm_bin_dir_.empty() ? name : slurm_bin_dir_ + "/" + name;
}

bool Supervisor::KillSlurmTask(const std::string& job) {
  std::string ids;
  if (RunToEnd({SlurmTool("squeue"), "--noheader", "--states=RUNNING",
                "--name=" + job, "--format=%i"},
               blocked_, &ids, kToolTimeoutMs) != 0) {
    return false;
  }
  const std::string id(Trim(ids.substr(0, ids.find('\n'))));
  if (id.empty()) return false;
  std::string ignored;
  return RunToEnd({SlurmTool("scancel"), "--signal=KILL", id + ".0"}, blocked_,
                  &ignored, kToolTimeoutMs) == 0;
}

void Supervisor::CancelSlurmJob(const std::string& job) {
  std::string ignored;
  RunToEnd({SlurmTool("scancel"), "--name=" + job}, blocked_, &ignored,
           kToolTimeoutMs);
}

pid_t Supervisor::SpawnChild(Child& c) {
  int stderr_fd = -1;
  if (c.keeps_stderr_tail) {
    Result<std::unique_ptr<StderrTail>> tail = StderrTail::Open();
    if (!tail.ok()) return -1;
    c.stderr_tail = std::move(*tail);
    stderr_fd = c.stderr_tail->write_fd();
  }
  c.started = SteadyClock::now();
  const pid_t pid =
      Spawn(c.args, c.env, blocked_, !c.slurm_job.empty(), stderr_fd);
  if (c.stderr_tail) c.stderr_tail->CloseWriteEnd();
  return pid;
}

Status Supervisor::Restart(size_t index, bool scheduled) {
  Child& c = children_[index];
  int& restarts = restarts_[static_cast<int>(c.role)];
  if (restarts >= kMaxRestartsPerRole) {
    return AbortedError(c.name + " died, and " + RoleName(c.role) +
                        "s were restarted " + std::to_string(restarts) +
                        " times already; giving up");
  }
  ++restarts;
  c.pid = SpawnChild(c);
  if (c.pid < 0) {
    return UnavailableError("cannot restart " + c.name + ": fork failed");
  }
  by_pid_[c.pid] = index;
  const std::string line =
      "restarted " + c.name + " (pid " + std::to_string(c.pid) + ")";
  if (scheduled) {
    KillLog(line);
  } else {
    std::fprintf(stderr, "ductile local: %s\n", line.c_str());
  }
  return Status::Ok();
}

}  // namespace ductile::launch
