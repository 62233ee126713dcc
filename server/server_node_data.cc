// A server's data path: push, pull and push-pull requests admitted, held
// or served (ApplyValues, ServePull), the gradient noise estimate fed, and
// BSP clocks ended (OnServerClock).
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ductile/limits.h"
#include "glog/logging.h"
#include "proto/codec.h"
#include "proto/counters.h"
#include "proto/table_config.h"
#include "server/server_node.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;

// A request of this many bytes of values, or a push of this many keys, or
// more is announced to the coordinator as a busy spell before it is served
// (and so are a BSP clock's combine of as many keys and a backup's taking
// of a primary's records of as many rows).
constexpr uint64_t kLongRequestBytes = uint64_t{64} << 20;
constexpr uint64_t kLongRequestKeys = uint64_t{1} << 17;

// Pushed values in shared memory of this many bytes or more are copied out
// in pieces of kCopyPieceBytes on the apply threads.
constexpr uint64_t kParallelCopyBytes = uint64_t{4} << 20;
constexpr uint64_t kCopyPieceBytes = uint64_t{1} << 20;

// A push rebuilt around values copied out of a worker's shared memory: the
// message as received, the rewritten header and the values.
struct ShmCopiedFrames final : FrameStorage {
  std::unique_ptr<FrameStorage> received;
  std::string header;
  std::unique_ptr<uint8_t[]> values;
};

}  // namespace

// --------------------------------------------------------------- requests

