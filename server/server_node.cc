#include "server/server_node.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "ductile/security.h"
#include "glog/logging.h"
#include "proto/codec.h"
#include "proto/counters.h"
#include "proto/table_config.h"
#include "transport/endpoint.h"
#include "util/malloc_policy.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;

// Requests handled per Step() before the coordinator's messages and the
// timers get their turn.
constexpr int kRequestsPerStep = 256;

// The threads that apply large pushes (ServerOptions::apply_threads); null
// when that is one.
std::unique_ptr<ParallelRunner> MakeRunner(int apply_threads) {
  const int threads =
      apply_threads > 0 ? apply_threads : ParallelRunner::DefaultThreads();
  if (threads <= 1) return nullptr;
  return std::make_unique<ParallelRunner>(threads);
}

}  // namespace

uint64_t ServerNode::MicrosSince(TimePoint start) {
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(env_->Now() - start)
          .count();
  return us > 0 ? static_cast<uint64_t>(us) : 0;
}

ServerNode::ServerNode(const ServerOptions& options, Env* env)
    : options_(options),
      env_(env),
      replies_(&routing_, &counters_),
      shm_regions_(options.shm_values),
      admission_(options.max_message_bytes, options.max_key_floats,
                 options.max_window_per_client, &counters_),
      runner_(MakeRunner(options.apply_threads)),
      tables_(&options_.custom_rules, -1, runner_.get()),
      consistency_(options.max_parked_pulls_per_worker,
                   options.max_parked_pulls),
      noise_(options.noise_scale_sample,
             GradientNoiseMonitor::kDefaultSmoothing),
      checkpointer_(env, this, &counters_),
      restorer_(env) {
  tables_.set_max_key_floats(options.max_key_floats);
  noise_.set_free_elsewhere([this](GradientNoiseMonitor::Sums sums) {
    FreeHeldBeside(std::move(sums));
  });
  if (options.max_stored_mb > 0) {
    max_stored_floats_ = options.max_stored_mb * (uint64_t{1} << 20) / 4;
  } else {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGESIZE);
    max_stored_floats_ = pages > 0 && page > 0
                             ? static_cast<uint64_t>(pages) * page / 4 * 3 / 4
                             : ~uint64_t{0};
  }
}

ServerNode::~ServerNode() { RemoveIpcFile(ipc_address_); }

Status ServerNode::Start() {
  transport_ =
      env_->NewTransport("server", options_.security, options_.io_threads);
  mover_ = std::make_unique<SlotMover>(
      env_, transport_.get(), milliseconds(options_.move_timeout_ms), wakeup_);
  DUCTILE_ASSIGN_OR_RETURN(
      router_,
      transport_->NewRouter(static_cast<int64_t>(options_.max_message_bytes),
                            options_.max_queued_replies,
                            options_.max_queued_reply_mb << 20,
                            options_.max_queued_requests));
  replies_.set_router(router_.get());
  replicator_ = std::make_unique<Replicator>(env_, transport_.get(), &routing_,
                                             &tables_, &consistency_);
  replicator_->set_copy_chunk_bytes(options_.replica_copy_chunk_bytes);
  replicator_->set_shm(options_.shm_values);
  replies_.set_gate(replicator_.get());
  const std::string port =
      options_.port == 0 ? "*" : std::to_string(options_.port);
  DUCTILE_ASSIGN_OR_RETURN(
      tcp_address_, router_->Bind("tcp://" + options_.host + ":" + port));
  if (options_.enable_ipc) {
    // Servers killed before they could remove their socket files.
    if (const int stale = RemoveStaleIpcFiles(options_.ipc_dir); stale > 0) {
      LOG(INFO) << "removed " << stale << " stale ipc socket file(s) from "
                << options_.ipc_dir;
    }
    DUCTILE_ASSIGN_OR_RETURN(ipc_address_, router_->Bind(MakeIpcAddress(
                                               options_.ipc_dir, "server")));
  }
  DUCTILE_ASSIGN_OR_RETURN(
      coordinator_,
      transport_->NewDealer(NewMemberIdentity("server"), kControlMessageBytes));
  DUCTILE_RETURN_IF_ERROR(coordinator_->Connect(options_.coordinator_address));
  wire::Header reg;
  reg.set_type(wire::REGISTER);
  reg.set_role(wire::ROLE_SERVER);
  reg.set_member_id(options_.requested_id);
  reg.set_pid(env_->ProcessId());
  reg.mutable_endpoint()->set_tcp_address(tcp_address_);
  reg.mutable_endpoint()->set_ipc_address(ipc_address_);
  reg.mutable_endpoint()->set_host_id(HostId());
  reg.set_state_dir(options_.state_dir);
  if (options_.requested_id >= 0) {
    // The store is known before registering: fail before the coordinator
    // counts this server in (and, if it restarted, rolls the job back).
    id_ = options_.requested_id;
    tables_.set_server_id(id_);
    DUCTILE_RETURN_IF_ERROR(checkpointer_.Open(options_.state_dir, id_,
                                               options_.keep_checkpoints,
                                               options_.disk_reserve_mb));
    tables_.set_keeps_evicted(checkpointer_.enabled());
  }
  reg.set_keep_checkpoints(options_.keep_checkpoints);
  registration_ = reg.SerializeAsString();
  return SendRegistration();
}

