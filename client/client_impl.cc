#include "client/client_impl.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>

#include "env/env.h"
#include "glog/logging.h"
#include "proto/codec.h"
#include "proto/table_config.h"
#include "routing/slot_map.h"
#include "transport/endpoint.h"
#include "util/finite.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

// A request with no reply for this long is sent again with the same
// sequence number (servers drop the duplicate if the first one arrived).
constexpr milliseconds kResendAfter{5000};
// Back-off before re-routing a request a server could not take yet.
constexpr milliseconds kRetryAfter{20};
// Values of at least this many bytes per key go out as one frame per key,
// read in place, rather than gathered into one buffer.
constexpr uint64_t kFramePerKeyBytes = 16384;
// How often deadlines and resends are checked while requests are open.
constexpr milliseconds kTimerPeriod{10};
// Barrier and Finish requests unanswered this long are sent again.
constexpr milliseconds kControlResendAfter{2000};
// Staleness histogram buckets (the last holds larger values too).
constexpr size_t kStalenessBuckets = 64;

int64_t RandomClientId() {
  std::random_device rd;
  const uint64_t hi = rd(), lo = rd();
  return static_cast<int64_t>(((hi << 32) | lo) >> 2) + 1;
}

}  // namespace

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.connect_timeout_ms < 1 || options.request_timeout_ms < 1) {
    return InvalidArgumentError("timeouts must be >= 1 ms");
  }
  if (options.heartbeat_interval_ms < 10 ||
      options.heartbeat_interval_ms > 60000) {
    return InvalidArgumentError("heartbeat_interval_ms must be in [10, 60000]");
  }
  auto client = std::make_unique<ClientImpl>(options);
  DUCTILE_RETURN_IF_ERROR(client->Init());
  return std::unique_ptr<Client>(std::move(client));
}

Handle Client::PushTensorAsync(const Tensor& t, std::span<const float> values) {
  return PushAsync(t.table, t.keys, values, t.lengths);
}

Handle Client::PullTensorAsync(const Tensor& t, std::span<float> out) {
  return PullAsync(t.table, t.keys, out, t.lengths);
}

ClientImpl::ClientImpl(const ClientOptions& options)
    : options_(options), client_id_(RandomClientId()) {
  stats_.staleness.assign(kStalenessBuckets, 0);
}

ClientImpl::~ClientImpl() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stop_.store(true);
  }
  wakeup_.Signal();
  if (thread_.joinable()) thread_.join();
}

