#include "launch/local_launcher.h"

#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ductile/admin.h"
#include "launch/child_process.h"
#include "launch/lost_members.h"
#include "launch/provider.h"
#include "launch/reconciler.h"
#include "launch/supervisor.h"

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
// How long a server's drain (its slots moving away) may take.
constexpr int64_t kServerDrainTimeoutMs = 120000;
// How long a report of a member's exit may take (it runs beside the
// supervision).
constexpr int64_t kExitReportTimeoutMs = 2000;

Role Of(MemberRole role) {
  return role == MemberRole::kServer ? Role::kServer : Role::kWorker;
}

// The supervisor's children as the reconcile loop's provider: a new
// member is a new child with the next id; members are the children still
// in the job.
class LocalProvider final : public Provider {
 public:
  using StartMember = std::function<Status(Role role, int id)>;
  LocalProvider(Supervisor* supervisor, StartMember start)
      : supervisor_(supervisor), start_(std::move(start)) {}

  Result<std::vector<int32_t>> Grow(MemberRole role, int32_t count) override {
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < count; ++i) {
      const int id = supervisor_->NextId(Of(role));
      DUCTILE_RETURN_IF_ERROR(start_(Of(role), id));
      ids.push_back(id);
    }
    return ids;
  }
  std::vector<int32_t> Members(MemberRole role, const ClusterStatus&) override {
    std::vector<int> active = supervisor_->Active(Of(role));
    return std::vector<int32_t>(active.rbegin(), active.rend());
  }
  bool Gone(MemberRole role, int32_t id) override {
    return supervisor_->Gone(Of(role), id);
  }
  void Shrink(MemberRole role, const std::vector<int32_t>&,
              const std::vector<int32_t>& leaving) override {
    for (const int32_t id : leaving) supervisor_->MarkDrained(Of(role), id);
  }
  void Retire(MemberRole role, int32_t id) override {
    supervisor_->MarkDrained(Of(role), id);
  }
  void Keep(MemberRole role, int32_t id) override {
    supervisor_->MarkDrained(Of(role), id, /*drained=*/false);
  }

 private:
  Supervisor* const supervisor_;
  const StartMember start_;
};

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
    if (!options.worker_command.empty()) {
      WorkerConnection c = options.worker_connection;
      c.coordinator = address;
      c.rank = id;
      c.keys_dir = keys_dir;
      c.member_key =
          own_keys ? keys_dir + "/members/worker-" + std::to_string(id) + ".key"
                   : "";
      c.require_member_keys = own_keys;
      c.workers = options.num_workers;
      return supervisor.Start(Role::kWorker, id, options.worker_command,
                              WorkerEnvironment(c), /*keep_stderr_tail=*/true);
    }
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

  // A server or worker that dies of a signal is reported to the
  // coordinator at once (ReportMemberExit), so that the others go on
  // without waiting for its heartbeat to time out: by its pid where it is
  // the launcher's own child, by its registration's incarnation (from the
  // last status) where it ran through srun.
  ExitReporter exits(address, security, kExitReportTimeoutMs);
  std::map<std::pair<Role, int>, uint64_t> incarnations;
  supervisor.OnCrash([&](Role role, int id, pid_t pid, bool via_srun) {
    MemberProcess process;
    process.role = role == Role::kServer ? "server" : "worker";
    process.id = id;
    if (via_srun) {
      const auto it = incarnations.find({role, id});
      if (it == incarnations.end()) return;  // never seen: silence
      process.incarnation = it->second;
    } else {
      process.pid = pid;
    }
    exits.Report(process);
  });

  // Resizes, `ductile resize`'s targets and replacements: the reconcile
  // loop decides, the supervisor's children carry it out. Drains run on
  // threads of their own, so that supervision goes on meanwhile.
  LocalProvider provider(&supervisor, [&](Role role, int id) {
    return role == Role::kServer ? start_server(id) : start_worker(id);
  });
  CoordinatorDrainer drainer(address, security, kClockQueryTimeoutMs,
                             kServerDrainTimeoutMs);
  Reconciler reconciler(&provider, &drainer,
                        [](const std::string& source, const std::string& line) {
                          std::printf("%s: %s\n", source.c_str(), line.c_str());
                          std::fflush(stdout);
                        });

  // Supervise: a failed child or a signal stops everything; crashes are
  // recovered from (Supervisor::Reap); kills and resizes are delivered on
  // schedule.
  // The job is watched (its clock, `ductile resize`'s target) every
  // kClockPollInterval while kills, resizes or drains are due, and every
  // kTargetPollInterval otherwise.
  LostMembers lost(kLostAfterTimeouts * options.heartbeat_timeout_ms);
  const std::vector<ResizeEvent>& resizes = options.resize_schedule;
  size_t next_kill = 0, next_resize = 0;
  auto next_poll = SteadyClock::now();
  // Members the coordinator declared dead whose process runs on.
  const auto started = SteadyClock::now();
  const auto since_start = [&](SteadyClock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t - started)
        .count();
  };
  const auto kill_lost = [&](const ClusterStatus& job, int64_t asked_ms) {
    const auto process_of = [&](const LostMembers::Member& m) {
      const Role role = Of(m.first);
      return LostMembers::Process{
          supervisor.Pid(role, m.second),
          since_start(supervisor.StartedAt(role, m.second))};
    };
    for (const LostMembers::Member& m : lost.Step(
             job, asked_ms, since_start(SteadyClock::now()), process_of)) {
      supervisor.KillLost(Of(m.first), m.second, *lost.DeadForMs(m));
    }
    for (const LostMembers::Member& m : lost.lingering()) {
      std::fprintf(stderr,
                   "ductile local: worker %d (pid %d) finished %.1f s ago "
                   "and its process has not exited (still saving, or hung "
                   "at exit); the job ends when it does (Ctrl-C stops it)\n",
                   m.second,
                   static_cast<int>(supervisor.Pid(Of(m.first), m.second)),
                   static_cast<double>(lost.grace_ms()) / 1000.0);
    }
  };
  // The coordinator's last answer, and when it was asked for.
  std::optional<std::pair<ClusterStatus, int64_t>> last_status;
  while (!supervisor.WorkersDone()) {
    const bool kill_pending = next_kill < schedule.size() ||
                              next_resize < resizes.size() || reconciler.Busy();
    const int wait_ms = static_cast<int>(std::clamp<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(
            next_poll - SteadyClock::now())
            .count(),
        0, 200));
    const int sig = WaitSignal(set, wait_ms);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      std::fprintf(stderr, "ductile local: %s, stopping the cluster\n",
                   strsignal(sig));
      // Passed on as it came: a worker command sees its Ctrl-C (Python's
      // KeyboardInterrupt) as it would run alone.
      supervisor.KillAll(3000, sig);
      return CancelledError(std::string("interrupted by ") + strsignal(sig));
    }
    Status s = supervisor.Reap();
    if (!s.ok()) {
      // Its first line (a worker command's stderr follows in the error).
      const std::string& m = s.message();
      std::fprintf(stderr, "ductile local: %s; stopping the cluster\n",
                   m.substr(0, m.find('\n')).c_str());
      supervisor.KillAll(3000);
      return s;
    }
    exits.Collect();
    if (SteadyClock::now() < next_poll) continue;
    next_poll = SteadyClock::now() +
                (kill_pending ? kClockPollInterval : kTargetPollInterval);
    // An unanswered question (the coordinator is down or restarting) is
    // asked again at the next poll.
    const int64_t asked_ms = since_start(SteadyClock::now());
    Result<ClusterStatus> status =
        QueryClusterStatus(address, kClockQueryTimeoutMs, security);
    if (!status.ok()) {
      if (last_status && supervisor.Pid(Role::kCoordinator, 0) < 0) {
        // The coordinator ended the job (its live workers finished):
        // nothing is restarted any more. A worker it last listed neither
        // finished nor heard from for half a heartbeat timeout (declared
        // dead in the same tick as the end, between two looks) cannot go
        // on, and runs past the grace only if stopped or hung.
        supervisor.StopRestarting();
        ClusterStatus over = last_status->first;
        for (MemberStatus& m : over.members) {
          if (m.role == "worker" && m.state != "finished" &&
              m.state != "left" &&
              m.last_heartbeat_ms_ago > options.heartbeat_timeout_ms / 2) {
            m.state = "dead";
          }
        }
        kill_lost(over, last_status->second);
      }
      continue;
    }
    last_status = {*status, asked_ms};
    kill_lost(*status, asked_ms);
    for (const MemberStatus& m : status->members) {
      if (m.incarnation == 0 || (m.role != "server" && m.role != "worker")) {
        continue;
      }
      incarnations[{m.role == "server" ? Role::kServer : Role::kWorker, m.id}] =
          m.incarnation;
    }
    const int64_t clock = JobClock(*status);
    // One kill per poll: a target killed but not yet restarted is not
    // killed again before it is back.
    if (next_kill < schedule.size() && schedule[next_kill].clock <= clock &&
        supervisor.Kill(schedule[next_kill], clock)) {
      ++next_kill;
    }
    if (next_resize < resizes.size() && resizes[next_resize].clock <= clock) {
      const ResizeEvent& e = resizes[next_resize++];
      s = reconciler.Resize(
          e.servers ? MemberRole::kServer : MemberRole::kWorker, e.count,
          "resize-schedule", *status);
    }
    if (s.ok()) s = reconciler.Step(*status);
    if (!s.ok()) {
      supervisor.KillAll(3000);
      return s;
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
