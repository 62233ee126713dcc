// MembershipManager's side that watches members once they are in: pauses
// forgiven, deaths by silence or by a launcher's report, the live workers
// published to the servers, the end of the job, and the members' status.
// Registration and admission are in membership_manager.cc.
#include <algorithm>
#include <string>
#include <vector>

#include "coordinator/membership_manager.h"
#include "glog/logging.h"
#include "proto/codec.h"

namespace ductile {

using std::chrono::milliseconds;

namespace {

// A member's state for `ductile status`.
std::string MemberState(const Member& m, const wire::MemberInfo& info,
                        bool joining) {
  if (m.role == wire::ROLE_SERVER) {
    if (m.left()) return "drained";
    if (!info.alive()) return "dead";
    if (m.rejoining) return "rejoining";
    return m.draining() ? "draining" : "active";
  }
  if (m.finished()) return "finished";
  if (m.left()) return "left";
  if (!info.alive()) return "dead";
  if (m.draining()) return "draining";
  return joining ? "joining" : "active";
}

}  // namespace

void MembershipManager::ForgivePause(
    std::chrono::steady_clock::duration pause) {
  const Member::TimePoint now = ctx_.Now();
  for (auto* members : {&ctx_.state.workers, &ctx_.state.servers}) {
    for (auto& [id, m] : *members) {
      m.last_seen = std::min(now, m.last_seen + pause);
    }
  }
}

bool MembershipManager::DetectDeadWorkers() {
  bool died = false;
  for (auto& [id, m] : ctx_.state.workers) {
    if (!m.live_worker()) continue;
    const int64_t silent = ctx_.SilentMs(m.last_seen);
    if (silent > ctx_.options.heartbeat_timeout_ms) {
      m.dead = true;
      died = true;
      LOG(WARNING) << "coordinator: worker " << id << " silent for " << silent
                   << " ms; declared dead";
    }
  }
  return died;
}

std::vector<int32_t> MembershipManager::DetectDeadServers() {
  std::vector<int32_t> dead;
  if (ctx_.shutting_down) return dead;
  for (auto& [id, m] : ctx_.state.servers) {
    // Busy as of the same read as its silence (SilentMs): a pause of the
    // coordinator past the end of the announced time is not the server's.
    if (m.dead || m.left() || ctx_.inbox_read_at < m.busy_until) continue;
    const int64_t silent = ctx_.SilentMs(m.last_seen);
    if (silent > ctx_.options.heartbeat_timeout_ms) {
      m.dead = true;
      // A rejoining server holds nothing and takes part in nothing: its
      // death needs no rollback.
      if (!m.rejoining) dead.push_back(id);
      LOG(WARNING) << "coordinator: server " << id << " silent for " << silent
                   << " ms; declared dead";
    }
  }
  return dead;
}

MembershipManager::Exited MembershipManager::ReportExit(
    const std::string& identity, const wire::Header& h) {
  Exited exited;
  if (h.role() != wire::ROLE_SERVER && h.role() != wire::ROLE_WORKER) {
    ctx_.out.Reply(identity, h.seq(),
                   InvalidArgumentError("a member's exit names its role: "
                                        "server or worker"));
    return exited;
  }
  const bool server = h.role() == wire::ROLE_SERVER;
  const std::string who =
      (server ? "server " : "worker ") + std::to_string(h.member_id());
  if (h.pid() <= 0 && h.incarnation() == 0) {
    ctx_.out.Reply(identity, h.seq(),
                   InvalidArgumentError(
                       "the exit of " + who +
                       " names no process: give its pid or its incarnation "
                       "(ductile status)"));
    return exited;
  }
  auto& group = server ? ctx_.state.servers : ctx_.state.workers;
  auto it = group.find(h.member_id());
  if (it == group.end()) {
    ctx_.out.Reply(identity, h.seq(),
                   NotFoundError("no " + who + " in the job"));
    return exited;
  }
  Member& m = it->second;
  const bool same_process =
      (h.pid() <= 0 || h.pid() == m.pid) &&
      (h.incarnation() == 0 || h.incarnation() == m.incarnation);
  if (!same_process) {
    // Another process registered as it since: the one reported is not in
    // the job any more, and the new one is not to be declared dead.
    LOG(INFO) << "coordinator: ignored a report that " << who << " (pid "
              << h.pid() << ", incarnation " << h.incarnation()
              << ") exited: it is now pid " << m.pid << ", incarnation "
              << m.incarnation;
    ctx_.out.Reply(
        identity, h.seq(),
        FailedPreconditionError("stale report: " + who + " is now pid " +
                                std::to_string(m.pid) + ", incarnation " +
                                std::to_string(m.incarnation) +
                                ", not the process reported"));
    return exited;
  }
  const bool gone = server ? (m.dead || m.left()) : !m.live_worker();
  if (!gone) {
    // As at the end of its heartbeat timeout (DetectDeadWorkers,
    // DetectDeadServers), without waiting for it.
    m.dead = true;
    LOG(WARNING) << "coordinator: " << who << " (pid " << m.pid
                 << ") exited, as its launcher reports; declared dead";
    if (!server) {
      exited.worker = true;
    } else if (!m.rejoining) {
      // A rejoining server holds nothing: no rollback for it.
      exited.server = m.id;
    }
  }
  // Dead of silence before, or now: it cannot come back.
  if (m.dead) m.exited = true;
  ctx_.out.Reply(identity, h.seq(), Status::Ok());
  return exited;
}

void MembershipManager::PublishWorkers() {
  wire::Header update;
  update.set_type(wire::WORKERS_UPDATE);
  update.set_change_id(++workers_round_);
  const std::set<int32_t> live = ctx_.state.LiveWorkers();
  for (int32_t id : live) update.add_worker_ids(id);
  // Workers too: a survivor takes a share of the data of those gone. They
  // are not told each other's connections.
  ctx_.SendTo(ctx_.state.workers, live, update);
  update.clear_worker_ids();
  ctx_.state.AddLiveWorkers(&update);
  for (const auto& [id, m] : ctx_.state.servers) {
    ctx_.out.Send(m.identity, update);
  }
}

bool MembershipManager::JobOver() const {
  const ClusterState& state = ctx_.state;
  if (state.workers.empty()) return false;
  int32_t finished = 0, gone = 0;
  for (const auto& [id, m] : state.workers) {
    if (m.finished()) {
      ++finished;
    } else if (m.left() || (m.dead && m.exited) ||
               (m.dead && ctx_.MsSince(m.last_seen) >
                              3 * ctx_.options.heartbeat_timeout_ms)) {
      ++gone;
    } else {
      return false;  // still working
    }
  }
  // Over once the workers the job started with have all registered and
  // every one since has finished, left or died, one at least finished (a
  // job whose workers all left waits for new ones).
  const int32_t total = ctx_.options.num_workers > 0
                            ? ctx_.options.num_workers
                            : static_cast<int32_t>(state.workers.size());
  if (finished == 0 || finished + gone < total) return false;
  LOG(INFO) << "coordinator: every worker finished"
            << (gone > 0 ? " or died" : "") << "; shutting the cluster down";
  return true;
}

void MembershipManager::AnnounceShutdown() {
  wire::Header notice;
  notice.set_type(wire::SHUTDOWN_NOTICE);
  for (const auto* group : {&ctx_.state.servers, &ctx_.state.workers}) {
    for (const auto& [id, m] : *group) ctx_.out.Send(m.identity, notice);
  }
  for (const Waiter& w : waiting_for_routing_) {
    ctx_.out.Reply(w.identity, w.seq, UnavailableError("cluster shut down"));
  }
  waiting_for_routing_.clear();
}

wire::ClusterState MembershipManager::Status(bool recovering) const {
  const ClusterState& state = ctx_.state;
  wire::ClusterState c;
  c.set_epoch(state.routing.epoch());
  c.set_num_slots(ctx_.options.num_slots);
  c.set_expected_servers(ctx_.options.num_servers);
  const std::map<int32_t, int32_t> slots = state.routing.SlotsPerServer();
  for (const auto* group : {&state.servers, &state.workers}) {
    for (const auto& [id, m] : *group) {
      wire::MemberInfo* info = c.add_members();
      info->set_id(id);
      info->set_role(m.role);
      info->set_address(m.endpoint.tcp_address());
      const int64_t ago = ctx_.MsSince(m.last_seen);
      info->set_last_heartbeat_ms_ago(ago);
      // A server silent while it writes or restores a checkpoint (as its
      // last heartbeat said) is not taken for dead, nor shown as dead.
      // Judged as the coordinator judges silence (as of its last empty
      // read of its inbox), so the two agree.
      info->set_alive(!m.dead && (ctx_.SilentMs(m.last_seen) <=
                                      ctx_.options.heartbeat_timeout_ms ||
                                  ctx_.inbox_read_at < m.busy_until));
      info->set_finished(m.finished());
      info->set_pid(m.pid);
      info->set_incarnation(m.incarnation);
      const int32_t member = id;
      const bool worker = m.role == wire::ROLE_WORKER;
      const bool joining = std::any_of(
          admissions_.begin(), admissions_.end(), [&](const Admission& a) {
            return !a.leave && a.worker == member && worker;
          });
      info->set_state(MemberState(m, *info, joining));
      if (m.role == wire::ROLE_SERVER) {
        auto it = slots.find(id);
        info->set_slots(it == slots.end() ? 0 : it->second);
        *info->mutable_counters() = m.counters;
      } else {
        *info->mutable_metrics() = m.metrics;
      }
    }
  }
  for (const auto& [name, t] : state.tables) {
    c.add_tables(name);
    *c.add_table_consistency() = t.consistency();
  }
  c.set_generation(state.generation);
  c.set_last_checkpoint_clock(state.LastCheckpointClock());
  c.set_checkpoints(static_cast<int32_t>(state.catalog.size()));
  c.set_recovering(recovering);
  return c;
}

}  // namespace ductile
