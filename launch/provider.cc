#include "launch/provider.h"

#include <chrono>
#include <utility>

#include "glog/logging.h"

namespace ductile::launch {

const char* RoleName(MemberRole role) {
  return role == MemberRole::kWorker ? "worker" : "server";
}

CoordinatorDrainer::CoordinatorDrainer(std::string address, Security security,
                                       int64_t worker_timeout_ms,
                                       int64_t server_timeout_ms)
    : address_(std::move(address)),
      security_(std::move(security)),
      worker_timeout_ms_(worker_timeout_ms),
      server_timeout_ms_(server_timeout_ms) {}

CoordinatorDrainer::~CoordinatorDrainer() {
  for (Running& r : running_) r.answer.wait();
}

void CoordinatorDrainer::Drain(MemberRole role, int32_t id) {
  const std::string address = address_;
  const Security security = security_;
  const int64_t timeout_ms =
      role == MemberRole::kWorker ? worker_timeout_ms_ : server_timeout_ms_;
  running_.push_back(Running{
      role, id,
      std::async(std::launch::async, [address, security, role, id, timeout_ms] {
        return role == MemberRole::kServer
                   ? RequestDrainServer(address, id, timeout_ms, security)
                   : RequestDrainWorker(address, id, timeout_ms, security);
      })});
}

std::vector<Drainer::Outcome> CoordinatorDrainer::Answered() {
  std::vector<Outcome> answered;
  for (auto it = running_.begin(); it != running_.end();) {
    if (it->answer.wait_for(std::chrono::seconds(0)) !=
        std::future_status::ready) {
      ++it;
      continue;
    }
    answered.push_back(Outcome{it->role, it->id, it->answer.get()});
    it = running_.erase(it);
  }
  return answered;
}

ExitReporter::ExitReporter(std::string address, Security security,
                           int64_t timeout_ms)
    : address_(std::move(address)),
      security_(std::move(security)),
      timeout_ms_(timeout_ms) {}

ExitReporter::~ExitReporter() {
  for (auto& [process, answer] : running_) answer.wait();
}

void ExitReporter::Report(const MemberProcess& process) {
  const std::string address = address_;
  const Security security = security_;
  const int64_t timeout_ms = timeout_ms_;
  running_.emplace_back(
      process,
      std::async(std::launch::async, [address, security, process, timeout_ms] {
        return ReportMemberExit(address, process, timeout_ms, security);
      }));
}

void ExitReporter::Collect() {
  for (auto it = running_.begin(); it != running_.end();) {
    if (it->second.wait_for(std::chrono::seconds(0)) !=
        std::future_status::ready) {
      ++it;
      continue;
    }
    const Status s = it->second.get();
    if (!s.ok() && s.code() != StatusCode::kFailedPrecondition) {
      LOG(WARNING) << "the coordinator was not told that " << it->first.role
                   << " " << it->first.id
                   << " exited (it learns it from the heartbeat timeout): "
                   << s;
    }
    it = running_.erase(it);
  }
}

}  // namespace ductile::launch
