#include "launch/local_launcher.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <set>
#include <string_view>
#include <thread>
#include <utility>

#include "launch/child_process.h"
#include "ductile/admin.h"

namespace ductile::launch {
namespace {

using SteadyClock = std::chrono::steady_clock;
using Role = KillEvent::Role;

// How often the supervisor asks for the job's clock while a kill is
// pending, and how long one question may take: a dead coordinator (killed
// on schedule) must not hold up the reaping of children for long.
constexpr auto kClockPollInterval = std::chrono::milliseconds(100);
// How often the job's target size (`ductile resize`) is looked at.
constexpr auto kTargetPollInterval = std::chrono::milliseconds(500);
constexpr int64_t kClockQueryTimeoutMs = 500;

// Random kills without an explicit range start here: the cluster is
// registered and training by then.
constexpr int64_t kFirstRandomClock = 10;

std::string_view Trim(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  const size_t end = s.find_last_not_of(" \t");
  return s.substr(begin, end - begin + 1);
}

// A decimal number made of digits only (no sign, no spaces).
bool ParseCount(std::string_view text, int64_t* out) {
  if (text.empty() || text.find_first_not_of("0123456789") != text.npos) {
    return false;
  }
  const auto [end, ec] =
      std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

// Uniform in [lo, hi]. The modulo's bias is below (hi - lo) / 2^64, and
// unlike std::uniform_int_distribution it draws the same numbers with
// every standard library, so a seed names the same schedule everywhere.
int64_t Draw(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(rng() % span);
}

}  // namespace

Result<std::vector<ResizeEvent>> ParseResizeSchedule(const std::string& spec) {
  std::vector<ResizeEvent> events;
  std::string_view rest = spec;
  while (!Trim(rest).empty()) {
    const size_t comma = rest.find(',');
    const std::string item(Trim(rest.substr(0, comma)));
    rest = comma == std::string_view::npos ? std::string_view()
                                           : rest.substr(comma + 1);
    const auto bad = [&](const std::string& why) {
      return InvalidArgumentError("--resize_schedule: '" + item + "': " + why +
                                  " (e.g. workers=4@clock=300,servers=3@"
                                  "clock=600)");
    };
    const size_t eq = item.find('=');
    const size_t at = item.find("@clock=");
    if (eq == std::string::npos || at == std::string::npos || at < eq) {
      return bad("expected ROLE=COUNT@clock=N");
    }
    const std::string role = item.substr(0, eq);
    if (role != "workers" && role != "servers") {
      return bad("the role is workers or servers");
    }
    int64_t count = 0, clock = 0;
    if (!ParseCount(std::string_view(item).substr(eq + 1, at - eq - 1),
                    &count) ||
        count < 1 || count > 1024) {
      return bad("the count is a number from 1 to 1024");
    }
    if (!ParseCount(std::string_view(item).substr(at + 7), &clock) ||
        clock < 1) {
      return bad("the clock is a number >= 1");
    }
    events.push_back({role == "servers", static_cast<int>(count), clock});
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const ResizeEvent& a, const ResizeEvent& b) {
                     return a.clock < b.clock;
                   });
  return events;
}

std::string KillTargetName(const KillEvent& event) {
  switch (event.role) {
    case Role::kCoordinator:
      return "coordinator";
    case Role::kServer:
      return "server " + std::to_string(event.id);
    case Role::kWorker:
      return "worker " + std::to_string(event.id);
  }
  return "?";
}

Result<std::vector<KillEvent>> ParseKillSchedule(
    const std::string& spec, const KillScheduleContext& context) {
  if (context.num_servers < 1 || context.num_workers < 1) {
    return InvalidArgumentError(
        "--kill_schedule: the cluster needs a server and a worker");
  }
  std::vector<KillEvent> events;
  if (Trim(spec).empty()) return events;

  struct RandomKills {
    int64_t count = 0;
    int64_t first_clock = 0;
    int64_t last_clock = 0;
  };
  std::vector<RandomKills> random_kills;
  std::vector<bool> worker_killed(context.num_workers, false);
  int workers_killed = 0;

  std::string_view rest = spec;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string item(Trim(rest.substr(0, comma)));
    auto bad = [&item](const std::string& why) {
      return InvalidArgumentError("--kill_schedule: item '" + item +
                                  "': " + why);
    };
    if (item.empty()) {
      return InvalidArgumentError(
          "--kill_schedule: empty item (a stray comma?) in '" + spec + "'");
    }
    const size_t at = item.find('@');
    const std::string_view target = std::string_view(item).substr(0, at);
    const std::string_view when = at == std::string::npos
                                      ? std::string_view()
                                      : std::string_view(item).substr(at + 1);
    constexpr std::string_view kClockPrefix = "clock=";
    if (at != std::string::npos &&
        when.substr(0, kClockPrefix.size()) != kClockPrefix) {
      return bad("expected '@clock=' after the target");
    }
    const std::string_view clock_text = at == std::string::npos
                                            ? std::string_view()
                                            : when.substr(kClockPrefix.size());

    const size_t colon = target.find(':');
    const std::string_view role = target.substr(0, colon);
    const std::string_view id_text = colon == std::string_view::npos
                                         ? std::string_view()
                                         : target.substr(colon + 1);
    if (role == "random") {
      RandomKills r;
      if (!ParseCount(id_text, &r.count) || r.count < 1 || r.count > 1000) {
        return bad("expected random:K with K kills, 1 <= K <= 1000");
      }
      if (at == std::string::npos) {
        if (context.estimated_clocks <= 0) {
          return bad(
              "the job's length is not known; give the clocks: "
              "random:K@clock=A-B");
        }
        // The last fifth stays free of kills: the estimate is only one,
        // and kills drawn past the job's real end would all fire at once
        // at its final barrier.
        const int64_t last = context.estimated_clocks * 4 / 5;
        if (last < kFirstRandomClock) {
          return bad("the job is expected to last only " +
                     std::to_string(context.estimated_clocks) +
                     " clocks, too few for random kills from clock " +
                     std::to_string(kFirstRandomClock) +
                     "; give the clocks: random:K@clock=A-B");
        }
        r.first_clock = kFirstRandomClock;
        r.last_clock = last;
      } else {
        const size_t dash = clock_text.find('-');
        if (dash == std::string_view::npos ||
            !ParseCount(clock_text.substr(0, dash), &r.first_clock) ||
            !ParseCount(clock_text.substr(dash + 1), &r.last_clock) ||
            r.first_clock < 1 || r.first_clock > r.last_clock) {
          return bad("expected a clock range A-B with 1 <= A <= B");
        }
      }
      random_kills.push_back(r);
    } else {
      KillEvent event;
      if (role == "coordinator") {
        if (colon != std::string_view::npos) {
          return bad("the coordinator takes no id: coordinator@clock=N");
        }
        event.role = Role::kCoordinator;
      } else if (role == "server" || role == "worker") {
        event.role = role == "server" ? Role::kServer : Role::kWorker;
        const int count =
            role == "server" ? context.num_servers : context.num_workers;
        int64_t id = 0;
        if (colon == std::string_view::npos) {
          return bad("missing id: " + std::string(role) + ":ID@clock=N");
        }
        if (!ParseCount(id_text, &id)) {
          return bad("bad id '" + std::string(id_text) + "'");
        }
        if (id >= count) {
          return bad(std::string(role) + " " + std::to_string(id) +
                     " does not exist: there are " + std::to_string(count) +
                     " " + std::string(role) + "s (ids 0-" +
                     std::to_string(count - 1) + ")");
        }
        event.id = static_cast<int>(id);
      } else {
        return bad("unknown role '" + std::string(role) +
                   "' (server:ID, worker:ID, coordinator or random:K)");
      }
      if (at == std::string::npos) return bad("missing '@clock=N'");
      if (!ParseCount(clock_text, &event.clock) || event.clock < 1) {
        return bad("expected a clock N >= 1 after '@clock='");
      }
      if (event.role == Role::kWorker) {
        if (worker_killed[event.id]) {
          return bad("worker " + std::to_string(event.id) +
                     " is already killed earlier in the schedule (killed "
                     "workers are not restarted)");
        }
        worker_killed[event.id] = true;
        ++workers_killed;
      }
      events.push_back(event);
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  if (workers_killed == context.num_workers) {
    return InvalidArgumentError(
        "--kill_schedule kills every worker; at least one must be left to "
        "finish the job");
  }

  // Random kills: first every clock, then the targets in clock order, so
  // that "2 workers remain" is judged against the kills before each one.
  std::mt19937_64 rng(context.seed);
  std::vector<int64_t> random_clocks;
  for (const RandomKills& r : random_kills) {
    for (int64_t k = 0; k < r.count; ++k) {
      random_clocks.push_back(Draw(rng, r.first_clock, r.last_clock));
    }
  }
  std::sort(random_clocks.begin(), random_clocks.end());
  for (int64_t clock : random_clocks) {
    std::vector<KillEvent> candidates;
    for (int i = 0; i < context.num_servers; ++i) {
      candidates.push_back({Role::kServer, i, clock});
    }
    candidates.push_back({Role::kCoordinator, 0, clock});
    if (context.num_workers - workers_killed - 1 >= 2) {
      for (int i = 0; i < context.num_workers; ++i) {
        if (!worker_killed[i]) candidates.push_back({Role::kWorker, i, clock});
      }
    }
    const KillEvent chosen = candidates[static_cast<size_t>(
        Draw(rng, 0, static_cast<int64_t>(candidates.size()) - 1))];
    if (chosen.role == Role::kWorker) {
      worker_killed[chosen.id] = true;
      ++workers_killed;
    }
    events.push_back(chosen);
  }
  std::stable_sort(
      events.begin(), events.end(),
      [](const KillEvent& a, const KillEvent& b) { return a.clock < b.clock; });
  return events;
}

namespace {

// fork + exec of `args` with the given signals unblocked. The child dies
// with the supervisor (PDEATHSIG), even if the supervisor is killed -9.
pid_t Spawn(const std::vector<std::string>& args, const sigset_t& blocked,
            bool own_slurm_job = false) {
  const ExecImage image = MakeExecImage(args, own_slurm_job);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;  // parent, or -1
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the parent died already
  sigprocmask(SIG_UNBLOCK, &blocked, nullptr);
  ExecOrDie(image);
}

// How long a Slurm command (squeue, scancel) may take before it is killed:
// a slurmctld that does not answer must not stop the supervision.
constexpr int kToolTimeoutMs = 10000;

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
// ended by one was stopped on purpose (often a Ctrl-C reaching the whole
// process group), so restarting it would fight whoever sent it.
bool IsStopRequest(int signal) {
  return signal == SIGINT || signal == SIGTERM || signal == SIGHUP;
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

// Prints a line of the kill schedule's log on stdout, where tests and
// users read the job's own output.
void KillLog(const std::string& line) {
  std::printf("kill-schedule: %s\n", line.c_str());
  std::fflush(stdout);
}

// The supervisor's view of one role instance ("server 1"). A server or the
// coordinator keeps its Child across restarts; only the pid changes.
struct Child {
  Role role = Role::kWorker;
  int id = 0;
  std::string name;               // "coordinator", "server 0", "worker 1"
  std::vector<std::string> args;  // the command line, reused on restart
  // The Slurm job's name when it runs through srun (Provider::kSlurm), "".
  std::string slurm_job;
  // A scheduled kill of a Slurm task not running yet is tried again then.
  SteadyClock::time_point next_slurm_kill{};
  pid_t pid = -1;               // the running process; -1 when none
  bool finished = false;        // a worker that exited with status 0
  bool dropped = false;         // a worker that was killed: not restarted
  bool scheduled_kill = false;  // the schedule killed the running process
  bool drained = false;         // resized away (drained; exits by itself)
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

  Status Start(Role role, int id, std::vector<std::string> args) {
    Child c;
    c.role = role;
    c.id = id;
    c.name = KillTargetName({role, id, 0});
    if (slurm_ && role != Role::kCoordinator) {
      c.slurm_job = "ductile-" + std::to_string(getpid()) + "-" +
                    RoleName(role) + "-" + std::to_string(id);
      std::vector<std::string> srun = {
          SlurmTool("srun"), "--ntasks=1", "--nodes=1",
          "--input=none",    "--quiet",    "--job-name=" + c.slurm_job};
      srun.insert(srun.end(), srun_flags_.begin(), srun_flags_.end());
      srun.push_back("--");
      args.insert(args.begin(), srun.begin(), srun.end());
    }
    c.args = std::move(args);
    c.pid = Spawn(c.args, blocked_, !c.slurm_job.empty());
    if (c.pid < 0)
      return UnavailableError("cannot start " + c.name + ": fork failed");
    by_pid_[c.pid] = children_.size();
    children_.push_back(std::move(c));
    return Status::Ok();
  }

  // The coordinator's restarts must listen where the first one does.
  void SetCoordinatorAddress(const std::string& address) {
    for (Child& c : children_) {
      if (c.role != Role::kCoordinator) continue;
      for (std::string& a : c.args) {
        if (a.rfind("--listen=", 0) == 0) a = "--listen=" + address;
      }
    }
  }

  // Reaps exited children and restarts crashed servers and coordinators.
  // Returns the first failure that ends the launch, if any.
  Status Reap() {
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
      const bool scheduled = std::exchange(c.scheduled_kill, false);
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        if (c.role == Role::kWorker) c.finished = true;
        continue;
      }
      if (stopping_) continue;
      const bool via_srun = !c.slurm_job.empty();
      const std::string what =
          c.name +
          (via_srun ? " (Slurm job " + c.slurm_job + ", srun pid " : " (pid ") +
          std::to_string(pid) + ")";
      const int signal = DeathSignal(status, via_srun);
      if (signal == 0 || (IsStopRequest(signal) && !scheduled)) {
        return AbortedError(what + " failed with " +
                            Describe(status, via_srun));
      }
      if (c.role == Role::kWorker) {
        c.dropped = true;
        if (!scheduled) {
          std::fprintf(stderr,
                       "ductile local: %s died of %s (not scheduled); the "
                       "other workers go on without it\n",
                       what.c_str(), Describe(status, via_srun).c_str());
        }
        continue;
      }
      if (!scheduled) {
        std::fprintf(stderr,
                     "ductile local: %s died of %s (not scheduled); "
                     "restarting it\n",
                     what.c_str(), Describe(status, via_srun).c_str());
      }
      DUCTILE_RETURN_IF_ERROR(Restart(index, scheduled));
    }
  }

  // SIGKILLs the target of `event`, if it is running. The reaping
  // (Reap) restarts it or drops it. False (the event stays due) while the
  // target was killed and has not been restarted yet.
  bool Kill(const KillEvent& event, int64_t clock) {
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
      if (c.pid > 0 && kill(c.pid, SIGKILL) == 0) {
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

  // Every worker has finished or was killed.
  bool WorkersDone() const {
    for (const Child& c : children_) {
      if (c.role == Role::kWorker && !c.finished && !c.dropped) return false;
    }
    return true;
  }
  // Children of `role` still in the job (not finished, dropped or
  // drained), highest id first.
  std::vector<int> Active(Role role) const {
    std::vector<int> ids;
    for (const Child& c : children_) {
      if (c.role == role && !c.finished && !c.dropped && !c.drained) {
        ids.push_back(c.id);
      }
    }
    std::sort(ids.rbegin(), ids.rend());
    return ids;
  }
  // The id the next child of `role` gets.
  int NextId(Role role) const {
    int n = 0;
    for (const Child& c : children_) n += c.role == role ? 1 : 0;
    return n;
  }
  void MarkDrained(Role role, int id) {
    for (Child& c : children_) {
      if (c.role == role && c.id == id) c.drained = true;
    }
  }
  int WorkersFinished() const {
    int n = 0;
    for (const Child& c : children_) n += c.finished ? 1 : 0;
    return n;
  }
  int WorkersDropped() const {
    int n = 0;
    for (const Child& c : children_) n += c.dropped ? 1 : 0;
    return n;
  }
  bool AllDone() const { return by_pid_.empty(); }

  // From now on a child's death is only recorded: nothing is restarted and
  // nothing fails the launch (the job is over, or being stopped).
  void StopRestarting() { stopping_ = true; }

  // SIGTERM to every live child, then SIGKILL to what is left after
  // `grace_ms`; reaps them all.
  void KillAll(int grace_ms) {
    stopping_ = true;
    for (const auto& [pid, index] : by_pid_) {
      kill(pid, grace_ms > 0 ? SIGTERM : SIGKILL);
    }
    const auto deadline =
        SteadyClock::now() + std::chrono::milliseconds(grace_ms);
    while (!AllDone() && SteadyClock::now() < deadline) {
      Reap().IgnoreError();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (const auto& [pid, index] : by_pid_) {
      kill(pid, SIGKILL);
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

 private:
  std::string SlurmTool(const char* name) const {
    return slurm_bin_dir_.empty() ? name : slurm_bin_dir_ + "/" + name;
  }
  // SIGKILL to the task of Slurm job `job` (its step 0, which srun runs);
  // false if the job is not running yet.
  bool KillSlurmTask(const std::string& job) {
    std::string ids;
    if (RunToEnd({SlurmTool("squeue"), "--noheader", "--states=RUNNING",
                  "--name=" + job, "--format=%i"},
                 blocked_, &ids, kToolTimeoutMs) != 0) {
      return false;
    }
    const std::string id(Trim(ids.substr(0, ids.find('\n'))));
    if (id.empty()) return false;
    std::string ignored;
    return RunToEnd({SlurmTool("scancel"), "--signal=KILL", id + ".0"},
                    blocked_, &ignored, kToolTimeoutMs) == 0;
  }
  void CancelSlurmJob(const std::string& job) {
    std::string ignored;
    RunToEnd({SlurmTool("scancel"), "--name=" + job}, blocked_, &ignored,
             kToolTimeoutMs);
  }

  Status Restart(size_t index, bool scheduled) {
    Child& c = children_[index];
    int& restarts = restarts_[static_cast<int>(c.role)];
    if (restarts >= kMaxRestartsPerRole) {
      return AbortedError(c.name + " died, and " + RoleName(c.role) +
                          "s were restarted " + std::to_string(restarts) +
                          " times already; giving up");
    }
    ++restarts;
    c.pid = Spawn(c.args, blocked_, !c.slurm_job.empty());
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

  sigset_t blocked_;
  const bool slurm_;
  const std::string slurm_bin_dir_;
  const std::vector<std::string> srun_flags_;
  std::vector<Child> children_;
  std::map<pid_t, size_t> by_pid_;  // running processes -> children_ index
  int restarts_[3] = {0, 0, 0};     // per Role
  bool stopping_ = false;
};

// Waits for a signal among `set` for up to `ms`; returns it, or 0.
int WaitSignal(const sigset_t& set, int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  const int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

// The job's clock as the coordinator last heard it: the furthest any
// worker or any server's clock has got.
// What the launcher watches: the job's clock (the furthest any member has
// reached) and the target size `ductile resize` set (0: none).
struct JobView {
  int64_t clock = 0;
  int32_t target_workers = 0;
  int32_t target_servers = 0;
  // Workers a policy asked to replace, and the workers active now.
  std::vector<int32_t> replace_workers;
  std::set<int32_t> active_workers;
};

Result<JobView> WatchJob(const std::string& coordinator,
                         const Security& security) {
  Result<ClusterStatus> status =
      QueryClusterStatus(coordinator, kClockQueryTimeoutMs, security);
  DUCTILE_RETURN_IF_ERROR(status.status());
  JobView view;
  for (const MemberStatus& m : status->members) {
    view.clock = std::max(view.clock,
                          m.role == "server" ? m.counters.min_clock : m.clock);
  }
  view.target_workers = status->target_workers;
  view.target_servers = status->target_servers;
  view.replace_workers = status->replace_workers;
  for (const MemberStatus& m : status->members) {
    if (m.role == "worker" && m.state == "active") {
      view.active_workers.insert(m.id);
    }
  }
  return view;
}

}  // namespace

Result<LocalClusterOptions::Provider> ParseProvider(const std::string& name) {
  if (name == "local") return LocalClusterOptions::Provider::kLocal;
  if (name == "slurm") return LocalClusterOptions::Provider::kSlurm;
  return InvalidArgumentError("--provider: '" + name +
                              "' is not one of local, slurm");
}

Status RunLocalCluster(const LocalClusterOptions& options) {
  if (options.num_servers < 1)
    return InvalidArgumentError("--servers must be >= 1");
  if (options.num_workers < 1)
    return InvalidArgumentError("--workers must be >= 1");
  std::vector<KillEvent> schedule = options.kill_schedule;
  for (const KillEvent& e : schedule) {
    const int count = e.role == Role::kServer   ? options.num_servers
                      : e.role == Role::kWorker ? options.num_workers
                                                : 1;
    if (e.id < 0 || e.id >= count || e.clock < 1) {
      return InvalidArgumentError("kill schedule: no " + KillTargetName(e) +
                                  " to kill at clock " +
                                  std::to_string(e.clock));
    }
  }
  std::stable_sort(
      schedule.begin(), schedule.end(),
      [](const KillEvent& a, const KillEvent& b) { return a.clock < b.clock; });
  // Signals are taken synchronously (sigtimedwait) by this thread.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, nullptr);

  if (options.provider == LocalClusterOptions::Provider::kSlurm) {
    const std::string srun = options.slurm_bin_dir.empty()
                                 ? "srun"
                                 : options.slurm_bin_dir + "/srun";
    std::string version;
    if (RunToEnd({srun, "--version"}, set, &version, kToolTimeoutMs) != 0) {
      return FailedPreconditionError(
          "--provider=slurm: cannot run '" + srun +
          " --version' (is Slurm installed, and srun on PATH?)");
    }
  }
  char dir_template[] = "/tmp/ductile-local-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    return UnavailableError("cannot create a temporary directory in /tmp");
  }
  const std::string run_dir = dir_template;
  const std::string address_file = run_dir + "/coordinator.address";
  // Declared before the supervisor, so that every child is dead before
  // the directory holding their state goes.
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } cleanup{run_dir};

  std::error_code ec;
  const std::filesystem::path state_dir = std::filesystem::absolute(
      options.state_dir.empty() ? run_dir + "/state" : options.state_dir, ec);
  if (!ec) std::filesystem::create_directories(state_dir, ec);
  if (ec) {
    return UnavailableError("cannot create the state directory " +
                            state_dir.string() + ": " + ec.message());
  }

  // The cluster's keys: the given ones, or ones made for this launch only
  // (gone with the run directory). The launcher itself acts as the admin.
  if (options.plain && !options.keys_dir.empty()) {
    return InvalidArgumentError("plain mode with keys");
  }
  const std::string keys_dir = options.plain              ? ""
                               : options.keys_dir.empty() ? run_dir + "/keys"
                                                          : options.keys_dir;
  if (!options.plain && options.keys_dir.empty()) {
    DUCTILE_RETURN_IF_ERROR(GenerateClusterKeys(keys_dir));
  }
  Security security;
  if (!options.plain) {
    DUCTILE_ASSIGN_OR_RETURN(security,
                             LoadClusterKeys(keys_dir, /*as_admin=*/true));
  }
  // Every child gets it ("--keys=" alone: plain mode).
  const std::string keys_flag = "--keys=" + keys_dir;
  // With keys, each server and worker also gets a member key of its own
  // (members/server-N.key, worker-N.key: made at its first start unless it
  // is there, and kept across its restarts), bound to that member: no
  // member can then register as, or act for, another.
  const bool own_keys = !options.plain;
  // The cluster's shared key then admits nobody.
  const auto member_key_flag =
      [&](const std::string& name) -> Result<std::vector<std::string>> {
    if (!own_keys) return std::vector<std::string>();
    Status made = GenerateMemberKey(keys_dir, name);
    if (!made.ok() && made.code() != StatusCode::kAlreadyExists) return made;
    return std::vector<std::string>{
        "--member_key=" + keys_dir + "/members/" + name + ".key",
        "--require_member_keys"};
  };

  Supervisor supervisor(set, options);
  // Port 0 picks a free port; once the coordinator reports it, restarts
  // listen on that same address (SetCoordinatorAddress).
  std::vector<std::string> args = {
      options.program,
      "coordinator",
      "--listen=tcp://127.0.0.1:0",
      "--servers=" + std::to_string(options.num_servers),
      "--workers=" + std::to_string(options.num_workers),
      "--address_file=" + address_file,
      "--state_dir=" + (state_dir / "coordinator").string(),
      keys_flag};
  if (own_keys) args.push_back("--require_member_keys");
  args.insert(args.end(), options.coordinator_flags.begin(),
              options.coordinator_flags.end());
  DUCTILE_RETURN_IF_ERROR(supervisor.Start(Role::kCoordinator, 0, args));

  // The coordinator writes its address once it listens.
  std::string address;
  const auto deadline = SteadyClock::now() + std::chrono::seconds(30);
  while (address.empty()) {
    std::ifstream in(address_file);
    std::getline(in, address);
    if (!address.empty()) break;
    Status s = supervisor.Reap();
    if (!s.ok()) return s;
    if (SteadyClock::now() > deadline) {
      return DeadlineExceededError("coordinator did not start within 30 s");
    }
    const int sig = WaitSignal(set, 20);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      return CancelledError("interrupted");
    }
  }
  supervisor.SetCoordinatorAddress(address);
  std::fprintf(stderr,
               "ductile local: coordinator at %s, %d server(s), %d "
               "worker(s), state in %s, %s%s\n",
               address.c_str(), options.num_servers, options.num_workers,
               state_dir.c_str(),
               options.plain ? "plain mode (no keys)" : "keys in ",
               keys_dir.c_str());

  const auto start_server = [&](int id) -> Status {
    DUCTILE_ASSIGN_OR_RETURN(std::vector<std::string> member_key,
                             member_key_flag("server-" + std::to_string(id)));
    std::vector<std::string> a = {options.program, "server",
                                  "--coordinator=" + address,
                                  "--server_id=" + std::to_string(id),
                                  "--state_dir=" + state_dir.string(),
                                  // The job's own directory, gone with it.
                                  "--ipc_dir=" + run_dir, keys_flag};
    a.insert(a.end(), member_key.begin(), member_key.end());
    a.insert(a.end(), options.server_flags.begin(), options.server_flags.end());
    return supervisor.Start(Role::kServer, id, std::move(a));
  };
  const auto start_worker = [&](int id) -> Status {
    DUCTILE_ASSIGN_OR_RETURN(std::vector<std::string> member_key,
                             member_key_flag("worker-" + std::to_string(id)));
    std::vector<std::string> a = {
        options.program, "worker", "--coordinator=" + address,
        "--worker_id=" + std::to_string(id), keys_flag};
    a.insert(a.end(), member_key.begin(), member_key.end());
    a.insert(a.end(), options.worker_flags.begin(), options.worker_flags.end());
    return supervisor.Start(Role::kWorker, id, std::move(a));
  };
  for (int i = 0; i < options.num_servers; ++i) {
    DUCTILE_RETURN_IF_ERROR(start_server(i));
  }
  for (int i = 0; i < options.num_workers; ++i) {
    DUCTILE_RETURN_IF_ERROR(start_worker(i));
  }

  // Resizes: start members, or drain them.
  // Members to drain, tried at each poll until they have registered; a
  // server's drain (slots moving, then a linger) runs on a thread of its
  // own, so that supervision goes on meanwhile.
  struct Drain {
    Role role;
    int id;
    int attempts = 0;
    std::future<Status> running;
  };
  std::vector<Drain> drains;
  // "resize-schedule:" for --resize_schedule's steps, "resize:" for
  // `ductile resize`'s targets.
  std::string resize_source = "resize-schedule";
  const auto resize_log = [&resize_source](const std::string& line) {
    std::printf("%s: %s\n", resize_source.c_str(), line.c_str());
    std::fflush(stdout);
  };
  // Workers a policy asked to replace: the worker started in each one's
  // place, whether the old one is draining yet, and how many workers were
  // started for it. A replacement that dies before it is active is
  // started again, kReplaceTries times in all; then the old worker stays
  // (in `kept`) and is not replaced again.
  struct Replacement {
    int new_id;
    bool draining = false;
    int tries = 1;
  };
  constexpr int kReplaceTries = 3;
  std::map<int32_t, Replacement> replacing;
  std::set<int32_t> kept;
  const auto resize = [&](const ResizeEvent& e, int64_t clock) -> Status {
    const Role role = e.servers ? Role::kServer : Role::kWorker;
    // A worker being replaced and its replacement count as one, and
    // neither is drained by a resize (the replacement drains the other).
    // A pair counts once while either of the two runs (the new one may
    // have died, to be started again).
    std::vector<int> active;
    std::set<int32_t> pairs_seen;
    for (const int id : supervisor.Active(role)) {
      bool paired = false;
      if (!e.servers) {
        for (const auto& [old_id, r] : replacing) {
          if (r.draining || (id != r.new_id && id != old_id)) continue;
          paired = true;
          pairs_seen.insert(old_id);
        }
      }
      if (!paired) active.push_back(id);
    }
    const int pairs = static_cast<int>(pairs_seen.size());
    const int now = static_cast<int>(active.size()) + pairs;
    std::string line = std::string(e.servers ? "servers " : "workers ") +
                       std::to_string(now) + " -> " + std::to_string(e.count) +
                       " at clock " + std::to_string(clock) + ":";
    for (int i = now; i < e.count; ++i) {
      const int id = supervisor.NextId(role);
      DUCTILE_RETURN_IF_ERROR(e.servers ? start_server(id) : start_worker(id));
      line += " started " + std::string(RoleName(role)) + " " +
              std::to_string(id) + ";";
    }
    for (int i = 0; i < now - e.count && i < static_cast<int>(active.size());
         ++i) {
      const int id = active[i];  // the newest first
      supervisor.MarkDrained(role, id);
      drains.push_back(Drain{role, id, 0, {}});
      line += " draining " + std::string(RoleName(role)) + " " +
              std::to_string(id) + ";";
    }
    resize_log(line);
    return Status::Ok();
  };
  // A member started by a resize may not have registered yet: its drain
  // is tried again at the next polls (for up to a minute).
  const auto drain_pending = [&]() {
    for (auto it = drains.begin(); it != drains.end();) {
      const std::string name =
          std::string(RoleName(it->role)) + " " + std::to_string(it->id);
      if (!it->running.valid()) {
        const Role role = it->role;
        const int id = it->id;
        it->running =
            std::async(std::launch::async, [address, role, id, security] {
              return role == Role::kServer
                         ? RequestDrainServer(address, id, 120000, security)
                         : RequestDrainWorker(address, id, kClockQueryTimeoutMs,
                                              security);
            });
      }
      if (it->running.wait_for(std::chrono::seconds(0)) !=
          std::future_status::ready) {
        ++it;
        continue;
      }
      const Status s = it->running.get();
      if (s.ok()) {
        resize_log("drained " + name);
      } else if (s.code() == StatusCode::kNotFound && ++it->attempts < 300) {
        ++it;
        continue;
      } else {
        resize_log("could not drain " + name + ": " + s.message());
      }
      it = drains.erase(it);
    }
  };

  // Supervise: a failed child or a signal stops everything; crashes are
  // recovered from (Supervisor::Reap); kills and resizes are delivered on
  // schedule.
  // The job is watched (its clock, `ductile resize`'s target) every
  // kClockPollInterval while kills, resizes or drains are due, and every
  // kTargetPollInterval otherwise.
  const std::vector<ResizeEvent>& resizes = options.resize_schedule;
  size_t next_kill = 0, next_resize = 0;
  // The targets acted on so far (0: none).
  int32_t applied_workers = 0, applied_servers = 0;
  const auto replace_workers = [&](const JobView& view) -> Status {
    // Replacements that died before they were active (killed by a signal;
    // an error exit ends the launch): another, or give up.
    for (auto it = replacing.begin(); it != replacing.end();) {
      const int32_t old_id = it->first;
      Replacement& r = it->second;
      const std::vector<int> active = supervisor.Active(Role::kWorker);
      const bool alive =
          std::find(active.begin(), active.end(), r.new_id) != active.end();
      const bool old_alive =
          std::find(active.begin(), active.end(), old_id) != active.end();
      if (r.draining || alive) {
        ++it;
        continue;
      }
      if (!old_alive) {  // nothing left to replace
        it = replacing.erase(it);
        continue;
      }
      if (r.tries >= kReplaceTries) {
        std::printf(
            "replace: worker %d died before it was active; giving up on "
            "replacing worker %d after %d tries\n",
            r.new_id, old_id, r.tries);
        std::fflush(stdout);
        kept.insert(old_id);
        it = replacing.erase(it);
        continue;
      }
      const int new_id = supervisor.NextId(Role::kWorker);
      DUCTILE_RETURN_IF_ERROR(start_worker(new_id));
      std::printf(
          "replace: worker %d died before it was active; started worker %d "
          "in place of worker %d (try %d of %d)\n",
          r.new_id, new_id, old_id, r.tries + 1, kReplaceTries);
      std::fflush(stdout);
      r.new_id = new_id;
      ++r.tries;
      ++it;
    }
    for (const int32_t old_id : view.replace_workers) {
      if (replacing.contains(old_id) || kept.contains(old_id)) continue;
      const std::vector<int> active = supervisor.Active(Role::kWorker);
      if (std::find(active.begin(), active.end(), old_id) == active.end()) {
        continue;  // gone already, or being drained
      }
      const int new_id = supervisor.NextId(Role::kWorker);
      DUCTILE_RETURN_IF_ERROR(start_worker(new_id));
      replacing.emplace(old_id, Replacement{new_id});
      std::printf("replace: started worker %d in place of worker %d\n", new_id,
                  old_id);
      std::fflush(stdout);
    }
    // The old one leaves once the new one is active: the job never runs
    // with fewer workers.
    for (auto& [old_id, r] : replacing) {
      if (r.draining || !view.active_workers.contains(r.new_id)) continue;
      r.draining = true;
      resize_source = "replace";  // names the drain's outcome
      supervisor.MarkDrained(Role::kWorker, old_id);
      drains.push_back(Drain{Role::kWorker, old_id, 0, {}});
      std::printf("replace: worker %d is active; draining worker %d\n",
                  r.new_id, old_id);
      std::fflush(stdout);
    }
    return Status::Ok();
  };
  auto next_poll = SteadyClock::now();
  while (!supervisor.WorkersDone()) {
    const bool replacements_pending =
        std::any_of(replacing.begin(), replacing.end(),
                    [](const auto& r) { return !r.second.draining; });
    const bool kill_pending = next_kill < schedule.size() ||
                              next_resize < resizes.size() || !drains.empty() ||
                              replacements_pending;
    const int wait_ms = static_cast<int>(std::clamp<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(
            next_poll - SteadyClock::now())
            .count(),
        0, 200));
    const int sig = WaitSignal(set, wait_ms);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      std::fprintf(stderr, "ductile local: %s, stopping the cluster\n",
                   strsignal(sig));
      supervisor.KillAll(3000);
      return CancelledError(std::string("interrupted by ") + strsignal(sig));
    }
    Status s = supervisor.Reap();
    if (!s.ok()) {
      std::fprintf(stderr, "ductile local: %s; stopping the cluster\n",
                   s.message().c_str());
      supervisor.KillAll(3000);
      return s;
    }
    if (SteadyClock::now() >= next_poll) {
      next_poll = SteadyClock::now() +
                  (kill_pending ? kClockPollInterval : kTargetPollInterval);
      // An unanswered question (the coordinator is down or restarting) is
      // asked again at the next poll.
      Result<JobView> view = WatchJob(address, security);
      Result<int64_t> clock =
          view.ok() ? Result<int64_t>(view->clock) : view.status();
      // One kill per poll: a target killed but not yet restarted is not
      // killed again before it is back.
      if (clock.ok() && next_kill < schedule.size() &&
          schedule[next_kill].clock <= *clock &&
          supervisor.Kill(schedule[next_kill], *clock)) {
        ++next_kill;
      }
      if (clock.ok() && next_resize < resizes.size() &&
          resizes[next_resize].clock <= *clock) {
        resize_source = "resize-schedule";
        Status s = resize(resizes[next_resize++], *clock);
        if (!s.ok()) {
          supervisor.KillAll(3000);
          return s;
        }
      }
      // `ductile resize`: a new target is acted on once.
      for (const bool servers : {false, true}) {
        if (!view.ok()) break;
        const int32_t target =
            servers ? view->target_servers : view->target_workers;
        int32_t& applied = servers ? applied_servers : applied_workers;
        if (target <= 0 || target == applied) continue;
        applied = target;
        resize_source = "resize";
        Status s = resize(ResizeEvent{servers, target, *clock}, *clock);
        if (!s.ok()) {
          supervisor.KillAll(3000);
          return s;
        }
      }
      if (view.ok()) {
        Status replaced = replace_workers(*view);
        if (!replaced.ok()) {
          supervisor.KillAll(3000);
          return replaced;
        }
      }
      drain_pending();
    }
  }
  if (next_kill < schedule.size()) {
    KillLog(std::to_string(schedule.size() - next_kill) +
            " kill(s) not reached before the workers finished");
  }
  if (next_resize < resizes.size()) {
    std::printf(
        "resize-schedule: %zu resize(s) not reached before the "
        "workers finished\n",
        resizes.size() - next_resize);
  }
  // Workers are done: the coordinator shuts the servers down by itself.
  // It does not know a killed worker is gone for good, and would wait
  // several heartbeat timeouts for it to come back: the launcher knows
  // better, and ends the job now.
  supervisor.StopRestarting();
  if (supervisor.WorkersDropped() > 0) {
    RequestShutdown(address, kClockQueryTimeoutMs, security).IgnoreError();
  }
  const auto grace =
      SteadyClock::now() + std::chrono::milliseconds(options.shutdown_grace_ms);
  while (!supervisor.AllDone() && SteadyClock::now() < grace) {
    WaitSignal(set, 50);
    supervisor.Reap().IgnoreError();
  }
  if (!supervisor.AllDone()) {
    std::fprintf(stderr,
                 "ductile local: cluster did not shut down in time; "
                 "killing it\n");
  }
  supervisor.KillAll(0);
  if (supervisor.WorkersFinished() == 0) {
    return AbortedError("every worker was killed; none finished the job");
  }
  return Status::Ok();
}

}  // namespace ductile::launch
