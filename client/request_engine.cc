// RequestEngine's step and its data requests: a call split by owning
// server into parts, each part sent (values in frames or in the worker's
// shared memory), finished once answered. Its timers are in
// request_engine_timers.cc, replies in request_engine_replies.cc.
#include "client/request_engine.h"

#include <algorithm>
#include <map>
#include <utility>

#include "client/request_frames.h"
#include "glog/logging.h"
#include "proto/codec.h"
#include "transport/endpoint.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;

// A request with no reply for this long is sent again with the same
// sequence number (servers drop the duplicate if the first one arrived).
constexpr milliseconds kResendAfter{5000};
// Servers that may leave the job, one after another, without answering a
// request before it fails.
constexpr size_t kMaxPriors = 8;
// How often deadlines and resends are checked while requests are open.
constexpr milliseconds kTimerPeriod{10};
// Values of fewer bytes go in frames even to and from a server on this
// host (shared memory saves little there).
constexpr uint64_t kShmMinBytes = 32768;

}  // namespace

RequestEngine::RequestEngine(const Shared& shared)
    : shared_(shared), options_(*shared.options), env_(shared.env) {}

RequestEngine::~RequestEngine() = default;

Status RequestEngine::Start() {
  transport_ =
      env_->NewTransport("client", options_.security, options_.io_threads);
  // One fixed identity on every connection: after a reconnection the
  // coordinator and the servers still know this member (a worker is bound
  // to its connections).
  const std::string identity = NewMemberIdentity("client");
  DUCTILE_ASSIGN_OR_RETURN(
      coordinator_, transport_->NewDealer(identity, kControlMessageBytes));
  DUCTILE_RETURN_IF_ERROR(coordinator_->Connect(options_.coordinator_address));
  routing_ = std::make_unique<RoutingView>(
      transport_.get(), options_.prefer_ipc, identity,
      static_cast<int64_t>(options_.max_message_bytes));
  RebuildSockets();
  const TimePoint now = env_->Now();
  next_timers_ = now;
  next_heartbeat_ = now + milliseconds(options_.heartbeat_interval_ms);
  return Status::Ok();
}

void RequestEngine::Submit(AnyOperation op) {
  bool was_empty = false;
  {
    MutexLock lock(&queue_mu_);
    if (!stopped_) {
      was_empty = queue_.empty();
      queue_.push_back(std::move(op));
      op = std::shared_ptr<ClockOperation>();
    }
  }
  std::visit(
      [](const auto& o) {
        if (o) o->Refuse(CancelledError("client is shutting down"));
      },
      op);
  // A non-empty queue has been signalled already and not yet taken.
  if (was_empty) wakeup_.Signal();
}

void RequestEngine::RebuildSockets() {
  sockets_.clear();
  sockets_.push_back(coordinator_.get());
  sockets_.insert(sockets_.end(), routing_->sockets().begin(),
                  routing_->sockets().end());
}

RequestEngine::TimePoint RequestEngine::NextWakeup() const {
  const bool busy = !parts_.empty() || !controls_.empty();
  return busy ? std::min(next_timers_, next_heartbeat_) : next_heartbeat_;
}

void RequestEngine::Step() {
  std::deque<AnyOperation> batch;
  {
    MutexLock lock(&queue_mu_);
    batch.swap(queue_);
  }
  for (AnyOperation& op : batch) {
    std::visit([this](const auto& o) { Dispatch(o); }, op);
  }
  bool got = true;
  while (got && coordinator_->Receive(&message_, &got).ok() && got) {
    HandleControlMessage(message_);
  }
  // Replies may install routing and so change the connections: look each
  // server's socket up again.
  const std::vector<int32_t> servers = routing_->servers();
  for (int32_t id : servers) {
    got = true;
    while (got) {
      Socket* socket = routing_->SocketOf(id);
      if (socket == nullptr || !socket->Receive(&message_, &got).ok() || !got) {
        break;
      }
      HandleDataReply(message_, id);
    }
  }
  const TimePoint now = env_->Now();
  if (now >= next_timers_ || reroute_now_) {
    reroute_now_ = false;
    HandleTimers();
    next_timers_ = now + kTimerPeriod;
  }
  if (now >= next_heartbeat_) {
    SendHeartbeat();
    next_heartbeat_ = now + milliseconds(options_.heartbeat_interval_ms);
  }
}