void ServerNode::HandleRequest(InMessage& message, bool replay) {
  if (!replay) {
    counters_.Add(&ServerCounters::requests);
    counters_.Add(&ServerCounters::bytes_in, message.bytes());
  }
  if (message.empty()) {
    counters_.Add(&ServerCounters::errors);  // nobody to answer
    return;
  }
  if (!replay && !TakeShmValues(message)) return;
  if (!behind_.empty()) {
    // Requests wait, in order, behind one that named a newer routing.
    behind_.push_back(std::move(message));
    return;
  }
  const ByteSpan identity = message.frame(0);
  RequestAdmission::Request request;
  uint64_t seq = 0;
  Status s = admission_.Check(message, routing_, generation_, id_, tables_,
                              &request, &seq);
  if (admission_.TakeNewerEpoch() != 0) {
    wire::Header get;
    get.set_type(wire::GET_ROUTING);
    get.set_member_id(id_);
    Send(get);
  }
  if (!s.ok()) {
    // Another server's chunk of keys moving here, or records of slots
    // this server backs.
    if (request.header.type() == wire::MIGRATE_DATA && !request.header.ack()) {
      return InstallMoved(message, request.header);
    }
    if (request.header.type() == wire::REPLICATE && !request.header.ack()) {
      return InstallReplica(message, request.header);
    }
    if (!routing_.empty() && request.header.epoch() > routing_.epoch() &&
        !refuse_behind_ && s.code() != StatusCode::kPermissionDenied) {
      // The sender knows a newer routing table than this server (asked for
      // it above). Refused, this request would be sent again after the
      // ones behind it: it waits for the table instead, and they wait
      // behind it, so that a client's requests are taken in order.
      behind_since_ = env_->Now();
      behind_.push_back(std::move(message));
      return;
    }
    return replies_.Error(identity, seq, s);
  }
  if (request.is_clock) return HandleClock(request.header);

  if (request.has_values()) {
    // Arrived: whatever waits below, its client is heard from now.
    admission_.dedup().Touch(request.header.client_id(), DedupNow(),
                             request.header.timeout_ms());
  }
  const TableId table = request.table->id();
  const int64_t clock = request.header.clock();
  if (request.is_worker) {
    consistency_.NoteClock(clock);
    const int64_t client = request.header.client_id();
    // The checkpoint's cut: a push after it waits, and so does whatever
    // its client sends after it (in order).
    if ((request.has_values() && checkpointer_.Holds(clock)) ||
        checkpointer_.HoldsClient(client)) {
      return checkpointer_.Hold(std::move(message), client);
    }
    if (request.has_values()) checkpointer_.NotePush(clock);
    // A consistency change is being agreed: requests beyond the clocks
    // seen so far wait until the change tells which model governs them.
    if (consistency_.HoldsForChange(table, clock)) {
      return consistency_.HoldForChange(table, std::move(message));
    }
  }

  bool duplicate = false;
  Result<RequestAdmission::Route> route =
      admission_.Decide(request, routing_, id_, &duplicate);
  if (duplicate) counters_.Add(&ServerCounters::duplicates);
  if (!route.ok()) return replies_.Error(identity, seq, route.status());
  if (*route == RequestAdmission::Route::kMoved ||
      (*route == RequestAdmission::Route::kServe && mover_->moving() &&
       mover_->Bounces(routing_, table, request.data.keys()))) {
    // Not served here (any more: its slot is moving away); the client asks
    // again, and the new owner once the routing names it. A resent push
    // applied here before is still acknowledged as a duplicate.
    return replies_.Moved(identity, seq, duplicate);
  }
  wire::Header reply;
  reply.set_type(wire::DATA_REPLY);
  reply.set_seq(seq);
  reply.set_duplicate(duplicate);
  if (*route == RequestAdmission::Route::kDuplicate) {
    return replies_.Reply(identity, reply, nullptr);
  }
  if (replicator_->awaiting_routing()) {
    // Fenced: its slots were taken over; the client learns where.
    return replies_.Error(identity, seq,
                          UnavailableError("server " + std::to_string(id_) +
                                           " no longer owns these keys"));
  }
  AnnounceLongWork(request);
  if (request.has_values() && !duplicate) {
    const TimePoint start = env_->Now();
    s = ApplyValues(request);
    counters_.Add(&ServerCounters::apply_us, MicrosSince(start));
    if (!s.ok()) return replies_.Error(identity, seq, s);
    admission_.MarkApplied(request);
    replicator_->NoteApplied(request.header.client_id(), seq,
                             request.header.done_below(), table,
                             request.data.keys());
    counters_.Add(&ServerCounters::pushes);
  }
  if (!request.has_pull()) return replies_.Reply(identity, reply, nullptr);

  // The staleness gate: park the pull until the server clock allows it.
  const int64_t required = request.is_worker
                               ? consistency_.RequiredServerClock(table, clock)
                               : ConsistencySchedule::kNoWait;
  if (required > consistency_.server_clock()) {
    const TimePoint now = env_->Now();
    const int64_t timeout_ms = request.header.timeout_ms() > 0
                                   ? request.header.timeout_ms()
                                   : kDefaultTimeoutMs;
    // Answer a little before the client gives up, so the answer can say
    // whom the pull waited for.
    const auto wait = milliseconds(std::max<int64_t>(
        1, timeout_ms - std::min<int64_t>(timeout_ms / 10, 1000)));
    // A parked push-pull has applied its push already: released, it is
    // only served (ServePull reads keys and lengths, never values), or
    // answered "moved" as a duplicate (its values went with the slot).
    ConsistencyController::ParkedPull pull{std::move(message),
                                           request.header.worker_id(),
                                           table,
                                           required,
                                           clock,
                                           duplicate || request.has_values(),
                                           now,
                                           now + wait};
    if (Status parked = consistency_.Park(std::move(pull)); !parked.ok()) {
      if (parked.code() == StatusCode::kResourceExhausted) {
        counters_.Add(&ServerCounters::refused_limits);
        counters_.Add(&ServerCounters::refused_parked_pulls);
      }
      // A push-pull's values stay applied, and the answer says so: its
      // client then only pulls if it asks again.
      return replies_.Error(pull.message.frame(0), seq, parked, pull.duplicate);
    }
    counters_.Set(&ServerCounters::parked_pulls, consistency_.parked());
    return;
  }
  ServePull(message, request, 0, duplicate);
}

