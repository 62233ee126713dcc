#include "server/server_impl.h"

#include <unistd.h>

#include <iterator>
#include <random>
#include <utility>

#include "elastic/slot_map.h"
#include "glog/logging.h"
#include "proto/codec.h"
#include "proto/counters.h"
#include "proto/table_config.h"
#include "transport/endpoint.h"

namespace ductile {
namespace {

using Clock = std::chrono::steady_clock;

std::string RandomIdentity(const char* role) {
  std::random_device rd;
  return std::string(role) + "-" + std::to_string(getpid()) + "-" +
         std::to_string(rd());
}

}  // namespace

Result<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  if (options.heartbeat_interval_ms < 10 ||
      options.heartbeat_interval_ms > 60000) {
    return InvalidArgumentError("heartbeat_interval_ms must be in [10, 60000]");
  }
  if (options.port < 0 || options.port > 65535) {
    return InvalidArgumentError("port must be in [0, 65535]");
  }
  auto server = std::make_unique<ServerImpl>(options);
  DUCTILE_RETURN_IF_ERROR(server->Init());
  return std::unique_ptr<Server>(std::move(server));
}

ServerImpl::ServerImpl(const ServerOptions& options) : options_(options) {}

ServerImpl::~ServerImpl() {
  Stop();
  Wait().IgnoreError();
  RemoveIpcFile(ipc_address_);
}

Status ServerImpl::Init() {
  router_ =
      MakeRouter(context_, static_cast<int64_t>(options_.max_message_bytes));
  const std::string port =
      options_.port == 0 ? "*" : std::to_string(options_.port);
  Result<std::string> bound =
      Bind(router_, "tcp://" + options_.host + ":" + port);
  DUCTILE_RETURN_IF_ERROR(bound.status());
  tcp_address_ = *bound;
  if (options_.enable_ipc) {
    Result<std::string> ipc =
        Bind(router_, MakeIpcAddress(options_.ipc_dir, "server"));
    DUCTILE_RETURN_IF_ERROR(ipc.status());
    ipc_address_ = *ipc;
  }

  coordinator_ = MakeDealer(context_, RandomIdentity("server"));
  DUCTILE_RETURN_IF_ERROR(Connect(coordinator_, options_.coordinator_address));
  wire::Header reg;
  reg.set_type(wire::REGISTER);
  reg.set_role(wire::ROLE_SERVER);
  reg.set_member_id(options_.requested_id);
  reg.mutable_endpoint()->set_tcp_address(tcp_address_);
  reg.mutable_endpoint()->set_ipc_address(ipc_address_);
  reg.mutable_endpoint()->set_host_id(HostId());
  reg.set_state_dir(options_.state_dir);
  if (options_.requested_id >= 0) {
    // The store is known before registering: fail before the coordinator
    // counts this server in (and, if it restarted, rolls the job back).
    id_ = options_.requested_id;
    DUCTILE_RETURN_IF_ERROR(OpenStore());
  }
  reg.set_keep_checkpoints(options_.keep_checkpoints);
  DUCTILE_RETURN_IF_ERROR(SendToCoordinator(reg));

  // Wait for the registration reply.
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(options_.connect_timeout_ms);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left.count() <= 0) {
      return DeadlineExceededError(
          "no answer from coordinator at " + options_.coordinator_address +
          " within " + std::to_string(options_.connect_timeout_ms) + " ms");
    }
    zmq::pollitem_t items[] = {{coordinator_.handle(), 0, ZMQ_POLLIN, 0}};
    DUCTILE_RETURN_IF_ERROR(Poll(items, left.count()));
    InMessage msg;
    bool got = false;
    DUCTILE_RETURN_IF_ERROR(ReceiveMessage(coordinator_, &msg, &got));
    if (!got) continue;
    wire::Header reply;
    if (!ParseHeader(msg.frame(0), &reply).ok()) continue;
    if (reply.type() != wire::CONTROL_REPLY) continue;
    if (reply.status_code() != 0) {
      return Status(
          StatusCode::kFailedPrecondition,
          "coordinator refused registration: " + reply.status_message());
    }
    if (store_ && reply.member_id() != id_) {
      return FailedPreconditionError("asked for server id " +
                                     std::to_string(id_) + ", got " +
                                     std::to_string(reply.member_id()));
    }
    id_ = reply.member_id();
    generation_ = reply.generation();
    checkpoint_every_ = reply.checkpoint_every();
    // At least three heartbeats per timeout: a server declared dead by
    // mistake would roll the whole job back.
    heartbeat_interval_ms_ = options_.heartbeat_interval_ms;
    if (reply.timeout_ms() > 0) {
      heartbeat_interval_ms_ = std::max<int64_t>(
          10, std::min(heartbeat_interval_ms_, reply.timeout_ms() / 3));
    }
    if (!store_) DUCTILE_RETURN_IF_ERROR(OpenStore());
    for (const auto& table : reply.tables()) {
      Status s = CreateTable(table);
      if (!s.ok()) {
        return FailedPreconditionError("cannot host table '" + table.name() +
                                       "': " + s.message());
      }
    }
    if (reply.has_routing()) InstallRouting(reply.routing());
    break;
  }
  LOG(INFO) << "server " << id_ << " listening on " << tcp_address_
            << (ipc_address_.empty() ? "" : " and " + ipc_address_);
  next_heartbeat_ = Clock::now();
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

Status ServerImpl::OpenStore() {
  if (options_.state_dir.empty()) return Status::Ok();
  store_dir_ = options_.state_dir + "/server-" + std::to_string(id_);
  CheckpointStoreOptions o;
  o.dir = store_dir_;
  o.keep_last = options_.keep_checkpoints;
  Result<std::unique_ptr<CheckpointStore>> store = CheckpointStore::Open(o);
  if (!store.ok()) {
    return Status(
        store.status().code(),
        "server " + std::to_string(id_) +
            " cannot open its checkpoint store: " + store.status().message());
  }
  store_ = std::move(*store);
  return Status::Ok();
}