void RequestEngine::Shutdown(const Status& status) {
  std::deque<AnyOperation> batch;
  {
    MutexLock lock(&queue_mu_);
    stopped_ = true;
    batch.swap(queue_);
  }
  for (AnyOperation& op : batch) {
    std::visit([&](const auto& o) { o->Release(status); }, op);
  }
  for (auto& op : deferred_clocks_) op->Release(status);
  deferred_clocks_.clear();
  FailInFlight(status);
  if (routing_) routing_->Clear();  // null if Start() failed
  sockets_.clear();
  coordinator_.reset();
}

void RequestEngine::FailInFlight(const Status& status) {
  auto parts = std::move(parts_);
  parts_.clear();
  waiting_parts_ = 0;
  auto held = std::move(held_ops_);
  held_ops_.clear();
  for (auto& op : held) op->Release(status);
  // None of them will be sent again: they no longer hold back the
  // done-below mark (which lets servers forget applied requests).
  open_seqs_.clear();
  prior_holds_.clear();
  for (auto& [seq, part] : parts) part.op->Release(status);
  // Nothing holds them back now (a rollback's generation check drops
  // those of the old timeline on the servers).
  SendDueClocks();
  auto controls = std::move(controls_);
  controls_.clear();
  for (auto& [seq, op] : controls) op->Release(status);
}

// -------------------------------------------------------------- dispatch

void RequestEngine::Dispatch(const std::shared_ptr<ClockOperation>& op) {
  if (shared_.recovery->shut_down()) return op->Release(ShutDownError());
  deferred_clocks_.push_back(op);
  SendDueClocks();
}

void RequestEngine::SendDueClocks() {
  while (!deferred_clocks_.empty()) {
    const int64_t clock = deferred_clocks_.front()->clock;
    for (const auto& [seq, part] : parts_) {
      // A push (or push-pull) of an earlier clock still unanswered.
      if (part.op->clock < clock && part.op->type != wire::PULL &&
          !part.pull_only) {
        return;
      }
    }
    for (const auto& op : held_ops_) {
      if (op->clock < clock && op->type != wire::PULL) return;
    }
    std::shared_ptr<ClockOperation> op = std::move(deferred_clocks_.front());
    deferred_clocks_.pop_front();
    SendClock(*op);
    op->Release();
  }
}

void RequestEngine::SendClock(const ClockOperation& op) {
  last_clock_ = SentClock{op.clock, op.generation};
  SendLastClock(routing_->servers());
}

void RequestEngine::SendLastClock(const std::vector<int32_t>& servers) {
  // To every server of the routing table (not only those this worker has
  // talked to), on the same sockets as the pushes, so every server sees
  // this worker's pushes of the previous clock before the clock itself.
  wire::Header header;
  header.set_type(wire::CLOCK);
  header.set_worker_id(shared_.worker_id->load());
  header.set_clock(last_clock_->clock);
  header.set_generation(last_clock_->generation);
  const std::string bytes = header.SerializeAsString();
  for (int32_t server : servers) {
    Socket* socket = routing_->SocketOf(server);
    if (socket == nullptr) continue;
    OutMessage out;
    out.AddString(bytes);
    socket->Send(std::move(out)).IgnoreError();
  }
}

void RequestEngine::Dispatch(const std::shared_ptr<DataOperation>& op) {
  // Submitted before the job's shutdown was known; no server answers now.
  if (shared_.recovery->shut_down()) return op->Release(ShutDownError());
  op->order = ++next_order_;
  if (waiting_parts_ > 0 || !held_ops_.empty()) {
    // Parts of earlier calls wait to be re-routed (their slot moved): this
    // call goes after them, or a read could overtake its own push.
    held_ops_.push_back(op);
    return;
  }
  SplitAndSend(op, nullptr, /*pull_only=*/false);
  op->Release();  // the dispatcher's hold
}