bool ServerNode::TakeShmValues(InMessage& message) {
  // [identity, header, keys, lengths?]: admission refuses anything else.
  wire::Header header;
  if (message.size() < 3 || !ParseHeader(message.frame(1), &header).ok() ||
      !header.has_push_shm()) {
    return true;
  }
  const wire::ShmRef& ref = header.push_shm();
  const uint64_t bytes = ref.bytes();
  if (header.values_frames() != 0 ||
      (header.type() != wire::PUSH && header.type() != wire::PUSH_PULL) ||
      bytes % sizeof(float) != 0 || bytes > options_.max_message_bytes) {
    replies_.Error(message.frame(0), header.seq(),
                   InvalidArgumentError(
                       "a request naming pushed values in shared memory "
                       "must be a push or push-pull without values frames, "
                       "of whole floats within the message limit"));
    return false;
  }
  Result<float*> from =
      shm_regions_.Region(ref, bytes, header.timeout_ms(), message.peer_pid());
  if (!from.ok()) {
    // Nothing applied: the worker sends the values again in frames (or,
    // for a request that waited past its timeout, in a new region).
    counters_.Add(&ServerCounters::errors);
    wire::Header reply;
    reply.set_type(wire::DATA_REPLY);
    reply.set_seq(header.seq());
    reply.set_shm_refused(from.status().code() !=
                          StatusCode::kDeadlineExceeded);
    StatusToWire(UnavailableError("server " + std::to_string(id_) +
                                  " cannot read the pushed values: " +
                                  from.status().message()),
                 &reply);
    replies_.Reply(message.frame(0), reply, nullptr);
    return false;
  }
  auto storage = std::make_unique<ShmCopiedFrames>();
  storage->values.reset(new uint8_t[bytes]);
  uint8_t* to = storage->values.get();
  const uint8_t* src = reinterpret_cast<const uint8_t*>(*from);
  if (runner_ != nullptr && bytes >= kParallelCopyBytes) {
    runner_->Run(
        (bytes + kCopyPieceBytes - 1) / kCopyPieceBytes, [&](size_t i) {
          const uint64_t at = i * kCopyPieceBytes;
          std::memcpy(to + at, src + at, std::min(kCopyPieceBytes, bytes - at));
        });
  } else {
    std::memcpy(to, src, bytes);
  }
  header.clear_push_shm();
  header.set_values_frames(1);
  storage->header = header.SerializeAsString();
  std::vector<ByteSpan> frames = {
      message.frame(0),
      {reinterpret_cast<const uint8_t*>(storage->header.data()),
       storage->header.size()},
      message.frame(2),
      {to, bytes}};
  for (size_t i = 3; i < message.size(); ++i)
    frames.push_back(message.frame(i));
  storage->received = message.TakeStorage();
  message.Reset(std::move(storage), std::move(frames));
  counters_.Add(&ServerCounters::shm_pushes);
  counters_.Add(&ServerCounters::bytes_in, bytes);
  return true;
}

void ServerNode::AnnounceLongWork(const RequestAdmission::Request& request) {
  // A pull only looks its keys up (it stores none); a push may create
  // each of them.
  AnnounceLongWork(request.has_values() ? request.data.keys().size() : 0,
                   request.data.total_floats() * sizeof(float));
}

void ServerNode::AnnounceLongWork(uint64_t keys, uint64_t bytes) {
  if (bytes < kLongRequestBytes && keys < kLongRequestKeys) return;
  // Large work keeps this thread, and so the heartbeats, busy for a while
  // (a push may create its keys, each with its allocations): say for how
  // long at most first, or a working server would be taken for a dead
  // one. Pessimistic: 10 MB/s, as for a checkpoint write, and 40 us a key
  // (pushes of 1.15 million new keys a server, into tables growing to
  // 3 x 10^7 rows each, took up to 10 s: 8.7 us a key, its lookup missing
  // the caches and its row allocated).
  const int64_t need = 2000 + static_cast<int64_t>(bytes / 10000) +
                       static_cast<int64_t>(keys / 25);
  // Rounded up to a power of two of milliseconds: large pushes one after
  // another (a step's, step after step) announce the same spell, and the
  // coordinator, hearing it again, has no new state to write.
  Heartbeat(/*busy_ms=*/static_cast<int64_t>(
      std::bit_ceil(static_cast<uint64_t>(need))));
}

