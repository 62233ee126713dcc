#include "launch/k8s_controller.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "launch/child_process.h"
#include "glog/logging.h"

namespace ductile::launch {
namespace {

const char* RoleName(int role) { return role == 0 ? "worker" : "server"; }

// A member that is in the job or on its way in.
bool Live(const MemberStatus& m) {
  return m.alive && (m.state == "joining" || m.state == "active" ||
                     m.state == "rejoining");
}

// Live, or leaving but not gone yet.
bool Present(const MemberStatus& m) {
  return Live(m) || (m.alive && m.state == "draining");
}

std::vector<int32_t> LiveIds(const ClusterStatus& status,
                             const std::string& role) {
  std::vector<int32_t> ids;
  for (const MemberStatus& m : status.members) {
    if (m.role == role && Live(m)) ids.push_back(m.id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

// A drain answered NotFound or FailedPrecondition: the member is not in
// the job (never registered, or already gone).
bool NothingToDrain(const Status& s) {
  return s.code() == StatusCode::kNotFound ||
         s.code() == StatusCode::kFailedPrecondition;
}

const MemberStatus* Find(const ClusterStatus& status, const std::string& role,
                         int32_t id) {
  for (const MemberStatus& m : status.members) {
    if (m.role == role && m.id == id) return &m;
  }
  return nullptr;
}

}  // namespace

K8sController::K8sController(K8sControllerOptions options, Tool tool)
    : options_(std::move(options)), tool_(std::move(tool)) {
  if (!tool_) {
    const std::string kubectl = options_.kubectl;
    const int64_t timeout_ms = options_.tool_timeout_ms;
    tool_ = [kubectl, timeout_ms](const std::vector<std::string>& args,
                                  std::string* out) {
      std::vector<std::string> argv = {kubectl};
      argv.insert(argv.end(), args.begin(), args.end());
      sigset_t none;
      sigemptyset(&none);
      return RunToEnd(argv, none, out, timeout_ms);
    };
  }
}

std::string K8sController::JobName(Role role) const {
  return options_.job_name + "-" + RoleName(role);
}

void K8sController::Act(const std::string& line) {
  LOG(INFO) << "k8s-controller: " << line;
  actions_.push_back(line);
}

Result<int32_t> K8sController::JobSize(Role role) {
  std::vector<std::string> args;
  if (!options_.kube_namespace.empty()) {
    args = {"--namespace", options_.kube_namespace};
  }
  for (const char* a : {"get", "job"}) args.push_back(a);
  args.push_back(JobName(role));
  args.push_back("--output=jsonpath={.spec.completions}");
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

Status K8sController::Patch(Role role, int32_t size) {
  std::vector<std::string> args;
  if (!options_.kube_namespace.empty()) {
    args = {"--namespace", options_.kube_namespace};
  }
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
  Act("patched " + JobName(role) + " to " + n);
  return Status::Ok();
}

void K8sController::Step(const ClusterStatus& status) {
  for (Role role : {kWorker, kServer}) {
    if (shrink_pending_[role]) {
      FinishShrink(role, status);
    } else {
      ApplyTarget(role, status);
    }
  }
  Replace(status);
}

int32_t K8sController::MaxSize(Role role) const {
  return role == kWorker ? options_.max_workers : options_.max_servers;
}

std::set<int32_t> K8sController::Fresh() const {
  std::set<int32_t> fresh;
  for (const auto& [old, id] : replacing_) fresh.insert(id);
  return fresh;
}

void K8sController::ApplyTarget(Role role, const ClusterStatus& status) {
  const int32_t target =
      role == kWorker ? status.target_workers : status.target_servers;
  if (target <= 0 || target == applied_[role]) return;
  // A worker being replaced and its replacement count as one, and
  // neither is drained.
  std::set<int32_t> paired;
  if (role == kWorker) {
    for (const auto& [old, fresh] : replacing_) {
      paired.insert(old);
      paired.insert(fresh);
    }
  }
  const std::set<int32_t> fresh =
      role == kWorker ? Fresh() : std::set<int32_t>();
  const std::vector<int32_t> live = LiveIds(status, RoleName(role));
  int32_t count = 0;
  for (int32_t id : live) count += fresh.contains(id) ? 0 : 1;
  if (target > count) {
    // New indexes past the Job's size: new members.
    Result<int32_t> size = JobSize(role);
    if (!size.ok()) {
      LOG(WARNING) << "k8s-controller: " << size.status() << "; tried again";
      return;
    }
    int32_t grown = *size + (target - count);
    const int32_t max = MaxSize(role);
    if (max > 0 && grown > max) {
      LOG(WARNING) << "k8s-controller: " << RoleName(role) << "s: a target of "
                   << target << " needs " << grown << " indexes in "
                   << JobName(role) << ", and only " << max
                   << " have member keys (ductile k8s --max_" << RoleName(role)
                   << "s): growing to " << max;
      grown = max;
    }
    if (grown > *size && !Patch(role, grown).ok()) return;
  } else if (target < count) {
    // The newest first, as `ductile local` does; what stays sets the
    // Job's new size.
    std::set<int32_t> staying(live.begin(), live.end());
    int32_t to_drain = count - target;
    for (auto it = live.rbegin(); it != live.rend() && to_drain > 0; ++it) {
      const int32_t id = *it;
      if (paired.contains(id)) continue;
      --to_drain;
      if (Drain(role, id)) staying.erase(id);
    }
    shrink_to_[role] = staying.empty() ? 0 : *staying.rbegin() + 1;
    shrink_pending_[role] = true;
  }
  applied_[role] = target;
}

bool K8sController::Drain(Role role, int32_t id) {
  const Status s =
      role == kWorker
          ? RequestDrainWorker(options_.coordinator, id,
                               options_.status_timeout_ms, options_.security)
          : RequestDrainServer(options_.coordinator, id,
                               options_.drain_timeout_ms, options_.security);
  const std::string name =
      std::string(RoleName(role)) + " " + std::to_string(id);
  if (s.ok() || s.code() == StatusCode::kDeadlineExceeded) {
    // Asked (a long drain goes on past the wait): the Job is lowered once
    // it is gone.
    Act("draining " + name);
    draining_[role].insert(id);
    return true;
  }
  if (s.code() == StatusCode::kNotFound) return true;  // not in the job
  LOG(WARNING) << "k8s-controller: the coordinator refused to drain " << name
               << " (" << s << "): it stays";
  return false;
}

void K8sController::FinishShrink(Role role, const ClusterStatus& status) {
  // Every member at or past the new size must be gone first, or
  // Kubernetes would stop it mid-drain; replacements started since stay.
  // A pod that registered there after the drains were asked (its index
  // was made by an earlier grow) is drained too, or, if refused, kept.
  const std::set<int32_t> fresh =
      role == kWorker ? Fresh() : std::set<int32_t>();
  int32_t size = shrink_to_[role];
  bool waiting = false;
  for (const MemberStatus& m : status.members) {
    if (m.role != RoleName(role)) continue;
    if (fresh.contains(m.id)) {
      size = std::max(size, m.id + 1);
    } else if (m.id >= shrink_to_[role] && Present(m)) {
      if (Live(m) && !draining_[role].contains(m.id) && !Drain(role, m.id)) {
        shrink_to_[role] = std::max(shrink_to_[role], m.id + 1);
        size = std::max(size, m.id + 1);
        continue;
      }
      waiting = true;  // not gone yet
    }
  }
  if (waiting) return;
  draining_[role].clear();
  for (int32_t id : fresh) size = std::max(size, id + 1);
  if (size == 0) size = 1;  // never a Job of no pods
  if (Patch(role, size).ok()) shrink_pending_[role] = false;
}

void K8sController::Replace(const ClusterStatus& status) {
  // Replacements under way: drain the old worker once the new is active.
  for (auto it = replacing_.begin(); it != replacing_.end();) {
    const MemberStatus* fresh = Find(status, "worker", it->second);
    const MemberStatus* old = Find(status, "worker", it->first);
    if (old == nullptr || !Present(*old)) {
      it = replacing_.erase(it);  // it left or died meanwhile
      continue;
    }
    if (fresh == nullptr || !fresh->alive || fresh->state != "active") {
      ++it;
      continue;
    }
    const Status s =
        RequestDrainWorker(options_.coordinator, it->first,
                           options_.status_timeout_ms, options_.security);
    if (!s.ok() && !NothingToDrain(s)) {
      LOG(WARNING) << "k8s-controller: cannot drain worker " << it->first
                   << ": " << s << "; tried again";
      ++it;
      continue;
    }
    Act("worker " + std::to_string(it->second) +
        " is active; draining worker " + std::to_string(it->first));
    it = replacing_.erase(it);
  }
  // No new replacement while the worker Job is being lowered.
  if (shrink_pending_[kWorker]) return;
  for (int32_t old : status.replace_workers) {
    if (replaced_.contains(old)) continue;
    const MemberStatus* m = Find(status, "worker", old);
    if (m == nullptr || !Live(*m)) continue;
    Result<int32_t> size = JobSize(kWorker);
    if (!size.ok()) {
      LOG(WARNING) << "k8s-controller: " << size.status() << "; tried again";
      return;
    }
    if (MaxSize(kWorker) > 0 && *size >= MaxSize(kWorker)) {
      LOG(WARNING) << "k8s-controller: cannot replace worker " << old
                   << ": its replacement would be index " << *size << " of "
                   << JobName(kWorker) << ", and only " << MaxSize(kWorker)
                   << " have member keys (ductile k8s --max_workers)";
      replaced_.insert(old);  // not asked again
      continue;
    }
    if (!Patch(kWorker, *size + 1).ok()) return;
    Act("worker " + std::to_string(*size) + " starts in place of worker " +
        std::to_string(old));
    replacing_[old] = *size;
    replaced_.insert(old);
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
