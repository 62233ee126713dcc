// `ductile status`, `shutdown`, `checkpoint`, `drain`, `resize`, `exited`
// and `keygen`: requests to a running cluster's coordinator, and its keys.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/options_from_flags.h"
#include "ductile/ductile.h"

namespace ductile::cli {

int RunStatus(const std::string&) {
  if (FLAGS_watch < 0 || FLAGS_watch > 3600) {
    return Fail(InvalidArgumentError("--watch must be in [0, 3600]"));
  }
  // The admin key where it is at hand: a cluster that requires member keys
  // of their own admits no one with the shared key.
  auto security =
      SecurityFromFlags(!FLAGS_keys.empty() &&
                        access((FLAGS_keys + "/admin.key").c_str(), R_OK) == 0);
  if (!security.ok()) return Fail(security.status());
  const int64_t timeout_ms = std::min<int64_t>(FLAGS_timeout_ms, 5000);
  if (FLAGS_watch == 0) {
    auto status = QueryClusterStatus(FLAGS_coordinator, timeout_ms, *security);
    if (!status.ok()) return Fail(status.status());
    std::printf("%s", FormatClusterStatus(*status).c_str());
    return 0;
  }
  // A live table: the screen redrawn in a terminal, tables one after the
  // other into a file or pipe.
  const bool terminal = isatty(STDOUT_FILENO) != 0;
  int failed_in_a_row = 0;
  Status last_error;
  while (failed_in_a_row < 5) {
    auto status = QueryClusterStatus(FLAGS_coordinator, timeout_ms, *security);
    const std::time_t now = std::time(nullptr);
    char when[32];
    std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S",
                  std::localtime(&now));
    std::printf("%s%s, every %d s (Ctrl-C stops)\n",
                terminal ? "\033[H\033[2J" : "\n", when, FLAGS_watch);
    if (status.ok()) {
      failed_in_a_row = 0;
      std::printf("%s", FormatClusterStatus(*status).c_str());
    } else {
      ++failed_in_a_row;
      last_error = status.status();
      std::printf("no status from %s: %s\n", FLAGS_coordinator.c_str(),
                  last_error.ToString().c_str());
    }
    std::fflush(stdout);
    if (failed_in_a_row >= 5) break;
    std::this_thread::sleep_for(std::chrono::seconds(FLAGS_watch));
  }
  return Fail(UnavailableError(
      "the coordinator did not answer 5 times in a row; last: " +
      last_error.ToString()));
}

int RunShutdown(const std::string&) {
  auto security = SecurityFromFlags(true);
  if (!security.ok()) return Fail(security.status());
  Status s = RequestShutdown(
      FLAGS_coordinator, std::min<int64_t>(FLAGS_timeout_ms, 5000), *security);
  if (!s.ok()) return Fail(s);
  std::printf(
      "shutdown: the coordinator at %s stops the job; its workers stop at "
      "their next call, and every member exits\n",
      FLAGS_coordinator.c_str());
  return 0;
}

namespace {

// A member named as worker:N or server:N: its id (-1: not of that form),
// and its role in `role`.
int32_t ParseMember(const std::string& operand, std::string* role) {
  int32_t id = -1;
  for (const char* prefix : {"worker:", "server:"}) {
    if (operand.rfind(prefix, 0) != 0) continue;
    const std::string digits = operand.substr(std::strlen(prefix));
    if (!digits.empty() && digits.size() <= 7 &&
        digits.find_first_not_of("0123456789") == std::string::npos) {
      id = std::stoi(digits);
      *role = std::string(prefix, std::strlen(prefix) - 1);
    }
  }
  return id;
}

}  // namespace

int RunDrain(const std::string& operand) {
  std::string role;
  const int32_t id = ParseMember(operand, &role);
  if (id < 0) {
    return Fail(InvalidArgumentError(
        "drain takes the member to drain as worker:N or server:N (e.g. "
        "`ductile drain --coordinator=ADDR worker:3`), not '" +
        operand + "'"));
  }
  auto security = SecurityFromFlags(true);
  if (!security.ok()) return Fail(security.status());
  if (role == "server") {
    std::printf("server %d: moving its slots to the other servers...\n", id);
    std::fflush(stdout);
    Status s =
        RequestDrainServer(FLAGS_coordinator, id, FLAGS_timeout_ms, *security);
    if (!s.ok()) return Fail(s);
    std::printf(
        "server %d drained: its slots are on the other servers and "
        "it has stopped\n",
        id);
    return 0;
  }
  Status s =
      RequestDrainWorker(FLAGS_coordinator, id, FLAGS_timeout_ms, *security);
  if (!s.ok()) return Fail(s);
  std::printf("worker %d asked to leave; it leaves at its next step\n", id);
  return 0;
}

int RunExited(const std::string& operand) {
  MemberProcess process;
  process.id = ParseMember(operand, &process.role);
  if (process.id < 0) {
    return Fail(InvalidArgumentError(
        "exited takes the member as worker:N or server:N (e.g. `ductile "
        "exited --coordinator=ADDR --pid=4321 worker:3`), not '" +
        operand + "'"));
  }
  process.pid = FLAGS_pid;
  process.incarnation = FLAGS_incarnation;
  auto security = SecurityFromFlags(true);
  if (!security.ok()) return Fail(security.status());
  Status s =
      ReportMemberExit(FLAGS_coordinator, process,
                       std::min<int64_t>(FLAGS_timeout_ms, 5000), *security);
  if (!s.ok()) return Fail(s);
  std::printf("%s %d is dead to the job\n", process.role.c_str(), process.id);
  return 0;
}

