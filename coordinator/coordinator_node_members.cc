// What a CoordinatorNode does as members come and go: registrations,
// drains, a worker's finish or leave, a launcher's report of an exit, a
// server heard from again after it was declared dead, and the deaths of
// servers and workers (the rest of the node is in coordinator_node.cc).
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/coordinator_node.h"
#include "glog/logging.h"
#include "proto/codec.h"

namespace ductile {

void CoordinatorNode::Rejoin(Member& server, const wire::Header& heartbeat) {
  if (ctx_.shutting_down) return;
  if (recovery_.waiting_for_a_server()) {
    // Every server was declared dead (all paused together): the rollback
    // waits for one. This one takes part: its store still holds every
    // version the catalog names (a REJOIN keeps them).
    server.rejoining = false;
    return StartRecovery("server " + std::to_string(server.id) +
                         " is heard from again");
  }
  // After the rollback under way, which goes on without it.
  if (state_.recovering || recovery_.in_progress()) return;
  // After a rollback it is behind the job's generation; after a takeover
  // (no rollback) it is not, but still holds the keys of slots that are
  // its backups' now, and its copies of slots it backed up: either way,
  // it drops them before it takes any slot.
  const uint64_t its_generation = heartbeat.generation();
  if (its_generation < state_.generation ||
      heartbeat.counters().keys_stored() > 0) {
    // Until its heartbeat shows it was heard (it ignores a repeat; after
    // a takeover the REJOIN is of its own generation, and it takes it
    // while it holds keys).
    return membership_.AskToRejoin(server);
  }
  server.rejoining = false;
  LOG(INFO) << "coordinator: server " << server.id << " rejoined at generation "
            << its_generation;
  if (!state_.routing.OwnsAny(server.id)) {
    server.awaiting_slots = true;
    migrations_.Rebalance();
  }
}

bool CoordinatorNode::TellReplaced(const Member* sender,
                                   const std::string& identity,
                                   const std::string& key,
                                   const wire::Header& h) {
  if (sender != nullptr || h.type() != wire::HEARTBEAT || !h.has_counters() ||
      h.incarnation() == 0) {
    return false;
  }
  auto it = state_.servers.find(h.member_id());
  if (it == state_.servers.end() || !it->second.KeyFits(key) ||
      it->second.incarnation <= h.incarnation()) {
    return false;
  }
  const Member& now = it->second;
  wire::Header reply;
  reply.set_type(wire::CONTROL_REPLY);
  reply.set_seq(h.seq());
  reply.set_incarnation(now.incarnation);
  StatusToWire(AbortedError("server " + std::to_string(now.id) +
                            " was replaced: registration " +
                            std::to_string(now.incarnation) +
                            " holds its id now, this process is " +
                            std::to_string(h.incarnation())),
               &reply);
  LOG(WARNING) << "coordinator: a heartbeat of server " << now.id
               << "'s registration " << h.incarnation() << ", replaced by "
               << now.incarnation << ": told to stop";
  out_.Send(identity, reply);
  return true;
}

void CoordinatorNode::HandleRegister(const std::string& identity,
                                     const std::string& key,
                                     const std::string& key_name,
                                     const wire::Header& h) {
  if (!save_error_.ok() &&
      (h.role() == wire::ROLE_WORKER || h.role() == wire::ROLE_OBSERVER)) {
    // Its answer would be held until the state is saved, and the client's
    // wait would run out with no reason given: it gets the coordinator's
    // reason now (one whose own registration failed the save asks again
    // 2 s later). A server, which waits without a deadline, is held.
    wire::Header reply;
    reply.set_type(wire::CONTROL_REPLY);
    reply.set_seq(h.seq());
    StatusToWire(Status(save_error_.code(),
                        "the coordinator cannot save its state, so it admits "
                        "no one until it can: " +
                            save_error_.message()),
                 &reply);
    return out_.SendStateless(identity, reply);
  }
  const MembershipManager::Registered r =
      membership_.Register(identity, key, key_name, h);
  if (r.server == nullptr) return;
  const int32_t id = r.server->id;
  const bool taken_over =
      r.restarted && !state_.routing.empty() && TakeOver({id}, "restarted");
  if (r.restarted) {
    // Answered only now. After a takeover the answer's routing, its first,
    // gives the new process, empty, none of its predecessor's slots.
    // Otherwise the answer's routing still lists the predecessor, and the
    // new process installs none until one lists it (the rollback's
    // RECOVER below, or the routing published for it).
    membership_.AnswerServer(*r.server, r.seq);
  }
  if (taken_over) {
    // Its process is new and holds nothing: its share comes back with keys.
    r.server->awaiting_slots = true;
    migrations_.Rebalance();
  } else if (r.restarted && !state_.routing.empty() &&
             state_.routing.OwnsAny(id)) {
    StartRecovery("server " + std::to_string(id) + " restarted");
  } else if (recovery_.waiting_for_a_server()) {
    StartRecovery("a server joined while no server was left");
  } else if (routing_.MaybeAssign()) {
    membership_.AnswerWaiting();
  } else if (!r.restarted && !state_.routing.OwnsAny(id)) {
    // A server joining a running job: it takes its share of the slots
    // (planned again if this rebalance is abandoned).
    r.server->awaiting_slots = true;
    migrations_.Rebalance();
  }
  // A table being created exists only once this process has it too: the
  // registration's answer and a rollback's RECOVER name only the tables
  // that exist.
  tables_.OnServerUp(*r.server);
  membership_.PublishWorkers();
}

void CoordinatorNode::HandleDrainServer(const std::string& identity,
                                        const wire::Header& h) {
  const uint64_t seq = h.seq();
  // Answered when the server is out (from a later message's handling,
  // which persists and sends).
  migrations_.Drain(h.member_id(), [this, identity, seq](const Status& s) {
    out_.Reply(identity, seq, s);
  });
}

void CoordinatorNode::HandleFinish(const std::string& identity,
                                   const wire::Header& h) {
  const bool was_live = state_.LiveWorkers().count(h.member_id()) > 0;
  membership_.Finish(identity, h);
  if (was_live && state_.LiveWorkers().count(h.member_id()) == 0) {
    OnWorkersChanged();
  }
  if (!ctx_.shutting_down && !state_.recovering && membership_.JobOver()) {
    BeginShutdown();
  }
}

void CoordinatorNode::HandleLeave(const std::string& identity,
                                  const wire::Header& h) {
  if (membership_.Leave(identity, h)) {
    barriers_.MaybeRelease();
    checkpoints_.ForgetGoneWorkers();
    ReleaseGoneWorkersData();
  }
  if (!ctx_.shutting_down && !state_.recovering && membership_.JobOver()) {
    BeginShutdown();
  }
}

void CoordinatorNode::HandleMemberExit(const std::string& identity,
                                       const wire::Header& h) {
  const MembershipManager::Exited exited = membership_.ReportExit(identity, h);
  if (exited.worker) OnWorkersChanged();
  if (exited.server >= 0) OnServersDead({exited.server}, "exited");
  if (!ctx_.shutting_down && !state_.recovering && membership_.JobOver()) {
    BeginShutdown();
  }
}

void CoordinatorNode::OnServersDead(const std::vector<int32_t>& dead,
                                    const std::string& how) {
  if (dead.empty()) return;
  membership_.ReleaseAdmissions();  // no longer waiting for them
  if (TakeOver(std::set<int32_t>(dead.begin(), dead.end()), how)) return;
  std::string why = "server";
  for (int32_t id : dead) why += " " + std::to_string(id);
  StartRecovery(why + " " + how);
}

bool CoordinatorNode::TakeOver(const std::set<int32_t>& dead,
                               const std::string& how) {
  RoutingTable& routing = state_.routing;
  if (options_.replicas < 2 || routing.empty() || ctx_.shutting_down ||
      state_.recovering || recovery_.in_progress()) {
    // (A rollback under way starts again without them: it was restoring
    // their slots, and the backups' copies are gone with it.)
    return false;
  }
  std::string who = dead.size() == 1 ? "server" : "servers";
  for (int32_t id : dead) who += " " + std::to_string(id);
  const int32_t uncovered = routing.SlotsWithoutLiveBackup(
      dead, state_.LiveServers(), state_.BackupsSynced());
  if (uncovered > 0) {
    LOG(WARNING) << "coordinator: " << who << " " << how << " with "
                 << uncovered
                 << " slot(s) that have no live backup with a whole copy: "
                    "the job rolls back";
    return false;
  }
  bool owned = false;
  int32_t backed_up = 0;
  for (int32_t s = 0; s < routing.num_slots(); ++s) {
    owned = owned || dead.count(routing.owner(s)) > 0;
    backed_up += dead.count(routing.backup(s)) > 0;
  }
  if (owned) {
    // The round's cut and catalog name the slots' owners, which change.
    checkpoints_.Fail(
        AbortedError(who + " " + how + ": the backups take its slots over"),
        /*counts=*/false);
  }
  if (migrations_.Involves(dead)) {
    migrations_.AbortAll(AbortedError(who + " " + how + " while slots moved"));
  }
  const int32_t promoted = routing_.TakeOver(dead);
  // Its slots and those it backed up have no whole copy now, or a new
  // backup being sent one.
  backups_whole_ = false;
  if (owned) ++state_.takeovers;
  if (!owned && backed_up == 0) {
    LOG(INFO) << "coordinator: " << who << " " << how
              << " holding no slot and no backup: no rollback";
    return true;
  }
  const bool one = dead.size() == 1;
  LOG(INFO) << "coordinator: " << who << " " << how << "; "
            << (one ? "its " : "their ") << promoted
            << " slot(s) taken over by their backups at epoch "
            << routing.epoch() << ", no rollback"
            << (backed_up > 0
                    ? "; " + std::to_string(backed_up) + " slot(s) " +
                          (one ? "it" : "they") + " backed up lost their copy"
                    : std::string());
  return true;
}

void CoordinatorNode::OnWorkersChanged() {
  membership_.PublishWorkers();
  barriers_.MaybeRelease();
  checkpoints_.ForgetGoneWorkers();
  ReleaseGoneWorkersData();
}

void CoordinatorNode::ReleaseGoneWorkersData() {
  for (const auto& [id, m] : state_.workers) {
    if (!m.live_worker()) state_.data_plan.Release(id);
  }
}

}  // namespace ductile