Status ClientImpl::Init() {
  transport_ = SystemEnv()->NewTransport("client");
  DUCTILE_ASSIGN_OR_RETURN(coordinator_, transport_->NewDealer(""));
  DUCTILE_RETURN_IF_ERROR(coordinator_->Connect(options_.coordinator_address));
  RebuildPollItems();
  thread_ = std::thread([this] { Run(); });

  wire::Header reg;
  reg.set_type(wire::REGISTER);
  reg.set_role(options_.register_as_worker ? wire::ROLE_WORKER
                                           : wire::ROLE_OBSERVER);
  if (options_.register_as_worker && options_.requested_worker_id >= 0) {
    reg.set_worker_id(options_.requested_worker_id);
  }
  Result<wire::Header> reply = Control(reg, options_.connect_timeout_ms);
  if (!reply.ok()) {
    if (reply.status().code() == StatusCode::kDeadlineExceeded) {
      return DeadlineExceededError(
          "coordinator at " + options_.coordinator_address +
          " did not admit this client within " +
          std::to_string(options_.connect_timeout_ms) +
          " ms (is it running, and have all its servers registered?)");
    }
    return reply.status();
  }
  worker_id_ = options_.register_as_worker ? reply->member_id() : -1;
  num_workers_ = reply->num_workers();
  barrier_round_.store(reply->barrier_round());
  for (const auto& table : reply->tables()) {
    tables_.Remember(table);
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- callers

Result<wire::Header> ClientImpl::Control(wire::Header request,
                                         int64_t timeout_ms) {
  auto op = std::make_shared<ControlOperation>();
  op->request = std::move(request);
  op->deadline = SteadyClock::now() + milliseconds(timeout_ms);
  op->Hold();
  Enqueue(op);
  DUCTILE_RETURN_IF_ERROR(op->Wait());
  Status s = StatusFromWire(op->reply);
  if (!s.ok()) return s;
  return op->reply;
}

Result<TableId> ClientImpl::CreateTable(const TableOptions& options) {
  DUCTILE_RETURN_IF_ERROR(ValidateTableOptions(options));
  wire::Header request;
  request.set_type(wire::CREATE_TABLE);
  *request.mutable_table() = ToWire(options, 0);
  Result<wire::Header> reply = Control(request, options_.request_timeout_ms);
  DUCTILE_RETURN_IF_ERROR(reply.status());
  tables_.Remember(reply->table());
  return reply->table().id();
}

Result<TableInfo> ClientImpl::GetTable(const std::string& name) {
  wire::Header request;
  request.set_type(wire::GET_TABLE);
  request.set_name(name);
  Result<wire::Header> reply = Control(request, options_.request_timeout_ms);
  DUCTILE_RETURN_IF_ERROR(reply.status());
  tables_.Remember(reply->table());
  return TableInfo{reply->table().id(), FromWire(reply->table())};
}

Result<Tensor> ClientImpl::RegisterTensor(const TableOptions& options,
                                          uint64_t num_floats,
                                          uint32_t chunk_floats) {
  if (num_floats == 0) return InvalidArgumentError("tensor has no floats");
  if (chunk_floats == 0) return InvalidArgumentError("chunk_floats is 0");
  TableOptions table = options;
  table.value_width = 0;
  Result<TableId> id = CreateTable(table);
  DUCTILE_RETURN_IF_ERROR(id.status());
  Tensor t;
  t.table = *id;
  t.num_floats = num_floats;
  t.chunk_floats = chunk_floats;
  for (uint64_t offset = 0, k = 0; offset < num_floats;
       offset += chunk_floats, ++k) {
    t.keys.push_back(k);
    t.lengths.push_back(static_cast<uint32_t>(
        std::min<uint64_t>(chunk_floats, num_floats - offset)));
  }
  return t;
}

Handle ClientImpl::PushAsync(TableId table, std::span<const Key> keys,
                             std::span<const float> values,
                             std::span<const uint32_t> lengths) {
  return SubmitData(wire::PUSH, table, keys, values, {}, lengths);
}

Handle ClientImpl::PullAsync(TableId table, std::span<const Key> keys,
                             std::span<float> out,
                             std::span<const uint32_t> lengths) {
  return SubmitData(wire::PULL, table, keys, {}, out, lengths);
}

Handle ClientImpl::PushPullAsync(TableId table, std::span<const Key> keys,
                                 std::span<const float> values,
                                 std::span<float> out,
                                 std::span<const uint32_t> lengths) {
  return SubmitData(wire::PUSH_PULL, table, keys, values, out, lengths);
}

Handle ClientImpl::SubmitData(wire::MessageType type, TableId table,
                              std::span<const Key> keys,
                              std::span<const float> values,
                              std::span<float> out,
                              std::span<const uint32_t> lengths) {
  auto op = std::make_shared<DataOperation>();
  op->type = type;
  op->table = table;
  op->keys = keys;
  op->values = values;
  op->out = out;
  op->lengths = lengths;
  return SubmitData(std::move(op));
}

Handle ClientImpl::SubmitData(std::shared_ptr<DataOperation> op) {
  op->Hold();  // the dispatcher's hold, dropped once every part is out
  if (worker_id_.load() >= 0 && RefuseDuringRecovery(*op)) return Handle(op);
  op->clock = clock_.load();
  op->generation = generation_.load();
  Result<TableRegistry::View> table = tables_.Lookup(op->table, op->clock);
  if (!table.ok()) {
    op->Release(table.status());
    return Handle(op);
  }
  op->width = table->width;
  const bool push = op->type != wire::PULL;
  const bool pull = op->type != wire::PUSH;
  Result<uint64_t> total = CheckRequestShape(
      op->keys, op->lengths, op->width,
      push ? op->values.size() : op->out.size(), push ? "values" : "out");
  if (total.ok() && push && pull && op->out.size() != op->values.size()) {
    total = InvalidArgumentError("out has " + std::to_string(op->out.size()) +
                                 " floats, values has " +
                                 std::to_string(op->values.size()));
  }
  if (total.ok() && *total * sizeof(float) > options_.max_message_bytes) {
    total = InvalidArgumentError(
        "request of " + std::to_string(*total * sizeof(float)) +
        " bytes of values is over max_message_bytes (" +
        std::to_string(options_.max_message_bytes) + ")");
  }
  if (!total.ok()) {
    op->Release(total.status());
    return Handle(op);
  }
  if (op->width == 0) {
    op->offsets.resize(op->keys.size());
    uint64_t offset = 0;
    for (size_t i = 0; i < op->keys.size(); ++i) {
      op->offsets[i] = offset;
      offset += op->lengths[i];
    }
  } else if (!op->lengths.empty()) {
    op->lengths = {};  // equal to the width: no need to send them
  }
  if (push) {
    if (Status s = CheckPushValues(*op, *table); !s.ok()) {
      op->Release(s);
      return Handle(op);
    }
  }
  op->deadline = SteadyClock::now() + milliseconds(options_.request_timeout_ms);
  if (options_.enable_cache && worker_id_.load() >= 0 &&
      table->mode == ConsistencyMode::kSsp && UseCache(*op, *table)) {
    return Handle(op);  // a cache hit
  }
  Enqueue(op);
  return Handle(op);
}

Status ClientImpl::CheckPushValues(const DataOperation& op,
                                   const TableRegistry::View& table) const {
  if (table.reject_non_finite && !AllFinite(op.values)) {
    const size_t bad = FirstNonFinite(op.values);
    size_t i = 0;  // the key holding float `bad`
    while (i + 1 < op.keys.size() && op.offset(i + 1) <= bad) ++i;
    return InvalidArgumentError("non-finite value (NaN or Inf) pushed to key " +
                                std::to_string(op.keys[i]) + " of " +
                                tables_.Name(op.table) +
                                "; nothing was sent, table left unchanged");
  }
  if (op.width == 0) return tables_.CheckWidths(op.table, op.keys, op.lengths);
  return Status::Ok();
}

bool ClientImpl::UseCache(DataOperation& op, const TableRegistry::View& table) {
  const DataOperation* o = &op;
  auto offset = [o](size_t i) { return o->offset(i); };
  auto length = [o](size_t i) { return o->length(i); };
  if (op.type != wire::PULL) {
    cache_.Write(op.table, op.keys, offset, length, op.values, *table.kernel);
  }
  if (op.type == wire::PUSH || !table.cache_readable) return false;
  if (op.type == wire::PULL &&
      cache_.TryRead(op.table, op.keys, offset, length,
                     op.clock - table.staleness, op.out)) {
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.cache_hits;
    }
    op.Release();  // the dispatcher's hold: done
    return true;
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.cache_misses;
  }
  op.cache_install = true;
  op.cache_mark = cache_.Mark();
  return false;
}

void ClientImpl::Enqueue(std::shared_ptr<internal::Operation> op) {
  bool was_empty = false;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (!stop_.load()) {
      was_empty = queue_.empty();
      queue_.push_back(std::move(op));
      op = nullptr;
    }
  }
  if (op) {
    op->Release(CancelledError("client is shutting down"));
    return;
  }
  // A non-empty queue has been signalled already and not yet taken.
  if (was_empty) wakeup_.Signal();
}