Status ServerImpl::Wait() {
  std::lock_guard<std::mutex> lock(wait_mu_);
  if (thread_.joinable()) thread_.join();
  return exit_status_;
}

void ServerImpl::Stop() {
  stop_.store(true);
  wakeup_.Signal();
}

ServerCounters ServerImpl::counters() const { return counters_.Snapshot(); }

bool ServerImpl::GetForTesting(TableId table, Key key,
                               std::vector<float>* value) {
  auto it = tables_.find(table);
  return it != tables_.end() && it->second->table->Get(key, value);
}

void ServerImpl::Run() {
  zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                             {coordinator_.handle(), 0, ZMQ_POLLIN, 0},
                             wakeup_.PollItem()};
  InMessage msg;
  while (!stop_.load()) {
    const auto now = Clock::now();
    if (now >= next_heartbeat_) {
      SendHeartbeat();
      next_heartbeat_ = now + std::chrono::milliseconds(heartbeat_interval_ms_);
    }
    // Wake for the next heartbeat or the earliest parked pull's deadline.
    auto wake = next_heartbeat_;
    for (const ParkedPull& p : parked_) wake = std::min(wake, p.deadline);
    if (prepare_above_) wake = std::min(wake, prepare_deadline_);
    for (const auto& [c, deadline] : pending_checkpoints_) {
      wake = std::min(wake, deadline);
    }
    const int64_t wait_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(wake - now)
            .count() +
        1;
    Status s = Poll(items, std::max<int64_t>(wait_ms, 0));
    if (!s.ok()) {
      exit_status_ = s;
      break;
    }
    if (items[2].revents & ZMQ_POLLIN) wakeup_.Drain();
    // Drain what is waiting, requests first; bounded so heartbeats go out.
    for (int i = 0; i < 256; ++i) {
      bool got = false;
      s = ReceiveMessage(router_, &msg, &got);
      if (!s.ok() || !got) break;
      HandleRequest(msg);
      // Large requests take a while each: heartbeats go out between them,
      // or a busy server would be taken for a dead one.
      const auto after = Clock::now();
      if (after >= next_heartbeat_) {
        SendHeartbeat();
        next_heartbeat_ =
            after + std::chrono::milliseconds(heartbeat_interval_ms_);
      }
    }
    while (true) {
      bool got = false;
      s = ReceiveMessage(coordinator_, &msg, &got);
      if (!s.ok() || !got) break;
      HandleCoordinator(msg);
    }
    if (!parked_.empty()) ExpireParked();
    if (prepare_above_) ExpireCheckpointPrepare();
    if (!pending_checkpoints_.empty()) ExpirePendingCheckpoints();
  }
  LOG(INFO) << "server " << id_ << " stopped";
}

Status ServerImpl::SendToCoordinator(const wire::Header& header) {
  OutMessage out;
  out.AddString(header.SerializeAsString());
  return SendMessage(coordinator_, std::move(out));
}

void ServerImpl::SendHeartbeat(int64_t busy_ms) {
  wire::Header hb;
  hb.set_type(wire::HEARTBEAT);
  hb.set_member_id(id_);
  hb.set_generation(generation_);
  if (busy_ms != 0) {
    hb.set_busy(true);
    hb.set_timeout_ms(std::max<int64_t>(busy_ms, 0));
  }
  CountersToWire(counters_.Snapshot(), hb.mutable_counters());
  SendToCoordinator(hb).IgnoreError();  // a lost heartbeat is not an error
}

void ServerImpl::InstallRouting(const wire::RoutingTable& routing) {
  if (routing.epoch() <= routing_.epoch()) return;
  routing_ = routing;
  owned_slots_.assign(routing.num_slots(), 0);
  for (int s = 0; s < routing.slot_owner_size(); ++s) {
    owned_slots_[s] = routing.slot_owner(s) == id_ ? 1 : 0;
  }
  VLOG(1) << "server " << id_ << " routing epoch " << routing.epoch();
}

Status ServerImpl::CreateTable(const wire::TableConfig& config) {
  auto it = tables_.find(config.id());
  if (it != tables_.end()) {
    if (SameTable(ToWire(it->second->table->options(), config.id()), config)) {
      return Status::Ok();
    }
    return AlreadyExistsError("table id " + std::to_string(config.id()) +
                              " exists with other options");
  }
  TableOptions options = FromWire(config);
  DUCTILE_RETURN_IF_ERROR(ValidateTableOptions(options));
  const CustomRule* custom = nullptr;
  if (options.rule == UpdateRule::kCustom) {
    auto rule = options_.custom_rules.find(options.custom_rule);
    if (rule == options_.custom_rules.end() || !rule->second.apply) {
      return FailedPreconditionError("custom rule '" + options.custom_rule +
                                     "' is not registered on server " +
                                     std::to_string(id_));
    }
    if (rule->second.state_floats_per_value > 4) {
      return InvalidArgumentError("custom rule state_floats_per_value > 4");
    }
    custom = &rule->second;
  }
  auto state = std::make_unique<TableState>();
  state->table = std::make_unique<ParameterTable>(config.id(), options, custom);
  state->schedule = ConsistencySchedule(options.consistency);
  tables_[config.id()] = std::move(state);
  return Status::Ok();
}

