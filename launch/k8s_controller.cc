#include "launch/k8s_controller.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <set>
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
    if (options_.kube_namespace.empty()) return {};
    return {"--namespace", options_.kube_namespace};
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
    : options_(std::move(options)), drainer_(std::move(drainer)) {
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
  // A kubectl call that failed leaves its target to the next step.
  if (Status s = reconciler_->Step(status); !s.ok()) {
    LOG(WARNING) << "k8s-controller: " << s << "; tried again";
  }
}

Status RunK8sController(const K8sControllerOptions& options,
                        const std::atomic<bool>& stop) {
  K8sController controller(options);
  auto last_answer = std::chrono::steady_clock::now();
  bool training = true;
  while (!stop.load()) {
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
      controller.Step(*status);
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