int64_t ClientImpl::Clock() {
  const int64_t clock = clock_.fetch_add(1) + 1;
  if (worker_id_.load() >= 0) {
    std::optional<int64_t> report;
    {
      std::lock_guard<std::mutex> lock(recovery_mu_);
      // Past a committed checkpoint's clock without a resume state for it
      // (or one this worker does not keep): report what there is.
      if (report_clock_ && *report_clock_ < clock) {
        report = *report_clock_;
        report_clock_.reset();
      }
      if (pending_recovery_) return clock;  // nothing to tell the servers
    }
    if (report) ReportResumeState(*report, {});
    auto op = std::make_shared<ClockOperation>();
    op->clock = clock;
    op->generation = generation_.load();
    op->Hold();
    Enqueue(op);
  }
  return clock;
}

Result<int64_t> ClientImpl::SetConsistency(TableId table,
                                           const Consistency& consistency) {
  DUCTILE_RETURN_IF_ERROR(ValidateConsistency(consistency));
  wire::Header request;
  request.set_type(wire::SET_CONSISTENCY);
  request.set_table_id(table);
  *request.mutable_consistency() = ToWire(consistency);
  Result<wire::Header> reply = Control(request, options_.request_timeout_ms);
  DUCTILE_RETURN_IF_ERROR(reply.status());
  tables_.SetConsistency(table, ToWire(consistency));
  return reply->clock();
}

ClientStats ClientImpl::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

Status ClientImpl::Barrier(int64_t timeout_ms) {
  if (worker_id_ < 0) {
    return FailedPreconditionError(
        "Barrier() needs a client registered as a "
        "worker");
  }
  if (timeout_ms < 0) timeout_ms = options_.request_timeout_ms;
  wire::Header request;
  request.set_type(wire::BARRIER);
  request.set_member_id(worker_id_);
  request.set_generation(generation_.load());
  int64_t round = barrier_round_.load();
  request.set_barrier_round(round);
  {
    std::lock_guard<std::mutex> lock(recovery_mu_);
    if (pending_recovery_) {
      return AbortedError("the job rolled back to the checkpoint at clock " +
                          std::to_string(pending_recovery_->clock) +
                          "; call AwaitRecovery() and resume from there");
    }
  }
  Result<wire::Header> reply = Control(request, timeout_ms);
  if (reply.status().code() == StatusCode::kDeadlineExceeded) {
    return DeadlineExceededError("barrier not reached by every worker within " +
                                 std::to_string(timeout_ms) + " ms");
  }
  if (reply.ok()) {
    // Passed: the next call waits at the next round.
    barrier_round_.compare_exchange_strong(round, round + 1);
    // Reads after a global barrier see every update made before it: no
    // copy from before may answer them.
    cache_.Clear();
  }
  return reply.status();
}

Status ClientImpl::Finish() {
  if (worker_id_ < 0) return Status::Ok();
  wire::Header request;
  request.set_type(wire::FINISH);
  request.set_member_id(worker_id_);
  request.set_generation(generation_.load());
  return Control(request, options_.request_timeout_ms).status();
}