void ServerImpl::HandleCoordinator(InMessage& message) {
  wire::Header header;
  if (message.frames.empty() || !ParseHeader(message.frame(0), &header).ok()) {
    LOG(WARNING) << "server " << id_ << ": unreadable message from coordinator";
    return;
  }
  if (header.has_routing()) {
    InstallRouting(header.routing());
    wire::Header ack;
    ack.set_type(wire::ROUTING_ACK);
    ack.set_member_id(id_);
    ack.set_epoch(routing_.epoch());
    SendToCoordinator(ack).IgnoreError();
  }
  switch (header.type()) {
    case wire::TABLE_CREATE: {
      Status s = CreateTable(header.table());
      wire::Header ack;
      ack.set_type(wire::TABLE_CREATE_ACK);
      ack.set_seq(header.seq());
      ack.set_member_id(id_);
      ack.set_status_code(static_cast<int>(s.code()));
      ack.set_status_message(s.message());
      SendToCoordinator(ack).IgnoreError();
      break;
    }
    case wire::WORKERS_UPDATE:
      SetWorkers({header.worker_ids().begin(), header.worker_ids().end()});
      break;
    case wire::CONSISTENCY_PREPARE:
      PrepareChange(header);
      break;
    case wire::CONSISTENCY_COMMIT:
      CommitChange(header);
      break;
    case wire::CHECKPOINT_PREPARE:
      PrepareCheckpoint(header);
      break;
    case wire::CHECKPOINT_COMMIT:
      CommitCheckpoint(header);
      break;
    case wire::RECOVER:
      Recover(header);
      break;
    case wire::SHUTDOWN_NOTICE:
      LOG(INFO) << "server " << id_ << ": cluster shutdown";
      stop_.store(true);
      break;
    case wire::CONTROL_REPLY:
      if (header.status_code() != 0) {
        LOG(WARNING) << "server " << id_
                     << ": coordinator says: " << header.status_message();
      }
      break;
    default:
      break;
  }
}

void ServerImpl::Reply(const zmq::message_t& identity,
                       const wire::Header& header, std::vector<float>* values) {
  OutMessage out;
  out.AddCopy(identity.data(), identity.size());
  out.AddString(header.SerializeAsString());
  if (values != nullptr) out.AddOwned(std::move(*values));
  counters_.Add(&ServerCounters::bytes_out, out.bytes());
  Status s = SendMessage(router_, std::move(out));
  if (!s.ok()) VLOG(1) << "reply dropped: " << s;
}

void ServerImpl::ReplyError(const zmq::message_t& identity, uint64_t seq,
                            const Status& s) {
  counters_.Add(&ServerCounters::errors, 1);
  VLOG(1) << "server " << id_ << " refused request " << seq << ": " << s;
  wire::Header h;
  h.set_type(wire::DATA_REPLY);
  h.set_seq(seq);
  h.set_status_code(static_cast<int>(s.code()));
  h.set_status_message(s.message());
  Reply(identity, h, nullptr);
}

void ServerImpl::ReplyMoved(const zmq::message_t& identity, uint64_t seq,
                            bool duplicate) {
  counters_.Add(&ServerCounters::redirects, 1);
  wire::Header h;
  h.set_type(wire::DATA_REPLY);
  h.set_seq(seq);
  h.set_moved(true);
  h.set_duplicate(duplicate);
  h.set_status_code(static_cast<int>(StatusCode::kUnavailable));
  h.set_status_message("routing changed: server " + std::to_string(id_) +
                       " does not own every key's slot");
  *h.mutable_routing() = routing_;
  Reply(identity, h, nullptr);
}

Status ServerImpl::ParseData(const InMessage& message,
                             const wire::Header& header,
                             const ParameterTable& table,
                             DataFrames* request) const {
  // Frames 0 and 1 are the sender's identity and the header. Requests
  // rarely have more than a few frames: keep their views on the stack.
  const size_t n_data = message.frames.size() - 2;
  ByteSpan on_stack[16];
  std::vector<ByteSpan> on_heap;
  ByteSpan* frames = on_stack;
  if (n_data > std::size(on_stack)) {
    on_heap.resize(n_data);
    frames = on_heap.data();
  }
  for (size_t i = 0; i < n_data; ++i) frames[i] = message.frame(i + 2);
  return request->Parse(header, {frames, n_data}, table.options().value_width,
                        header.type() != wire::PULL);
}