Status ServerNode::SendRegistration() {
  next_register_ = env_->Now() + kRegisterResend;
  OutMessage out;
  out.AddString(registration_);
  return coordinator_->Send(std::move(out));
}

void ServerNode::HandleRegistration(const wire::Header& reply) {
  if (reply.status_code() != 0) {
    failure_ = FailedPreconditionError("coordinator refused registration: " +
                                       reply.status_message());
    return;
  }
  if (checkpointer_.enabled() && reply.member_id() != id_) {
    failure_ =
        FailedPreconditionError("asked for server id " + std::to_string(id_) +
                                ", got " + std::to_string(reply.member_id()));
    return;
  }
  id_ = reply.member_id();
  last_heard_ = env_->Now();
  tables_.set_server_id(id_);
  replies_.set_server_id(id_);
  replicator_->set_server_id(id_);
  checkpointer_.set_server_id(id_);
  incarnation_ = reply.incarnation();
  generation_ = reply.generation();
  checkpointer_.set_checkpoint_every(reply.checkpoint_every());
  // At least three heartbeats per timeout: a server declared dead by
  // mistake would roll the whole job back.
  heartbeat_interval_ms_ = options_.heartbeat_interval_ms;
  if (reply.timeout_ms() > 0) {
    heartbeat_interval_ms_ = std::max<int64_t>(
        10, std::min(heartbeat_interval_ms_, reply.timeout_ms() / 3));
  }
  if (!checkpointer_.enabled()) {
    Status s =
        checkpointer_.Open(options_.state_dir, id_, options_.keep_checkpoints,
                           options_.disk_reserve_mb);
    if (!s.ok()) {
      failure_ = s;
      return;
    }
    tables_.set_keeps_evicted(checkpointer_.enabled());
  }
  for (const auto& config : reply.tables()) {
    Status s = tables_.Create(config);
    if (!s.ok()) {
      failure_ = FailedPreconditionError("cannot host table '" + config.name() +
                                         "': " + s.message());
      return;
    }
    consistency_.AddTable(config.id(), FromWire(config.consistency()));
  }
  if (reply.has_routing()) InstallRouting(reply.routing());
  registered_ = true;
  next_heartbeat_ = env_->Now();
  admission_.dedup().SetNow(DedupNow());
  LOG(INFO) << "server " << id_ << " listening on " << tcp_address_
            << (ipc_address_.empty() ? "" : " and " + ipc_address_);
}