Result<Client::Recovery> ClientImpl::AwaitRecovery(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(recovery_mu_);
  if (!recovery_cv_.wait_for(lock,
                             milliseconds(std::max<int64_t>(timeout_ms, 0)),
                             [&] { return pending_recovery_.has_value(); })) {
    return DeadlineExceededError("no rollback was announced within " +
                                 std::to_string(timeout_ms) + " ms");
  }
  Recovery r = std::move(*pending_recovery_);
  pending_recovery_.reset();
  // States recorded past the checkpoint belong to the abandoned timeline.
  resume_states_.erase(resume_states_.upper_bound(r.clock),
                       resume_states_.end());
  report_clock_.reset();
  clock_.store(r.clock);
  cache_.Clear();
  generation_.store(r.generation);
  LOG(INFO) << "worker " << worker_id_.load() << ": resuming at clock "
            << r.clock << " (generation " << r.generation << ")";
  return r;
}

void ClientImpl::SetResumeState(std::string state) {
  const int64_t clock = clock_.load();
  std::optional<int64_t> report;
  {
    std::lock_guard<std::mutex> lock(recovery_mu_);
    uses_resume_state_ = true;
    resume_states_[clock] = std::move(state);
    // Keep a window: a checkpoint is never far behind the current clock
    // (its clock lies above every clock the servers had seen).
    while (resume_states_.size() > 4096) {
      resume_states_.erase(resume_states_.begin());
    }
    if (report_clock_ && *report_clock_ <= clock) {
      report = *report_clock_;
      report_clock_.reset();
    }
  }
  if (report) ReportResumeState(*report, {});
}

std::vector<int32_t> ClientImpl::live_workers() const {
  std::lock_guard<std::mutex> lock(recovery_mu_);
  return live_workers_;
}

bool ClientImpl::RefuseDuringRecovery(internal::Operation& op) {
  std::lock_guard<std::mutex> lock(recovery_mu_);
  if (!pending_recovery_) return false;
  op.Release(AbortedError("the job rolled back to the checkpoint at clock " +
                          std::to_string(pending_recovery_->clock) +
                          "; call AwaitRecovery() and resume from there"));
  return true;
}

// Sends this worker's resume state at `clock` (looked up when `state` is
// empty) to the coordinator, from any thread.
void ClientImpl::ReportResumeState(int64_t clock, const std::string& state) {
  auto op = std::make_shared<NoticeOperation>();
  op->message.set_type(wire::CHECKPOINT_DONE);
  op->message.set_role(wire::ROLE_WORKER);
  op->message.set_member_id(worker_id_.load());
  op->message.set_clock(clock);
  op->message.set_generation(generation_.load());
  if (!state.empty()) {
    op->message.set_resume_state(state);
  } else {
    std::lock_guard<std::mutex> lock(recovery_mu_);
    auto it = resume_states_.find(clock);
    if (it != resume_states_.end()) op->message.set_resume_state(it->second);
  }
  op->Hold();
  Enqueue(op);
}

// -------------------------------------------------------------- I/O thread

void ClientImpl::RebuildPollItems() {
  poll_sockets_.clear();
  poll_servers_.clear();
  poll_sockets_.push_back(coordinator_.get());
  for (auto& [id, conn] : servers_) {
    poll_sockets_.push_back(conn.socket.get());
    poll_servers_.push_back(id);
  }
}

void ClientImpl::Run() {
  InMessage message;
  auto next_timers = SteadyClock::now();
  const milliseconds heartbeat_period(options_.heartbeat_interval_ms);
  auto next_heartbeat = SteadyClock::now() + heartbeat_period;
  while (!stop_.load()) {
    const bool busy = !parts_.empty() || !controls_.empty();
    Status s = transport_->Wait(
        poll_sockets_, wakeup_.fd(),
        SteadyClock::now() + (busy ? kTimerPeriod : heartbeat_period));
    if (!s.ok()) {
      LOG(ERROR) << "client I/O thread: " << s;
      break;
    }
    wakeup_.Drain();
    std::deque<std::shared_ptr<internal::Operation>> batch;
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      batch.swap(queue_);
    }
    for (auto& op : batch) Dispatch(op);

    bool got = true;
    while (got && coordinator_->Receive(&message, &got).ok() && got) {
      HandleControlReply(message);
    }
    // Replies may install routing and so add sockets: iterate over a copy
    // of the server ids, looking each socket up again.
    const std::vector<int32_t> ids = poll_servers_;
    for (int32_t id : ids) {
      auto it = servers_.find(id);
      if (it == servers_.end()) continue;
      got = true;
      while (got && it->second.socket->Receive(&message, &got).ok() && got) {
        HandleDataReply(message);
      }
    }
    const auto now = SteadyClock::now();
    if (now >= next_timers) {
      HandleTimers();
      next_timers = now + kTimerPeriod;
    }
    if (now >= next_heartbeat) {
      SendHeartbeat();
      next_heartbeat = now + heartbeat_period;
    }
  }
  FailAll(CancelledError("client closed"));
  servers_.clear();
  coordinator_.reset();
}