Status ServerNode::ApplyValues(const RequestAdmission::Request& request) {
  ParameterTable& table = *request.table;
  const uint32_t weight = request.header.batch_weight();
  if (weight > static_cast<uint32_t>(kMaxPushWeight)) {
    return InvalidArgumentError(
        "a push's batch weight is " + std::to_string(weight) +
        ", above the most a worker may give, " +
        std::to_string(kMaxPushWeight) + "; nothing of it was applied");
  }
  // 0 (unset) reads as 1; NaN fails the test.
  const float rate = request.header.rate_factor() == 0.0f
                         ? 1.0f
                         : request.header.rate_factor();
  if (!(rate > 0.0f && rate <= kMaxRateFactor)) {
    return InvalidArgumentError("a push's learning-rate factor is " +
                                std::to_string(rate) + ", outside (0, " +
                                std::to_string(kMaxRateFactor) +
                                "]; nothing of it was applied");
  }
  DUCTILE_RETURN_IF_ERROR(table.CheckPush(request.data));
  const uint64_t adds = table.NewFloats(request.data);
  if (adds > 0 && tables_.stored_floats() + adds > max_stored_floats_) {
    counters_.Add(&ServerCounters::refused_limits);
    return ResourceExhaustedError(
        "server " + std::to_string(id_) + " holds " +
        std::to_string(tables_.stored_floats() * 4 >> 20) +
        " MB of tables; this push's new keys (" +
        std::to_string(adds * 4 >> 10) + " KB with their optimizer state) " +
        "would pass its limit of " +
        std::to_string(max_stored_floats_ * 4 >> 20) +
        " MB (--max_stored_mb); nothing of it was applied");
  }
  const int64_t clock = request.header.clock();
  // BSP: a worker's push of clock t becomes visible once every worker has
  // finished clock t (a late one, below the server clock, applies now).
  if (request.is_worker && consistency_.Buffers(table.id(), clock)) {
    DUCTILE_RETURN_IF_ERROR(
        consistency_.CheckBuffered(table.id(), clock, request.data));
    NoteGradient(request);
    consistency_.Buffer(table.id(), clock, request.data,
                        std::max<int32_t>(1, static_cast<int32_t>(weight)),
                        table.options().rule == UpdateRule::kAssign, rate);
    replicator_->NoteBuffered(table.id(), clock, request.data.keys());
    return Status::Ok();
  }
  if (request.is_worker) NoteGradient(request);
  table.ApplyPush(request.data, clock, rate);
  SetKeysStored();
  return Status::Ok();
}

void ServerNode::NoteGradient(const RequestAdmission::Request& request) {
  switch (request.table->options().rule) {
    case UpdateRule::kSgd:
    case UpdateRule::kMomentum:
    case UpdateRule::kAdaGrad:
    case UpdateRule::kAdam: {
      const TimePoint start = env_->Now();
      noise_.OnPush(request.table->id(), request.header.worker_id(),
                    request.header.clock(), request.data.keys(),
                    request.data.values(),
                    // At most kMaxPushWeight: ApplyValues checked it.
                    static_cast<int32_t>(request.header.batch_weight()));
      counters_.Add(&ServerCounters::gns_us, MicrosSince(start));
      return;
    }
    default:
      return;  // not a gradient
  }
}

void ServerNode::ServePull(const InMessage& message,
                           const RequestAdmission::Request& request,
                           uint64_t blocked_us, bool duplicate) {
  const ByteSpan identity = message.frame(0);
  ParameterTable& table = *request.table;
  Status s = table.CheckPull(request.data);
  if (!s.ok()) return replies_.Error(identity, request.header.seq(), s);
  // The worker's shared memory if it named a region there, else a frame.
  float* region = nullptr;
  if (request.header.has_reply_shm()) {
    Result<float*> to = shm_regions_.Region(
        request.header.reply_shm(), request.data.total_floats() * sizeof(float),
        request.header.timeout_ms(), message.peer_pid());
    if (to.ok()) region = *to;
  }
  std::vector<float> values;
  if (region != nullptr) {
    table.PullInto(request.data, region);
    counters_.Add(&ServerCounters::shm_replies);
    counters_.Add(&ServerCounters::bytes_out,
                  request.data.total_floats() * sizeof(float));
  } else {
    table.Pull(request.data, &values);
  }
  SetKeysStored();
  counters_.Add(&ServerCounters::pulls);
  wire::Header reply;
  reply.set_type(wire::DATA_REPLY);
  reply.set_seq(request.header.seq());
  reply.set_num_keys(request.data.keys().size());
  reply.set_values_frames(region != nullptr ? 0 : 1);
  reply.set_values_in_shm(region != nullptr);
  reply.set_data_clock(consistency_.server_clock());
  reply.set_blocked_us(blocked_us);
  reply.set_duplicate(duplicate);
  // Clients' caches decide freshness with the bound: keep theirs current.
  *reply.mutable_consistency() = ToWire(consistency_.latest(table.id()));
  reply.mutable_consistency()->set_from_clock(
      consistency_.latest_from(table.id()));
  replies_.Reply(identity, reply, region != nullptr ? nullptr : &values);
}

void ServerNode::HandleClock(const wire::Header& header) {
  if (!header.has_worker_id() || header.worker_id() < 0) return;
  if (header.generation() != generation_) return;  // another timeline
  if (consistency_.Advance(header.worker_id(), header.clock())) {
    OnServerClock();
  }
}