ServerNode::TimePoint ServerNode::NextWakeup() const {
  // Until registered only the coordinator's answer matters, and asking
  // again when it is late.
  if (!registered_) return next_register_;
  TimePoint wake = next_heartbeat_;
  if (!behind_.empty()) wake = std::min(wake, behind_since_ + kBehindWait);
  if (auto d = consistency_.NextDeadline()) wake = std::min(wake, *d);
  if (auto d = checkpointer_.NextDeadline()) wake = std::min(wake, *d);
  if (mover_) {
    if (auto d = mover_->NextDeadline()) wake = std::min(wake, *d);
  }
  if (replicator_) {
    if (auto d = replicator_->NextDeadline()) wake = std::min(wake, *d);
  }
  return wake;
}

std::vector<Socket*> ServerNode::sockets() const {
  std::vector<Socket*> out = {router_.get(), coordinator_.get()};
  if (mover_) {
    for (Socket* s : mover_->sockets()) out.push_back(s);
  }
  if (replicator_) {
    for (Socket* s : replicator_->sockets()) out.push_back(s);
  }
  return out;
}

bool ServerNode::ServesAll(const RequestAdmission::Request& request) const {
  const TableId table = request.table->id();
  for (Key key : request.data.keys()) {
    if (!routing_.Serves(id_, routing_.SlotOf(table, key))) return false;
  }
  return true;
}

void ServerNode::SetMoveCounters() {
  counters_.Set(&ServerCounters::slots_moving, mover_->slots_moving());
  counters_.Set(&ServerCounters::move_bytes_left, mover_->bytes_left());
  // Rows copied out for a move stay as sent until it ends.
  tables_.HoldEvictions(mover_->slots_moving() > 0);
}

void ServerNode::StepMoves() {
  if (mover_ && mover_->moving()) {
    for (const wire::Header& done : mover_->Step()) {
      // Reported once the backups hold what the slots' last requests did:
      // the coordinator then names their new owner.
      moves_done_.push_back({done, replicator_->Ticket()});
      moves_done_.back().first.set_member_id(id_);
    }
    SetMoveCounters();
  }
  while (!moves_done_.empty() &&
         replicator_->Passed(moves_done_.front().second)) {
    Send(moves_done_.front().first);
    moves_done_.erase(moves_done_.begin());
  }
}

void ServerNode::InstallMoved(InMessage& message, const wire::Header& header) {
  const ByteSpan identity = message.frame(0);
  wire::Header ack;
  ack.set_type(wire::MIGRATE_DATA);
  ack.set_ack(true);
  ack.set_change_id(header.change_id());
  ack.set_seq(header.seq());
  // Only servers move slots: a key bound to a worker (worker-N) sends none.
  bool server_key = false;
  int32_t key_id = -1;
  Status s =
      MemberKeyRole(message.member_key_name(), &server_key, &key_id) &&
              !server_key
          ? PermissionDeniedError("member key '" + message.member_key_name() +
                                  "' is a worker's: only servers move slots")
          : mover_->Install(header, message, routing_, tables_, consistency_,
                            admission_.dedup());
  if (s.code() == StatusCode::kPermissionDenied) {
    counters_.Add(&ServerCounters::refused_permission);
  }
  if (!s.ok()) {
    counters_.Add(&ServerCounters::errors);
    StatusToWire(s, &ack);
  }
  SetKeysStored();
  replies_.ReplyNow(identity, ack);  // its own backups have nothing of it
}