void ClientImpl::FailAll(const Status& status) {
  std::deque<std::shared_ptr<internal::Operation>> batch;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    batch.swap(queue_);
  }
  for (auto& op : batch) op->Release(status);
  auto parts = std::move(parts_);
  parts_.clear();
  // None of them will be sent again: they no longer hold back the
  // done-below mark (which lets servers forget applied requests).
  open_seqs_.clear();
  for (auto& [seq, part] : parts) part.op->Release(status);
  auto controls = std::move(controls_);
  controls_.clear();
  for (auto& [seq, op] : controls) op->Release(status);
}

void ClientImpl::Dispatch(const std::shared_ptr<internal::Operation>& op) {
  if (auto control = std::dynamic_pointer_cast<ControlOperation>(op)) {
    const uint64_t seq = next_seq_++;
    control->request.set_seq(seq);
    OutMessage out;
    out.AddString(control->request.SerializeAsString());
    Status s = coordinator_->Send(std::move(out));
    if (!s.ok()) {
      control->Release(s);
      return;
    }
    if (control->request.type() == wire::BARRIER ||
        control->request.type() == wire::FINISH) {
      control->resend_at = SteadyClock::now() + kControlResendAfter;
    }
    controls_[seq] = control;
    return;
  }
  if (auto notice = std::dynamic_pointer_cast<NoticeOperation>(op)) {
    OutMessage out;
    out.AddString(notice->message.SerializeAsString());
    notice->Release(coordinator_->Send(std::move(out)));
    return;
  }
  if (auto clock = std::dynamic_pointer_cast<ClockOperation>(op)) {
    // Same sockets as the pushes, so every server sees this worker's
    // pushes of the previous clock before the clock itself.
    wire::Header header;
    header.set_type(wire::CLOCK);
    header.set_worker_id(worker_id_.load());
    header.set_clock(clock->clock);
    header.set_generation(clock->generation);
    const std::string bytes = header.SerializeAsString();
    for (auto& [id, conn] : servers_) {
      OutMessage out;
      out.AddString(bytes);
      conn.socket->Send(std::move(out)).IgnoreError();
    }
    clock->Release();
    return;
  }
  auto data = std::static_pointer_cast<DataOperation>(op);
  SplitAndSend(data, nullptr, /*pull_only=*/false);
  data->Release();  // the dispatcher's hold
}

void ClientImpl::SplitAndSend(const std::shared_ptr<DataOperation>& op,
                              const std::vector<uint32_t>* subset,
                              bool pull_only) {
  const size_t n = subset ? subset->size() : op->keys.size();
  if (n == 0) return;
  const int32_t num_slots = routing_.num_slots();
  if (num_slots <= 0) {
    op->Fail(UnavailableError("no routing table"));
    return;
  }
  auto key_index = [&](size_t j) -> uint32_t {
    return subset ? (*subset)[j] : static_cast<uint32_t>(j);
  };
  auto owner = [&](uint32_t i) {
    return routing_.slot_owner(SlotOf(op->table, op->keys[i], num_slots));
  };
  // Group key indices by owning server (usually one group per server).
  std::map<int32_t, std::vector<uint32_t>> groups;
  const int32_t first = owner(key_index(0));
  bool single = true;
  for (size_t j = 1; j < n && single; ++j)
    single = owner(key_index(j)) == first;
  if (single && !subset) {
    Part part;
    part.op = op;
    part.pull_only = pull_only;
    part.server = first;
    part.begin = 0;
    part.end = n;
    const uint64_t seq = next_seq_++;
    part.seq = seq;
    op->Hold();
    open_seqs_.insert(seq);
    SendPart(parts_.emplace(seq, std::move(part)).first->second);
    return;
  }
  for (size_t j = 0; j < n; ++j) {
    const uint32_t i = key_index(j);
    groups[owner(i)].push_back(i);
  }
  for (auto& [server, indices] : groups) {
    Part part;
    part.op = op;
    part.pull_only = pull_only;
    part.server = server;
    if (indices.back() - indices.front() + 1 == indices.size()) {
      part.begin = indices.front();
      part.end = indices.back() + 1;
    } else {
      part.indices = std::move(indices);
    }
    const uint64_t seq = next_seq_++;
    part.seq = seq;
    op->Hold();
    open_seqs_.insert(seq);
    SendPart(parts_.emplace(seq, std::move(part)).first->second);
  }
}

uint64_t ClientImpl::DoneBelow() const {
  return open_seqs_.empty() ? next_seq_ : *open_seqs_.begin();
}

