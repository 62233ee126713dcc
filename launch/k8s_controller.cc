#include "launch/k8s_controller.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "glog/logging.h"
#include "launch/child_process.h"

namespace ductile::launch {
namespace {

// A member that is in the job or on its way in.
bool Live(const MemberStatus& m) {
  return m.alive && (m.state == "joining" || m.state == "active" ||
                     m.state == "rejoining");
}

// Live, or leaving but not gone yet.
bool Present(const MemberStatus& m) {
  return Live(m) || (m.alive && m.state == "draining");
}

const MemberStatus* Find(const ClusterStatus& status, MemberRole role,
                         int32_t id) {
  for (const MemberStatus& m : status.members) {
    if (m.role == RoleName(role) && m.id == id) return &m;
  }
  return nullptr;
}

// kubectl's arguments for `kube_namespace` ("": its current one).
std::vector<std::string> NamespaceArgs(const std::string& kube_namespace) {
  if (kube_namespace.empty()) return {};
  return {"--namespace", kube_namespace};
}

// How much later than Kubernetes says a container is taken to have
// started: its start time's resolution (a second) and the skew between the
// node's clock and this one.
constexpr int64_t kStartMarginMs = 5000;

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A completion index ("0", "12"), or nullopt.
std::optional<int32_t> ParseIndex(const std::string& s) {
  if (s.empty() || s.size() > 6 ||
      s.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoi(s);
}

// Kubernetes' time ("2026-11-29T23:04:05Z", UTC) in ms since the epoch,
// or nullopt.
std::optional<int64_t> ParseRfc3339Ms(const std::string& s) {
  std::tm tm{};
  const char* end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (end == nullptr || *end != '\0') return std::nullopt;
  const time_t t = timegm(&tm);
  if (t == static_cast<time_t>(-1)) return std::nullopt;
  return static_cast<int64_t>(t) * 1000;
}

}  // namespace

// A Kubernetes Job per role as the reconcile loop's provider: member N is
// the pod of completion index N. Growing raises the Job's size; a shrink
// lowers it once every member at or past the new size is gone.
class K8sController::JobProvider final : public Provider {
 public:
  JobProvider(const K8sControllerOptions& options, Tool tool,
              std::function<void(const std::string&)> act)
      : options_(options), tool_(std::move(tool)), act_(std::move(act)) {}

  Result<std::vector<int32_t>> Grow(MemberRole role, int32_t count) override {
    // New indexes past the Job's size: new members.
    DUCTILE_ASSIGN_OR_RETURN(const int32_t size, JobSize(role));
    int32_t grown = size + count;
    const int32_t max = MaxSize(role);
    if (max > 0 && grown > max) {
      LOG(WARNING) << "k8s-controller: " << RoleName(role) << "s: " << count
                   << " more need " << grown << " indexes in " << JobName(role)
                   << ", and only " << max
                   << " have member keys (ductile k8s --max_" << RoleName(role)
                   << "s): growing to " << max;
      grown = max;
    }
    std::vector<int32_t> ids;
    if (grown <= size) return ids;
    DUCTILE_RETURN_IF_ERROR(Patch(role, grown));
    for (int32_t id = size; id < grown; ++id) ids.push_back(id);
    return ids;
  }

  std::vector<int32_t> Members(MemberRole role,
                               const ClusterStatus& status) override {
    return LiveMembers(status, role);
  }

  // A member that left the job or finished. One the coordinator does not
  // list may be a pod that has not registered yet, and a dead one is
  // started again by its Job.
  bool Gone(MemberRole role, int32_t id) override {
    const MemberStatus* m = Find(last_, role, id);
    return m != nullptr && (m->state == "left" || m->state == "drained" ||
                            m->state == "finished");
  }

  void Shrink(MemberRole role, const std::vector<int32_t>& staying,
              const std::vector<int32_t>& leaving) override {
    const int r = static_cast<int>(role);
    shrink_to_[r] = staying.empty() ? 0 : staying.back() + 1;
    shrink_pending_[r] = true;
    draining_[r].insert(leaving.begin(), leaving.end());
  }

  // A replaced worker's pod succeeds when it leaves; its index stays.
  void Retire(MemberRole, int32_t) override {}

  void Keep(MemberRole role, int32_t id) override {
    const int r = static_cast<int>(role);
    draining_[r].erase(id);
    if (shrink_pending_[r]) shrink_to_[r] = std::max(shrink_to_[r], id + 1);
  }