int RunResize(const std::string&) {
  // Only the flags given count: the other size stays as it is.
  const bool workers =
      !gflags::GetCommandLineFlagInfoOrDie("workers").is_default;
  const bool servers =
      !gflags::GetCommandLineFlagInfoOrDie("servers").is_default;
  if (!workers && !servers) {
    return Fail(InvalidArgumentError(
        "resize needs --workers=N and/or --servers=M (the job's new size)"));
  }
  if ((workers && FLAGS_workers < 1) || (servers && FLAGS_servers < 1)) {
    return Fail(InvalidArgumentError(
        "resize: --workers and --servers must be at least 1"));
  }
  auto security = SecurityFromFlags(true);
  if (!security.ok()) return Fail(security.status());
  Status s =
      RequestResize(FLAGS_coordinator, workers ? FLAGS_workers : 0,
                    servers ? FLAGS_servers : 0, FLAGS_timeout_ms, *security);
  if (!s.ok()) return Fail(s);
  std::printf(
      "target size set:%s%s; `ductile local` (or the job's launcher) "
      "starts or drains members to match\n",
      workers ? (" " + std::to_string(FLAGS_workers) + " worker(s)").c_str()
              : "",
      servers ? (" " + std::to_string(FLAGS_servers) + " server(s)").c_str()
              : "");
  return 0;
}

int RunCheckpoint(const std::string&) {
  auto security = SecurityFromFlags(true);
  if (!security.ok()) return Fail(security.status());
  Result<int64_t> clock =
      RequestCheckpoint(FLAGS_coordinator, FLAGS_timeout_ms, *security);
  if (!clock.ok()) return Fail(clock.status());
  std::printf("checkpoint at clock %lld\n", static_cast<long long>(*clock));
  return 0;
}

int RunKeygen(const std::string&) {
  if (FLAGS_out.empty()) {
    return Fail(InvalidArgumentError(
        "keygen needs --out=DIR, the directory for the new keys"));
  }
  if (!FLAGS_member.empty()) {
    Status s = GenerateMemberKey(FLAGS_out, FLAGS_member);
    if (!s.ok()) return Fail(s);
    std::printf(
        "member key written to %s/members: %s.key is for that member only "
        "(--member_key=FILE); every coordinator and server reads %s.pub "
        "from DIR/members (--keys=DIR)\n",
        FLAGS_out.c_str(), FLAGS_member.c_str(), FLAGS_member.c_str());
    return 0;
  }
  // --servers and --workers: a key of its own for each (server-N.key,
  // worker-N.key), which binds it to that member.
  // Only the counts given: `--workers=4` alone adds worker keys.
  const int servers = gflags::GetCommandLineFlagInfoOrDie("servers").is_default
                          ? 0
                          : FLAGS_servers;
  const int workers = gflags::GetCommandLineFlagInfoOrDie("workers").is_default
                          ? 0
                          : FLAGS_workers;
  const bool members =
      !gflags::GetCommandLineFlagInfoOrDie("servers").is_default ||
      !gflags::GetCommandLineFlagInfoOrDie("workers").is_default;
  if (members &&
      (servers < 0 || workers < 0 || servers > 4096 || workers > 65536)) {
    return Fail(InvalidArgumentError(
        "keygen: --servers must be in [0, 4096] and --workers in [0, 65536]"));
  }
  const bool have_cluster_keys =
      access((FLAGS_out + "/cluster.key").c_str(), F_OK) == 0;
  if (!members || !have_cluster_keys) {
    Status s = GenerateClusterKeys(FLAGS_out);
    if (!s.ok()) return Fail(s);
    std::printf(
        "keys written to %s: the coordinator and servers need cluster.key, "
        "members cluster.pub and admin.pub (--keys=DIR); only "
        "administrators need admin.key\n",
        FLAGS_out.c_str());
  }
  if (!members) {
    std::printf(
        "each server and worker also needs a key of its own: `ductile "
        "keygen --out=%s --servers=N --workers=M`\n",
        FLAGS_out.c_str());
    return 0;
  }
  int made = 0;
  int kept = 0;
  for (int role = 0; role < 2; ++role) {
    const int count = role == 0 ? servers : workers;
    for (int i = 0; i < count; ++i) {
      const std::string name =
          (role == 0 ? "server-" : "worker-") + std::to_string(i);
      Status s = GenerateMemberKey(FLAGS_out, name);
      if (s.code() == StatusCode::kAlreadyExists) {
        ++kept;
      } else if (!s.ok()) {
        return Fail(s);
      } else {
        ++made;
      }
    }
  }
  std::printf(
      "member keys in %s/members: %d made, %d already there; server-N.key "
      "and worker-N.key are for that member only, each bound to it; the "
      "coordinator and servers read every NAME.pub there\n",
      FLAGS_out.c_str(), made, kept);
  return 0;
}

}  // namespace ductile::cli