void ClientImpl::SendPart(Part& part) {
  DataOperation& op = *part.op;
  const uint64_t seq = part.seq;
  ServerConnection* conn = ConnectionTo(part.server);
  if (conn == nullptr) {
    FinishPart(seq, UnavailableError("routing names server " +
                                     std::to_string(part.server) +
                                     " but gives no address for it"));
    return;
  }
  const size_t count = part.size();
  const bool contiguous = part.indices.empty();
  const wire::MessageType type = part.pull_only ? wire::PULL : op.type;
  const bool push = type != wire::PULL;
  const bool variable = op.width == 0;
  uint64_t floats = 0;
  for (size_t j = 0; j < count; ++j) floats += op.length(part.index(j));

  wire::Header header;
  header.set_type(type);
  header.set_seq(seq);
  header.set_client_id(client_id_);
  header.set_table_id(op.table);
  header.set_epoch(routing_.epoch());
  header.set_clock(op.clock);
  header.set_generation(op.generation);
  header.set_num_keys(static_cast<uint32_t>(count));
  header.set_has_lengths(variable);
  header.set_done_below(DoneBelow());
  header.set_timeout_ms(options_.request_timeout_ms);
  if (const int32_t worker = worker_id_.load(); worker >= 0) {
    header.set_worker_id(worker);
  }
  const bool per_key_frames =
      push && !contiguous && count > 1 &&
      floats * sizeof(float) / count >= kFramePerKeyBytes;
  if (push) header.set_values_frames(per_key_frames ? count : 1);

  std::shared_ptr<DataOperation> op_ref = part.op;
  auto borrow = [&](OutMessage& out, const void* data, size_t bytes) {
    op_ref->Hold();
    out.AddBorrowed(data, bytes, [op_ref] { op_ref->Release(); });
  };
  OutMessage out;
  out.AddString(header.SerializeAsString());
  if (contiguous) {
    borrow(out, op.keys.data() + part.begin, count * sizeof(Key));
    if (push) {
      borrow(out, op.values.data() + op.offset(part.begin),
             floats * sizeof(float));
    }
    if (variable) {
      borrow(out, op.lengths.data() + part.begin, count * sizeof(uint32_t));
    }
  } else {
    std::vector<Key> keys(count);
    for (size_t j = 0; j < count; ++j) keys[j] = op.keys[part.index(j)];
    out.AddCopy(keys.data(), keys.size() * sizeof(Key));
    if (push && per_key_frames) {
      for (size_t j = 0; j < count; ++j) {
        const size_t i = part.index(j);
        borrow(out, op.values.data() + op.offset(i),
               op.length(i) * sizeof(float));
      }
    } else if (push) {
      std::vector<float> values;
      values.reserve(floats);
      for (size_t j = 0; j < count; ++j) {
        const size_t i = part.index(j);
        const float* v = op.values.data() + op.offset(i);
        values.insert(values.end(), v, v + op.length(i));
      }
      out.AddOwned(std::move(values));
    }
    if (variable) {
      std::vector<uint32_t> lengths(count);
      for (size_t j = 0; j < count; ++j) lengths[j] = op.lengths[part.index(j)];
      out.AddCopy(lengths.data(), lengths.size() * sizeof(uint32_t));
    }
  }
  part.retry_at = {};
  part.resend_at = SteadyClock::now() + kResendAfter;
  Status s = conn->socket->Send(std::move(out));
  if (!s.ok()) FinishPart(seq, s);
}

void ClientImpl::FinishPart(uint64_t seq, const Status& status) {
  auto it = parts_.find(seq);
  if (it == parts_.end()) return;
  std::shared_ptr<DataOperation> op = std::move(it->second.op);
  parts_.erase(it);
  open_seqs_.erase(seq);
  op->Release(status);
}

void ClientImpl::HandleDataReply(InMessage& message) {
  wire::Header header;
  if (message.empty() || !ParseHeader(message.frame(0), &header).ok()) {
    LOG(WARNING) << "client: unreadable reply from a server, dropped";
    return;
  }
  auto it = parts_.find(header.seq());
  if (it == parts_.end() || it->second.retry_at != SteadyTime{}) {
    return;  // late reply to a request that already finished or was re-routed
  }
  Part& part = it->second;
  const Status status = StatusFromWire(header);
  if (header.moved() || status.code() == StatusCode::kUnavailable) {
    // Not applied: re-route the keys (under the newer table if the server
    // sent one) with fresh sequence numbers.
    const bool newer =
        header.has_routing() && header.routing().epoch() > routing_.epoch();
    if (newer)
      InstallRouting(header.routing());
    else
      RequestRouting();
    open_seqs_.erase(part.seq);
    // A duplicate push-pull was applied here before its slot moved: the
    // new owner is only asked for the values.
    if (header.duplicate()) part.pull_only = true;
    part.retry_at =
        SteadyClock::now() + (newer ? milliseconds(0) : kRetryAfter);
    if (newer) HandleTimers();
    return;
  }
  if (!status.ok()) {
    return FinishPart(
        header.seq(),
        Status(status.code(), "server " + std::to_string(part.server) + ": " +
                                  status.message()));
  }
  DataOperation& op = *part.op;
  if (op.type != wire::PUSH) {
    uint64_t floats = 0;
    for (size_t j = 0; j < part.size(); ++j) floats += op.length(part.index(j));
    if (message.size() != 2 ||
        message.frame(1).size() != floats * sizeof(float)) {
      return FinishPart(header.seq(),
                        InternalError("server " + std::to_string(part.server) +
                                      " sent a pull reply of the wrong size"));
    }
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.pulls;
      if (header.blocked_us() > op.blocked_us) {
        stats_.blocked_us += header.blocked_us() - op.blocked_us;
        op.blocked_us = header.blocked_us();
      }
      const int64_t staleness =
          std::max<int64_t>(0, op.clock - header.data_clock());
      ++stats_.staleness[std::min<size_t>(staleness, kStalenessBuckets - 1)];
    }
    const float* values =
        reinterpret_cast<const float*>(message.frame(1).data());
    if (op.cache_install && !tables_.CacheSuspended(op.table)) {
      if (header.has_consistency()) {
        tables_.SetConsistency(op.table, header.consistency());
      }
      const float* v = values;
      for (size_t j = 0; j < part.size(); ++j) {
        const size_t i = part.index(j);
        cache_.Install(op.table, op.keys[i], {v, op.length(i)},
                       header.data_clock(), op.cache_mark);
        v += op.length(i);
      }
    }
    if (part.indices.empty()) {
      std::memcpy(op.out.data() + op.offset(part.begin), values,
                  floats * sizeof(float));
    } else {
      for (size_t j = 0; j < part.size(); ++j) {
        const size_t i = part.index(j);
        std::memcpy(op.out.data() + op.offset(i), values,
                    op.length(i) * sizeof(float));
        values += op.length(i);
      }
    }
  }
  if (op.width == 0) {
    tables_.LearnWidths(op.table, op.keys, op.lengths, part.size(),
                        [&part](size_t j) { return part.index(j); });
  }
  FinishPart(header.seq(), Status::Ok());
}