void ServerNode::Step() {
  if (!registered_) {
    // Only the registration's answer counts until then; requests wait.
    bool got = true;
    while (got && failure_.ok() && !registered_ &&
           coordinator_->Receive(&message_, &got).ok() && got) {
      wire::Header reply;
      if (message_.empty() || !ParseHeader(message_.frame(0), &reply).ok() ||
          reply.type() != wire::CONTROL_REPLY) {
        continue;
      }
      HandleRegistration(reply);
    }
    if (!registered_ && failure_.ok() && env_->Now() >= next_register_) {
      VLOG(1) << "server: no answer to its registration yet; asking again";
      SendRegistration().IgnoreError();  // sent again in kRegisterResend
    }
    return;
  }
  if (env_->Now() >= next_heartbeat_) Heartbeat(0);
  // A checkpoint written beside this thread: reported; the next cut may
  // be due (its pushes held until now).
  if (checkpointer_.Poll(tables_)) WriteDueCheckpoints();
  for (int i = 0; i < kRequestsPerStep; ++i) {
    bool got = false;
    if (!router_->Receive(&message_, &got).ok() || !got) {
      run_ = 0;
      break;
    }
    // Read right after another: it waited in the socket behind that one.
    if (run_++ > 0) {
      counters_.Add(&ServerCounters::queued_requests);
      if (run_ - 1 > busy_run_peak_) {
        busy_run_peak_ = run_ - 1;
        counters_.Set(&ServerCounters::busy_run_peak, busy_run_peak_);
      }
    }
    const TimePoint start = env_->Now();
    HandleRequest(message_);
    const TimePoint end = env_->Now();
    counters_.Add(&ServerCounters::busy_us,
                  static_cast<uint64_t>(std::max<int64_t>(
                      0, std::chrono::duration_cast<std::chrono::microseconds>(
                             end - start)
                             .count())));
    // Large requests take a while each: heartbeats go out between them,
    // or a busy server would be taken for a dead one.
    if (end >= next_heartbeat_) Heartbeat(0);
  }
  while (!shut_down_) {
    bool got = false;
    if (!coordinator_->Receive(&message_, &got).ok() || !got) break;
    HandleCoordinator(message_);
  }
  if (StoppedFailing()) return;  // replaced: nothing more
  StepMoves();
  HandleTimers();
  StepReplication();
}

// ------------------------------------------------------------ coordinator

void ServerNode::Send(const wire::Header& header) {
  OutMessage out;
  out.AddString(header.SerializeAsString());
  coordinator_->Send(std::move(out)).IgnoreError();  // best effort
}

