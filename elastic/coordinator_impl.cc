#include "elastic/coordinator_impl.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "glog/logging.h"
#include "proto/codec.h"
#include "proto/table_config.h"
#include "routing/slot_map.h"

namespace ductile {
namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long servers get to acknowledge a new table.
constexpr milliseconds kTableAckTimeout{10000};
// How long shutdown notices get to leave before the socket closes.
constexpr milliseconds kShutdownFlush{300};
// How long servers hold pushes between a checkpoint's prepare and commit.
constexpr int64_t kPrepareHoldMs = 3000;
// How long servers hold pushes beyond a committed cut for the workers to
// reach it before dropping the checkpoint: below clients' request timeout
// (60 s by default), so a straggler under async fails the checkpoint, not
// the faster workers' pushes.
constexpr int64_t kCutHoldMs = 30000;
// Complete checkpoints the catalog remembers (servers keep their own K).
constexpr size_t kCatalogSize = 8;

int64_t UnixMs() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(SteadyClock::now() - t)
      .count();
}

}  // namespace

Result<std::unique_ptr<Coordinator>> Coordinator::Start(
    const CoordinatorOptions& options) {
  if (options.num_servers < 1) {
    return InvalidArgumentError("num_servers must be >= 1");
  }
  if (options.num_workers < 0) {
    return InvalidArgumentError("num_workers must be >= 0");
  }
  if (options.num_slots < 1 || options.num_slots > (1 << 20)) {
    return InvalidArgumentError("num_slots must be in [1, 1048576]");
  }
  if (options.heartbeat_timeout_ms < 100 ||
      options.heartbeat_timeout_ms > 86400000) {
    return InvalidArgumentError(
        "heartbeat_timeout_ms must be in [100, 86400000]");
  }
  if (options.num_slots < options.num_servers) {
    return InvalidArgumentError("num_slots must be >= num_servers");
  }
  if (options.checkpoint_every_clocks < 0 ||
      !(options.checkpoint_interval_s >= 0)) {
    return InvalidArgumentError(
        "checkpoint_every_clocks and checkpoint_interval_s must be >= 0");
  }
  if (options.checkpoint_timeout_ms < 1000) {
    return InvalidArgumentError("checkpoint_timeout_ms must be >= 1000");
  }
  if (options.state_dir.empty() && (options.checkpoint_every_clocks > 0 ||
                                    options.checkpoint_interval_s > 0)) {
    return InvalidArgumentError(
        "checkpoints need a state directory for the coordinator's catalog");
  }
  auto coordinator = std::make_unique<CoordinatorImpl>(options);
  DUCTILE_RETURN_IF_ERROR(coordinator->Init());
  return std::unique_ptr<Coordinator>(std::move(coordinator));
}

CoordinatorImpl::CoordinatorImpl(const CoordinatorOptions& options)
    : options_(options), env_(SystemEnv()) {}

CoordinatorImpl::~CoordinatorImpl() {
  Stop();
  Wait().IgnoreError();
}