  bool Settle(MemberRole role, const ClusterStatus& status,
              const std::vector<int32_t>& keep,
              std::vector<int32_t>* drain) override {
    last_ = status;
    const int r = static_cast<int>(role);
    if (!shrink_pending_[r]) return false;
    // Every member at or past the new size must be gone first, or
    // Kubernetes would stop it mid-drain; replacements started since stay.
    // A pod that registered there after the drains were asked (its index
    // was made by an earlier grow) is drained too.
    int32_t size = shrink_to_[r];
    bool waiting = false;
    for (const MemberStatus& m : status.members) {
      if (m.role != RoleName(role)) continue;
      if (std::find(keep.begin(), keep.end(), m.id) != keep.end()) {
        size = std::max(size, m.id + 1);
      } else if (m.id >= shrink_to_[r] && Present(m)) {
        if (Live(m) && !draining_[r].contains(m.id)) {
          draining_[r].insert(m.id);
          drain->push_back(m.id);
        }
        waiting = true;  // not gone yet
      }
    }
    if (waiting) return true;
    draining_[r].clear();
    for (const int32_t id : keep) size = std::max(size, id + 1);
    if (size == 0) size = 1;  // never a Job of no pods
    if (Patch(role, size).ok()) shrink_pending_[r] = false;
    return true;
  }

 private:
  std::string JobName(MemberRole role) const {
    return options_.job_name + "-" + RoleName(role);
  }

  int32_t MaxSize(MemberRole role) const {
    return role == MemberRole::kWorker ? options_.max_workers
                                       : options_.max_servers;
  }

  std::vector<std::string> Namespace() const {
    return NamespaceArgs(options_.kube_namespace);
  }

  // The Job's completions (its size), or an error.
  Result<int32_t> JobSize(MemberRole role) {
    std::vector<std::string> args = Namespace();
    for (const std::string& a :
         {std::string("get"), std::string("job"), JobName(role),
          std::string("--output=jsonpath={.spec.completions}")}) {
      args.push_back(a);
    }
    std::string out;
    const int code = tool_(args, &out);
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) {
      out.pop_back();
    }
    if (code != 0) {
      return UnavailableError("kubectl get job " + JobName(role) +
                              (code < 0
                                   ? " did not run or timed out"
                                   : " exited with " + std::to_string(code)));
    }
    int32_t size = -1;
    if (out.empty() || out.size() > 6 ||
        out.find_first_not_of("0123456789") != std::string::npos ||
        (size = std::stoi(out)) < 0) {
      return UnavailableError("kubectl get job " + JobName(role) +
                              ": not a size: '" + out + "'");
    }
    return size;
  }

  Status Patch(MemberRole role, int32_t size) {
    std::vector<std::string> args = Namespace();
    const std::string n = std::to_string(size);
    for (const std::string& a : {std::string("patch"), std::string("job"),
                                 JobName(role), std::string("--type=merge"),
                                 "--patch={\"spec\":{\"parallelism\":" + n +
                                     ",\"completions\":" + n + "}}"}) {
      args.push_back(a);
    }
    std::string out;
    const int code = tool_(args, &out);
    if (code != 0) {
      return UnavailableError("kubectl patch job " + JobName(role) +
                              (code < 0
                                   ? " did not run or timed out"
                                   : " exited with " + std::to_string(code)));
    }
    act_("patched " + JobName(role) + " to " + n);
    return Status::Ok();
  }