void ServerNode::HandleCoordinator(InMessage& message) {
  last_heard_ = env_->Now();
  wire::Header header;
  if (message.empty() || !ParseHeader(message.frame(0), &header).ok()) {
    LOG(WARNING) << "server " << id_ << ": unreadable message from coordinator";
    return;
  }
  if (header.type() == wire::RECOVER) {
    // The copies and what waits for them belong to the old timeline (and
    // the slots of a dead primary come back from the checkpoint).
    DropReplicas();
  }
  if (header.has_routing()) {
    InstallRouting(header.routing());
    if (StoppedFailing()) return;  // replaced: it stops here
    wire::Header ack;
    ack.set_type(wire::ROUTING_ACK);
    ack.set_member_id(id_);
    ack.set_epoch(routing_.epoch());
    Send(ack);
  }
  switch (header.type()) {
    case wire::TABLE_CREATE:
      return CreateTable(header);
    case wire::WORKERS_UPDATE:
      return SetWorkers(header);
    case wire::CONSISTENCY_PREPARE:
      return PrepareChange(header);
    case wire::CONSISTENCY_COMMIT:
      return CommitChange(header);
    case wire::CHECKPOINT_PREPARE:
      return checkpointer_.Prepare(header, generation_);
    case wire::CHECKPOINT_COMMIT:
      if (checkpointer_.Commit(header, generation_)) ReplayCheckpointHeld();
      return WriteDueCheckpoints();
    case wire::RECOVER:
      return Recover(header);
    case wire::REJOIN:
      return Rejoin(header);
    case wire::MIGRATE_OUT: {
      if (header.change_id() < moves_from_) {
        // Planned by a coordinator process that has since restarted and
        // abandoned it (MIGRATE_ABORT of every move): late, and not made.
        LOG(WARNING) << "server " << id_ << ": move " << header.change_id()
                     << " of a coordinator that has restarted since "
                        "ignored";
        return;
      }
      // The slots' BSP pushes not combined yet go with their keys.
      std::vector<SlotMover::Buffered> buffered =
          consistency_.TakeBufferedKeys([&](TableId table, Key key) {
            return SlotMover::InSlots(header, routing_.SlotOf(table, key));
          });
      mover_->Start(header, routing_, tables_, std::move(buffered),
                    admission_.dedup().Snapshot());
      SetMoveCounters();
      return StepMoves();
    }
    case wire::MIGRATE_ABORT:
      if (header.change_id() == 0) {
        moves_from_ = std::max(moves_from_, header.seq());
      }
      // The slots are served here again, with their BSP pushes.
      mover_->Abort(header.change_id(), tables_, consistency_);
      SetMoveCounters();
      return;
    case wire::SHUTDOWN_NOTICE:
      LOG(INFO) << "server " << id_ << ": cluster shutdown";
      shut_down_ = true;
      return;
    case wire::CONTROL_REPLY:
      // Refused as a process another registration replaced under its id.
      if (StatusFromWire(header).code() == StatusCode::kAborted &&
          incarnation_ != 0 && header.incarnation() > incarnation_) {
        return StopReplaced(header.incarnation());
      }
      if (header.status_code() != 0) {
        LOG(WARNING) << "server " << id_
                     << ": coordinator says: " << header.status_message();
      }
      return;
    case wire::HEARTBEAT: {
      // The answer to a heartbeat, with the job's noise scale once known.
      const double job = header.job_noise_scale();
      if (std::isfinite(job) && job > 0 && job != job_noise_scale_) {
        job_noise_scale_ = job;
        SetAdaScaleNoise();
      }
      return;
    }
    default:
      return;
  }
}

void ServerNode::InstallRouting(const wire::RoutingTable& wire) {
  if (wire.epoch() <= routing_.epoch()) return;
  Result<RoutingTable> routing = RoutingTable::FromWire(wire);
  if (!routing.ok()) {
    LOG(WARNING) << "server " << id_ << ": ignoring a malformed routing table: "
                 << routing.status();
    return;
  }
  if (!ListsThisProcess(*routing)) return;
  const RoutingTable old = std::exchange(routing_, std::move(*routing));
  // The admission filters keep their counts by the routing's slots.
  tables_.set_num_slots(routing_.num_slots());
  VLOG(1) << "server " << id_ << " routing epoch " << routing_.epoch();
  if (mover_ && mover_->moving()) {
    // Slots moved away are the new owner's now: their keys go. Their rows
    // are freed, and the memory given back to the system, beside this
    // thread: hundreds of MB of them took it most of a second.
    std::vector<ParameterTable::Erased> erased;
    if (mover_->OnRouting(routing_, id_, tables_, &erased) > 0) {
      SetKeysStored();
      auto rows = std::make_shared<std::vector<ParameterTable::Erased>>(
          std::move(erased));
      FreeBeside([rows = std::move(rows)]() mutable {
        rows.reset();
        ReleaseFreedMemory();
      });
    }
    SetMoveCounters();
  }
  OnReplicaRouting(old);
  ReplayBehind();
}

void ServerNode::ReplayBehind() {
  if (behind_.empty()) return;
  std::deque<InMessage> held = std::move(behind_);
  behind_.clear();
  for (InMessage& m : held) HandleRequest(m, /*replay=*/true);
}