void RequestEngine::SendHeldOps() {
  while (waiting_parts_ == 0 && !held_ops_.empty()) {
    std::shared_ptr<DataOperation> op = std::move(held_ops_.front());
    held_ops_.pop_front();
    SplitAndSend(op, nullptr, /*pull_only=*/false);
    op->Release();
  }
}

void RequestEngine::SplitAndSend(const std::shared_ptr<DataOperation>& op,
                                 const std::vector<uint32_t>* subset,
                                 bool pull_only,
                                 const std::vector<uint64_t>& priors) {
  const size_t n = subset ? subset->size() : op->keys.size();
  if (n == 0) return;
  const RoutingTable& routing = routing_->table();
  if (routing.empty()) {
    op->Fail(UnavailableError("no routing table"));
    return;
  }
  auto key_index = [&](size_t j) -> uint32_t {
    return subset ? (*subset)[j] : static_cast<uint32_t>(j);
  };
  auto owner = [&](uint32_t i) {
    return routing.owner(routing.SlotOf(op->table, op->keys[i]));
  };
  // Usually every key has one owner: one part over the whole range.
  const int32_t first = owner(key_index(0));
  bool single = true;
  for (size_t j = 1; j < n && single; ++j) {
    single = owner(key_index(j)) == first;
  }
  if (single && !subset) {
    Part part;
    part.op = op;
    part.pull_only = pull_only;
    part.priors = priors;
    part.server = first;
    part.begin = 0;
    part.end = n;
    return AddPart(std::move(part));
  }
  // Several servers: a refused part must not leave the others applied.
  if (Status s = CheckBeforeSplit(*op); !s.ok()) {
    op->Fail(s);
    return;
  }
  // Group key indices by owning server.
  std::map<int32_t, std::vector<uint32_t>> groups;
  for (size_t j = 0; j < n; ++j) {
    const uint32_t i = key_index(j);
    groups[owner(i)].push_back(i);
  }
  for (auto& [server, indices] : groups) {
    Part part;
    part.op = op;
    part.pull_only = pull_only;
    part.priors = priors;
    part.server = server;
    if (indices.back() - indices.front() + 1 == indices.size()) {
      part.begin = indices.front();
      part.end = indices.back() + 1;
    } else {
      part.indices = std::move(indices);
    }
    AddPart(std::move(part));
  }
}

Status RequestEngine::CheckBeforeSplit(DataOperation& op) {
  if (op.type == wire::PULL || !op.reject_non_finite || op.values_checked) {
    return Status::Ok();
  }
  return CheckFiniteValues(op, shared_.tables->Name(op.table));
}

void RequestEngine::AddPart(Part part) {
  const uint64_t seq = next_seq_++;
  part.seq = seq;
  part.op->Hold();
  open_seqs_.insert(seq);
  prior_holds_.insert(part.priors.begin(), part.priors.end());
  SendPart(parts_.emplace(seq, std::move(part)).first->second);
}

uint64_t RequestEngine::DoneBelow() const {
  uint64_t below = open_seqs_.empty() ? next_seq_ : *open_seqs_.begin();
  if (!prior_holds_.empty()) below = std::min(below, *prior_holds_.begin());
  return below;
}

void RequestEngine::ReleasePriors(const Part& part) {
  for (uint64_t prior : part.priors) {
    auto it = prior_holds_.find(prior);
    if (it != prior_holds_.end()) prior_holds_.erase(it);
  }
}

bool RequestEngine::KeepAsPrior(Part& part) {
  if (part.op->type == wire::PULL || part.pull_only) return true;
  // A chain of re-routes, each leaving a copy that may be applied, is
  // bounded.
  if (part.priors.size() >= kMaxPriors) {
    // It may have been applied: not kUnavailable, which says "retry".
    FinishPart(part.seq,
               AbortedError("request re-routed " + std::to_string(kMaxPriors) +
                            " times while an earlier copy of it could still "
                            "be applied; it may have been applied"));
    return false;
  }
  part.priors.push_back(part.seq);
  prior_holds_.insert(part.seq);
  return true;
}