void ServerImpl::HandleRequest(InMessage& message, bool replay) {
  if (!replay) {
    counters_.Add(&ServerCounters::requests, 1);
    counters_.Add(&ServerCounters::bytes_in, message.bytes());
  }
  if (message.frames.size() < 2) {
    // Not even a header: reply to the sender if it can be named.
    if (!message.frames.empty()) {
      ReplyError(message.frames[0], 0,
                 InvalidArgumentError("message has no header frame"));
    } else {
      counters_.Add(&ServerCounters::errors, 1);
    }
    return;
  }
  const zmq::message_t& identity = message.frames[0];
  wire::Header header;
  Status s = ParseHeader(message.frame(1), &header);
  if (!s.ok()) return ReplyError(identity, 0, s);
  const uint64_t seq = header.seq();
  const auto type = header.type();
  if (type == wire::CLOCK && message.frames.size() == 2) {
    return HandleClock(header);
  }
  if (type != wire::PUSH && type != wire::PULL && type != wire::PUSH_PULL) {
    return ReplyError(identity, seq,
                      InvalidArgumentError("servers take push, pull, push-pull "
                                           "and clock messages, not type " +
                                           std::to_string(type)));
  }
  if (message.bytes() > options_.max_message_bytes) {
    return ReplyError(
        identity, seq,
        InvalidArgumentError("request of " + std::to_string(message.bytes()) +
                             " bytes is over the server's limit of " +
                             std::to_string(options_.max_message_bytes)));
  }
  if (routing_.epoch() == 0) {
    return ReplyError(identity, seq,
                      UnavailableError("server " + std::to_string(id_) +
                                       " has no routing table yet"));
  }
  if (header.epoch() > routing_.epoch()) {
    // The client has heard of a newer routing table than this server.
    if (routing_requested_epoch_ < header.epoch()) {
      routing_requested_epoch_ = header.epoch();
      wire::Header get;
      get.set_type(wire::GET_ROUTING);
      get.set_member_id(id_);
      SendToCoordinator(get).IgnoreError();
    }
    return ReplyError(identity, seq,
                      UnavailableError("server " + std::to_string(id_) +
                                       " is at routing epoch " +
                                       std::to_string(routing_.epoch()) +
                                       ", behind the request's " +
                                       std::to_string(header.epoch())));
  }
  auto table_it = tables_.find(header.table_id());
  if (table_it == tables_.end()) {
    return ReplyError(
        identity, seq,
        NotFoundError("unknown table id " + std::to_string(header.table_id())));
  }
  TableState& state = *table_it->second;
  ParameterTable& table = *state.table;
  DataFrames request;
  s = ParseData(message, header, table, &request);
  if (!s.ok()) return ReplyError(identity, seq, s);

  const int64_t clock = header.clock();
  const bool is_worker = header.has_worker_id() && header.worker_id() >= 0;
  if (is_worker && header.generation() != generation_) {
    // A request from before a rollback belongs to the abandoned timeline;
    // one from after a rollback this server has not heard of yet is retried.
    if (header.generation() < generation_) {
      return ReplyError(
          identity, seq,
          AbortedError("the job rolled back (generation " +
                       std::to_string(generation_) + "); request of " +
                       "generation " + std::to_string(header.generation()) +
                       " refused"));
    }
    return ReplyError(identity, seq,
                      UnavailableError("server " + std::to_string(id_) +
                                       " is still at generation " +
                                       std::to_string(generation_)));
  }
  if (is_worker && type != wire::PULL && HeldForCheckpoint(clock)) {
    // The checkpoint's cut: this push comes after it.
    max_clock_seen_ = std::max(max_clock_seen_, clock);
    checkpoint_held_.push_back(std::move(message));
    counters_.Set(&ServerCounters::held_pushes, checkpoint_held_.size());
    return;
  }
  if (is_worker) {
    max_clock_seen_ = std::max(max_clock_seen_, clock);
    if (type != wire::PULL) max_push_clock_ = std::max(max_push_clock_, clock);
  }
  // A consistency change is being agreed: requests beyond the clocks seen
  // so far wait until the change tells which model governs them.
  if (is_worker && state.hold_above && clock > *state.hold_above) {
    state.held.push_back(std::move(message));
    return;
  }

  // Exactly-once comes first: a push this server has applied is
  // acknowledged as a duplicate even if its slot has moved since.
  const bool has_values = type != wire::PULL;
  const bool has_pull = type != wire::PUSH;
  bool duplicate = false;
  if (has_values) {
    dedup_.Advance(header.client_id(), header.done_below());
    duplicate = dedup_.IsDuplicate(header.client_id(), seq);
    if (duplicate) counters_.Add(&ServerCounters::duplicates, 1);
  }
  wire::Header reply;
  reply.set_type(wire::DATA_REPLY);
  reply.set_seq(seq);
  reply.set_epoch(routing_.epoch());
  reply.set_duplicate(duplicate);
  if (duplicate && !has_pull) return Reply(identity, reply, nullptr);

  const int32_t num_slots = routing_.num_slots();
  for (Key key : request.keys()) {
    if (!owned_slots_[SlotOf(table.id(), key, num_slots)]) {
      // For a duplicate push-pull the reply says so: the client then only
      // pulls from the new owner.
      return ReplyMoved(identity, seq, duplicate);
    }
  }
  if (has_pull &&
      request.total_floats() * sizeof(float) > options_.max_message_bytes) {
    return ReplyError(
        identity, seq,
        InvalidArgumentError(
            "pull of " + std::to_string(request.total_floats()) +
            " floats is over the server's reply limit of " +
            std::to_string(options_.max_message_bytes) + " bytes"));
  }
  if (has_values && !duplicate) {
    s = table.CheckPush(request);
    if (!s.ok()) return ReplyError(identity, seq, s);
    // BSP: a worker's push of clock t becomes visible once every worker has
    // finished clock t (a late one, below the server clock, applies now).
    const bool buffer =
        is_worker && state.schedule.Buffers(clock) && clock >= min_clock();
    if (buffer) {
      const auto keys = request.keys();
      for (size_t i = 0; i < keys.size(); ++i) {
        s = state.bsp.Check(clock, keys[i], request.length(i));
        if (!s.ok()) return ReplyError(identity, seq, s);
      }
      const bool replace = table.options().rule == UpdateRule::kAssign;
      for (size_t i = 0; i < keys.size(); ++i) {
        state.bsp.Add(clock, keys[i], request.value(i), replace);
      }
    } else {
      const size_t before = table.size();
      table.ApplyPush(request);
      counters_.Add(&ServerCounters::keys_stored, table.size() - before);
    }
    dedup_.MarkApplied(header.client_id(), seq);
    counters_.Add(&ServerCounters::pushes, 1);
  }
  if (type == wire::PUSH) return Reply(identity, reply, nullptr);

  // The staleness gate: park the pull until the server clock allows it.
  const int64_t required = is_worker ? state.schedule.RequiredServerClock(clock)
                                     : ConsistencySchedule::kNoWait;
  if (required > min_clock()) {
    const auto now = Clock::now();
    const int64_t timeout_ms =
        header.timeout_ms() > 0 ? header.timeout_ms() : 60000;
    // Answer a little before the client gives up, so the answer can say
    // whom the pull waited for.
    const auto wait = std::chrono::milliseconds(std::max<int64_t>(
        1, timeout_ms - std::min<int64_t>(timeout_ms / 10, 1000)));
    // A parked push-pull has applied its push already: released, it is
    // only served (ServePull reads keys and lengths, never values).
    parked_.push_back(ParkedPull{std::move(message), table.id(), required,
                                 clock, duplicate, now, now + wait});
    counters_.Set(&ServerCounters::parked_pulls, parked_.size());
    return;
  }
  ServePull(identity, header, state, request, 0, duplicate);
}

