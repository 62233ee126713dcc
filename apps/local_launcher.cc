#include "apps/local_launcher.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

namespace ductile::apps {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct Child {
  std::string name;  // "coordinator", "server 0", "worker 1"
  bool worker = false;
  bool exited = false;
  int status = 0;
};

// fork + exec of `argv` with the given signals unblocked. The child dies
// with the supervisor (PDEATHSIG), even if the supervisor is killed -9.
pid_t Spawn(const std::vector<std::string>& args, const sigset_t& blocked) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;  // parent, or -1
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the parent died already
  sigprocmask(SIG_UNBLOCK, &blocked, nullptr);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  std::perror("ductile local: exec");
  _exit(127);
}

std::string Describe(int status) {
  if (WIFEXITED(status))
    return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return std::string("signal ") + strsignal(WTERMSIG(status));
  }
  return "status " + std::to_string(status);
}

class Supervisor {
 public:
  explicit Supervisor(const sigset_t& blocked) : blocked_(blocked) {}
  ~Supervisor() { KillAll(0); }

  Status Start(const std::string& name, bool worker,
               const std::vector<std::string>& args) {
    const pid_t pid = Spawn(args, blocked_);
    if (pid < 0)
      return UnavailableError("cannot start " + name + ": fork failed");
    children_[pid] = {name, worker};
    return Status::Ok();
  }

  // Reaps exited children; returns the first failure seen, if any.
  Status Reap() {
    while (true) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) return Status::Ok();
      auto it = children_.find(pid);
      if (it == children_.end()) continue;
      it->second.exited = true;
      it->second.status = status;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok && !stopping_) {
        return AbortedError(it->second.name + " (pid " + std::to_string(pid) +
                            ") failed with " + Describe(status));
      }
    }
  }

  bool WorkersDone() const {
    for (const auto& [pid, c] : children_) {
      if (c.worker && !c.exited) return false;
    }
    return true;
  }
  bool AllDone() const {
    for (const auto& [pid, c] : children_) {
      if (!c.exited) return false;
    }
    return true;
  }

  // SIGTERM to every live child, then SIGKILL to what is left after
  // `grace_ms`; reaps them all.
  void KillAll(int grace_ms) {
    stopping_ = true;
    for (const auto& [pid, c] : children_) {
      if (!c.exited) kill(pid, grace_ms > 0 ? SIGTERM : SIGKILL);
    }
    const auto deadline =
        SteadyClock::now() + std::chrono::milliseconds(grace_ms);
    while (!AllDone() && SteadyClock::now() < deadline) {
      Reap().IgnoreError();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (auto& [pid, c] : children_) {
      if (!c.exited) {
        kill(pid, SIGKILL);
        waitpid(pid, &c.status, 0);
        c.exited = true;
      }
    }
  }

 private:
  sigset_t blocked_;
  std::map<pid_t, Child> children_;
  bool stopping_ = false;
};

// Waits for a signal among `set` for up to `ms`; returns it, or 0.
int WaitSignal(const sigset_t& set, int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  const int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

}  // namespace

Status RunLocalCluster(const LocalClusterOptions& options) {
  if (options.num_servers < 1)
    return InvalidArgumentError("--servers must be >= 1");
  if (options.num_workers < 1)
    return InvalidArgumentError("--workers must be >= 1");
  // Signals are taken synchronously (sigtimedwait) by this thread.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, nullptr);

  char dir_template[] = "/tmp/ductile-local-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    return UnavailableError("cannot create a temporary directory in /tmp");
  }
  const std::string run_dir = dir_template;
  const std::string address_file = run_dir + "/coordinator.address";
  struct Cleanup {
    std::string dir, file;
    ~Cleanup() {
      std::remove(file.c_str());
      rmdir(dir.c_str());
    }
  } cleanup{run_dir, address_file};

  Supervisor supervisor(set);
  std::vector<std::string> args = {
      options.program,
      "coordinator",
      "--listen=tcp://127.0.0.1:0",
      "--servers=" + std::to_string(options.num_servers),
      "--workers=" + std::to_string(options.num_workers),
      "--address_file=" + address_file};
  args.insert(args.end(), options.coordinator_flags.begin(),
              options.coordinator_flags.end());
  RETURN_IF_ERROR(supervisor.Start("coordinator", false, args));

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
  std::fprintf(stderr,
               "ductile local: coordinator at %s, %d server(s), %d "
               "worker(s)\n",
               address.c_str(), options.num_servers, options.num_workers);

  for (int i = 0; i < options.num_servers; ++i) {
    std::vector<std::string> a = {options.program, "server",
                                  "--coordinator=" + address};
    a.insert(a.end(), options.server_flags.begin(), options.server_flags.end());
    RETURN_IF_ERROR(supervisor.Start("server " + std::to_string(i), false, a));
  }
  for (int i = 0; i < options.num_workers; ++i) {
    std::vector<std::string> a = {options.program, "worker",
                                  "--coordinator=" + address};
    a.insert(a.end(), options.worker_flags.begin(), options.worker_flags.end());
    RETURN_IF_ERROR(supervisor.Start("worker " + std::to_string(i), true, a));
  }

  // Supervise: a failed child or a signal stops everything.
  while (!supervisor.WorkersDone()) {
    const int sig = WaitSignal(set, 200);
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
  }
  // Workers are done: the coordinator shuts the servers down by itself.
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
  return Status::Ok();
}

}  // namespace ductile::apps