Status CoordinatorImpl::Init() {
  transport_ = env_->NewTransport("coordinator");
  Result<std::unique_ptr<Socket>> socket =
      transport_->NewRouter(int64_t{64} << 20);
  DUCTILE_RETURN_IF_ERROR(socket.status());
  socket_ = std::move(*socket);
  std::string bind = options_.bind_address;
  if (bind.size() > 2 && bind.compare(bind.size() - 2, 2, ":0") == 0) {
    bind = bind.substr(0, bind.size() - 1) + "*";
  }
  Result<std::string> bound = socket_->Bind(bind);
  DUCTILE_RETURN_IF_ERROR(bound.status());
  address_ = *bound;
  if (!options_.state_dir.empty()) {
    Result<std::unique_ptr<CoordinatorStore>> store =
        CoordinatorStore::Open(options_.state_dir);
    DUCTILE_RETURN_IF_ERROR(store.status());
    store_ = std::move(*store);
    DUCTILE_RETURN_IF_ERROR(LoadState());
  }
  last_checkpoint_at_ = SteadyClock::now();
  LOG(INFO) << "coordinator listening on " << address_ << ", waiting for "
            << options_.num_servers << " server(s)";
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

Status CoordinatorImpl::Wait() {
  if (thread_.joinable()) thread_.join();
  return Status::Ok();
}

void CoordinatorImpl::Stop() {
  stop_.store(true);
  wakeup_.Signal();
}

Status CoordinatorImpl::MoveSlot(int32_t slot, int32_t server_id) {
  auto result = std::make_shared<std::promise<Status>>();
  std::future<Status> done = result->get_future();
  {
    std::lock_guard<std::mutex> lock(tasks_mu_);
    tasks_.push_back([this, slot, server_id, result] {
      if (routing_.epoch() == 0) {
        result->set_value(
            FailedPreconditionError("slots are not assigned yet"));
      } else if (slot < 0 || slot >= routing_.num_slots()) {
        result->set_value(
            InvalidArgumentError("no slot " + std::to_string(slot)));
      } else if (servers_.count(server_id) == 0) {
        result->set_value(
            NotFoundError("no server " + std::to_string(server_id)));
      } else {
        routing_.set_slot_owner(slot, server_id);
        routing_.set_epoch(routing_.epoch() + 1);
        PublishRouting();
        // Answered once every server has installed the new epoch.
        RoutingWaiter waiter{routing_.epoch(), {}, result};
        for (const auto& [id, m] : servers_) {
          if (server_epochs_[id] < routing_.epoch()) waiter.awaiting.insert(id);
        }
        if (waiter.awaiting.empty()) {
          result->set_value(Status::Ok());
        } else {
          routing_waiters_.push_back(std::move(waiter));
        }
      }
    });
  }
  wakeup_.Signal();
  if (done.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    return DeadlineExceededError(
        "not every server confirmed the new routing table within 10 s");
  }
  try {
    return done.get();
  } catch (const std::future_error&) {  // the loop ended before answering
    return CancelledError("coordinator stopped");
  }
}

void CoordinatorImpl::Run() {
  InMessage message;
  Socket* const sockets[] = {socket_.get()};
  while (!stop_.load()) {
    if (shutting_down_ && SteadyClock::now() >= shutdown_at_) break;
    Status s = transport_->Wait(sockets, wakeup_.fd(),
                                SteadyClock::now() + milliseconds(100));
    if (!s.ok()) {
      LOG(ERROR) << "coordinator: " << s;
      break;
    }
    wakeup_.Drain();
    std::deque<std::function<void()>> tasks;
    {
      std::lock_guard<std::mutex> lock(tasks_mu_);
      tasks.swap(tasks_);
    }
    for (auto& task : tasks) task();
    while (true) {
      bool got = false;
      if (!socket_->Receive(&message, &got).ok() || !got) break;
      Handle(message);
    }
    CheckTimeouts();
  }
  for (RoutingWaiter& w : routing_waiters_) {
    w.done->set_value(CancelledError("coordinator stopped"));
  }
  routing_waiters_.clear();
  LOG(INFO) << "coordinator stopped";
}

CoordinatorImpl::Member* CoordinatorImpl::FindByIdentity(
    const std::string& identity) {
  for (auto* group : {&servers_, &workers_}) {
    for (auto& [id, m] : *group) {
      if (m.identity == identity) return &m;
    }
  }
  return nullptr;
}

void CoordinatorImpl::Send(const std::string& identity,
                           const wire::Header& header) {
  OutMessage out;
  out.AddString(identity);
  out.AddString(header.SerializeAsString());
  Status s = socket_->Send(std::move(out));
  if (!s.ok()) VLOG(1) << "coordinator: send failed: " << s;
}

void CoordinatorImpl::ReplyStatus(const std::string& identity, uint64_t seq,
                                  const Status& s) {
  wire::Header reply;
  reply.set_type(wire::CONTROL_REPLY);
  reply.set_seq(seq);
  StatusToWire(s, &reply);
  Send(identity, reply);
}

void CoordinatorImpl::Handle(InMessage& message) {
  if (message.size() < 2) return;  // no header: nothing to answer
  const std::string identity(message.frame_view(0));
  wire::Header h;
  Status s = ParseHeader(message.frame(1), &h);
  if (!s.ok()) return ReplyStatus(identity, 0, s);
  if (Member* m = FindMember(h, identity)) {
    m->last_seen = SteadyClock::now();
    if (m->dead) {
      m->dead = false;
      if (m->role == wire::ROLE_WORKER) {
        LOG(WARNING) << "coordinator: worker " << m->id
                     << " is heard from again; back in the clock vectors";
        PublishWorkers();
      } else {
        LOG(WARNING) << "coordinator: server " << m->id
                     << " is heard from again, but its slots have moved";
      }
    }
  }

  switch (h.type()) {
    case wire::REGISTER:
      return HandleRegister(identity, h);
    case wire::HEARTBEAT: {
      Member* m = FindByIdentity(identity);
      if (m == nullptr) {
        return ReplyStatus(identity, h.seq(),
                           NotFoundError("heartbeat from an unregistered "
                                         "member; register first"));
      }
      if (h.has_counters()) m->counters = h.counters();
      if (h.has_metrics()) m->metrics = h.metrics();
      // A server about to write or restore a checkpoint says for how long
      // it may be silent (0: up to the checkpoint timeout).
      m->busy_until =
          h.busy()
              ? SteadyClock::now() +
                    milliseconds(h.timeout_ms() > 0
                                     ? std::min(h.timeout_ms(),
                                                options_.checkpoint_timeout_ms)
                                     : options_.checkpoint_timeout_ms)
              : Time{};
      // A member behind the job's generation missed the rollback's message
      // (lost with a coordinator that restarted): send it again.
      if (h.generation() < generation_) {
        if (m->role == wire::ROLE_SERVER && recovery_ &&
            recovery_->awaiting.count(m->id)) {
          Send(identity, recovery_->message);
        } else if (m->role == wire::ROLE_WORKER && !recovery_ && last_resume_ &&
                   last_resume_->generation() == generation_) {
          wire::Header resume = *last_resume_;
          resume.set_resume_state(last_resume_states_[m->id]);
          Send(identity, resume);
        }
      }
      if (m->role == wire::ROLE_SERVER &&
          options_.checkpoint_every_clocks > 0 &&
          m->counters.min_clock() >=
              std::max<int64_t>(LastCheckpointClock(), 0) +
                  options_.checkpoint_every_clocks) {
        MaybeStartCheckpoint(/*on_demand=*/false);
      }
      return;
    }
    case wire::CHECKPOINT:
      return HandleCheckpointRequest(identity, h);
    case wire::CHECKPOINT_ACK:
      return HandleCheckpointAck(h);
    case wire::CHECKPOINT_DONE:
      return HandleCheckpointDone(h);
    case wire::RECOVER_ACK:
      return HandleRecoverAck(h);
    case wire::GET_ROUTING: {
      wire::Header reply;
      reply.set_type(wire::CONTROL_REPLY);
      reply.set_seq(h.seq());
      if (routing_.epoch() > 0) *reply.mutable_routing() = routing_;
      return Send(identity, reply);
    }
    case wire::CREATE_TABLE:
      return HandleCreateTable(identity, h);
    case wire::TABLE_CREATE_ACK:
      return HandleTableAck(h);
    case wire::ROUTING_ACK:
      return HandleRoutingAck(h);
    case wire::SET_CONSISTENCY:
      return HandleSetConsistency(identity, h);
    case wire::CONSISTENCY_ACK:
      return HandleConsistencyAck(h);
    case wire::GET_TABLE: {
      auto it = tables_.find(h.name());
      if (it == tables_.end()) {
        return ReplyStatus(identity, h.seq(),
                           NotFoundError("no table named '" + h.name() + "'"));
      }
      wire::Header reply;
      reply.set_type(wire::CONTROL_REPLY);
      reply.set_seq(h.seq());
      *reply.mutable_table() = it->second;
      return Send(identity, reply);
    }
    case wire::BARRIER:
      return HandleBarrier(identity, h);
    case wire::FINISH:
      return HandleFinish(identity, h);
    case wire::STATUS: {
      wire::Header reply;
      reply.set_type(wire::CONTROL_REPLY);
      reply.set_seq(h.seq());
      *reply.mutable_cluster() = State();
      return Send(identity, reply);
    }
    case wire::SHUTDOWN:
      ReplyStatus(identity, h.seq(), Status::Ok());
      LOG(INFO) << "coordinator: shutdown requested";
      return BeginShutdown();
    default:
      return ReplyStatus(
          identity, h.seq(),
          InvalidArgumentError("the coordinator does not take message type " +
                               std::to_string(h.type())));
  }
}

void CoordinatorImpl::FillRegistration(const Member& member,
                                       wire::Header* reply) const {
  reply->set_type(wire::CONTROL_REPLY);
  reply->set_member_id(member.id);
  reply->set_generation(generation_);
  if (member.role == wire::ROLE_SERVER && store_) {
    reply->set_checkpoint_every(options_.checkpoint_every_clocks);
  }
  // A server heartbeats often enough not to be declared dead by mistake.
  reply->set_timeout_ms(options_.heartbeat_timeout_ms);
  reply->set_barrier_round(barrier_round_);
  reply->set_num_workers(options_.num_workers > 0
                             ? options_.num_workers
                             : static_cast<int32_t>(workers_.size()));
  if (routing_.epoch() > 0) *reply->mutable_routing() = routing_;
  for (const auto& [name, table] : tables_) *reply->add_tables() = table;
}

void CoordinatorImpl::HandleRegister(const std::string& identity,
                                     const wire::Header& h) {
  if (shutting_down_) {
    return ReplyStatus(identity, h.seq(),
                       UnavailableError("cluster is shutting down"));
  }
  Member member;
  member.role = h.role();
  member.identity = identity;
  member.last_seen = SteadyClock::now();
  wire::Header reply;
  reply.set_seq(h.seq());
  switch (h.role()) {
    case wire::ROLE_SERVER: {
      int32_t id = h.member_id();
      // A server registering again under its id was restarted: the process
      // that held its slots is gone, with whatever it had not checkpointed.
      const bool restarted = id >= 0 && servers_.count(id) > 0 &&
                             servers_[id].identity != identity;
      if (id < 0) {
        id = 0;
        while (servers_.count(id)) ++id;
      }
      member.id = id;
      member.endpoint = h.endpoint();
      member.endpoint.set_id(id);
      if (!h.state_dir().empty()) {
        member.state_dir = h.state_dir() + "/server-" + std::to_string(id);
      }
      member.keep_checkpoints = h.keep_checkpoints();
      servers_[id] = member;
      LOG(INFO) << "coordinator: server " << id
                << (restarted ? " registered again (restarted)" : " registered")
                << " at " << member.endpoint.tcp_address();
      FillRegistration(member, &reply);
      Send(identity, reply);
      bool owns_slots = false;
      for (int32_t owner : routing_.slot_owner()) owns_slots |= owner == id;
      if (restarted && routing_.epoch() > 0 && owns_slots) {
        StartRecovery("server " + std::to_string(id) + " restarted");
      } else if (recovery_ && recovery_->awaiting.empty()) {
        StartRecovery("a server joined while no server was left");
      } else {
        MaybeAssignSlots();
      }
      PublishWorkers();
      SaveState();
      return;
    }
    case wire::ROLE_WORKER: {
      if (Member* existing = FindByIdentity(identity)) {
        member = *existing;  // a resent registration
      } else if (h.has_worker_id() && h.worker_id() >= 0) {
        // A worker asking for its id (`ductile local` numbers them, so its
        // --kill_schedule names the coordinator's ids).
        const int32_t id = h.worker_id();
        if (id >= (1 << 20)) {
          return ReplyStatus(
              identity, h.seq(),
              InvalidArgumentError("worker id " + std::to_string(id) +
                                   " is out of range (0 to 1048575)"));
        }
        auto taken = workers_.find(id);
        if (taken != workers_.end() && !taken->second.dead) {
          return ReplyStatus(
              identity, h.seq(),
              AlreadyExistsError("worker id " + std::to_string(id) +
                                 " is taken"));
        }
        member.id = id;
        next_worker_id_ = std::max(next_worker_id_, id + 1);
        workers_[member.id] = member;
        LOG(INFO) << "coordinator: worker " << member.id << " registered";
        PublishWorkers();
        SaveState();
      } else {
        while (workers_.count(next_worker_id_)) ++next_worker_id_;
        member.id = next_worker_id_++;
        workers_[member.id] = member;
        LOG(INFO) << "coordinator: worker " << member.id << " registered";
        PublishWorkers();
        SaveState();
      }
      break;
    }
    case wire::ROLE_OBSERVER:
      observers_[identity] = SteadyClock::now();
      break;
    default:
      return ReplyStatus(identity, h.seq(),
                         InvalidArgumentError("register with an unknown role"));
  }
  if (routing_.epoch() == 0) {
    waiting_for_routing_.push_back({identity, h.seq()});
    return;
  }
  FillRegistration(member, &reply);
  Send(identity, reply);
}

void CoordinatorImpl::MaybeAssignSlots() {
  if (routing_.epoch() > 0) {
    // A server joining a running cluster gets the current table (and no
    // slots until resharding moves some to it).
    PublishRouting();
    return;
  }
  if (static_cast<int32_t>(servers_.size()) < options_.num_servers) return;
  std::vector<int32_t> ids;
  for (const auto& [id, m] : servers_) ids.push_back(id);
  const std::vector<int32_t> owners =
      AssignSlotsEvenly(options_.num_slots, ids);
  routing_.set_epoch(1);
  routing_.set_num_slots(options_.num_slots);
  routing_.clear_slot_owner();
  for (int32_t o : owners) routing_.add_slot_owner(o);
  LOG(INFO) << "coordinator: " << options_.num_slots << " slots assigned to "
            << ids.size() << " server(s), epoch 1";
  PublishRouting();
  SaveState();
  for (const Waiter& w : waiting_for_routing_) {
    wire::Header reply;
    reply.set_seq(w.seq);
    Member observer;
    const Member* m = FindByIdentity(w.identity);
    FillRegistration(m ? *m : observer, &reply);
    Send(w.identity, reply);
  }
  waiting_for_routing_.clear();
}

void CoordinatorImpl::PublishRouting() {
  routing_.clear_servers();
  for (const auto& [id, m] : servers_) {
    if (!m.dead) *routing_.add_servers() = m.endpoint;
  }
  wire::Header update;
  update.set_type(wire::ROUTING_UPDATE);
  *update.mutable_routing() = routing_;
  // Servers must know at once; clients learn lazily, from a server's
  // "routing changed" answer, which keeps a routing change O(servers).
  for (const auto& [id, m] : servers_) Send(m.identity, update);
}

void CoordinatorImpl::HandleCreateTable(const std::string& identity,
                                        const wire::Header& h) {
  const TableOptions options = FromWire(h.table());
  Status s = ValidateTableOptions(options);
  if (!s.ok()) return ReplyStatus(identity, h.seq(), s);
  auto existing = tables_.find(options.name);
  if (existing != tables_.end()) {
    if (!SameTable(existing->second, h.table())) {
      return ReplyStatus(identity, h.seq(),
                         AlreadyExistsError("table '" + options.name +
                                            "' exists with other options"));
    }
    wire::Header reply;
    reply.set_type(wire::CONTROL_REPLY);
    reply.set_seq(h.seq());
    *reply.mutable_table() = existing->second;
    return Send(identity, reply);
  }
  auto pending = pending_tables_.find(options.name);
  if (pending != pending_tables_.end()) {
    if (!SameTable(pending->second.config, h.table())) {
      return ReplyStatus(identity, h.seq(),
                         AlreadyExistsError("table '" + options.name +
                                            "' is being created with other "
                                            "options"));
    }
    pending->second.waiters.push_back({identity, h.seq()});
    return;
  }
  if (servers_.empty()) {
    return ReplyStatus(identity, h.seq(),
                       UnavailableError("no server has registered yet"));
  }
  PendingTable p;
  p.config = h.table();
  p.config.set_id(next_table_id_++);
  p.waiters.push_back({identity, h.seq()});
  p.deadline = SteadyClock::now() + kTableAckTimeout;
  p.seq = next_seq_++;
  wire::Header create;
  create.set_type(wire::TABLE_CREATE);
  create.set_seq(p.seq);
  *create.mutable_table() = p.config;
  for (const auto& [id, m] : servers_) {
    p.awaiting.insert(id);
    Send(m.identity, create);
  }
  pending_tables_[options.name] = std::move(p);
}

void CoordinatorImpl::HandleTableAck(const wire::Header& h) {
  for (auto it = pending_tables_.begin(); it != pending_tables_.end(); ++it) {
    PendingTable& p = it->second;
    if (p.seq != h.seq() || !p.awaiting.count(h.member_id())) continue;
    Status s = StatusFromWire(h);
    if (!s.ok()) {
      for (const Waiter& w : p.waiters) {
        ReplyStatus(
            w.identity, w.seq,
            Status(s.code(), "server " + std::to_string(h.member_id()) +
                                 " cannot create table '" + p.config.name() +
                                 "': " + s.message()));
      }
      pending_tables_.erase(it);
      return;
    }
    p.awaiting.erase(h.member_id());
    if (!p.awaiting.empty()) return;
    tables_[p.config.name()] = p.config;
    SaveState();
    LOG(INFO) << "coordinator: table '" << p.config.name() << "' created, id "
              << p.config.id();
    wire::Header reply;
    reply.set_type(wire::CONTROL_REPLY);
    *reply.mutable_table() = p.config;
    for (const Waiter& w : p.waiters) {
      reply.set_seq(w.seq);
      Send(w.identity, reply);
    }
    pending_tables_.erase(it);
    return;
  }
}

void CoordinatorImpl::HandleRoutingAck(const wire::Header& h) {
  uint64_t& acked = server_epochs_[h.member_id()];
  acked = std::max<uint64_t>(acked, h.epoch());
  for (auto it = routing_waiters_.begin(); it != routing_waiters_.end();) {
    if (acked >= it->epoch) it->awaiting.erase(h.member_id());
    if (it->awaiting.empty()) {
      it->done->set_value(Status::Ok());
      it = routing_waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

void CoordinatorImpl::PublishWorkers() {
  wire::Header update;
  update.set_type(wire::WORKERS_UPDATE);
  for (const auto& [id, m] : workers_) {
    if (!m.finished && !m.dead) update.add_worker_ids(id);
  }
  for (const auto& [id, m] : servers_) Send(m.identity, update);
  // Workers too: a survivor takes a share of the data of those gone.
  for (const auto& [id, m] : workers_) {
    if (!m.finished && !m.dead) Send(m.identity, update);
  }
  if (round_ && round_->clock >= 0) {
    // A worker gone will not report its resume state.
    for (auto it = round_->awaiting_workers.begin();
         it != round_->awaiting_workers.end();) {
      const Member& w = workers_[*it];
      it = (w.finished || w.dead) ? round_->awaiting_workers.erase(it)
                                  : std::next(it);
    }
    MaybeCompleteCheckpoint();
  }
}

void CoordinatorImpl::HandleSetConsistency(const std::string& identity,
                                           const wire::Header& h) {
  auto table = std::find_if(tables_.begin(), tables_.end(), [&](const auto& t) {
    return t.second.id() == h.table_id();
  });
  if (table == tables_.end()) {
    return ReplyStatus(
        identity, h.seq(),
        NotFoundError("no table with id " + std::to_string(h.table_id())));
  }
  Status s = ValidateConsistency(FromWire(h.consistency()));
  if (!s.ok()) return ReplyStatus(identity, h.seq(), s);
  for (const auto& [id, change] : changes_) {
    if (change.table == table->first) {
      return ReplyStatus(
          identity, h.seq(),
          UnavailableError("another consistency change of '" + table->first +
                           "' is in progress; retry"));
    }
  }
  PendingChange change;
  change.id = next_seq_++;
  change.table = table->first;
  change.consistency = h.consistency();
  change.waiter = {identity, h.seq()};
  change.deadline = SteadyClock::now() + kTableAckTimeout;
  wire::Header prepare;
  prepare.set_type(wire::CONSISTENCY_PREPARE);
  prepare.set_table_id(h.table_id());
  prepare.set_change_id(change.id);
  for (const auto& [id, m] : servers_) {
    change.awaiting.insert(id);
    Send(m.identity, prepare);
  }
  // Workers too: a worker's cache must not answer from the old model past
  // the boundary, so it stops reading cached copies until the commit.
  for (const auto& [id, m] : workers_) {
    if (m.finished || m.dead) continue;
    change.awaiting_workers.insert(id);
    Send(m.identity, prepare);
  }
  changes_[change.id] = std::move(change);
}

void CoordinatorImpl::HandleConsistencyAck(const wire::Header& h) {
  auto it = changes_.find(h.change_id());
  if (it == changes_.end()) return;
  PendingChange& change = it->second;
  Status s = StatusFromWire(h);
  if (!s.ok()) {
    // Release the servers' holds with the model in force, and give up.
    CommitChange(change, tables_[change.table].consistency());
    ReplyStatus(change.waiter.identity, change.waiter.seq, s);
    changes_.erase(it);
    return;
  }
  change.max_clock = std::max(change.max_clock, h.clock());
  if (h.role() == wire::ROLE_WORKER) {
    change.awaiting_workers.erase(h.member_id());
  } else {
    change.awaiting.erase(h.member_id());
  }
  if (!change.awaiting.empty() || !change.awaiting_workers.empty()) return;
  CommitChange(change, change.consistency);
  tables_[change.table].mutable_consistency()->CopyFrom(change.consistency);
  LOG(INFO) << "coordinator: table '" << change.table << "' is "
            << ToString(FromWire(change.consistency)) << " from clock "
            << change.max_clock + 1;
  wire::Header reply;
  reply.set_type(wire::CONTROL_REPLY);
  reply.set_seq(change.waiter.seq);
  reply.set_clock(change.max_clock + 1);
  Send(change.waiter.identity, reply);
  changes_.erase(it);
}

void CoordinatorImpl::CommitChange(PendingChange& change,
                                   const wire::ConsistencyConfig& c) {
  wire::Header commit;
  commit.set_type(wire::CONSISTENCY_COMMIT);
  commit.set_table_id(tables_[change.table].id());
  *commit.mutable_consistency() = c;
  // No server has let through a request beyond max_clock since it was
  // prepared, so from max_clock + 1 on every request sees the new model.
  commit.set_clock(change.max_clock + 1);
  for (const auto& [id, m] : servers_) Send(m.identity, commit);
  for (const auto& [id, m] : workers_) {
    if (!m.finished && !m.dead) Send(m.identity, commit);
  }
}

std::set<int32_t> CoordinatorImpl::LiveWorkers() const {
  std::set<int32_t> live;
  for (const auto& [id, m] : workers_) {
    if (!m.finished && !m.dead) live.insert(id);
  }
  return live;
}

int32_t CoordinatorImpl::WorkersNotYetRegistered() const {
  return std::max<int32_t>(
      0, options_.num_workers - static_cast<int32_t>(workers_.size()));
}

void CoordinatorImpl::HandleBarrier(const std::string& identity,
                                    const wire::Header& h) {
  auto it = workers_.find(h.member_id());
  if (it == workers_.end()) {
    return ReplyStatus(identity, h.seq(),
                       FailedPreconditionError("barrier from an unregistered "
                                               "worker"));
  }
  it->second.identity = identity;  // after a coordinator restart
  if (recovery_ || h.generation() < generation_) {
    return ReplyStatus(identity, h.seq(),
                       AbortedError("the job is rolling back to a checkpoint"));
  }
  if (h.barrier_round() < barrier_round_) {
    // Released already: a worker that gave up waiting, or whose answer a
    // coordinator restart lost, asks again.
    return ReplyStatus(identity, h.seq(), Status::Ok());
  }
  if (h.barrier_round() > barrier_round_) {
    return ReplyStatus(identity, h.seq(),
                       InvalidArgumentError("barrier round " +
                                            std::to_string(h.barrier_round()) +
                                            " is ahead of the cluster's " +
                                            std::to_string(barrier_round_)));
  }
  // A request asked again replaces the first.
  barrier_[h.member_id()] = {identity, h.seq()};
  MaybeReleaseBarrier();
}

void CoordinatorImpl::MaybeReleaseBarrier() {
  if (barrier_.empty() || WorkersNotYetRegistered() > 0) return;
  for (int32_t id : LiveWorkers()) {
    if (barrier_.count(id) == 0) return;
  }
  for (const auto& [id, w] : barrier_) {
    ReplyStatus(w.identity, w.seq, Status::Ok());
  }
  barrier_.clear();
  ++barrier_round_;
  SaveState();
}

void CoordinatorImpl::HandleFinish(const std::string& identity,
                                   const wire::Header& h) {
  auto it = workers_.find(h.member_id());
  if (it == workers_.end()) {
    return ReplyStatus(identity, h.seq(),
                       FailedPreconditionError("finish from an unregistered "
                                               "worker"));
  }
  it->second.identity = identity;  // after a coordinator restart
  if (recovery_ || h.generation() < generation_) {
    return ReplyStatus(identity, h.seq(),
                       AbortedError("the job is rolling back to a checkpoint"));
  }
  it->second.finished = true;
  SaveState();
  LOG(INFO) << "coordinator: worker " << h.member_id() << " finished";
  PublishWorkers();
  ReplyStatus(identity, h.seq(), Status::Ok());
  MaybeReleaseBarrier();
  MaybeShutDown();
}

void CoordinatorImpl::MaybeShutDown() {
  if (workers_.empty() || shutting_down_ || recovery_) return;
  // The job is over when every worker has finished or is gone. A worker
  // declared dead may just be slow (it rejoins when heard from again), so
  // it counts as gone only after three heartbeat timeouts of silence:
  // shutting the servers down under a live one would lose its work.
  int32_t finished = 0, gone = 0;
  for (const auto& [id, m] : workers_) {
    if (m.finished) {
      ++finished;
    } else if (m.dead &&
               MsSince(m.last_seen) > 3 * options_.heartbeat_timeout_ms) {
      ++gone;
    } else {
      return;  // still working
    }
  }
  const int32_t total = options_.num_workers > 0
                            ? options_.num_workers
                            : static_cast<int32_t>(workers_.size());
  if (finished == 0 || finished + gone < total) return;
  LOG(INFO) << "coordinator: every worker finished"
            << (gone > 0 ? " or died" : "") << "; shutting the cluster down";
  BeginShutdown();
}

void CoordinatorImpl::BeginShutdown() {
  if (shutting_down_) return;
  shutting_down_ = true;
  wire::Header notice;
  notice.set_type(wire::SHUTDOWN_NOTICE);
  for (const auto& [id, m] : servers_) Send(m.identity, notice);
  for (const auto& [id, m] : workers_) Send(m.identity, notice);
  for (const Waiter& w : waiting_for_routing_) {
    ReplyStatus(w.identity, w.seq, UnavailableError("cluster shut down"));
  }
  waiting_for_routing_.clear();
  for (const auto& [id, w] : barrier_) {
    ReplyStatus(w.identity, w.seq, UnavailableError("cluster shut down"));
  }
  barrier_.clear();
  shutdown_at_ = SteadyClock::now() + kShutdownFlush;
}

void CoordinatorImpl::CheckTimeouts() {
  const auto now = SteadyClock::now();
  if (resume_pending_recovery_) {
    resume_pending_recovery_ = false;
    StartRecovery("the coordinator restarted during a rollback");
  }
  // A worker silent past the heartbeat timeout is dead: nobody waits for
  // it any more (clock vectors, barriers, shutdown).
  bool died = false;
  for (auto& [id, m] : workers_) {
    if (m.finished || m.dead) continue;
    if (MsSince(m.last_seen) > options_.heartbeat_timeout_ms) {
      m.dead = true;
      died = true;
      LOG(WARNING) << "coordinator: worker " << id << " silent for "
                   << MsSince(m.last_seen) << " ms; declared dead";
    }
  }
  if (died) {
    PublishWorkers();
    MaybeReleaseBarrier();
    SaveState();
  }
  if (!shutting_down_) MaybeShutDown();
  // A server silent past the timeout is dead: the job rolls back to the
  // latest checkpoint with its slots on the survivors.
  std::vector<int32_t> dead_servers;
  for (auto& [id, m] : servers_) {
    if (m.dead || shutting_down_ || now < m.busy_until) continue;
    if (MsSince(m.last_seen) > options_.heartbeat_timeout_ms) {
      m.dead = true;
      dead_servers.push_back(id);
      LOG(WARNING) << "coordinator: server " << id << " silent for "
                   << MsSince(m.last_seen) << " ms; declared dead";
    }
  }
  if (!dead_servers.empty()) {
    std::string why = "server";
    for (int32_t id : dead_servers) why += " " + std::to_string(id);
    StartRecovery(why + " died");
  }
  if (recovery_ && !recovery_->awaiting.empty() && now >= recovery_->deadline) {
    StartRecovery("servers did not finish restoring in time");
  }
  if (round_ && now >= round_->deadline) {
    FailCheckpoint(DeadlineExceededError(
        "the checkpoint was not complete within " +
        std::to_string(options_.checkpoint_timeout_ms) + " ms"));
  }
  if (options_.checkpoint_interval_s > 0 &&
      now - last_checkpoint_at_ >=
          std::chrono::duration<double>(options_.checkpoint_interval_s)) {
    MaybeStartCheckpoint(/*on_demand=*/false);
  }
  for (auto it = changes_.begin(); it != changes_.end();) {
    if (now < it->second.deadline) {
      ++it;
      continue;
    }
    CommitChange(it->second, tables_[it->second.table].consistency());
    ReplyStatus(it->second.waiter.identity, it->second.waiter.seq,
                DeadlineExceededError("servers did not confirm the "
                                      "consistency change in time"));
    it = changes_.erase(it);
  }
  for (auto it = pending_tables_.begin(); it != pending_tables_.end();) {
    if (now < it->second.deadline) {
      ++it;
      continue;
    }
    std::string missing;
    for (int32_t id : it->second.awaiting) missing += " " + std::to_string(id);
    for (const Waiter& w : it->second.waiters) {
      ReplyStatus(
          w.identity, w.seq,
          DeadlineExceededError("servers" + missing +
                                " did not confirm table '" + it->first + "'"));
    }
    it = pending_tables_.erase(it);
  }
}

wire::ClusterState CoordinatorImpl::State() const {
  wire::ClusterState c;
  c.set_epoch(routing_.epoch());
  c.set_num_slots(options_.num_slots);
  c.set_expected_servers(options_.num_servers);
  std::map<int32_t, int32_t> slots;
  for (int32_t owner : routing_.slot_owner()) ++slots[owner];
  for (const auto* group : {&servers_, &workers_}) {
    for (const auto& [id, m] : *group) {
      wire::MemberInfo* info = c.add_members();
      info->set_id(id);
      info->set_role(m.role);
      info->set_address(m.endpoint.tcp_address());
      const int64_t ago = MsSince(m.last_seen);
      info->set_last_heartbeat_ms_ago(ago);
      info->set_alive(!m.dead && ago <= options_.heartbeat_timeout_ms);
      info->set_finished(m.finished);
      if (m.role == wire::ROLE_SERVER) {
        info->set_slots(slots[id]);
        *info->mutable_counters() = m.counters;
      } else {
        *info->mutable_metrics() = m.metrics;
      }
    }
  }
  for (const auto& [name, t] : tables_) c.add_tables(name);
  c.set_generation(generation_);
  c.set_last_checkpoint_clock(catalog_.empty() ? -1 : catalog_.back().clock());
  c.set_checkpoints(static_cast<int32_t>(catalog_.size()));
  c.set_recovering(recovery_.has_value());
  return c;
}

// ---------------------------------------------------------- durable state

Status CoordinatorImpl::LoadState() {
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
  generation_ = state.generation();
  routing_ = state.routing();
  for (const auto& t : state.tables()) tables_[t.name()] = t;
  next_table_id_ = std::max<uint32_t>(state.next_table_id(), 1);
  next_worker_id_ = state.next_worker_id();
  barrier_round_ = state.barrier_round();
  const auto now = SteadyClock::now();
  for (const auto& pm : state.members()) {
    Member m;
    m.id = pm.id();
    m.role = pm.role();
    m.endpoint = pm.endpoint();
    m.state_dir = pm.state_dir();
    m.finished = pm.finished();
    m.dead = pm.dead();
    m.keep_checkpoints = pm.keep_checkpoints();
    // Not declared dead: alive until the heartbeat timeout says otherwise.
    // Each member's first message after the restart tells where it is (its
    // identity) again.
    m.last_seen = now;
    (m.role == wire::ROLE_SERVER ? servers_ : workers_)[m.id] = m;
  }
  catalog_.assign(state.catalog().begin(), state.catalog().end());
  if (state.recovering()) {
    // Finish the rollback once the loop runs (members reconnect first).
    resume_pending_recovery_ = true;
  } else if (generation_ > 0) {
    // Workers that missed the last rollback's RESUME get it again.
    wire::Header resume;
    resume.set_type(wire::RESUME);
    resume.set_generation(generation_);
    resume.set_clock(state.resume_clock());
    *resume.mutable_routing() = routing_;
    last_resume_ = resume;
    for (const auto& e : catalog_) {
      if (e.clock() != state.resume_clock()) continue;
      for (const auto& w : e.workers()) {
        last_resume_states_[w.worker_id()] = w.resume_state();
      }
    }
  }
  LOG(INFO) << "coordinator: resumed the cluster in " << options_.state_dir
            << ": " << servers_.size() << " server(s), " << workers_.size()
            << " worker(s), routing epoch " << routing_.epoch()
            << ", generation " << generation_ << ", " << catalog_.size()
            << " checkpoint(s)"
            << (catalog_.empty() ? ""
                                 : ", latest at clock " +
                                       std::to_string(catalog_.back().clock()));
  return Status::Ok();
}

void CoordinatorImpl::SaveState() {
  if (!store_) return;
  wire::CoordinatorState state;
  state.set_generation(generation_);
  *state.mutable_routing() = routing_;
  for (const auto& [name, t] : tables_) *state.add_tables() = t;
  state.set_next_table_id(next_table_id_);
  state.set_next_worker_id(next_worker_id_);
  state.set_barrier_round(barrier_round_);
  for (const auto* group : {&servers_, &workers_}) {
    for (const auto& [id, m] : *group) {
      auto* pm = state.add_members();
      pm->set_id(id);
      pm->set_role(m.role);
      *pm->mutable_endpoint() = m.endpoint;
      pm->set_state_dir(m.state_dir);
      pm->set_finished(m.finished);
      pm->set_dead(m.dead);
      pm->set_keep_checkpoints(m.keep_checkpoints);
    }
  }
  for (const auto& e : catalog_) *state.add_catalog() = e;
  state.set_num_workers(options_.num_workers);
  state.set_recovering(recovery_.has_value());
  if (last_resume_) state.set_resume_clock(last_resume_->clock());
  Status s = store_->Save(state);
  if (!s.ok()) LOG(ERROR) << "coordinator: " << s;
}

CoordinatorImpl::Member* CoordinatorImpl::FindMember(
    const wire::Header& h, const std::string& identity) {
  if (Member* m = FindByIdentity(identity)) return m;
  // After a restart of the coordinator, members are known by id only; a
  // heartbeat says which (servers send counters, workers metrics).
  if (h.type() != wire::HEARTBEAT) return nullptr;
  auto& group = h.has_counters() ? servers_ : workers_;
  auto it = group.find(h.member_id());
  if (it == group.end()) return nullptr;
  const bool first = it->second.identity.empty();
  it->second.identity = identity;
  if (first) {
    LOG(INFO) << "coordinator: " << (h.has_counters() ? "server " : "worker ")
              << h.member_id() << " reconnected";
    // Bring it up to date with what it may have missed.
    if (h.has_counters()) {
      PublishRouting();
      PublishWorkers();
      if (recovery_ && recovery_->awaiting.count(h.member_id())) {
        Send(identity, recovery_->message);
      }
    }
    if (round_ && (h.has_counters()
                       ? round_->awaiting.count(h.member_id()) > 0
                       : round_->awaiting_workers.count(h.member_id()) > 0)) {
      Send(identity, round_->message);
    }
  }
  return &it->second;
}

std::set<int32_t> CoordinatorImpl::ServersWithSlots() const {
  std::set<int32_t> owners(routing_.slot_owner().begin(),
                           routing_.slot_owner().end());
  for (auto it = owners.begin(); it != owners.end();) {
    auto m = servers_.find(*it);
    it = (m == servers_.end() || m->second.dead) ? owners.erase(it)
                                                 : std::next(it);
  }
  return owners;
}

int64_t CoordinatorImpl::LastCheckpointClock() const {
  return catalog_.empty() ? -1 : catalog_.back().clock();
}

// ------------------------------------------------------------ checkpoints

void CoordinatorImpl::MaybeStartCheckpoint(bool on_demand) {
  if (!store_ || round_ || recovery_ || shutting_down_ ||
      routing_.epoch() == 0) {
    return;
  }
  if (!on_demand) {
    // Nothing to save when no server clock moved since the last one.
    int64_t progress = -1;
    for (const auto& [id, m] : servers_) {
      if (!m.dead) progress = std::max(progress, m.counters.min_clock());
    }
    if (progress <= LastCheckpointClock()) {
      last_checkpoint_at_ = SteadyClock::now();
      return;
    }
  }
  CheckpointRound round;
  round.id = next_seq_++;
  round.deadline =
      SteadyClock::now() + milliseconds(options_.checkpoint_timeout_ms);
  wire::Header prepare;
  prepare.set_type(wire::CHECKPOINT_PREPARE);
  prepare.set_change_id(round.id);
  prepare.set_generation(generation_);
  prepare.set_timeout_ms(kPrepareHoldMs);
  // A server with no slots (one that joined late, or came back after its
  // slots moved) has nothing to save.
  for (int32_t id : ServersWithSlots()) {
    round.awaiting.insert(id);
    Send(servers_[id].identity, prepare);
  }
  round.message = prepare;
  VLOG(1) << "coordinator: checkpoint round " << round.id << " prepared";
  round_ = std::move(round);
  last_checkpoint_at_ = SteadyClock::now();
}

void CoordinatorImpl::HandleCheckpointRequest(const std::string& identity,
                                              const wire::Header& h) {
  if (!store_) {
    return ReplyStatus(identity, h.seq(),
                       FailedPreconditionError(
                           "the coordinator keeps no checkpoints (start it "
                           "with a state directory)"));
  }
  if (recovery_) {
    return ReplyStatus(
        identity, h.seq(),
        UnavailableError("the job is rolling back to a checkpoint; retry"));
  }
  if (routing_.epoch() == 0) {
    return ReplyStatus(identity, h.seq(),
                       UnavailableError("the servers have not all "
                                        "registered yet"));
  }
  MaybeStartCheckpoint(/*on_demand=*/true);
  if (!round_) {
    return ReplyStatus(identity, h.seq(),
                       UnavailableError("the cluster is shutting down"));
  }
  round_->waiters.push_back({identity, h.seq()});
}

Result<int64_t> CoordinatorImpl::Checkpoint(int64_t timeout_ms) {
  auto result = std::make_shared<std::promise<Result<int64_t>>>();
  std::future<Result<int64_t>> done = result->get_future();
  {
    std::lock_guard<std::mutex> lock(tasks_mu_);
    tasks_.push_back([this, result] {
      if (!store_) {
        result->set_value(FailedPreconditionError(
            "the coordinator keeps no checkpoints (no state_dir)"));
        return;
      }
      MaybeStartCheckpoint(/*on_demand=*/true);
      if (!round_) {
        result->set_value(UnavailableError(
            recovery_ ? "the job is rolling back to a checkpoint"
                      : "the cluster is not running"));
        return;
      }
      round_->promises.push_back(result);
    });
  }
  wakeup_.Signal();
  if (done.wait_for(milliseconds(timeout_ms)) != std::future_status::ready) {
    return DeadlineExceededError("no complete checkpoint within " +
                                 std::to_string(timeout_ms) + " ms");
  }
  try {
    return done.get();
  } catch (const std::future_error&) {  // the loop ended before answering
    return CancelledError("coordinator stopped");
  }
}

void CoordinatorImpl::HandleCheckpointAck(const wire::Header& h) {
  if (!round_ || round_->id != h.change_id() || round_->clock >= 0) return;
  Status s = StatusFromWire(h);
  if (!s.ok()) {
    return FailCheckpoint(
        Status(s.code(),
               "server " + std::to_string(h.member_id()) + ": " + s.message()));
  }
  if (h.clock() < -1 || h.clock() >= std::numeric_limits<int64_t>::max() / 2) {
    return FailCheckpoint(InvalidArgumentError(
        "server " + std::to_string(h.member_id()) +
        " reported an impossible clock " + std::to_string(h.clock())));
  }
  round_->max_clock = std::max(round_->max_clock, h.clock());
  round_->awaiting.erase(h.member_id());
  if (!round_->awaiting.empty()) return;
  // No server has let a push with a timestamp beyond max_clock through
  // since it was prepared: the cut at max_clock + 1 is one every server can
  // still take.
  const int64_t clock =
      std::max<int64_t>({round_->max_clock + 1, LastCheckpointClock() + 1, 1});
  round_->clock = clock;
  wire::Header commit;
  commit.set_type(wire::CHECKPOINT_COMMIT);
  commit.set_change_id(round_->id);
  commit.set_clock(clock);
  commit.set_generation(generation_);
  commit.set_data_clock(LastCheckpointClock());
  commit.set_timeout_ms(kCutHoldMs);
  for (int32_t id : ServersWithSlots()) {
    round_->awaiting.insert(id);
    Send(servers_[id].identity, commit);
  }
  for (const auto& [id, m] : workers_) {
    if (m.finished || m.dead) continue;
    round_->awaiting_workers.insert(id);
    Send(m.identity, commit);
  }
  round_->message = commit;
  VLOG(1) << "coordinator: checkpoint round " << round_->id << " at clock "
          << clock;
}

void CoordinatorImpl::HandleCheckpointDone(const wire::Header& h) {
  if (!round_ || round_->clock < 0 || h.clock() != round_->clock ||
      h.generation() != generation_) {
    return;
  }
  if (h.role() == wire::ROLE_WORKER) {
    round_->resume_states[h.member_id()] = h.resume_state();
    round_->awaiting_workers.erase(h.member_id());
  } else {
    Status s = StatusFromWire(h);
    if (!s.ok()) {
      return FailCheckpoint(Status(
          s.code(),
          "server " + std::to_string(h.member_id()) + ": " + s.message()));
    }
    round_->awaiting.erase(h.member_id());
  }
  MaybeCompleteCheckpoint();
}

void CoordinatorImpl::MaybeCompleteCheckpoint() {
  if (!round_ || round_->clock < 0 || !round_->awaiting.empty() ||
      !round_->awaiting_workers.empty()) {
    return;
  }
  wire::CoordinatorState::CatalogEntry entry;
  entry.set_clock(round_->clock);
  entry.set_generation(generation_);
  *entry.mutable_routing() = routing_;
  std::map<int32_t, wire::CheckpointSource> sources;
  for (int32_t slot = 0; slot < routing_.slot_owner_size(); ++slot) {
    const int32_t owner = routing_.slot_owner(slot);
    wire::CheckpointSource& source = sources[owner];
    source.set_server_id(owner);
    source.add_slots(slot);
  }
  for (auto& [id, source] : sources) {
    auto m = servers_.find(id);
    if (m != servers_.end()) source.set_state_dir(m->second.state_dir);
    *entry.add_sources() = std::move(source);
  }
  for (const auto& [id, state] : round_->resume_states) {
    auto* w = entry.add_workers();
    w->set_worker_id(id);
    w->set_resume_state(state);
  }
  entry.set_written_unix_ms(UnixMs());
  catalog_.push_back(std::move(entry));
  // Only checkpoints every server still keeps can be restored.
  size_t keep = kCatalogSize;
  for (const auto& [id, m] : servers_) {
    if (!m.dead && m.keep_checkpoints > 0) {
      keep = std::min<size_t>(keep, m.keep_checkpoints);
    }
  }
  while (catalog_.size() > keep) catalog_.erase(catalog_.begin());
  SaveState();
  const int64_t clock = round_->clock;
  LOG(INFO) << "coordinator: checkpoint at clock " << clock << " complete";
  wire::Header reply;
  reply.set_type(wire::CONTROL_REPLY);
  reply.set_clock(clock);
  for (const Waiter& w : round_->waiters) {
    reply.set_seq(w.seq);
    Send(w.identity, reply);
  }
  for (auto& p : round_->promises) p->set_value(clock);
  round_.reset();
}

void CoordinatorImpl::FailCheckpoint(const Status& s) {
  if (!round_) return;
  LOG(WARNING) << "coordinator: checkpoint"
               << (round_->clock >= 0
                       ? " at clock " + std::to_string(round_->clock)
                       : std::string())
               << " failed: " << s;
  if (round_->clock < 0) {
    // Release the holds of the servers that prepared: a commit they cannot
    // take tells them the round is over.
    wire::Header commit;
    commit.set_type(wire::CHECKPOINT_COMMIT);
    commit.set_change_id(round_->id);
    commit.set_clock(-1);
    commit.set_generation(generation_);
    for (const auto& [id, m] : servers_) {
      if (!m.dead) Send(m.identity, commit);
    }
  }
  for (const Waiter& w : round_->waiters) ReplyStatus(w.identity, w.seq, s);
  for (auto& p : round_->promises) p->set_value(s);
  round_.reset();
}

// --------------------------------------------------------------- recovery

void CoordinatorImpl::StartRecovery(const std::string& why) {
  if (routing_.epoch() == 0 || shutting_down_) return;
  if (round_) FailCheckpoint(AbortedError("a server failed: " + why));
  // Every wait of the abandoned timeline ends now.
  for (const auto& [id, w] : barrier_) {
    ReplyStatus(w.identity, w.seq,
                AbortedError("the job is rolling back to a checkpoint"));
  }
  barrier_.clear();
  ++generation_;
  const int64_t clock = LastCheckpointClock() > 0 ? LastCheckpointClock() : 0;
  std::vector<int32_t> live;
  for (const auto& [id, m] : servers_) {
    if (!m.dead) live.push_back(id);
  }
  Recovery recovery;
  recovery.clock = clock;
  recovery.deadline =
      SteadyClock::now() + milliseconds(options_.checkpoint_timeout_ms);
  if (live.empty()) {
    LOG(ERROR) << "coordinator: " << why
               << "; no server is left: waiting for one to register";
    recovery_ = std::move(recovery);
    SaveState();
    return;
  }
  // The dead servers' slots go to the survivors, least loaded first.
  std::map<int32_t, int32_t> load;
  for (int32_t id : live) load[id] = 0;
  for (int32_t owner : routing_.slot_owner()) {
    if (load.count(owner)) ++load[owner];
  }
  int moved = 0;
  for (int32_t slot = 0; slot < routing_.slot_owner_size(); ++slot) {
    if (load.count(routing_.slot_owner(slot))) continue;
    auto target = std::min_element(
        load.begin(), load.end(),
        [](const auto& a, const auto& b) { return a.second < b.second; });
    routing_.set_slot_owner(slot, target->first);
    ++target->second;
    ++moved;
  }
  routing_.set_epoch(routing_.epoch() + 1);
  routing_.clear_servers();
  for (int32_t id : live) *routing_.add_servers() = servers_[id].endpoint;
  LOG(WARNING) << "coordinator: " << why << "; rolling back to "
               << (clock > 0
                       ? "the checkpoint at clock " + std::to_string(clock)
                       : std::string("the start (no checkpoint yet)"))
               << ", generation " << generation_ << ", " << moved
               << " slot(s) moved to the survivors";
  wire::Header& m = recovery.message;
  m.set_type(wire::RECOVER);
  m.set_generation(generation_);
  m.set_clock(clock);
  *m.mutable_routing() = routing_;
  for (const auto& [name, t] : tables_) *m.add_tables() = t;
  if (clock > 0) {
    for (const auto& source : catalog_.back().sources()) {
      *m.add_sources() = source;
    }
  }
  for (const auto& [id, w] : workers_) {
    if (!w.finished && !w.dead) m.add_worker_ids(id);
  }
  for (int32_t id : live) recovery.awaiting.insert(id);
  recovery_ = std::move(recovery);
  // Durable before anyone hears of it: a coordinator killed right after
  // sending restarts into this rollback, not into the old generation.
  SaveState();
  for (int32_t id : live) Send(servers_[id].identity, recovery_->message);
}

void CoordinatorImpl::HandleRecoverAck(const wire::Header& h) {
  if (!recovery_ || h.generation() != generation_) return;
  Status s = StatusFromWire(h);
  if (!s.ok()) {
    if (!catalog_.empty()) {
      // That checkpoint cannot be restored: fall back to the one before.
      LOG(WARNING) << "coordinator: the checkpoint at clock "
                   << catalog_.back().clock() << " cannot be restored (server "
                   << h.member_id() << ": " << s.message()
                   << "); falling back to "
                   << (catalog_.size() > 1
                           ? "the one at clock " +
                                 std::to_string(
                                     catalog_[catalog_.size() - 2].clock())
                           : std::string("the start"));
      catalog_.pop_back();
      StartRecovery("restore failed");
    } else {
      LOG(ERROR) << "coordinator: server " << h.member_id()
                 << " cannot restart from the start: " << s;
    }
    return;
  }
  recovery_->awaiting.erase(h.member_id());
  if (recovery_->awaiting.empty()) FinishRecovery();
}

void CoordinatorImpl::FinishRecovery() {
  const int64_t clock = recovery_->clock;
  // Checkpoints after the one restored belong to the abandoned timeline.
  while (!catalog_.empty() && catalog_.back().clock() > clock) {
    catalog_.pop_back();
  }
  std::map<int32_t, std::string> states;
  if (clock > 0 && !catalog_.empty()) {
    for (const auto& w : catalog_.back().workers()) {
      states[w.worker_id()] = w.resume_state();
    }
  }
  wire::Header resume;
  resume.set_type(wire::RESUME);
  resume.set_generation(generation_);
  resume.set_clock(clock);
  *resume.mutable_routing() = routing_;
  for (const auto& [id, w] : workers_) {
    if (w.finished || w.dead) continue;
    auto it = states.find(id);
    resume.set_resume_state(it == states.end() ? std::string() : it->second);
    Send(w.identity, resume);
  }
  resume.clear_resume_state();
  last_resume_ = resume;
  last_resume_states_ = std::move(states);
  LOG(INFO) << "coordinator: every server restored clock " << clock
            << "; workers resume (generation " << generation_ << ")";
  recovery_.reset();
  last_checkpoint_at_ = SteadyClock::now();
  SaveState();
}

}  // namespace ductile
