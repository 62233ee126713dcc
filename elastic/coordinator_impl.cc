#include "elastic/coordinator_impl.h"

#include <algorithm>
#include <utility>

#include "elastic/slot_map.h"
#include "glog/logging.h"
#include "proto/codec.h"
#include "proto/table_config.h"

namespace ductile {
namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long servers get to acknowledge a new table.
constexpr milliseconds kTableAckTimeout{10000};
// How long shutdown notices get to leave before the socket closes.
constexpr milliseconds kShutdownFlush{300};

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
  auto coordinator = std::make_unique<CoordinatorImpl>(options);
  RETURN_IF_ERROR(coordinator->Init());
  return std::unique_ptr<Coordinator>(std::move(coordinator));
}

CoordinatorImpl::CoordinatorImpl(const CoordinatorOptions& options)
    : options_(options) {}

CoordinatorImpl::~CoordinatorImpl() {
  Stop();
  Wait().IgnoreError();
}

Status CoordinatorImpl::Init() {
  socket_ = MakeRouter(context_, int64_t{64} << 20);
  std::string bind = options_.bind_address;
  if (bind.size() > 2 && bind.compare(bind.size() - 2, 2, ":0") == 0) {
    bind = bind.substr(0, bind.size() - 1) + "*";
  }
  Result<std::string> bound = Bind(socket_, bind);
  RETURN_IF_ERROR(bound.status());
  address_ = *bound;
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
  zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                             wakeup_.PollItem()};
  InMessage message;
  while (!stop_.load()) {
    if (shutting_down_ && SteadyClock::now() >= shutdown_at_) break;
    Status s = Poll(items, 100);
    if (!s.ok()) {
      LOG(ERROR) << "coordinator: " << s;
      break;
    }
    if (items[1].revents & ZMQ_POLLIN) wakeup_.Drain();
    std::deque<std::function<void()>> tasks;
    {
      std::lock_guard<std::mutex> lock(tasks_mu_);
      tasks.swap(tasks_);
    }
    for (auto& task : tasks) task();
    while (true) {
      bool got = false;
      if (!ReceiveMessage(socket_, &message, &got).ok() || !got) break;
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
  Status s = SendMessage(socket_, std::move(out));
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
  if (message.frames.size() < 2) return;  // no header: nothing to answer
  const std::string identity(static_cast<const char*>(message.frames[0].data()),
                             message.frames[0].size());
  wire::Header h;
  Status s = ParseHeader(message.frame(1), &h);
  if (!s.ok()) return ReplyStatus(identity, 0, s);
  if (Member* m = FindByIdentity(identity)) {
    m->last_seen = SteadyClock::now();
    if (m->dead) {
      m->dead = false;
      LOG(WARNING) << "coordinator: worker " << m->id
                   << " is heard from again; back in the clock vectors";
      PublishWorkers();
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
      return;
    }
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
      if (id >= 0 && servers_.count(id) && servers_[id].identity != identity) {
        return ReplyStatus(
            identity, h.seq(),
            AlreadyExistsError("server id " + std::to_string(id) +
                               " is taken"));
      }
      if (id < 0) {
        id = 0;
        while (servers_.count(id)) ++id;
      }
      member.id = id;
      member.endpoint = h.endpoint();
      member.endpoint.set_id(id);
      servers_[id] = member;
      LOG(INFO) << "coordinator: server " << id << " registered at "
                << member.endpoint.tcp_address();
      FillRegistration(member, &reply);
      Send(identity, reply);
      MaybeAssignSlots();
      PublishWorkers();
      return;
    }
    case wire::ROLE_WORKER: {
      if (Member* existing = FindByIdentity(identity)) {
        member = *existing;  // a resent registration
      } else {
        member.id = next_worker_id_++;
        workers_[member.id] = member;
        LOG(INFO) << "coordinator: worker " << member.id << " registered";
        PublishWorkers();
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
  for (const auto& [id, m] : servers_) *routing_.add_servers() = m.endpoint;
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
  wire::Header create;
  create.set_type(wire::TABLE_CREATE);
  create.set_seq(next_seq_++);
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
    if (!p.awaiting.count(h.member_id())) continue;
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

int32_t CoordinatorImpl::LiveWorkersNeeded() const {
  int32_t finished = 0;
  for (const auto& [id, m] : workers_) finished += m.finished || m.dead ? 1 : 0;
  const int32_t total = options_.num_workers > 0
                            ? options_.num_workers
                            : static_cast<int32_t>(workers_.size());
  return total - finished;
}

void CoordinatorImpl::HandleBarrier(const std::string& identity,
                                    const wire::Header& h) {
  auto it = workers_.find(h.member_id());
  if (it == workers_.end() || it->second.identity != identity) {
    return ReplyStatus(identity, h.seq(),
                       FailedPreconditionError("barrier from an unregistered "
                                               "worker"));
  }
  barrier_.push_back({{identity, h.seq()}, h.member_id()});
  MaybeReleaseBarrier();
}

void CoordinatorImpl::MaybeReleaseBarrier() {
  if (barrier_.empty()) return;
  std::set<int32_t> arrived;
  for (const auto& [w, id] : barrier_) arrived.insert(id);
  if (static_cast<int32_t>(arrived.size()) < LiveWorkersNeeded()) return;
  for (const auto& [w, id] : barrier_)
    ReplyStatus(w.identity, w.seq, Status::Ok());
  barrier_.clear();
}

void CoordinatorImpl::HandleFinish(const std::string& identity,
                                   const wire::Header& h) {
  auto it = workers_.find(h.member_id());
  if (it == workers_.end() || it->second.identity != identity) {
    return ReplyStatus(identity, h.seq(),
                       FailedPreconditionError("finish from an unregistered "
                                               "worker"));
  }
  it->second.finished = true;
  LOG(INFO) << "coordinator: worker " << h.member_id() << " finished";
  PublishWorkers();
  ReplyStatus(identity, h.seq(), Status::Ok());
  MaybeReleaseBarrier();
  MaybeShutDown();
}

void CoordinatorImpl::MaybeShutDown() {
  if (workers_.empty()) return;
  // Only finished workers end the job: one declared dead may just be slow
  // (it rejoins when heard from again), and shutting the servers down under
  // it would lose its work.
  int32_t finished = 0;
  for (const auto& [id, m] : workers_) finished += m.finished ? 1 : 0;
  const int32_t total = options_.num_workers > 0
                            ? options_.num_workers
                            : static_cast<int32_t>(workers_.size());
  if (finished < total) return;
  LOG(INFO) << "coordinator: every worker finished; shutting the cluster down";
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
  for (const auto& [w, id] : barrier_) {
    ReplyStatus(w.identity, w.seq, UnavailableError("cluster shut down"));
  }
  barrier_.clear();
  shutdown_at_ = SteadyClock::now() + kShutdownFlush;
}

void CoordinatorImpl::CheckTimeouts() {
  const auto now = SteadyClock::now();
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
  return c;
}

}  // namespace ductile
