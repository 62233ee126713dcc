#include "launch/lost_members.h"

#include <string>

namespace ductile::launch {

std::vector<LostMembers::Member> LostMembers::Step(
    const ClusterStatus& status, int64_t now_ms, const ProcessOf& process_of) {
  std::vector<Member> lost;
  std::map<Member, uint64_t> listed;
  for (const MemberStatus& m : status.members) {
    if (m.role != "server" && m.role != "worker") continue;
    const Member member{
        m.role == "server" ? MemberRole::kServer : MemberRole::kWorker, m.id};
    listed[member] = m.incarnation;
    Watch& w = watches_[member];
    const pid_t pid = process_of(member);
    if (pid != w.pid) {
      // A new process (or none): what was listed so far is not its own.
      const auto newest = newest_.find(member);
      w = Watch{};
      w.pid = pid;
      w.before = newest == newest_.end() ? 0 : newest->second;
    }
    const bool own_death =
        pid > 0 && m.state == "dead" && m.incarnation > w.before;
    if (!own_death) {
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
  for (const auto& [member, incarnation] : listed) {
    uint64_t& newest = newest_[member];
    if (incarnation > newest) newest = incarnation;
  }
  return lost;
}

std::optional<int64_t> LostMembers::DeadForMs(const Member& member) const {
  const auto it = watches_.find(member);
  if (it == watches_.end() || !it->second.dead_since) return std::nullopt;
  return it->second.dead_for;
}

}  // namespace ductile::launch