void ClientImpl::HandleTimers() {
  const auto now = SteadyClock::now();
  std::vector<uint64_t> expired, resend, reroute;
  for (auto& [seq, part] : parts_) {
    if (now >= part.op->deadline) {
      expired.push_back(seq);
    } else if (part.retry_at != SteadyTime{}) {
      if (now >= part.retry_at) reroute.push_back(seq);
    } else if (now >= part.resend_at && part.op->type == wire::PUSH &&
               !part.pull_only) {
      // Only pushes are resent on silence: a pull may be waiting at the
      // server on a staleness bound, and its deadline covers a lost one.
      resend.push_back(seq);
    }
  }
  for (uint64_t seq : expired) {
    const Part& part = parts_.at(seq);
    std::string where = "server " + std::to_string(part.server);
    auto conn = servers_.find(part.server);
    if (conn != servers_.end()) where += " (" + conn->second.address + ")";
    FinishPart(seq, DeadlineExceededError(
                        "no reply from " + where + " within " +
                        std::to_string(options_.request_timeout_ms) + " ms"));
  }
  for (uint64_t seq : resend) {
    VLOG(1) << "client: resending request " << seq;
    SendPart(parts_.at(seq));
  }
  for (uint64_t seq : reroute) {
    auto it = parts_.find(seq);
    Part part = std::move(it->second);
    parts_.erase(it);
    std::vector<uint32_t> indices(part.size());
    for (size_t j = 0; j < part.size(); ++j) indices[j] = part.index(j);
    SplitAndSend(part.op, &indices, part.pull_only);
    part.op->Release();  // the old part's hold, after the new parts took theirs
  }
  for (auto it = controls_.begin(); it != controls_.end();) {
    ControlOperation& c = *it->second;
    if (c.resend_at != SteadyTime{} && now >= c.resend_at && now < c.deadline) {
      c.resend_at = now + kControlResendAfter;
      OutMessage out;
      out.AddString(c.request.SerializeAsString());
      coordinator_->Send(std::move(out)).IgnoreError();
    }
    if (now >= it->second->deadline) {
      it->second->Release(DeadlineExceededError(
          "no answer from the coordinator at " + options_.coordinator_address));
      it = controls_.erase(it);
    } else {
      ++it;
    }
  }
}

void ClientImpl::HandleControlReply(InMessage& message) {
  wire::Header header;
  if (message.empty() || !ParseHeader(message.frame(0), &header).ok()) {
    LOG(WARNING) << "client: unreadable message from the coordinator, dropped";
    return;
  }
  if (header.has_routing()) InstallRouting(header.routing());
  if (header.type() == wire::CONSISTENCY_PREPARE ||
      header.type() == wire::CONSISTENCY_COMMIT) {
    return HandleConsistencyChange(header);
  }
  if (header.type() == wire::RESUME) return HandleResume(header);
  if (header.type() == wire::CHECKPOINT_COMMIT) {
    return HandleCheckpointCommit(header);
  }
  if (header.type() == wire::WORKERS_UPDATE) {
    std::lock_guard<std::mutex> lock(recovery_mu_);
    live_workers_.assign(header.worker_ids().begin(),
                         header.worker_ids().end());
    return;
  }
  if (header.type() != wire::CONTROL_REPLY) return;
  auto it = controls_.find(header.seq());
  if (it == controls_.end()) return;
  std::shared_ptr<ControlOperation> op = std::move(it->second);
  controls_.erase(it);
  op->reply = std::move(header);
  op->Release();
}