void ServerImpl::ServePull(const zmq::message_t& identity,
                           const wire::Header& header, TableState& state,
                           const DataFrames& request, uint64_t blocked_us,
                           bool duplicate) {
  ParameterTable& table = *state.table;
  Status s = table.CheckPull(request);
  if (!s.ok()) return ReplyError(identity, header.seq(), s);
  const size_t before = table.size();
  std::vector<float> values;
  table.Pull(request, &values);
  counters_.Add(&ServerCounters::keys_stored, table.size() - before);
  counters_.Add(&ServerCounters::pulls, 1);
  wire::Header reply;
  reply.set_type(wire::DATA_REPLY);
  reply.set_seq(header.seq());
  reply.set_epoch(routing_.epoch());
  reply.set_num_keys(request.keys().size());
  reply.set_values_frames(1);
  reply.set_data_clock(min_clock());
  reply.set_blocked_us(blocked_us);
  reply.set_duplicate(duplicate);
  // Clients' caches decide freshness with the bound: keep theirs current.
  *reply.mutable_consistency() = ToWire(state.schedule.latest());
  Reply(identity, reply, &values);
}

void ServerImpl::HandleClock(const wire::Header& header) {
  if (!header.has_worker_id() || header.worker_id() < 0) return;
  if (header.generation() != generation_) return;  // another timeline
  const int32_t worker = header.worker_id();
  max_clock_seen_ = std::max(max_clock_seen_, header.clock());
  AdvanceWorker(worker, header.clock());
}

void ServerImpl::AdvanceWorker(int32_t worker, int64_t clock) {
  int64_t& known = known_clocks_[worker];
  known = std::max(known, clock);
  if (live_workers_.count(worker) == 0) return;
  if (worker_clocks_.Advance(worker, clock)) OnServerClock();
}

void ServerImpl::SetWorkers(const std::vector<int32_t>& ids) {
  const int64_t before = min_clock();
  std::set<int32_t> live(ids.begin(), ids.end());
  for (int32_t gone : live_workers_) {
    if (live.count(gone) == 0) worker_clocks_.Remove(gone);
  }
  for (int32_t id : live) {
    if (live_workers_.count(id) == 0) {
      worker_clocks_.Advance(id, known_clocks_[id]);
    }
  }
  live_workers_ = std::move(live);
  VLOG(1) << "server " << id_ << ": " << live_workers_.size()
          << " live workers, server clock " << min_clock();
  if (min_clock() != before) OnServerClock();
  MaybeWriteCheckpoint();  // e.g. the last worker the cut waited for died
}

void ServerImpl::OnServerClock() {
  const int64_t server_clock = min_clock();
  counters_.Set(&ServerCounters::min_clock, server_clock);
  // Tell the coordinator at once when a checkpoint by clock is due, rather
  // than at the next heartbeat.
  if (checkpoint_every_ > 0 && store_) {
    const int64_t due =
        std::max<int64_t>(last_checkpoint_, 0) + checkpoint_every_;
    if (server_clock >= due && due_reported_ < due) {
      due_reported_ = due;
      SendHeartbeat();
    }
  }
  // Apply every BSP clock that every worker has finished.
  for (auto& [id, state] : tables_) {
    if (state->bsp.empty()) continue;
    const bool mean_rule = state->table->options().rule != UpdateRule::kAssign;
    for (auto& [clock, keys] : state->bsp.TakeBefore(server_clock)) {
      const bool mean =
          mean_rule && state->schedule.At(clock).combine == BspCombine::kMean;
      const size_t before = state->table->size();
      for (auto& [key, combined] : keys) {
        if (mean && combined.pushes > 1) {
          const float scale = 1.0f / static_cast<float>(combined.pushes);
          for (float& x : combined.values) x *= scale;
        }
        state->table->ApplyOne(key, combined.values);
      }
      counters_.Add(&ServerCounters::keys_stored,
                    state->table->size() - before);
    }
  }
  MaybeWriteCheckpoint();
  // Release the pulls the new server clock allows, in arrival order.
  if (parked_.empty()) return;
  std::vector<ParkedPull> ready;
  std::vector<ParkedPull> still;
  for (ParkedPull& p : parked_) {
    (p.required <= server_clock ? ready : still).push_back(std::move(p));
  }
  parked_ = std::move(still);
  counters_.Set(&ServerCounters::parked_pulls, parked_.size());
  const auto now = Clock::now();
  for (ParkedPull& p : ready) {
    wire::Header header;
    if (!ParseHeader(p.message.frame(1), &header).ok()) continue;
    auto it = tables_.find(p.table);
    if (it == tables_.end()) continue;
    DataFrames request;
    Status s = ParseData(p.message, header, *it->second->table, &request);
    if (!s.ok()) {
      ReplyError(p.message.frames[0], header.seq(), s);
      continue;
    }
    const uint64_t blocked_us =
        std::chrono::duration_cast<std::chrono::microseconds>(now - p.parked_at)
            .count();
    ServePull(p.message.frames[0], header, *it->second, request, blocked_us,
              p.duplicate);
  }
}

std::string ServerImpl::Laggards(int64_t required) const {
  std::string out;
  for (int32_t w : live_workers_) {
    const int64_t c = worker_clocks_.clock_of(w);
    if (c < required) {
      if (!out.empty()) out += ", ";
      out += std::to_string(w) + " (at clock " + std::to_string(c) + ")";
    }
  }
  return out.empty() ? "none" : out;
}