void ServerNode::SetAdaScaleNoise() {
  // AdaScale's gain (BatchScaling::Rule::kAdaScale) reads the job's
  // estimate, or until there is one this server's, once it has enough
  // clocks.
  const double noise_scale = job_noise_scale_ > 0 ? job_noise_scale_
                             : noise_.worker_clocks() >= kAdaScaleMinClocks
                                 ? noise_.worker_noise_scale()
                                 : 0;
  counters_.Set(&ServerCounters::adascale_noise_scale, noise_scale);
  tables_.ForEach([noise_scale](TableId, ParameterTable& table) {
    table.SetNoiseScale(noise_scale);
  });
}

void ServerNode::OnServerClock() {
  const int64_t server_clock = consistency_.server_clock();
  counters_.Set(&ServerCounters::min_clock, server_clock);
  // Rows idle too long go first; the BSP clocks applied below count as
  // updates at this clock. A first move past 1 is this server learning
  // the job's clock (clock_learned_), not clocks its rows were idle.
  if (!clock_learned_ && server_clock > 0) {
    if (server_clock > 1) tables_.RestartClock(server_clock);
    clock_learned_ = true;
  }
  tables_.SetClock(server_clock);
  SetKeysStored();
  const TimePoint noise_start = env_->Now();
  const bool noise_moved = noise_.OnServerClock(server_clock);
  counters_.Add(&ServerCounters::gns_us, MicrosSince(noise_start));
  if (noise_moved) {
    counters_.Set(&ServerCounters::gns_gradient_sq, noise_.gradient_sq());
    counters_.Set(&ServerCounters::gns_noise_trace, noise_.noise_trace());
    counters_.Set(&ServerCounters::gns_clocks, noise_.clocks());
    counters_.Set(&ServerCounters::gns_batch_gradient_sq,
                  noise_.worker_gradient_sq());
    counters_.Set(&ServerCounters::gns_batch_noise_trace,
                  noise_.worker_noise_trace());
    counters_.Set(&ServerCounters::gns_batch_clocks, noise_.worker_clocks());
    SetAdaScaleNoise();
  }
  // Tell the coordinator at once when a checkpoint by clock is due, rather
  // than at the next heartbeat.
  if (checkpointer_.DueByClock(server_clock)) Heartbeat(0);
  // Apply every BSP clock that every worker has finished.
  std::vector<ConsistencyController::CombinedClock> clocks =
      consistency_.TakeCombined();
  if (!clocks.empty()) replicator_->NoteCombinedBelow(server_clock);
  for (auto& combined : clocks) {
    ParameterTable* table = tables_.Find(combined.table);
    if (table == nullptr) continue;
    AnnounceLongWork(
        combined.keys.size(),
        combined.keys.size() * table->options().value_width * sizeof(float));
    std::vector<Status> errors;
    const TimePoint start = env_->Now();
    table->ApplyCombinedAll(combined.keys, combined.combine, combined.clock,
                            &errors);
    counters_.Add(&ServerCounters::apply_us, MicrosSince(start));
    for (const Status& s : errors) {
      counters_.Add(&ServerCounters::errors);
      LOG(ERROR) << "server " << id_ << ": clock " << combined.clock << ": "
                 << s.message();
    }
    SetKeysStored();
  }
  WriteDueCheckpoints();
  // Release the pulls the new server clock allows, in arrival order.
  std::vector<ConsistencyController::ParkedPull> ready =
      consistency_.TakeReleasable();
  if (ready.empty()) return;
  counters_.Set(&ServerCounters::parked_pulls, consistency_.parked());
  const TimePoint now = env_->Now();
  for (ConsistencyController::ParkedPull& p : ready) {
    RequestAdmission::Request request;
    uint64_t seq = 0;
    Status s = admission_.Check(p.message, routing_, generation_, id_, tables_,
                                &request, &seq);
    if (!s.ok()) {
      replies_.Error(p.message.frame(0), seq, s);
      continue;
    }
    if (!ServesAll(request) ||
        (mover_->moving() &&
         mover_->Bounces(routing_, request.table->id(), request.data.keys()))) {
      // Its slot moved away while it waited: the new owner serves it.
      replies_.Moved(p.message.frame(0), seq, p.duplicate);
      continue;
    }
    const uint64_t blocked_us =
        std::chrono::duration_cast<std::chrono::microseconds>(now - p.parked_at)
            .count();
    AnnounceLongWork(request);
    ServePull(p.message, request, blocked_us, p.duplicate);
  }
}

}  // namespace ductile
