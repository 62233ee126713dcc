#include "coordinator/migration_manager.h"

#include <algorithm>
#include <utility>

#include "glog/logging.h"
#include "proto/codec.h"

namespace ductile {

std::map<int32_t, int32_t> MigrationManager::Load() const {
  const ClusterState& state = ctx_.state;
  std::map<int32_t, int32_t> load;
  for (int32_t id : state.LiveServers()) {
    if (!state.servers.at(id).draining()) load[id] = 0;
  }
  for (int32_t s = 0; s < state.routing.num_slots(); ++s) {
    auto it = load.find(state.routing.owner(s));
    if (it != load.end()) ++it->second;
  }
  return load;
}

void MigrationManager::Rebalance() {
  ClusterState& state = ctx_.state;
  if (state.routing.empty() || state.recovering || ctx_.shutting_down) return;
  if (plan_) {
    rebalance_pending_ = true;  // once the plan under way is done
    return;
  }
  rebalance_pending_ = false;
  std::map<int32_t, int32_t> load = Load();
  if (load.size() < 2) return;
  // Each server's slots, lowest first; a move takes the most loaded
  // server's highest slot to the least loaded, until they differ by one
  // at most: the fewest moves that even the load.
  std::map<int32_t, std::vector<int32_t>> owned;
  for (int32_t s = 0; s < state.routing.num_slots(); ++s) {
    if (load.count(state.routing.owner(s))) {
      owned[state.routing.owner(s)].push_back(s);
    }
  }
  std::map<int32_t, int32_t> moves;
  while (true) {
    auto most = std::max_element(
        load.begin(), load.end(),
        [](const auto& a, const auto& b) { return a.second < b.second; });
    auto least = std::min_element(
        load.begin(), load.end(),
        [](const auto& a, const auto& b) { return a.second < b.second; });
    if (most->second - least->second <= 1) break;
    std::vector<int32_t>& from = owned[most->first];
    const int32_t slot = from.back();
    from.pop_back();
    moves[slot] = least->first;
    --most->second;
    ++least->second;
  }
  if (moves.empty()) return;
  Begin(std::move(moves), "rebalance", std::nullopt, {});
}

void MigrationManager::Drain(int32_t server, Done done) {
  ClusterState& state = ctx_.state;
  auto it = state.servers.find(server);
  if (it == state.servers.end()) {
    return done(
        NotFoundError("no server " + std::to_string(server) + " in the job"));
  }
  Member& m = it->second;
  if (m.dead || m.left() || m.rejoining) {
    return done(FailedPreconditionError("server " + std::to_string(server) +
                                        " is not active (" +
                                        (m.dead     ? "dead"
                                         : m.left() ? "drained"
                                                    : "rejoining the job") +
                                        ")"));
  }
  if (state.routing.empty() || state.recovering) {
    return done(UnavailableError(
        "the job is not running (slots unassigned or rolling back); retry"));
  }
  if (plan_) {
    return done(UnavailableError(
        "slots are moving between servers already; retry once they are in "
        "place"));
  }
  m.stage = Member::Stage::kDraining;
  std::map<int32_t, int32_t> load = Load();  // without the drained one
  if (load.empty()) {
    m.stage = Member::Stage::kActive;
    return done(FailedPreconditionError(
        "server " + std::to_string(server) +
        " is the only server: its slots have nowhere to go"));
  }
  std::map<int32_t, int32_t> moves;
  for (int32_t s = 0; s < state.routing.num_slots(); ++s) {
    if (state.routing.owner(s) != server) continue;
    auto least = std::min_element(
        load.begin(), load.end(),
        [](const auto& a, const auto& b) { return a.second < b.second; });
    moves[s] = least->first;
    ++least->second;
  }
  LOG(INFO) << "coordinator: draining server " << server << ": " << moves.size()
            << " slot(s) to move";
  Begin(std::move(moves), "drain of server " + std::to_string(server), server,
        std::move(done));
}

void MigrationManager::MoveSlot(int32_t slot, int32_t server, Done done) {
  ClusterState& state = ctx_.state;
  if (state.routing.empty()) {
    return done(FailedPreconditionError("slots are not assigned yet"));
  }
  if (slot < 0 || slot >= state.routing.num_slots()) {
    return done(InvalidArgumentError("no slot " + std::to_string(slot)));
  }
  if (state.LiveServers().count(server) == 0) {
    return done(NotFoundError("no live server " + std::to_string(server)));
  }
  if (plan_) {
    return done(UnavailableError(
        "slots are moving between servers already; retry once they are in "
        "place"));
  }
  if (state.routing.owner(slot) == server) return done(Status::Ok());
  Begin({{slot, server}}, "move of slot " + std::to_string(slot), std::nullopt,
        std::move(done));
}

void MigrationManager::Begin(std::map<int32_t, int32_t> moves, std::string why,
                             std::optional<int32_t> drained, Done done) {
  Plan plan;
  plan.why = std::move(why);
  plan.drained = drained;
  if (done) plan.done.push_back(std::move(done));
  plan.started_at = ctx_.Now();
  // One group per (source, target).
  std::map<std::pair<int32_t, int32_t>, std::vector<int32_t>> by_pair;
  for (const auto& [slot, target] : moves) {
    by_pair[{ctx_.state.routing.owner(slot), target}].push_back(slot);
  }
  IdFloor();
  for (auto& [pair, slots] : by_pair) {
    Group& g = plan.groups[next_id_++];
    ctx_.state.next_move_id = next_id_;
    g.source = pair.first;
    g.target = pair.second;
    g.slots = std::move(slots);
  }
  plan_ = std::move(plan);
  launched_ = false;
  ctx_.migrating = true;
  LOG(INFO) << "coordinator: " << plan_->why << ": " << moves.size()
            << " slot(s) in " << plan_->groups.size() << " move(s)";
  // Nothing to move (a drained server without slots): done now.
  if (plan_->groups.empty()) return MaybeFinish();
  CheckTimers();  // at once, unless a checkpoint round is under way
}

void MigrationManager::Launch() {
  if (!plan_ || launched_) return;
  launched_ = true;
  ClusterState& state = ctx_.state;
  for (auto& [id, g] : plan_->groups) {
    const Member& source = state.servers.at(g.source);
    const Member& target = state.servers.at(g.target);
    wire::Header out;
    out.set_type(wire::MIGRATE_OUT);
    out.set_change_id(id);
    out.set_member_id(g.target);
    *out.mutable_endpoint() = target.endpoint;
    for (int32_t s : g.slots) out.add_slots(s);
    ctx_.out.Send(source.identity, out);
    g.started = true;
  }
}

void MigrationManager::CheckTimers() {
  CheckTimers(/*stop_all=*/false);
  RebalanceStranded();
}

void MigrationManager::RebalanceStranded() {
  ClusterState& state = ctx_.state;
  if (plan_ || rebalance_pending_ || !stops_.empty() || state.routing.empty() ||
      state.recovering || ctx_.shutting_down ||
      ctx_.Now() < next_stranded_check_) {
    return;
  }
  bool awaiting = false;
  for (const auto& [id, m] : state.servers)
    awaiting = awaiting || m.awaiting_slots;
  if (!awaiting) return;  // the common case, checked cheaply
  const std::map<int32_t, int32_t> load = Load();
  bool stranded = false;
  for (auto& [id, m] : state.servers) {
    auto it = load.find(id);
    if (it == load.end() || it->second > 0) {
      m.awaiting_slots = false;  // it got slots, or it is gone
    }
    stranded = stranded || m.awaiting_slots;
  }
  if (!stranded) return;
  for (const auto& [id, slots] : load) {
    // Not heard from since a coordinator restart: it cannot be asked yet.
    if (state.servers.at(id).identity.empty()) return;
  }
  if (!stranded || load.size() < 2) return;
  next_stranded_check_ = ctx_.Now() + std::chrono::seconds(5);
  LOG(INFO) << "coordinator: a server that joined owns no slot (its "
               "rebalance was abandoned); rebalancing";
  Rebalance();
}

void MigrationManager::CheckTimers(bool stop_all) {
  if (plan_ && !launched_ && !checkpoint_busy_()) Launch();
  const TimePoint now = ctx_.Now();
  for (auto it = stops_.begin(); it != stops_.end();) {
    if (!stop_all && now < it->at) {
      ++it;
      continue;
    }
    auto m = ctx_.state.servers.find(it->server);
    if (m != ctx_.state.servers.end()) {
      // Out of the job: nobody expects it any more, and the copies it
      // kept as a backup go with it (it owns no slot: only those change).
      m->second.stage = Member::Stage::kLeft;
      ctx_.state.routing.Promote({it->server});
      routing_.Publish();
      wire::Header stop;
      stop.set_type(wire::SHUTDOWN_NOTICE);
      ctx_.out.Send(m->second.identity, stop);
      LOG(INFO) << "coordinator: server " << it->server
                << " drained and stopped";
    }
    for (Done& done : it->done) {
      // Its slots are elsewhere; when stopping everything, nobody waits
      // for the servers to install the last routing.
      if (stop_all) {
        done(Status::Ok());
      } else {
        routing_.WhenInstalled(std::move(done));
      }
    }
    it = stops_.erase(it);
  }
}

void MigrationManager::HandleDone(const wire::Header& h) {
  if (!plan_) return;
  auto it = plan_->groups.find(h.change_id());
  if (it == plan_->groups.end() || it->second.done) return;
  Group& g = it->second;
  if (h.member_id() != g.source) return;
  g.done = true;
  const Status s = StatusFromWire(h);
  if (!s.ok()) {
    LOG(WARNING) << "coordinator: moving " << g.slots.size()
                 << " slot(s) from server " << g.source << " to server "
                 << g.target << " failed: " << s << "; they stay";
    wire::Header abort;
    abort.set_type(wire::MIGRATE_ABORT);
    abort.set_change_id(h.change_id());
    ctx_.SendTo(ctx_.state.servers, {g.source}, abort);
    if (plan_->failure.ok()) plan_->failure = s;
  } else {
    g.bytes = h.bytes();
    // The keys are at the target: the slots are its now.
    for (int32_t slot : g.slots) ctx_.state.routing.Move(slot, g.target);
    LOG(INFO) << "coordinator: " << g.slots.size() << " slot(s) moved from "
              << "server " << g.source << " to server " << g.target << " ("
              << g.bytes << " bytes), routing epoch "
              << ctx_.state.routing.epoch();
    routing_.Publish();
  }
  MaybeFinish();
}

void MigrationManager::MaybeFinish() {
  for (const auto& [id, g] : plan_->groups) {
    if (!g.done) return;
  }
  Plan plan = std::move(*plan_);
  plan_.reset();
  ctx_.migrating = false;
  ClusterState& state = ctx_.state;
  if (plan.drained) {
    Member& m = state.servers.at(*plan.drained);
    if (!plan.failure.ok() || state.routing.OwnsAny(*plan.drained)) {
      m.AbandonDrain();
    } else {
      // It owns nothing now. It stops after a linger, answering requests
      // sent under older routing tables ("moved", or "duplicate" for a
      // push it applied before), and stays in the routing's endpoints
      // meanwhile so that clients keep their connection to it. What it
      // leaves unanswered the clients send to the new owners, with the
      // seqs it was sent under (its window moved with its slots).
      const int64_t linger_ms = std::min(ctx_.options.heartbeat_timeout_ms,
                                         ctx_.options.drain_linger_ms);
      stops_.push_back({*plan.drained,
                        ctx_.Now() + std::chrono::milliseconds(linger_ms),
                        std::move(plan.done)});
      plan.done.clear();
    }
  }
  const int64_t ms = ctx_.MsSince(plan.started_at);
  LOG(INFO) << "coordinator: " << plan.why
            << (plan.failure.ok() ? " done" : " ended with a failure") << " in "
            << ms << " ms";
  Status status = plan.failure;
  if (status.ok() && plan.drained && state.routing.OwnsAny(*plan.drained)) {
    status = InternalError("server still owns slots after its drain");
  }
  for (Done& done : plan.done) {
    // Done once every server has installed the new routing.
    if (status.ok()) {
      routing_.WhenInstalled(std::move(done));
    } else {
      done(status);
    }
  }
  if (rebalance_pending_) Rebalance();
}

void MigrationManager::AbortAll(const Status& status) {
  rebalance_pending_ = false;
  // Drained servers waiting out their linger stop now: they own nothing.
  CheckTimers(/*stop_all=*/true);
  for (auto& [id, m] : ctx_.state.servers) m.AbandonDrain();
  wire::Header abort;
  abort.set_type(wire::MIGRATE_ABORT);
  abort.set_change_id(0);
  for (const auto& [id, m] : ctx_.state.servers) {
    if (!m.identity.empty()) ctx_.out.Send(m.identity, abort);
  }
  if (!plan_) return;
  LOG(WARNING) << "coordinator: " << plan_->why << " abandoned: " << status;
  std::vector<Done> done = std::move(plan_->done);
  plan_.reset();
  ctx_.migrating = false;
  for (Done& d : done) d(status);
}

bool MigrationManager::Involves(const std::set<int32_t>& servers) const {
  if (!plan_) return false;
  if (plan_->drained && servers.count(*plan_->drained) > 0) return true;
  for (const auto& [id, g] : plan_->groups) {
    if (servers.count(g.source) > 0 || servers.count(g.target) > 0) {
      return true;
    }
  }
  return false;
}

uint64_t MigrationManager::IdFloor() {
  if (next_id_ == 0) {
    // Milliseconds since the epoch, and room for 2^20 moves in each; above
    // every id an earlier process gave (saved), should the clock go back.
    next_id_ = std::max(
        (static_cast<uint64_t>(std::max<int64_t>(ctx_.env->UnixMs(), 1))
         << 20) |
            (ctx_.env->RandomU64() & 0xfff),
        ctx_.state.next_move_id);
    ctx_.state.next_move_id = next_id_;
  }
  return next_id_;
}

int32_t MigrationManager::slots_moving() const {
  if (!plan_) return 0;
  int32_t n = 0;
  for (const auto& [id, g] : plan_->groups) {
    if (!g.done) n += static_cast<int32_t>(g.slots.size());
  }
  return n;
}

}  // namespace ductile
