#include "coordinator/membership_manager.h"

#include <algorithm>

#include "ductile/limits.h"
#include "ductile/security.h"
#include "glog/logging.h"
#include "proto/codec.h"

namespace ductile {

using std::chrono::milliseconds;

Member* MembershipManager::FindMember(const wire::Header& h,
                                      const std::string& identity,
                                      const std::string& key,
                                      Touched* touched) {
  if (Member* m = ctx_.state.FindByIdentity(identity)) {
    // A peer that took a keyed member's identity is not that member.
    if (m->KeyFits(key)) return m;
    touched->impostor_of = m;
    return nullptr;
  }
  // After a restart of the coordinator, members are known by id only; a
  // heartbeat says which (servers send counters, workers metrics).
  if (h.type() != wire::HEARTBEAT) return nullptr;
  auto& group = h.has_counters() ? ctx_.state.servers : ctx_.state.workers;
  auto it = group.find(h.member_id());
  // A member bound to another connection is not taken over by whoever
  // names it (CoordinatorNode::CheckSender refuses the message).
  if (it == group.end() || !it->second.identity.empty() ||
      !it->second.KeyFits(key)) {
    return nullptr;
  }
  // Nor is a process that another registration replaced under the id (a
  // server's heartbeat names its registration).
  if (h.incarnation() != 0 && it->second.incarnation != 0 &&
      h.incarnation() != it->second.incarnation) {
    return nullptr;
  }
  touched->reconnected = true;
  it->second.identity = identity;
  LOG(INFO) << "coordinator: " << it->second.name() << " reconnected";
  return &it->second;
}

MembershipManager::Touched MembershipManager::Touch(const wire::Header& h,
                                                    const std::string& identity,
                                                    const std::string& key) {
  Touched t;
  t.member = FindMember(h, identity, key, &t);
  if (t.member == nullptr) return t;
  Member& m = *t.member;
  if (m.exited) {
    // Its process is gone (a report said so): what still comes under its
    // identity was sent before it died, and does not bring it back.
    t.member = nullptr;
    t.from_exited = &m;
    return t;
  }
  m.last_seen = ctx_.Now();
  if (m.dead) {
    m.dead = false;
    t.back_from_dead = true;
    if (m.role == wire::ROLE_WORKER) {
      LOG(WARNING) << "coordinator: worker " << m.id
                   << " is heard from again; back in the clock vectors";
    } else {
      m.rejoining = true;
      LOG(WARNING) << "coordinator: server " << m.id
                   << " is heard from again, but its slots have moved; it "
                      "rejoins the job with no keys";
    }
  }
  return t;
}

void MembershipManager::AskToRejoin(const Member& server) const {
  const ClusterState& state = ctx_.state;
  wire::Header rejoin;
  rejoin.set_type(wire::REJOIN);
  rejoin.set_member_id(server.id);
  rejoin.set_generation(state.generation);
  if (!state.routing.empty()) state.routing.ToWire(rejoin.mutable_routing());
  for (const auto& [name, table] : state.tables) *rejoin.add_tables() = table;
  state.AddLiveWorkers(&rejoin);
  // Its store may still be read for rollbacks to these checkpoints.
  for (const CatalogEntry& entry : state.catalog) {
    for (const wire::CheckpointSource& source : entry.sources()) {
      if (source.server_id() == server.id &&
          source.state_dir() == server.state_dir) {
        rejoin.add_keep_clocks(entry.clock());
      }
    }
  }
  rejoin.set_clock(std::max<int64_t>(0, state.LastCheckpointClock()));
  ctx_.out.Send(server.identity, rejoin);
}

void MembershipManager::FillRegistration(const Member& member,
                                         wire::Header* reply) const {
  const ClusterState& state = ctx_.state;
  reply->set_type(wire::CONTROL_REPLY);
  reply->set_member_id(member.id);
  // The process's registration: the routing lists it under this number.
  if (member.role == wire::ROLE_SERVER) {
    reply->set_incarnation(member.incarnation);
  }
  reply->set_generation(state.generation);
  if (member.role == wire::ROLE_SERVER && state.durable()) {
    reply->set_checkpoint_every(ctx_.options.checkpoint_every_clocks);
  }
  // A server heartbeats often enough not to be declared dead by mistake.
  reply->set_timeout_ms(ctx_.options.heartbeat_timeout_ms);
  reply->set_barrier_round(state.barrier_round);
  reply->set_num_workers(ctx_.options.num_workers > 0
                             ? ctx_.options.num_workers
                             : static_cast<int32_t>(state.workers.size()));
  if (!state.routing.empty()) state.routing.ToWire(reply->mutable_routing());
  for (const auto& [name, table] : state.tables) *reply->add_tables() = table;
}

void MembershipManager::AnswerServer(const Member& server, uint64_t seq) {
  wire::Header reply;
  reply.set_seq(seq);
  FillRegistration(server, &reply);
  ctx_.out.Send(server.identity, reply);
}

bool MembershipManager::RefusedForItsKey(const Member& taken,
                                         const std::string& key,
                                         const std::string& identity,
                                         const wire::Header& h) const {
  if (taken.KeyFits(key)) return false;
  const std::string who = taken.name();
  LOG(WARNING) << "coordinator: refused a registration as " << who
               << ": it is bound to another member key";
  ctx_.out.Reply(
      identity, h.seq(),
      PermissionDeniedError(who + " registered with a member key of its "
                                  "own: only that key may register as "
                                  "it again"));
  return true;
}

namespace {

// A member key named for a role and id ("worker-3") registers only as that
// member, so a worker's key cannot take a server's place or slots, nor
// another worker's id; one that asks for no id gets its key's (`*bound`,
// else -1). Observers only read: any key may observe.
Status KeyFitsRole(const std::string& key_name, const wire::Header& h,
                   int32_t* bound) {
  *bound = -1;
  bool server = false;
  int32_t id = -1;
  if (key_name.empty() || !MemberKeyRole(key_name, &server, &id)) {
    return Status::Ok();
  }
  if (h.role() != wire::ROLE_SERVER && h.role() != wire::ROLE_WORKER) {
    return Status::Ok();
  }
  const bool as_server = h.role() == wire::ROLE_SERVER;
  const int32_t asked = as_server           ? h.member_id()
                        : h.has_worker_id() ? h.worker_id()
                                            : -1;
  if (as_server == server && (asked == id || asked < 0)) {
    *bound = id;
    return Status::Ok();
  }
  const std::string role = server ? "server" : "worker";
  return PermissionDeniedError(
      "member key '" + key_name + "' registers only as " + role + " " +
      std::to_string(id) + ", not as " + (as_server ? "server" : "worker") +
      (asked >= 0 ? " " + std::to_string(asked) : " with no id"));
}

}  // namespace

Member* MembershipManager::FindRegistration(std::map<int32_t, Member>& members,
                                            const std::string& identity,
                                            int32_t id) {
  for (auto& [member_id, m] : members) {
    if ((m.identity == identity || m.registered_from == identity) &&
        (id < 0 || id == member_id)) {
      return &m;
    }
  }
  return nullptr;
}

MembershipManager::Registered MembershipManager::Register(
    const std::string& identity, const std::string& key,
    const std::string& key_name, const wire::Header& h_in) {
  Registered result;
  if (ctx_.shutting_down) {
    ctx_.out.Reply(
        identity, h_in.seq(),
        UnavailableError("cluster is shutting down"));  // text: ductile worker
    return result;
  }
  int32_t bound = -1;
  if (ductile::Status fits = KeyFitsRole(key_name, h_in, &bound); !fits.ok()) {
    LOG(WARNING) << "coordinator: refused a registration: " << fits.message();
    ctx_.out.Reply(identity, h_in.seq(), fits);
    return result;
  }
  // A key bound to a member registers as that member.
  wire::Header bound_h;
  if (bound >= 0) {
    bound_h = h_in;
    if (h_in.role() == wire::ROLE_SERVER) {
      bound_h.set_member_id(bound);
    } else {
      bound_h.set_worker_id(bound);
    }
  }
  const wire::Header& h = bound >= 0 ? bound_h : h_in;
  ClusterState& state = ctx_.state;
  Member member;
  member.role = h.role();
  member.identity = identity;
  member.registered_from = identity;
  member.key = key;
  member.pid = h.pid();
  member.last_seen = ctx_.Now();
  wire::Header reply;
  reply.set_seq(h.seq());
  switch (h.role()) {
    case wire::ROLE_SERVER: {
      int32_t id = h.member_id();
      if (auto taken = state.servers.find(id);
          taken != state.servers.end() &&
          RefusedForItsKey(taken->second, key, identity, h)) {
        return result;
      }
      if (Member* same = FindRegistration(state.servers, identity, id);
          same != nullptr && same->KeyFits(key)) {
        // After a coordinator restart its identity was not known yet.
        same->identity = identity;
        same->last_seen = ctx_.Now();
        // The same process asking again (its first answer is late, or it
        // asked a coordinator that died before answering and was
        // restarted from a state that had it): the same answer.
        VLOG(1) << "coordinator: server " << same->id << " asked again";
        FillRegistration(*same, &reply);
        ctx_.out.Send(identity, reply);
        return result;
      }
      // A server registering again under its id was restarted: the process
      // that held its slots is gone, with whatever it had not checkpointed.
      result.restarted = id >= 0 && state.servers.count(id) > 0 &&
                         state.servers[id].identity != identity;
      if (id < 0) {
        id = 0;
        while (state.servers.count(id)) ++id;
      }
      member.id = id;
      member.endpoint = h.endpoint();
      member.endpoint.set_id(id);
      if (!h.state_dir().empty()) {
        member.state_dir = h.state_dir() + "/server-" + std::to_string(id);
      }
      member.keep_checkpoints = h.keep_checkpoints();
      member.incarnation = state.next_incarnation++;
      member.endpoint.set_incarnation(member.incarnation);
      if (result.restarted) {
        // What the dead process last said of its backups decides whether
        // they take its slots over (until the new one's first heartbeat).
        member.backups_synced_epoch = state.servers[id].backups_synced_epoch;
      }
      state.servers[id] = member;
      LOG(INFO) << "coordinator: server " << id
                << (result.restarted ? " registered again (restarted)"
                                     : " registered")
                << " at " << member.endpoint.tcp_address();
      result.server = &state.servers[id];
      if (result.restarted) {
        result.seq = h.seq();  // answered by the caller (AnswerServer)
        return result;
      }
      FillRegistration(member, &reply);
      ctx_.out.Send(identity, reply);
      return result;
    }
    case wire::ROLE_WORKER: {
      Member* existing = FindRegistration(
          state.workers, identity,
          h.has_worker_id() && h.worker_id() >= 0 ? h.worker_id() : -1);
      const int32_t bound = ctx_.options.max_workers;
      if (existing == nullptr && bound > 0 && CountLiveWorkers() >= bound) {
        ctx_.out.Reply(
            identity, h.seq(),
            ResourceExhaustedError(
                "the job has its maximum of " + std::to_string(bound) +
                " workers (--max_workers); try again once one "
                "has left"));
        return result;
      }
      if (existing != nullptr && !existing->KeyFits(key)) {
        // Its identity, taken by a peer without its key.
        ctx_.out.Reply(
            identity, h.seq(),
            PermissionDeniedError("worker " + std::to_string(existing->id) +
                                  " is bound to another member key"));
        return result;
      }
      if (existing != nullptr) {
        // A resent registration. After a coordinator restart its identity
        // was not known yet.
        existing->identity = identity;
        existing->last_seen = ctx_.Now();
        member = *existing;
      } else if (h.has_worker_id() && h.worker_id() >= 0) {
        // A worker asking for its id (`ductile local` numbers them, so its
        // --kill_schedule names the coordinator's ids).
        const int32_t id = h.worker_id();
        if (id > kMaxMemberId) {
          ctx_.out.Reply(
              identity, h.seq(),
              InvalidArgumentError("worker id " + std::to_string(id) +
                                   " is out of range (0 to " +
                                   std::to_string(kMaxMemberId) + ")"));
          return result;
        }
        auto taken = state.workers.find(id);
        if (taken != state.workers.end() &&
            RefusedForItsKey(taken->second, key, identity, h)) {
          return result;
        }
        if (taken != state.workers.end() && !taken->second.dead &&
            !taken->second.left()) {
          ctx_.out.Reply(identity, h.seq(),
                         AlreadyExistsError("worker id " + std::to_string(id) +
                                            " is taken"));
          return result;
        }
        member.id = id;
        member.incarnation = state.next_incarnation++;
        state.next_worker_id = std::max(state.next_worker_id, id + 1);
        state.workers[member.id] = member;
        LOG(INFO) << "coordinator: worker " << member.id << " registered";
        PublishWorkers();
      } else {
        while (state.workers.count(state.next_worker_id)) {
          ++state.next_worker_id;
        }
        member.id = state.next_worker_id++;
        member.incarnation = state.next_incarnation++;
        state.workers[member.id] = member;
        LOG(INFO) << "coordinator: worker " << member.id << " registered";
        PublishWorkers();
      }
      break;
    }
    case wire::ROLE_OBSERVER:
      // Nothing is kept for an observer: it only reads.
      break;
    default:
      ctx_.out.Reply(identity, h.seq(),
                     InvalidArgumentError("register with an unknown role"));
      return result;
  }
  if (state.routing.empty()) {
    // A resent registration is answered once.
    const Waiter waiter{identity, h.seq()};
    if (std::find(waiting_for_routing_.begin(), waiting_for_routing_.end(),
                  waiter) == waiting_for_routing_.end()) {
      waiting_for_routing_.push_back(waiter);
    }
    return result;
  }
  if (member.role == wire::ROLE_WORKER) {
    Admit({identity, h.seq()}, member);
    return result;
  }
  FillRegistration(member, &reply);
  ctx_.out.Send(identity, reply);
  return result;
}

void MembershipManager::Admit(const Waiter& waiter, const Member& worker) {
  // A resent registration is answered once.
  for (const Admission& a : admissions_) {
    if (a.waiter == waiter) return;
  }
  if (auto it = admitted_.find(waiter.identity); it != admitted_.end()) {
    // Admitted already (this is a resend that crossed the answer, or the
    // answer was lost): the same answer, at once. It is in the job: a
    // rollback now tells it so.
    wire::Header reply;
    reply.set_seq(waiter.seq);
    FillRegistration(worker, &reply);
    reply.set_clock(it->second);
    ctx_.out.Send(waiter.identity, reply);
    return;
  }
  if (workers_round_ == 0) {
    // Nothing published since this coordinator started (a registration
    // asked again after a restart): no server has acknowledged a set that
    // includes the worker, nor its clock in this job.
    PublishWorkers();
  }
  admissions_.push_back({waiter, worker.id, workers_round_});
  ReleaseAdmissions();
}

int32_t MembershipManager::CountLiveWorkers() const {
  return static_cast<int32_t>(ctx_.state.LiveWorkers().size());
}

void MembershipManager::HandleWorkersAck(const wire::Header& h) {
  WorkersAck& acked = workers_acked_[h.member_id()];
  if (h.change_id() >= acked.round) {
    // Acks of one server arrive in order: the newest clock is its latest.
    acked.round = h.change_id();
    acked.clock = h.clock();
  }
  ReleaseAdmissions();
}

void MembershipManager::ReleaseAdmissions() {
  for (auto it = admissions_.begin(); it != admissions_.end();) {
    if (!it->leave && ctx_.state.recovering) {
      // The servers' clocks are going back: the joiner starts where the
      // rollback ends (AdmitAfterRollback).
      ++it;
      continue;
    }
    bool known = true;
    // A joiner starts at the highest server clock among the servers: on
    // the others its CLOCK brings it there (nothing before it waits for
    // it, and the clocks after it do).
    int64_t start_clock = 0;
    for (int32_t server : ctx_.state.LiveServers()) {
      const WorkersAck& acked = workers_acked_[server];
      known = known && acked.round >= it->round;
      start_clock = std::max(start_clock, acked.clock);
    }
    auto w = ctx_.state.workers.find(it->worker);
    if (!known && w != ctx_.state.workers.end()) {
      ++it;
      continue;
    }
    if (w != ctx_.state.workers.end()) {
      if (it->leave) {
        ctx_.out.Reply(it->waiter.identity, it->waiter.seq, Status::Ok());
      } else {
        wire::Header reply;
        reply.set_seq(it->waiter.seq);
        FillRegistration(w->second, &reply);
        reply.set_clock(start_clock);
        ctx_.out.Send(it->waiter.identity, reply);
        admitted_[it->waiter.identity] = start_clock;
      }
    }
    it = admissions_.erase(it);
  }
}

std::set<int32_t> MembershipManager::Joining() const {
  std::set<int32_t> joining;
  for (const Admission& a : admissions_) {
    if (!a.leave) joining.insert(a.worker);
  }
  return joining;
}

void MembershipManager::AdmitAfterRollback() {
  // The servers' acknowledgements so far may be of the abandoned timeline
  // (a server that reconnected to a restarted coordinator acknowledged at
  // its clock before it restored), and the rollback may have restored a
  // live set without the joiners: they, and any registration from now on,
  // are admitted once every server has installed a new round, at the
  // servers' clock then (the checkpoint's, or above once the others have
  // gone on). An answer given before is of the old timeline too.
  admitted_.clear();
  PublishWorkers();
  for (Admission& a : admissions_) {
    if (!a.leave) a.round = workers_round_;
  }
  ReleaseAdmissions();
}

void MembershipManager::AnswerWaiting() {
  for (const Waiter& w : waiting_for_routing_) {
    const Member* m = ctx_.state.FindByIdentity(w.identity);
    if (m != nullptr && m->role == wire::ROLE_WORKER) {
      Admit(w, *m);
      continue;
    }
    wire::Header reply;
    reply.set_seq(w.seq);
    FillRegistration(Member(), &reply);
    ctx_.out.Send(w.identity, reply);
  }
  waiting_for_routing_.clear();
}

Member* MembershipManager::Heartbeat(const std::string& identity,
                                     const wire::Header& h) {
  Member* m = ctx_.state.FindByIdentity(identity);
  if (m == nullptr) {
    ctx_.out.Reply(
        identity, h.seq(),
        NotFoundError("heartbeat from an unregistered member; register first"));
    return nullptr;
  }
  if (h.has_counters()) m->counters = h.counters();
  if (h.has_metrics()) m->metrics = h.metrics();
  // A server about to write or restore a checkpoint says for how long it
  // may be silent (0: up to the checkpoint timeout).
  const int64_t limit = ctx_.options.checkpoint_timeout_ms;
  m->busy_ms = !h.busy()            ? 0
               : h.timeout_ms() > 0 ? std::min(h.timeout_ms(), limit)
                                    : limit;
  m->busy_until =
      h.busy() ? ctx_.Now() + milliseconds(m->busy_ms) : Member::TimePoint{};
  return m;
}

void MembershipManager::Finish(const std::string& identity,
                               const wire::Header& h) {
  auto it = ctx_.state.workers.find(h.member_id());
  if (it == ctx_.state.workers.end()) {
    return ctx_.out.Reply(
        identity, h.seq(),
        FailedPreconditionError("finish from an unregistered worker"));
  }
  it->second.identity = identity;  // after a coordinator restart
  if (ctx_.state.recovering || h.generation() < ctx_.state.generation) {
    return ctx_.out.Reply(
        identity, h.seq(),
        AbortedError("the job is rolling back to a checkpoint"));
  }
  if (it->second.left()) {
    // It left the job before: nothing more to count.
    return ctx_.out.Reply(identity, h.seq(), Status::Ok());
  }
  it->second.stage = Member::Stage::kFinished;
  LOG(INFO) << "coordinator: worker " << h.member_id() << " finished";
  ctx_.out.Reply(identity, h.seq(), Status::Ok());
}

bool MembershipManager::Leave(const std::string& identity,
                              const wire::Header& h) {
  auto it = ctx_.state.workers.find(h.member_id());
  if (it == ctx_.state.workers.end()) {
    ctx_.out.Reply(
        identity, h.seq(),
        FailedPreconditionError("leave from an unregistered worker"));
    return false;
  }
  Member& m = it->second;
  m.identity = identity;  // after a coordinator restart
  if (ctx_.state.recovering || h.generation() < ctx_.state.generation) {
    ctx_.out.Reply(identity, h.seq(),
                   AbortedError("the job is rolling back to a checkpoint"));
    return false;
  }
  if (m.finished()) {
    ctx_.out.Reply(identity, h.seq(),
                   FailedPreconditionError("worker " + std::to_string(m.id) +
                                           " has finished; it cannot leave"));
    return false;
  }
  const bool was_live = m.live_worker();
  if (!m.left()) {
    LOG(INFO) << "coordinator: worker " << m.id << " left at clock "
              << h.clock() << (m.draining() ? " (drained)" : "");
  }
  m.stage = Member::Stage::kLeft;
  m.dead = false;
  if (was_live) PublishWorkers();
  admissions_.push_back({{identity, h.seq()}, m.id, workers_round_, true});
  ReleaseAdmissions();
  return was_live;
}

void MembershipManager::Drain(const std::string& identity,
                              const wire::Header& h) {
  auto it = ctx_.state.workers.find(h.worker_id());
  if (!h.has_worker_id() || it == ctx_.state.workers.end()) {
    return ctx_.out.Reply(
        identity, h.seq(),
        NotFoundError("no worker " + std::to_string(h.worker_id()) +
                      " in the job"));
  }
  Member& m = it->second;
  if (!m.live_worker()) {
    return ctx_.out.Reply(
        identity, h.seq(),
        FailedPreconditionError("worker " + std::to_string(m.id) +
                                " is not active (" +
                                (m.finished() ? "finished"
                                 : m.left()   ? "left"
                                              : "dead") +
                                ")"));
  }
  if (!m.draining()) {
    LOG(INFO) << "coordinator: worker " << m.id << " asked to leave (drain)";
  }
  m.stage = Member::Stage::kDraining;
  wire::Header notice;
  notice.set_type(wire::DRAIN);
  notice.set_worker_id(m.id);
  ctx_.out.Send(m.identity, notice);
  ctx_.out.Reply(identity, h.seq(), Status::Ok());
}

}  // namespace ductile