void ServerImpl::ExpireParked() {
  const auto now = Clock::now();
  std::vector<ParkedPull> still;
  for (ParkedPull& p : parked_) {
    if (now < p.deadline) {
      still.push_back(std::move(p));
      continue;
    }
    wire::Header header;
    const uint64_t seq =
        ParseHeader(p.message.frame(1), &header).ok() ? header.seq() : 0;
    ReplyError(p.message.frames[0], seq,
               DeadlineExceededError(
                   "pull at clock " + std::to_string(p.clock) +
                   " needs server clock " + std::to_string(p.required) +
                   ", which is " + std::to_string(min_clock()) +
                   "; waiting for workers " + Laggards(p.required)));
  }
  parked_ = std::move(still);
  counters_.Set(&ServerCounters::parked_pulls, parked_.size());
}

void ServerImpl::PrepareChange(const wire::Header& header) {
  wire::Header ack;
  ack.set_type(wire::CONSISTENCY_ACK);
  ack.set_member_id(id_);
  ack.set_change_id(header.change_id());
  auto it = tables_.find(header.table_id());
  if (it == tables_.end()) {
    StatusToWire(
        NotFoundError("server " + std::to_string(id_) + " has no table " +
                      std::to_string(header.table_id())),
        &ack);
  } else {
    it->second->hold_above = max_clock_seen_;
    ack.set_clock(max_clock_seen_);
  }
  SendToCoordinator(ack).IgnoreError();
}

void ServerImpl::CommitChange(const wire::Header& header) {
  auto it = tables_.find(header.table_id());
  if (it == tables_.end()) return;
  TableState& state = *it->second;
  const Consistency c = FromWire(header.consistency());
  if (ValidateConsistency(c).ok()) state.schedule.Set(header.clock(), c);
  LOG(INFO) << "server " << id_ << ": table '" << state.table->options().name
            << "' is " << ToString(c) << " from clock " << header.clock();
  state.hold_above.reset();
  std::vector<InMessage> held = std::move(state.held);
  state.held.clear();
  for (InMessage& m : held) HandleRequest(m, /*replay=*/true);
  // The new model may let parked pulls go (a larger bound) or hold fewer.
  for (ParkedPull& p : parked_) {
    if (p.table == header.table_id()) {
      p.required = state.schedule.RequiredServerClock(p.clock);
    }
  }
  OnServerClock();
}

// ------------------------------------------------------------ checkpoints

bool ServerImpl::HeldForCheckpoint(int64_t clock) const {
  if (prepare_above_ && clock > *prepare_above_) return true;
  return !pending_checkpoints_.empty() &&
         clock >= pending_checkpoints_.begin()->first;
}

void ServerImpl::PrepareCheckpoint(const wire::Header& header) {
  wire::Header ack;
  ack.set_type(wire::CHECKPOINT_ACK);
  ack.set_member_id(id_);
  ack.set_change_id(header.change_id());
  ack.set_generation(generation_);
  if (!store_) {
    StatusToWire(FailedPreconditionError(
                     "server " + std::to_string(id_) +
                     " keeps no checkpoints (it was started without a "
                     "state directory)"),
                 &ack);
  } else if (header.generation() != generation_) {
    StatusToWire(
        AbortedError("server " + std::to_string(id_) + " is at generation " +
                     std::to_string(generation_)),
        &ack);
  } else {
    // Pushes beyond every push let through so far wait until the
    // coordinator has picked the checkpoint's clock (above the largest of
    // all servers'), so none lands on the wrong side of the cut.
    prepare_above_ = max_push_clock_;
    prepare_id_ = header.change_id();
    prepare_deadline_ =
        Clock::now() +
        std::chrono::milliseconds(std::max<int64_t>(header.timeout_ms(), 1000));
    ack.set_clock(max_push_clock_);
  }
  SendToCoordinator(ack).IgnoreError();
}

void ServerImpl::CommitCheckpoint(const wire::Header& header) {
  const int64_t clock = header.clock();
  const bool ours = prepare_above_ && prepare_id_ == header.change_id() &&
                    header.generation() == generation_;
  const bool valid =
      ours && clock > *prepare_above_ && clock > last_checkpoint_;
  if (ours) {
    // The round is over either way: its holds end here.
    prepare_above_.reset();
    if (valid) {
      last_complete_checkpoint_ = header.data_clock();
      pending_checkpoints_[clock] =
          Clock::now() +
          std::chrono::milliseconds(std::max<int64_t>(
              header.timeout_ms() > 0 ? header.timeout_ms() : 30000, 1000));
    }
    ReplayCheckpointHeld();
  }
  if (!valid && clock >= 0) {
    // The prepare expired (pushes beyond it were let through since) or
    // belongs to another round: this cut cannot be taken here.
    wire::Header done;
    done.set_type(wire::CHECKPOINT_DONE);
    done.set_member_id(id_);
    done.set_change_id(header.change_id());
    done.set_clock(clock);
    done.set_generation(generation_);
    StatusToWire(AbortedError("server " + std::to_string(id_) +
                              " cannot take the checkpoint at clock " +
                              std::to_string(clock) +
                              " (its prepare expired or was replaced)"),
                 &done);
    SendToCoordinator(done).IgnoreError();
    return;
  }
  MaybeWriteCheckpoint();
}

