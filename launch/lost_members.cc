#include "launch/lost_members.h"

#include <algorithm>
#include <string>

namespace ductile::launch {

std::vector<LostMembers::Member> LostMembers::Step(
    const ClusterStatus& status, int64_t asked_ms, int64_t now_ms,
    const ProcessOf& process_of) {
  if (last_step_ms_ && now_ms - *last_step_ms_ > gap_ms_) {
    // What happened meanwhile is unknown: each grace starts again.
    for (auto& [member, w] : watches_) w.dead_since.reset();
  }
  last_step_ms_ = now_ms;
  lingering_.clear();
  std::vector<Member> lost;
  for (const MemberStatus& m : status.members) {
    if (m.role != "server" && m.role != "worker") continue;
    const Member member{
        m.role == "server" ? MemberRole::kServer : MemberRole::kWorker, m.id};
    Watch& w = watches_[member];
    const Process process = process_of(member);
    uint64_t& newest = newest_[member];
    if (process.pid != w.pid) {  // a new process
      w = Watch{};
      w.pid = process.pid;
      w.before = newest;
    }
    // Its own registration: heard from after the process started (a
    // predecessor's last heartbeat is older), and not listed before it.
    const bool own = asked_ms - m.last_heartbeat_ms_ago >= process.started_ms &&
                     m.incarnation > w.before;
    newest = std::max(newest, m.incarnation);
    if (process.pid > 0 && m.state == "finished" && own) {
      if (!w.finished_since) w.finished_since = now_ms;
      if (now_ms - *w.finished_since >= grace_ms_ && !w.lingering) {
        w.lingering = true;
        lingering_.push_back(member);
      }
    } else {
      w.finished_since.reset();
    }
    if (process.pid <= 0 || m.state != "dead" || !own) {
      w.dead_since.reset();
      w.dead_for = 0;
      continue;
    }
    if (!w.dead_since) w.dead_since = now_ms;
    w.dead_for = now_ms - *w.dead_since;
    if (w.dead_for >= grace_ms_ && !w.reported) {
      w.reported = true;
      lost.push_back(member);
    }
  }
  return lost;
}

std::optional<int64_t> LostMembers::DeadForMs(const Member& member) const {
  const auto it = watches_.find(member);
  if (it == watches_.end() || !it->second.dead_since) return std::nullopt;
  return it->second.dead_for;
}

}  // namespace ductile::launch
