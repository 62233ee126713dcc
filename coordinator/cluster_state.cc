#include "coordinator/cluster_state.h"

#include <cmath>

#include "ductile/table.h"
#include "glog/logging.h"

namespace ductile {
namespace {

using PersistedMember = wire::CoordinatorState::PersistedMember;

// A member's stage in its persisted form: one of three flags, or none for
// an active member. (A worker drained, then finished, was stored with both
// draining and finished before the stage existed: it is finished.)
Member::Stage StageFromWire(const PersistedMember& pm) {
  if (pm.finished()) return Member::Stage::kFinished;
  if (pm.left()) return Member::Stage::kLeft;
  if (pm.draining()) return Member::Stage::kDraining;
  return Member::Stage::kActive;
}

void StageToWire(Member::Stage stage, PersistedMember* pm) {
  pm->set_finished(stage == Member::Stage::kFinished);
  pm->set_left(stage == Member::Stage::kLeft);
  pm->set_draining(stage == Member::Stage::kDraining);
}

}  // namespace

Status ClusterState::Open() {
  if (options_.state_dir.empty()) return Status::Ok();
  CoordinatorStoreOptions store;
  store.dir = options_.state_dir;
  store.min_free_bytes = static_cast<uint64_t>(options_.disk_reserve_mb) << 20;
  DUCTILE_ASSIGN_OR_RETURN(store_, env_->OpenCoordinatorStore(store));
  Result<std::optional<wire::CoordinatorState>> loaded = store_->Load();
  DUCTILE_RETURN_IF_ERROR(loaded.status());
  if (!loaded->has_value()) return Status::Ok();
  const wire::CoordinatorState& state = **loaded;
  if (state.routing().num_slots() != 0 &&
      state.routing().num_slots() != options_.num_slots) {
    return FailedPreconditionError(
        "the state in " + options_.state_dir + " is of a cluster with " +
        std::to_string(state.routing().num_slots()) + " slots, not " +
        std::to_string(options_.num_slots));
  }
  Result<RoutingTable> r = RoutingTable::FromWire(state.routing());
  if (!r.ok()) {
    return FailedPreconditionError(
        "the state in " + options_.state_dir +
        " holds a bad routing table: " + r.status().message());
  }
  routing = std::move(*r);
  generation = state.generation();
  for (const auto& t : state.tables()) tables[t.name()] = t;
  next_table_id = std::max<uint32_t>(state.next_table_id(), 1);
  next_worker_id = state.next_worker_id();
  next_incarnation = std::max<uint64_t>(state.next_incarnation(), 1);
  takeovers = state.takeovers();
  next_move_id = state.next_move_id();
  barrier_round = state.barrier_round();
  target_workers = state.target_workers();
  target_servers = state.target_servers();
  replace_workers = {state.replace_workers().begin(),
                     state.replace_workers().end()};
  const Member::TimePoint now = env_->Now();
  for (const auto& pm : state.members()) {
    Member m;
    m.id = pm.id();
    m.role = pm.role();
    m.endpoint = pm.endpoint();
    m.state_dir = pm.state_dir();
    m.stage = StageFromWire(pm);
    m.dead = pm.dead();
    m.awaiting_slots = pm.awaiting_slots();
    m.rejoining = pm.rejoining();
    m.keep_checkpoints = pm.keep_checkpoints();
    m.key = pm.key();
    m.registered_from = pm.registered_from();
    m.pid = pm.pid();
    m.incarnation = pm.incarnation();
    m.backups_synced_epoch = pm.backups_synced_epoch();
    // Not declared dead: alive until the heartbeat timeout says otherwise,
    // counting the silence it had under the previous coordinator (not the
    // time this one was down). Each member's first message after the
    // restart tells where it is (its identity) again.
    m.last_seen = now - std::chrono::milliseconds(
                            std::clamp<int64_t>(pm.silent_ms(), 0, 86400000));
    // A server busy by announcement when the state was written (restoring
    // a checkpoint, say) may still be: it gets that silence again.
    if (pm.busy_ms() > 0) {
      m.busy_ms = std::min(pm.busy_ms(), options_.checkpoint_timeout_ms);
      m.busy_until = now + std::chrono::milliseconds(m.busy_ms);
    }
    (m.role == wire::ROLE_SERVER ? servers : workers)[m.id] = m;
  }
  catalog.assign(state.catalog().begin(), state.catalog().end());
  recovering = state.recovering();
  resume_clock = state.resume_clock();
  resumed_ = true;
  saved_ = ToWire().SerializeAsString();
  Result<std::optional<wire::DataPlanState>> plan = store_->LoadDataPlan();
  DUCTILE_RETURN_IF_ERROR(plan.status());
  if (plan->has_value()) {
    Status s = data_plan.FromWire(**plan);
    if (!s.ok()) {
      return FailedPreconditionError("the data plan in " + options_.state_dir +
                                     " is inconsistent: " + s.message());
    }
    saved_plan_ = data_plan.ToWire().SerializeAsString();
  }
  return Status::Ok();
}

wire::CoordinatorState ClusterState::ToWire() const {
  const Member::TimePoint now = env_->Now();
  wire::CoordinatorState state;
  state.set_generation(generation);
  routing.ToWire(state.mutable_routing());
  for (const auto& [name, t] : tables) *state.add_tables() = t;
  state.set_next_table_id(next_table_id);
  state.set_next_worker_id(next_worker_id);
  state.set_next_incarnation(next_incarnation);
  state.set_takeovers(takeovers);
  state.set_next_move_id(next_move_id);
  for (const auto* group : {&servers, &workers}) {
    for (const auto& [id, m] : *group) {
      auto* pm = state.add_members();
      pm->set_id(id);
      pm->set_role(m.role);
      *pm->mutable_endpoint() = m.endpoint;
      pm->set_state_dir(m.state_dir);
      StageToWire(m.stage, pm);
      pm->set_dead(m.dead);
      pm->set_awaiting_slots(m.awaiting_slots);
      pm->set_rejoining(m.rejoining);
      pm->set_keep_checkpoints(m.keep_checkpoints);
      pm->set_key(m.key);
      pm->set_registered_from(m.registered_from);
      pm->set_pid(m.pid);
      pm->set_incarnation(m.incarnation);
      pm->set_backups_synced_epoch(m.backups_synced_epoch);
      if (!m.dead && m.busy_until > now) pm->set_busy_ms(m.busy_ms);
      if (!m.dead && m.in_job() && m.busy_until <= now) {
        // In whole quanta of at least two worker heartbeat intervals: a
        // member that speaks regularly changes nothing, and a silent one
        // causes a write once per quantum. (A server busy writing or
        // restoring a checkpoint is silent by announcement: not counted.)
        const int64_t quantum =
            std::max<int64_t>(options_.heartbeat_timeout_ms / 4, 2000);
        const int64_t silent =
            std::chrono::duration_cast<std::chrono::milliseconds>(now -
                                                                  m.last_seen)
                .count();
        if (silent >= quantum) pm->set_silent_ms(silent / quantum * quantum);
      }
    }
  }
  for (const auto& e : catalog) *state.add_catalog() = e;
  state.set_num_workers(options_.num_workers);
  state.set_recovering(recovering);
  state.set_resume_clock(resume_clock);
  state.set_barrier_round(barrier_round);
  state.set_target_workers(target_workers);
  state.set_target_servers(target_servers);
  for (int32_t id : replace_workers) state.add_replace_workers(id);
  return state;
}

Status ClusterState::PersistIfChanged() {
  if (!store_) return Status::Ok();
  const wire::CoordinatorState state = ToWire();
  std::string bytes;
  state.SerializeToString(&bytes);
  DUCTILE_RETURN_IF_ERROR(PersistDataPlan());
  if (bytes == saved_) return Status::Ok();
  DUCTILE_RETURN_IF_ERROR(store_->Save(state));
  saved_ = std::move(bytes);
  return Status::Ok();
}

Status ClusterState::PersistDataPlan() {
  const wire::DataPlanState plan = data_plan.ToWire();
  std::string bytes;
  plan.SerializeToString(&bytes);
  if (bytes == saved_plan_) return Status::Ok();
  DUCTILE_RETURN_IF_ERROR(store_->SaveDataPlan(plan));
  saved_plan_ = std::move(bytes);
  return Status::Ok();
}

Member* ClusterState::FindByIdentity(const std::string& identity) {
  for (auto* group : {&servers, &workers}) {
    for (auto& [id, m] : *group) {
      if (m.identity == identity) return &m;
    }
  }
  return nullptr;
}

const wire::TableConfig* ClusterState::TableById(TableId id) const {
  for (const auto& [name, t] : tables) {
    if (t.id() == id) return &t;
  }
  return nullptr;
}

std::set<int32_t> ClusterState::LiveWorkers() const {
  std::set<int32_t> live;
  for (const auto& [id, m] : workers) {
    if (m.live_worker()) live.insert(id);
  }
  return live;
}

void ClusterState::AddLiveWorkers(wire::Header* to_servers) const {
  for (const auto& [id, m] : workers) {
    if (!m.live_worker()) continue;
    to_servers->add_worker_ids(id);
    // A worker with a key of its own is known by it: a connection that
    // took its identity still lacks its key.
    to_servers->add_worker_identities(m.key.empty() ? m.identity : "");
    to_servers->add_worker_keys(m.key);
  }
}

std::set<int32_t> ClusterState::LiveServers() const {
  std::set<int32_t> live;
  for (const auto& [id, m] : servers) {
    if (!m.dead && !m.left() && !m.rejoining) live.insert(id);
  }
  return live;
}

std::set<int32_t> ClusterState::BackupCandidates() const {
  std::set<int32_t> live = LiveServers();
  for (const auto& [id, m] : servers) {
    if (m.draining()) live.erase(id);
  }
  return live;
}

std::map<int32_t, uint64_t> ClusterState::BackupsSynced() const {
  std::map<int32_t, uint64_t> synced;
  for (const auto& [id, m] : servers) synced[id] = m.backups_synced_epoch;
  return synced;
}

int32_t ClusterState::SlotsWithoutCopy() const {
  if (routing.empty()) return 0;
  return routing.SlotsWithoutCopy(LiveServers(), BackupsSynced());
}

std::set<int32_t> ClusterState::ServersWithSlots() const {
  std::set<int32_t> owners;
  for (int32_t id : routing.Owners()) {
    auto m = servers.find(id);
    if (m != servers.end() && !m->second.dead) owners.insert(id);
  }
  return owners;
}

int32_t ClusterState::WorkersNotYetRegistered() const {
  return std::max<int32_t>(
      0, options_.num_workers - static_cast<int32_t>(workers.size()));
}

std::vector<wire::ServerEndpoint> ClusterState::LiveEndpoints() const {
  std::vector<wire::ServerEndpoint> out;
  for (const auto& [id, m] : servers) {
    if (!m.dead && !m.left() && !m.rejoining) out.push_back(m.endpoint);
  }
  return out;
}

double ClusterState::JobNoiseScale() const {
  double gradient_sq = 0;
  double noise_trace = 0;
  for (const auto& [id, server] : servers) {
    if (server.dead || server.left()) continue;
    const wire::Counters& c = server.counters;
    if (c.gns_batch_clocks() < kAdaScaleMinClocks ||
        !std::isfinite(c.gns_batch_gradient_sq()) ||
        !std::isfinite(c.gns_batch_noise_trace()) ||
        c.gns_batch_gradient_sq() < 0 || c.gns_batch_noise_trace() < 0) {
      continue;
    }
    gradient_sq += c.gns_batch_gradient_sq();
    noise_trace += c.gns_batch_noise_trace();
  }
  const double scale = gradient_sq > 0 ? noise_trace / gradient_sq : 0;
  return std::isfinite(scale) ? scale : 0;
}

void ClusterState::ForgetReplacedWorkers() {
  std::erase_if(replace_workers, [this](int32_t w) {
    auto it = workers.find(w);
    return it == workers.end() || !it->second.live_worker();
  });
}

}  // namespace ductile