void ServerImpl::ExpirePendingCheckpoints() {
  const auto now = Clock::now();
  bool dropped = false;
  for (auto it = pending_checkpoints_.begin();
       it != pending_checkpoints_.end();) {
    if (now < it->second) {
      ++it;
      continue;
    }
    const int64_t clock = it->first;
    LOG(WARNING) << "server " << id_ << ": dropping the checkpoint at clock "
                 << clock << ": workers " << Laggards(clock)
                 << " did not reach it in time";
    wire::Header done;
    done.set_type(wire::CHECKPOINT_DONE);
    done.set_member_id(id_);
    done.set_clock(clock);
    done.set_generation(generation_);
    StatusToWire(
        DeadlineExceededError("server " + std::to_string(id_) + ": workers " +
                              Laggards(clock) + " did not reach clock " +
                              std::to_string(clock) + " in time"),
        &done);
    SendToCoordinator(done).IgnoreError();
    it = pending_checkpoints_.erase(it);
    dropped = true;
  }
  if (dropped) ReplayCheckpointHeld();
}

void ServerImpl::ExpireCheckpointPrepare() {
  if (Clock::now() < prepare_deadline_) return;
  LOG(WARNING) << "server " << id_
               << ": no checkpoint clock from the coordinator in time; "
                  "releasing the held pushes";
  prepare_above_.reset();
  ReplayCheckpointHeld();
}

void ServerImpl::ReplayCheckpointHeld() {
  std::vector<InMessage> held = std::move(checkpoint_held_);
  checkpoint_held_.clear();
  // In arrival order; those still beyond a cut are held again, in order.
  for (InMessage& m : held) HandleRequest(m, /*replay=*/true);
  counters_.Set(&ServerCounters::held_pushes, checkpoint_held_.size());
}

void ServerImpl::MaybeWriteCheckpoint() {
  while (!pending_checkpoints_.empty()) {
    const int64_t clock = pending_checkpoints_.begin()->first;
    // Every live worker has finished clock - 1, and the BSP clocks below
    // it are applied (OnServerClock runs first): the state is the cut.
    if (!live_workers_.empty() && min_clock() < clock) return;
    pending_checkpoints_.erase(pending_checkpoints_.begin());
    const auto start = Clock::now();
    Status s = WriteCheckpointAt(clock);
    SendHeartbeat();  // done: silence means death again
    const double ms =
        std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    wire::Header done;
    done.set_type(wire::CHECKPOINT_DONE);
    done.set_member_id(id_);
    done.set_clock(clock);
    done.set_generation(generation_);
    StatusToWire(s, &done);
    SendToCoordinator(done).IgnoreError();
    if (s.ok()) {
      LOG(INFO) << "server " << id_ << ": checkpoint at clock " << clock
                << " written in " << ms << " ms";
    } else {
      LOG(ERROR) << "server " << id_ << ": checkpoint at clock " << clock
                 << " failed: " << s;
    }
    ReplayCheckpointHeld();
  }
}

Status ServerImpl::WriteCheckpointAt(int64_t clock) {
  // No heartbeat goes out while copying and writing the changes: say for
  // how long at most first, at a pessimistic 25 MB/s (a crash meanwhile is
  // noticed after that).
  uint64_t bytes = 0;
  for (auto& [id, state] : tables_) {
    bytes += state->table->changed_bytes() + 32 * state->table->changed();
  }
  SendHeartbeat(/*busy_ms=*/1000 + static_cast<int64_t>(bytes / 25000));
  std::vector<TableRecord> tables;
  std::vector<EntryRecord> changed;
  for (auto& [id, state] : tables_) {
    tables.push_back(
        {id, ToWire(state->table->options(), id).SerializeAsString()});
    state->table->TakeChanges(&changed);
  }
  // Versions of rounds that failed will never be restored: drop them, or
  // they would push complete ones out of the newest keep_last.
  Result<std::vector<int64_t>> versions = store_->ListCheckpoints();
  if (versions.ok()) {
    for (int64_t v : *versions) {
      if (v > last_complete_checkpoint_ && v < clock) {
        Status dropped = store_->DropCheckpoint(v);
        if (!dropped.ok()) LOG(WARNING) << "server " << id_ << ": " << dropped;
      }
    }
  }
  Status s = store_->WriteCheckpoint(
      clock, routing_.epoch(), tables, changed, pending_deletes_,
      "generation=" + std::to_string(generation_));
  if (!s.ok()) {
    // Not written: the changes belong to the next attempt.
    for (const EntryRecord& e : changed) {
      auto it = tables_.find(e.table);
      if (it != tables_.end()) it->second->table->MarkChanged(e.key);
    }
    return s;
  }
  pending_deletes_.clear();
  last_checkpoint_ = clock;
  counters_.Set(&ServerCounters::checkpoint_clock, clock);
  counters_.Add(&ServerCounters::checkpoints_written, 1);
  return Status::Ok();
}

// --------------------------------------------------------------- recovery

void ServerImpl::AbortWaiting(const Status& status) {
  for (ParkedPull& p : parked_) {
    wire::Header header;
    const uint64_t seq =
        ParseHeader(p.message.frame(1), &header).ok() ? header.seq() : 0;
    ReplyError(p.message.frames[0], seq, status);
  }
  parked_.clear();
  counters_.Set(&ServerCounters::parked_pulls, 0);
  std::vector<InMessage*> waiting;
  for (InMessage& m : checkpoint_held_) waiting.push_back(&m);
  for (auto& [id, state] : tables_) {
    for (InMessage& m : state->held) waiting.push_back(&m);
  }
  for (InMessage* m : waiting) {
    wire::Header header;
    const uint64_t seq =
        ParseHeader(m->frame(1), &header).ok() ? header.seq() : 0;
    ReplyError(m->frames[0], seq, status);
  }
  checkpoint_held_.clear();
  counters_.Set(&ServerCounters::held_pushes, 0);
  for (auto& [id, state] : tables_) {
    state->held.clear();
    state->hold_above.reset();
  }
}