void ServerNode::CreateTable(const wire::Header& header) {
  Status s = tables_.Create(header.table());
  if (s.ok()) {
    consistency_.AddTable(header.table().id(),
                          FromWire(header.table().consistency()));
    if (!noise_.enabled() &&
        header.table().batch_scaling().rule() ==
            static_cast<int>(BatchScaling::Rule::kAdaScale)) {
      LOG(WARNING) << "server " << id_ << ": table '" << header.table().name()
                   << "' scales its learning rate by AdaScale's gain, which "
                      "needs the gradient noise scale: with "
                      "--noise_scale_sample=0 this server adds nothing to "
                      "it, and its factor here stays 1 unless other "
                      "servers estimate one";
    }
    SetAdaScaleNoise();  // the job's, when already known
  }
  wire::Header ack;
  ack.set_type(wire::TABLE_CREATE_ACK);
  ack.set_seq(header.seq());
  ack.set_member_id(id_);
  StatusToWire(s, &ack);
  Send(ack);
}

void ServerNode::SetWorkers(const wire::Header& header) {
  admission_.BindWorkers(header, /*overwrite=*/true);
  const std::set<int32_t> live(header.worker_ids().begin(),
                               header.worker_ids().end());
  const bool moved = consistency_.SetWorkers(live);
  FailParked(consistency_.TakeOfGoneWorkers(), [](const auto& p) {
    return UnavailableError("worker " + std::to_string(p.worker_id) +
                            " left the job (or was declared dead) while its "
                            "pull waited on the staleness bound");
  });
  VLOG(1) << "server " << id_ << ": " << live.size()
          << " live workers, server clock " << consistency_.server_clock();
  wire::Header ack;
  ack.set_type(wire::WORKERS_ACK);
  ack.set_member_id(id_);
  ack.set_change_id(header.change_id());
  // Where a joining worker starts: nothing before this clock waits for it.
  ack.set_clock(consistency_.floor());
  Send(ack);
  if (moved) {
    OnServerClock();
  } else {
    WriteDueCheckpoints();  // e.g. the last worker the cut waited for died
  }
}

void ServerNode::PrepareChange(const wire::Header& header) {
  wire::Header ack;
  ack.set_type(wire::CONSISTENCY_ACK);
  ack.set_member_id(id_);
  ack.set_change_id(header.change_id());
  Result<int64_t> clock = consistency_.Prepare(header.table_id());
  if (clock.ok()) {
    ack.set_clock(*clock);
  } else {
    StatusToWire(
        NotFoundError("server " + std::to_string(id_) + " has no table " +
                      std::to_string(header.table_id())),
        &ack);
  }
  Send(ack);
}

void ServerNode::CommitChange(const wire::Header& header) {
  const TableId table = header.table_id();
  if (!consistency_.HasTable(table)) return;
  Consistency c = FromWire(header.consistency());
  if (!ValidateConsistency(c).ok()) c = consistency_.latest(table);
  LOG(INFO) << "server " << id_ << ": table " << table << " is " << ToString(c)
            << " from clock " << header.clock();
  for (InMessage& m : consistency_.Commit(table, header.clock(), c)) {
    HandleRequest(m, /*replay=*/true);
  }
  OnServerClock();
}

// ------------------------------------------------------------ checkpoints

void ServerNode::WriteDueCheckpoints() {
  while (std::optional<int64_t> clock =
             checkpointer_.TakeDue(consistency_.server_clock(),
                                   !consistency_.live_workers().empty())) {
    // Reported to the coordinator once written. The cut's state is
    // copied: the pushes held for it may be applied.
    checkpointer_.Write(*clock, tables_, routing_.epoch(), generation_);
    ReplayCheckpointHeld();
  }
}

void ServerNode::ReplayCheckpointHeld() {
  // In arrival order; those still beyond a cut are held again, in order.
  for (InMessage& m : checkpointer_.TakeHeld()) {
    HandleRequest(m, /*replay=*/true);
  }
}

bool ServerNode::GetForTesting(TableId table, Key key,
                               std::vector<float>* value) {
  ParameterTable* t = tables_.Find(table);
  return t != nullptr && t->Get(key, value);
}

}  // namespace ductile