void ClientImpl::HandleConsistencyChange(const wire::Header& header) {
  const TableId table = header.table_id();
  if (header.type() == wire::CONSISTENCY_PREPARE) {
    tables_.SuspendCache(table);
  } else {
    tables_.ResumeCache(table, header.clock(), header.consistency());
  }
  cache_.DropTable(table);
  if (header.type() != wire::CONSISTENCY_PREPARE) return;
  // The boundary must lie beyond this worker's clock too.
  wire::Header ack;
  ack.set_type(wire::CONSISTENCY_ACK);
  ack.set_role(wire::ROLE_WORKER);
  ack.set_member_id(worker_id_.load());
  ack.set_change_id(header.change_id());
  ack.set_clock(clock_.load());
  OutMessage out;
  out.AddString(ack.SerializeAsString());
  coordinator_->Send(std::move(out)).IgnoreError();
}

void ClientImpl::HandleResume(const wire::Header& header) {
  {
    std::lock_guard<std::mutex> lock(recovery_mu_);
    const uint64_t known =
        pending_recovery_ ? pending_recovery_->generation : generation_.load();
    if (header.generation() <= known) return;  // old news
    Recovery r;
    r.clock = header.clock();
    r.generation = header.generation();
    r.resume_state = header.resume_state();
    pending_recovery_ = std::move(r);
  }
  LOG(WARNING) << "worker " << worker_id_.load()
               << ": the job rolls back to clock " << header.clock()
               << " (generation " << header.generation() << ")";
  // Whatever was in flight belongs to the abandoned timeline.
  FailAll(AbortedError("the job rolled back to the checkpoint at clock " +
                       std::to_string(header.clock()) +
                       "; call AwaitRecovery() and resume from there"));
  cache_.Clear();
  recovery_cv_.notify_all();
}

void ClientImpl::HandleCheckpointCommit(const wire::Header& header) {
  const int64_t clock = header.clock();
  bool now_ = false;
  {
    std::lock_guard<std::mutex> lock(recovery_mu_);
    if (header.generation() != generation_.load()) return;
    // Report at once if this worker keeps no resume state, or has one for
    // that clock already, or is past it; otherwise when it gets there.
    now_ = !uses_resume_state_ || resume_states_.count(clock) > 0 ||
           clock_.load() > clock;
    if (!now_) report_clock_ = clock;
  }
  if (now_) ReportResumeState(clock, {});
}

void ClientImpl::SendHeartbeat() {
  const int32_t id = worker_id_.load();
  if (id < 0) return;
  wire::Header hb;
  hb.set_type(wire::HEARTBEAT);
  hb.set_member_id(id);
  hb.set_generation(generation_.load());
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    wire::WorkerMetrics* m = hb.mutable_metrics();
    m->set_pulls(stats_.pulls);
    m->set_blocked_us(stats_.blocked_us);
    const int64_t max = stats_.max_staleness();
    for (int64_t i = 0; i <= max; ++i) m->add_staleness(stats_.staleness[i]);
    m->set_cache_hits(stats_.cache_hits);
    m->set_cache_misses(stats_.cache_misses);
  }
  hb.mutable_metrics()->set_clock(clock_.load());
  OutMessage out;
  out.AddString(hb.SerializeAsString());
  coordinator_->Send(std::move(out)).IgnoreError();  // best effort
}

void ClientImpl::RequestRouting() {
  const auto now = SteadyClock::now();
  if (now - routing_requested_at_ < kRetryAfter) return;
  routing_requested_at_ = now;
  wire::Header get;
  get.set_type(wire::GET_ROUTING);
  OutMessage out;
  out.AddString(get.SerializeAsString());
  coordinator_->Send(std::move(out)).IgnoreError();
}

void ClientImpl::InstallRouting(const wire::RoutingTable& routing) {
  if (routing.epoch() <= routing_.epoch()) return;
  if (routing.num_slots() <= 0 ||
      routing.slot_owner_size() != routing.num_slots()) {
    LOG(WARNING) << "client: ignoring malformed routing table";
    return;
  }
  routing_ = routing;
  bool changed = false;
  for (const auto& server : routing.servers()) {
    const std::string address =
        ChooseAddress(server.tcp_address(), server.ipc_address(),
                      server.host_id(), options_.prefer_ipc);
    auto it = servers_.find(server.id());
    if (it != servers_.end() && it->second.address == address) continue;
    Result<std::unique_ptr<Socket>> socket = transport_->NewDealer("");
    if (!socket.ok()) {
      LOG(WARNING) << "client: cannot connect to server " << server.id() << ": "
                   << socket.status();
      continue;
    }
    ServerConnection conn{address, std::move(*socket)};
    Status s = conn.socket->Connect(address);
    if (!s.ok()) {
      LOG(WARNING) << "client: cannot connect to server " << server.id() << ": "
                   << s;
      continue;
    }
    servers_.insert_or_assign(server.id(), std::move(conn));
    changed = true;
  }
  if (changed) RebuildPollItems();
}

ClientImpl::ServerConnection* ClientImpl::ConnectionTo(int32_t server) {
  auto it = servers_.find(server);
  return it == servers_.end() ? nullptr : &it->second;
}

}  // namespace ductile