Status RequestEngine::FailureOf(const Part& part, const Status& status) {
  const bool may_be_applied = part.op->type != wire::PULL && !part.pull_only &&
                              (part.sent || !part.priors.empty());
  if (!may_be_applied || status.code() != StatusCode::kUnavailable) {
    return status;
  }
  // Not kUnavailable, which says "retry": the caller's retry could apply
  // the values a second time.
  return AbortedError(status.message() +
                      "; an earlier copy of the push was sent, so it may "
                      "have been applied");
}

void RequestEngine::Orphan(Part& part, milliseconds delay) {
  const uint64_t seq = part.seq;
  // Its server left before answering: it may have applied the part, and
  // its window moved with its slots.
  if (part.sent && !KeepAsPrior(part)) return;
  VLOG(1) << "client " << shared_.worker_id->load() << ": part " << seq << " ("
          << wire::MessageType_Name(part.op->type) << " clock "
          << part.op->clock << ") to server " << part.server
          << ", which left the routing: re-routed";
  open_seqs_.erase(seq);
  AwaitReroute(part, env_->Now() + delay);
  if (delay.count() == 0) reroute_now_ = true;
}

void RequestEngine::RerouteLaterParts(const Part& bounced, milliseconds delay) {
  if (bounced.op->type == wire::PULL || bounced.pull_only) return;
  std::vector<uint64_t> later;
  for (const auto& [seq, part] : parts_) {
    if (!part.awaiting_reroute() && part.server == bounced.server &&
        part.op->order > bounced.op->order) {
      later.push_back(seq);
    }
  }
  for (uint64_t seq : later) {
    auto it = parts_.find(seq);
    if (it == parts_.end()) continue;
    Part& part = it->second;
    // Sent: it may be applied there yet (KeepAsPrior may end it).
    if (part.sent && !KeepAsPrior(part)) continue;
    VLOG(1) << "client " << shared_.worker_id->load() << ": part " << seq
            << " (" << wire::MessageType_Name(part.op->type) << " clock "
            << part.op->clock << ") goes again after part " << bounced.seq;
    open_seqs_.erase(seq);
    AwaitReroute(part, env_->Now() + delay);
  }
}

void RequestEngine::AwaitReroute(Part& part, TimePoint at) {
  if (!part.awaiting_reroute()) ++waiting_parts_;
  part.state = Part::State::kAwaitingReroute;
  part.retry_at = at;
}

void RequestEngine::SendPart(Part& part) {
  DataOperation& op = *part.op;
  const uint64_t seq = part.seq;
  Socket* socket = routing_->SocketOf(part.server);
  if (socket == nullptr && !routing_->Lists(part.server)) {
    // The server left the routing (a drain ended): its slots are
    // elsewhere now, or will be once a newer table names their owner.
    RequestRouting();
    return Orphan(part, kRetryAfter);
  }
  if (socket == nullptr) {
    // Listed, but its address could not be connected to: an earlier copy
    // of this part may still reach it, so it is not sent elsewhere.
    return FinishPart(
        seq, FailureOf(part, UnavailableError("routing names " +
                                              routing_->Describe(part.server) +
                                              " but it cannot be reached")));
  }
  const size_t count = part.size();
  const wire::MessageType type = part.pull_only ? wire::PULL : op.type;
  wire::Header header;
  header.set_type(type);
  header.set_seq(seq);
  header.set_client_id(shared_.client_id);
  header.set_table_id(op.table);
  header.set_epoch(routing_->table().epoch());
  header.set_clock(op.clock);
  header.set_generation(op.generation);
  header.set_num_keys(static_cast<uint32_t>(count));
  header.set_has_lengths(op.width == 0);
  header.set_done_below(DoneBelow());
  header.set_timeout_ms(options_.request_timeout_ms);
  if (type != wire::PULL) {
    for (uint64_t prior : part.priors) header.add_prior_seqs(prior);
    if (op.batch_weight > 1) {
      header.set_batch_weight(static_cast<uint32_t>(op.batch_weight));
    }
    if (op.rate_factor != 1.0f) header.set_rate_factor(op.rate_factor);
  }
  if (const int32_t worker = shared_.worker_id->load(); worker >= 0) {
    header.set_worker_id(worker);
  }
  VLOG(2) << "client " << shared_.worker_id->load() << ": part " << seq << " ("
          << wire::MessageType_Name(type) << " clock " << op.clock
          << ") to server " << part.server << " epoch "
          << routing_->table().epoch();
  const std::span<float> shm_values = LendShmRegions(part, type, header);
  OutMessage out =
      BuildDataRequest(header, part.op, part.begin, count, part.indices,
                       type != wire::PULL, shm_values);
  part.state = Part::State::kAwaitingAnswer;
  part.resend_at = env_->Now() + kResendAfter;
  Status s = socket->Send(std::move(out));
  if (!s.ok()) {
    // Nothing of this copy went out: its regions may go out again (those
    // of a copy sent before stay kept for it).
    if (shm_ != nullptr && !part.sent) {
      shm_->Return(ShmValueArea::ReplyTicket(seq), part.server);
      shm_->Return(ShmValueArea::PushTicket(seq), part.server);
    }
    return FinishPart(seq, FailureOf(part, s));
  }
  if (part.sent) part.resent = true;
  part.sent = true;
}