void ServerImpl::Recover(const wire::Header& header) {
  if (header.generation() < generation_) return;  // an older rollback's
  if (restored_generation_ == header.generation()) {
    // Sent again (the coordinator restarted, or missed the ack): restored
    // already, and requests of this generation may have been applied since.
    wire::Header ack;
    ack.set_type(wire::RECOVER_ACK);
    ack.set_member_id(id_);
    ack.set_generation(header.generation());
    ack.set_clock(header.clock());
    SendToCoordinator(ack).IgnoreError();
    return;
  }
  SendHeartbeat(/*busy_ms=*/-1);  // no heartbeat goes out while restoring
  const auto start = Clock::now();
  Status s = RestoreState(header);
  SendHeartbeat();  // done: silence means death again
  const double ms =
      std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (s.ok()) {
    LOG(INFO) << "server " << id_ << ": rolled back to clock " << header.clock()
              << " (generation " << generation_ << ") in " << ms << " ms";
  } else {
    LOG(ERROR) << "server " << id_
               << ": cannot restore the checkpoint at clock " << header.clock()
               << ": " << s;
  }
  if (s.ok()) restored_generation_ = header.generation();
  wire::Header ack;
  ack.set_type(wire::RECOVER_ACK);
  ack.set_member_id(id_);
  ack.set_generation(header.generation());
  ack.set_clock(header.clock());
  StatusToWire(s, &ack);
  SendToCoordinator(ack).IgnoreError();
}

Status ServerImpl::RestoreState(const wire::Header& header) {
  const int64_t clock = header.clock();
  // Everything waiting belongs to the abandoned timeline.
  AbortWaiting(
      AbortedError("the job is rolling back to the checkpoint at "
                   "clock " +
                   std::to_string(clock)));
  generation_ = header.generation();
  prepare_above_.reset();
  pending_checkpoints_.clear();
  pending_deletes_.clear();
  dedup_ = RequestDedup();
  for (const auto& config : header.tables()) {
    // A table this server has keeps its own options: they differ from the
    // coordinator's after a consistency change (kept in the schedule).
    if (tables_.count(config.id()) == 0)
      DUCTILE_RETURN_IF_ERROR(CreateTable(config));
  }
  for (auto& [id, state] : tables_) {
    state->table->Clear();
    state->bsp = BspBuffer();
  }
  // The routing came with the message (installed before this runs).
  if (routing_.num_slots() <= 0) {
    return FailedPreconditionError("no routing table to restore into");
  }
  const int32_t num_slots = routing_.num_slots();
  uint64_t restored = 0;
  bool own_version = false;
  if (clock > 0) {
    for (const wire::CheckpointSource& source : header.sources()) {
      std::vector<uint8_t> wanted(num_slots, 0);
      bool any = false;
      for (int32_t slot : source.slots()) {
        if (slot >= 0 && slot < num_slots && owned_slots_[slot]) {
          wanted[slot] = 1;
          any = true;
        }
      }
      const bool mine = store_ && source.state_dir() == store_dir_;
      if (!any && !mine) continue;
      if (source.state_dir().empty()) {
        return FailedPreconditionError(
            "server " + std::to_string(source.server_id()) +
            " kept no checkpoints; its slots cannot be restored");
      }
      Result<LoadedCheckpoint> loaded =
          mine ? store_->Load(clock)
               : LoadCheckpointFrom(source.state_dir(), clock);
      if (!loaded.ok()) {
        return Status(loaded.status().code(),
                      "checkpoint at clock " + std::to_string(clock) +
                          " of server " + std::to_string(source.server_id()) +
                          " in " + source.state_dir() + ": " +
                          loaded.status().message());
      }
      own_version = own_version || mine;
      for (EntryRecord& e : loaded->entries) {
        auto t = tables_.find(e.table);
        const int32_t slot = SlotOf(e.table, e.key, num_slots);
        if (t == tables_.end() || !wanted[slot]) {
          // Stored here but no longer ours: drop it from the store too.
          if (mine) pending_deletes_.emplace_back(e.table, e.key);
          continue;
        }
        // Entries from another server's store are new to this one's.
        t->second->table->Restore(std::move(e), /*changed=*/!mine);
        ++restored;
      }
    }
  }
  if (store_) {
    if (own_version) {
      DUCTILE_RETURN_IF_ERROR(store_->RollBackTo(clock));
    } else {
      // Nothing of this server's own at that clock: start its store over,
      // and write everything it now holds at the next checkpoint.
      DUCTILE_RETURN_IF_ERROR(store_->DiscardAll());
      for (auto& [id, state] : tables_) {
        std::vector<Key> keys;
        state->table->ForEachKey([&](Key k) { keys.push_back(k); });
        for (Key k : keys) state->table->MarkChanged(k);
      }
      pending_deletes_.clear();
    }
  }
  last_checkpoint_ = clock > 0 ? clock : -1;
  last_complete_checkpoint_ = last_checkpoint_;
  due_reported_ = 0;
  counters_.Set(&ServerCounters::checkpoint_clock, last_checkpoint_);
  uint64_t keys = 0;
  for (auto& [id, state] : tables_) keys += state->table->size();
  counters_.Set(&ServerCounters::keys_stored, keys);
  // Every live worker resumes at the checkpoint's clock.
  worker_clocks_ = ClockVector();
  known_clocks_.clear();
  live_workers_ =
      std::set<int32_t>(header.worker_ids().begin(), header.worker_ids().end());
  for (int32_t w : live_workers_) {
    worker_clocks_.Advance(w, clock);
    known_clocks_[w] = clock;
  }
  max_clock_seen_ = clock;
  max_push_clock_ = clock - 1;
  counters_.Set(&ServerCounters::min_clock, min_clock());
  VLOG(1) << "server " << id_ << ": restored " << restored << " keys";
  return Status::Ok();
}

}  // namespace ductile
