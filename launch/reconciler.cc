#include "launch/reconciler.h"

#include <algorithm>
#include <utility>

namespace ductile::launch {
namespace {

std::string Name(MemberRole role, int32_t id) {
  return std::string(RoleName(role)) + " " + std::to_string(id);
}

int Index(MemberRole role) { return static_cast<int>(role); }

}  // namespace

int64_t JobClock(const ClusterStatus& status) {
  int64_t clock = 0;
  for (const MemberStatus& m : status.members) {
    clock =
        std::max(clock, m.role == "server" ? m.counters.min_clock : m.clock);
  }
  return clock;
}

std::vector<int32_t> LiveMembers(const ClusterStatus& status, MemberRole role) {
  std::vector<int32_t> ids;
  for (const MemberStatus& m : status.members) {
    if (m.role == RoleName(role) && m.alive &&
        (m.state == "joining" || m.state == "active" ||
         m.state == "rejoining")) {
      ids.push_back(m.id);
    }
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

Reconciler::Reconciler(Provider* provider, Drainer* drainer, Log log)
    : provider_(provider), drainer_(drainer), log_(std::move(log)) {}

bool Reconciler::Busy() const {
  return !drains_.empty() ||
         std::any_of(replacing_.begin(), replacing_.end(),
                     [](const auto& r) { return !r.second.draining; });
}

void Reconciler::AskDrain(MemberRole role, int32_t id,
                          const std::string& source) {
  drainer_->Drain(role, id);
  drains_.push_back(PendingDrain{role, id, source});
}

void Reconciler::TakeDrainOutcomes() {
  for (Drainer::Outcome& outcome : drainer_->Answered()) {
    auto it = std::find_if(
        drains_.begin(), drains_.end(), [&](const PendingDrain& d) {
          return d.role == outcome.role && d.id == outcome.id;
        });
    if (it == drains_.end()) continue;
    const std::string name = Name(it->role, it->id);
    const Status& s = outcome.status;
    if (s.ok()) {
      log_(it->source, "drained " + name);
    } else if (s.code() == StatusCode::kNotFound &&
               it->attempts < kDrainAttempts &&
               !provider_->Gone(it->role, it->id)) {
      // Not registered yet: asked again.
      ++it->attempts;
      drainer_->Drain(it->role, it->id);
      continue;
    } else {
      log_(it->source, "could not drain " + name + ": " + s.message());
      // A drain that outlasted the wait goes on; a refusal keeps it.
      if (s.code() != StatusCode::kDeadlineExceeded) {
        provider_->Keep(it->role, it->id);
      }
    }
    drains_.erase(it);
  }
}

Status Reconciler::Resize(MemberRole role, int32_t count,
                          const std::string& source,
                          const ClusterStatus& status) {
  const int64_t clock = JobClock(status);
  // A worker being replaced and its replacement count as one, and neither
  // is drained by a resize (the replacement drains the other). A pair
  // counts once while either of the two runs (the new one may have died,
  // to be started again).
  std::vector<int32_t> members = provider_->Members(role, status);
  std::sort(members.rbegin(), members.rend());  // the newest first
  std::vector<int32_t> unpaired;
  std::set<int32_t> pairs;
  for (const int32_t id : members) {
    bool paired = false;
    if (role == MemberRole::kWorker) {
      for (const auto& [old_id, r] : replacing_) {
        if (r.draining || (id != r.new_id && id != old_id)) continue;
        paired = true;
        pairs.insert(old_id);
      }
    }
    if (!paired) unpaired.push_back(id);
  }
  const int32_t now = static_cast<int32_t>(unpaired.size() + pairs.size());
  std::string line = std::string(RoleName(role)) + "s " + std::to_string(now) +
                     " -> " + std::to_string(count) + " at clock " +
                     std::to_string(clock) + ":";
  if (count > now) {
    DUCTILE_ASSIGN_OR_RETURN(std::vector<int32_t> started,
                             provider_->Grow(role, count - now));
    for (const int32_t id : started) line += " started " + Name(role, id) + ";";
  } else if (count < now) {
    std::vector<int32_t> leaving;
    for (size_t i = 0;
         i < static_cast<size_t>(now - count) && i < unpaired.size(); ++i) {
      leaving.push_back(unpaired[i]);
    }
    std::vector<int32_t> staying;
    for (const int32_t id : members) {
      if (std::find(leaving.begin(), leaving.end(), id) == leaving.end()) {
        staying.push_back(id);
      }
    }
    std::sort(staying.begin(), staying.end());
    provider_->Shrink(role, staying, leaving);
    for (const int32_t id : leaving) {
      AskDrain(role, id, source);
      line += " draining " + Name(role, id) + ";";
    }
  }
  log_(source, line);
  return Status::Ok();
}

Status Reconciler::Step(const ClusterStatus& status) {
  TakeDrainOutcomes();
  std::vector<int32_t> fresh;  // replacements under way
  for (const auto& [old_id, r] : replacing_) fresh.push_back(r.new_id);
  bool settling[2] = {false, false};
  for (const MemberRole role : {MemberRole::kWorker, MemberRole::kServer}) {
    std::vector<int32_t> drain;
    settling[Index(role)] = provider_->Settle(
        role, status,
        role == MemberRole::kWorker ? fresh : std::vector<int32_t>(), &drain);
    for (const int32_t id : drain) {
      AskDrain(role, id, "resize");
      log_("resize", "draining " + Name(role, id) + ", past the new size");
    }
    if (settling[Index(role)]) continue;
    // `ductile resize` or a policy: a new target is acted on once.
    const int32_t target = role == MemberRole::kWorker ? status.target_workers
                                                       : status.target_servers;
    if (target <= 0 || target == applied_[Index(role)]) continue;
    DUCTILE_RETURN_IF_ERROR(Resize(role, target, "resize", status));
    applied_[Index(role)] = target;
  }
  if (settling[Index(MemberRole::kWorker)]) return Status::Ok();
  return Replace(status);
}

Status Reconciler::Replace(const ClusterStatus& status) {
  constexpr MemberRole kWorker = MemberRole::kWorker;
  // Replacements gone before they were active: another, or give up.
  for (auto it = replacing_.begin(); it != replacing_.end();) {
    const int32_t old_id = it->first;
    Replacement& r = it->second;
    if (r.draining || !provider_->Gone(kWorker, r.new_id)) {
      ++it;
      continue;
    }
    if (provider_->Gone(kWorker, old_id)) {  // nothing left to replace
      it = replacing_.erase(it);
      continue;
    }
    if (r.tries >= kReplaceTries) {
      log_("replace", "worker " + std::to_string(r.new_id) +
                          " died before it was active; giving up on "
                          "replacing worker " +
                          std::to_string(old_id) + " after " +
                          std::to_string(r.tries) + " tries");
      kept_.insert(old_id);
      it = replacing_.erase(it);
      continue;
    }
    DUCTILE_ASSIGN_OR_RETURN(std::vector<int32_t> started,
                             provider_->Grow(kWorker, 1));
    if (started.empty()) {
      kept_.insert(old_id);
      it = replacing_.erase(it);
      continue;
    }
    log_("replace", "worker " + std::to_string(r.new_id) +
                        " died before it was active; started worker " +
                        std::to_string(started[0]) + " in place of worker " +
                        std::to_string(old_id) + " (try " +
                        std::to_string(r.tries + 1) + " of " +
                        std::to_string(kReplaceTries) + ")");
    r.new_id = started[0];
    ++r.tries;
    ++it;
  }
  // New requests: a worker started in each one's place.
  for (const int32_t old_id : status.replace_workers) {
    if (replacing_.contains(old_id) || kept_.contains(old_id)) continue;
    const std::vector<int32_t> members = provider_->Members(kWorker, status);
    if (std::find(members.begin(), members.end(), old_id) == members.end()) {
      continue;  // gone already, or being drained
    }
    DUCTILE_ASSIGN_OR_RETURN(std::vector<int32_t> started,
                             provider_->Grow(kWorker, 1));
    if (started.empty()) {
      log_("replace", "cannot replace worker " + std::to_string(old_id) +
                          ": no worker can be started in its place");
      kept_.insert(old_id);  // not asked again
      continue;
    }
    replacing_.emplace(old_id, Replacement{started[0]});
    log_("replace", "started worker " + std::to_string(started[0]) +
                        " in place of worker " + std::to_string(old_id));
  }
  // The old one leaves once the new one is active: the job never runs
  // with fewer workers.
  for (auto& [old_id, r] : replacing_) {
    if (r.draining) continue;
    const int32_t new_id = r.new_id;
    const bool active =
        std::any_of(status.members.begin(), status.members.end(),
                    [new_id](const MemberStatus& m) {
                      return m.role == "worker" && m.id == new_id && m.alive &&
                             m.state == "active";
                    });
    if (!active) continue;
    r.draining = true;
    provider_->Retire(kWorker, old_id);
    AskDrain(kWorker, old_id, "replace");
    log_("replace", "worker " + std::to_string(r.new_id) +
                        " is active; draining worker " +
                        std::to_string(old_id));
  }
  // Pairs whose drain is answered are done.
  for (auto it = replacing_.begin(); it != replacing_.end();) {
    const bool asked =
        std::any_of(drains_.begin(), drains_.end(), [&](const PendingDrain& d) {
          return d.role == kWorker && d.id == it->first;
        });
    it = it->second.draining && !asked ? replacing_.erase(it) : std::next(it);
  }
  return Status::Ok();
}

}  // namespace ductile::launch