std::span<float> RequestEngine::LendShmRegions(const Part& part,
                                               wire::MessageType type,
                                               wire::Header& header) {
  if (options_.shm_reply_bytes == 0 || shm_failed_ ||
      !routing_->IsLocal(part.server)) {
    return {};
  }
  const uint64_t floats = part.floats();
  const uint64_t bytes = floats * sizeof(float);
  if (bytes < kShmMinBytes) return {};
  if (shm_ == nullptr) {
    Result<std::unique_ptr<ShmValueArea>> area =
        ShmValueArea::Create(options_.shm_reply_bytes);
    if (!area.ok()) {
      LOG(WARNING) << "client: no shared memory for values exchanged with "
                      "servers on this host (they go in frames): "
                   << area.status();
      shm_failed_ = true;
      return {};
    }
    shm_ = std::move(*area);
  }
  const int64_t timeout_ms = options_.request_timeout_ms;
  wire::ShmRef reply_ref;
  if (type != wire::PUSH &&
      shm_->Lend(ShmValueArea::ReplyTicket(part.seq), part.server, bytes,
                 timeout_ms, &reply_ref)) {
    *header.mutable_reply_shm() = std::move(reply_ref);
  }
  if (type == wire::PULL) return {};
  const uint64_t ticket = ShmValueArea::PushTicket(part.seq);
  if (part.sent) {
    // Sent again under its seq: the first copy may still be on its way
    // and read from its region, so that region waits for its time to be
    // up, and this copy carries its values in frames.
    shm_->Keep(ticket);
    return {};
  }
  // Pushed values go in shared memory only to a server that has shown it
  // can use it (a pull's values came that way): a refusal would let the
  // requests behind the push overtake it.
  wire::ShmRef push_ref;
  if (shm_proven_.count(part.server) == 0 ||
      !shm_->Lend(ticket, part.server, bytes, timeout_ms, &push_ref)) {
    return {};
  }
  *header.mutable_push_shm() = std::move(push_ref);
  return {shm_->Data(ticket, part.server, bytes), floats};
}

void RequestEngine::FinishPart(uint64_t seq, const Status& status) {
  auto it = parts_.find(seq);
  if (it == parts_.end()) return;
  if (it->second.awaiting_reroute()) --waiting_parts_;
  std::shared_ptr<DataOperation> op = std::move(it->second.op);
  ReleasePriors(it->second);
  parts_.erase(it);
  open_seqs_.erase(seq);
  op->Release(status);
  if (waiting_parts_ == 0 && !held_ops_.empty()) SendHeldOps();
  if (!deferred_clocks_.empty()) SendDueClocks();
}

}  // namespace ductile