  const K8sControllerOptions& options_;
  const Tool tool_;
  const std::function<void(const std::string&)> act_;
  ClusterStatus last_;
  // Per role (MemberRole as index): a shrink under way, the Job's size
  // once every member at or past it is gone, and the members drained for
  // it.
  bool shrink_pending_[2] = {false, false};
  int32_t shrink_to_[2] = {0, 0};
  std::set<int32_t> draining_[2];
};

K8sController::K8sController(K8sControllerOptions options, Tool tool,
                             std::unique_ptr<Drainer> drainer)
    : options_(std::move(options)),
      // A look may take a status query and two kubectl calls (a patch,
      // the pods) at their longest, so the time between two looks' starts
      // is no gap; looks missed are told apart in Step instead.
      lost_(options_.lost_after_ms,
            std::max(LostMembers::kGapMs, options_.poll_ms +
                                              options_.status_timeout_ms +
                                              2 * options_.tool_timeout_ms)),
      drainer_(std::move(drainer)) {
  if (!tool) {
    const std::string kubectl = options_.kubectl;
    const int64_t timeout_ms = options_.tool_timeout_ms;
    tool = [kubectl, timeout_ms](const std::vector<std::string>& args,
                                 std::string* out) {
      std::vector<std::string> argv = {kubectl};
      argv.insert(argv.end(), args.begin(), args.end());
      sigset_t none;
      sigemptyset(&none);
      return RunToEnd(argv, none, out, timeout_ms);
    };
  }
  if (!drainer_) {
    drainer_ = std::make_unique<CoordinatorDrainer>(
        options_.coordinator, options_.security, options_.status_timeout_ms,
        options_.drain_timeout_ms);
  }
  tool_ = tool;
  provider_ = std::make_unique<JobProvider>(
      options_, std::move(tool),
      [this](const std::string& line) { Act(line); });
  reconciler_ = std::make_unique<Reconciler>(
      provider_.get(), drainer_.get(),
      [this](const std::string&, const std::string& line) { Act(line); });
}

K8sController::~K8sController() = default;

void K8sController::Act(const std::string& line) {
  LOG(INFO) << "k8s-controller: " << line;
  actions_.push_back(line);
}

void K8sController::Step(const ClusterStatus& status) {
  const int64_t now = SteadyMs();
  Step(status, now, now);
}

void K8sController::Step(const ClusterStatus& status, int64_t asked_ms,
                         int64_t now_ms) {
  // The wall clock at the caller's `now_ms`: pods' start times are on it.
  const int64_t wall_ms = WallMs();
  const int64_t steady_ms = SteadyMs();
  // A status asked for well after the last look ended: looks were missed
  // (the coordinator did not answer: restarting, say). What happened
  // meanwhile is unknown, so each lost member's grace starts again.
  if (last_look_end_ms_ &&
      asked_ms - *last_look_end_ms_ > options_.poll_ms + LostMembers::kGapMs) {
    lost_.StartGracesAgain();
  }
  // A kubectl call that failed leaves its target to the next step.
  if (Status s = reconciler_->Step(status); !s.ok()) {
    LOG(WARNING) << "k8s-controller: " << s << "; tried again";
  }
  if (options_.lost_after_ms > 0) {
    DeleteLost(status, asked_ms, now_ms, wall_ms);
  }
  // On the caller's clock: `now_ms` plus this look's own time.
  last_look_end_ms_ = now_ms + (SteadyMs() - steady_ms);
}

void K8sController::DeleteLost(const ClusterStatus& status, int64_t asked_ms,
                               int64_t now_ms, int64_t wall_ms) {
  // The pods are listed again when a registration appears (its pod may be
  // new), when the members listed dead change, and while one of them has
  // a running pod (which may be replaced); otherwise the last listing
  // stands (a worker dead for good, its pod gone, costs no call).
  std::set<uint64_t> registrations, dead;
  bool watching = false;
  for (const MemberStatus& m : status.members) {
    if (m.role != "server" && m.role != "worker") continue;
    registrations.insert(m.incarnation);
    if (m.state != "dead") continue;
    dead.insert(m.incarnation);
    const MemberRole role =
        m.role == "server" ? MemberRole::kServer : MemberRole::kWorker;
    if (pods_.contains({role, m.id})) watching = true;
  }
  if (registrations != registrations_ || dead != dead_ || watching) {
    Result<std::map<LostMembers::Member, Pod>> pods =
        RunningPods(now_ms, wall_ms);
    if (!pods.ok()) {
      // Once per run of failures (a Role without pods: every look).
      if (!pods_failing_) {
        LOG(WARNING) << "k8s-controller: " << pods.status()
                     << "; lost members' pods are not deleted until it "
                        "works (tried at each look)";
      }
      pods_failing_ = true;
      return;  // the next look lists them again
    }
    if (pods_failing_) LOG(INFO) << "k8s-controller: kubectl get pods works";
    pods_failing_ = false;
    pods_ = std::move(*pods);
    registrations_ = std::move(registrations);
    dead_ = std::move(dead);
  }
  const auto process_of = [&](const LostMembers::Member& member) {
    const auto it = pods_.find(member);
    if (it == pods_.end()) return LostMembers::Process{};
    // A pid stands for the pod's container: a new pod, or its container
    // started again, is a new process.
    const auto pid = static_cast<pid_t>(
        std::hash<std::string>{}(it->second.process) % 0x7ffffffe + 1);
    return LostMembers::Process{pid, it->second.started_ms};
  };
  for (const LostMembers::Member& m :
       lost_.Step(status, asked_ms, now_ms, process_of)) {
    const Pod& pod = pods_.at(m);
    std::vector<std::string> args = NamespaceArgs(options_.kube_namespace);
    for (const std::string& a : {std::string("delete"), std::string("pod"),
                                 pod.name, std::string("--wait=false")}) {
      args.push_back(a);
    }
    std::string out;
    const int code = tool_(args, &out);
    const std::string who =
        std::string(RoleName(m.first)) + " " + std::to_string(m.second);
    if (code != 0) {
      LOG(WARNING) << "k8s-controller: kubectl delete pod " << pod.name
                   << (code < 0 ? " did not run or timed out"
                                : " exited with " + std::to_string(code))
                   << "; " << who << "'s pod is deleted at the next look";
      lost_.Unreport(m);
      continue;
    }
    char line[256];
    std::snprintf(
        line, sizeof line,
        "deleted pod %s: %s listed dead for %.1f s while its pod runs on "
        "(stopped or hung); its Job starts it again",
        pod.name.c_str(), who.c_str(),
        static_cast<double>(lost_.DeadForMs(m).value_or(0)) / 1000.0);
    Act(line);
  }
}

Result<std::map<LostMembers::Member, K8sController::Pod>>
K8sController::RunningPods(int64_t now_ms, int64_t wall_ms) {
  const std::string worker_job = options_.job_name + "-worker";
  const std::string server_job = options_.job_name + "-server";
  std::vector<std::string> args = NamespaceArgs(options_.kube_namespace);
  for (const std::string& a :
       {std::string("get"), std::string("pods"),
        "--selector=job-name in (" + worker_job + "," + server_job + ")",
        std::string("--output=jsonpath={range .items[*]}"
                    "{.metadata.labels.job-name}{\"\\t\"}"
                    "{.metadata.annotations.batch\\.kubernetes\\.io/"
                    "job-completion-index}{\"\\t\"}"
                    "{.metadata.name}{\"\\t\"}{.status.phase}{\"\\t\"}"
                    "{.status.containerStatuses[0].state.running.startedAt}"
                    "{\"\\t\"}{.status.containerStatuses[0].restartCount}"
                    "{\"\\n\"}{end}")}) {
    args.push_back(a);
  }
  std::string out;
  const int code = tool_(args, &out);
  if (code != 0) {
    return UnavailableError("kubectl get pods" +
                            (code < 0
                                 ? std::string(" did not run or timed out")
                                 : " exited with " + std::to_string(code)));
  }
  std::map<LostMembers::Member, Pod> pods;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string field; std::getline(fields, field, '\t');) {
      f.push_back(field);
    }
    if (f.size() != 6 || f[3] != "Running") continue;
    MemberRole role;
    if (f[0] == worker_job) {
      role = MemberRole::kWorker;
    } else if (f[0] == server_job) {
      role = MemberRole::kServer;
    } else {
      continue;
    }
    const std::optional<int32_t> index = ParseIndex(f[1]);
    const std::optional<int64_t> started = ParseRfc3339Ms(f[4]);
    if (!index || !started) continue;
    // Later by the margin (the time's resolution, the nodes' clock skew),
    // never earlier: a registration from before the container started is
    // never taken for its own.
    Pod pod{f[2], f[2] + "#" + f[5],
            now_ms - (wall_ms - *started) + kStartMarginMs};
    auto [it, added] = pods.emplace(LostMembers::Member{role, *index}, pod);
    // Two running pods of one index (one on its way out): the newer.
    if (!added && it->second.started_ms < pod.started_ms) it->second = pod;
  }
  return pods;
}

Status RunK8sController(const K8sControllerOptions& options,
                        const std::atomic<bool>& stop) {
  K8sController controller(options);
  auto last_answer = std::chrono::steady_clock::now();
  bool training = true;
  while (!stop.load()) {
    const int64_t asked_ms = SteadyMs();
    Result<ClusterStatus> status = QueryClusterStatus(
        options.coordinator, options.status_timeout_ms, options.security);
    const auto now = std::chrono::steady_clock::now();
    const int64_t silent_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - last_answer)
            .count();
    if (status.ok()) {
      last_answer = now;
      training = false;
      for (const MemberStatus& m : status->members) {
        if (m.role == "worker" && Present(m)) training = true;
      }
      controller.Step(*status, asked_ms, SteadyMs());
    } else if (options.give_up_ms > 0 && silent_ms >= options.give_up_ms) {
      if (!training) return Status::Ok();
      return UnavailableError("no answer from the coordinator at " +
                              options.coordinator + " for " +
                              std::to_string(silent_ms / 1000) +
                              " s; last: " + status.status().ToString());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(options.poll_ms));
  }
  return Status::Ok();
}

}  // namespace ductile::launch
