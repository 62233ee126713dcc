#include "coordinator/coordinator_node.h"

#include <utility>

#include "glog/logging.h"
#include "proto/codec.h"
#include "proto/table_config.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;

// How long shutdown notices get to leave before the socket closes.
constexpr milliseconds kShutdownFlush{300};
// The longest the loop sleeps: liveness and deadlines are checked at
// least this often.
constexpr milliseconds kTimerPeriod{100};
// How often a state that could not be saved is tried again.
constexpr milliseconds kSaveRetry{200};

}  // namespace

CoordinatorNode::CoordinatorNode(const CoordinatorOptions& options, Env* env)
    : options_(options),
      env_(env),
      state_(env, options_),
      ctx_{options_, env, state_, out_},
      membership_(&ctx_),
      routing_(&ctx_),
      tables_(&ctx_),
      barriers_(&ctx_),
      checkpoints_(&ctx_),
      recovery_(&ctx_),
      migrations_(&ctx_, &routing_,
                  [this] { return checkpoints_.in_progress(); }) {}

Status CoordinatorNode::Start() {
  transport_ = env_->NewTransport("coordinator", options_.security,
                                  /*io_threads=*/1);  // control messages
  DUCTILE_ASSIGN_OR_RETURN(
      socket_,
      transport_->NewRouter(kControlMessageBytes, options_.max_queued_replies,
                            options_.max_queued_reply_mb << 20,
                            options_.max_queued_requests));
  std::string bind = options_.bind_address;
  if (bind.size() > 2 && bind.compare(bind.size() - 2, 2, ":0") == 0) {
    bind = bind.substr(0, bind.size() - 1) + "*";
  }
  DUCTILE_ASSIGN_OR_RETURN(address_, socket_->Bind(bind));
  DUCTILE_RETURN_IF_ERROR(state_.Open());
  if (state_.resumed()) {
    recovery_.Load();
    LOG(INFO) << "coordinator: resumed the cluster in " << options_.state_dir
              << ": " << state_.servers.size() << " server(s), "
              << state_.workers.size() << " worker(s), routing epoch "
              << state_.routing.epoch() << ", generation " << state_.generation
              << ", " << state_.catalog.size() << " checkpoint(s)"
              << (state_.catalog.empty()
                      ? ""
                      : ", latest at clock " +
                            std::to_string(state_.catalog.back().clock()));
  }
  // A drain or rebalance under way when the coordinator stopped is
  // abandoned (its servers are told when they reconnect).
  for (auto& [id, m] : state_.servers) m.AbandonDrain();
  // A store that cannot take the state now would hold every message to
  // the members from the first: nobody could ever join. Refused here, with
  // the store's reason, rather than held.
  if (Status saved = state_.PersistIfChanged(); !saved.ok()) {
    return Status(saved.code(),
                  "the coordinator cannot save its state, so it does not "
                  "start: " +
                      saved.message());
  }
  checkpoints_.RestartInterval();
  LOG(INFO) << "coordinator listening on " << address_ << ", waiting for "
            << options_.num_servers << " server(s)";
  return Status::Ok();
}

void CoordinatorNode::Step() {
  while (true) {
    const TimePoint read_at = env_->Now();
    ForgiveAPause(read_at);
    bool got = false;
    if (!socket_->Receive(&message_, &got).ok() || !got) {
      ctx_.inbox_read_at = read_at;
      break;
    }
    Handle(message_);
    PersistAndSend();
  }
  CheckTimeouts();
  PersistAndSend();
}

void CoordinatorNode::Run(const std::function<void()>& task) {
  task();
  PersistAndSend();
}

void CoordinatorNode::PersistAndSend() {
  const TimePoint now = env_->Now();
  if (!save_error_.ok() && now < save_retry_at_) {
    return out_.FlushStateless(socket_.get());
  }
  Status saved = state_.PersistIfChanged();
  if (!saved.ok()) {
    // What is queued tells of changes the state on disk lacks: a restart
    // now would load the older state, and members must not have heard of
    // the newer one (a generation, a routing, a checkpoint). Hold it all
    // until the state is written; the cluster waits meanwhile.
    if (save_error_.ok()) {
      LOG(ERROR) << "coordinator: cannot save its state (" << saved
                 << "); every message is held until it can be saved";
    }
    save_error_ = std::move(saved);
    save_retry_at_ = now + kSaveRetry;
    if (ctx_.shutting_down && now >= shutdown_deadline_ && failure_.ok()) {
      failure_ = UnavailableError(
          "the job ended while the coordinator could not save its state (" +
          save_error_.ToString() + "); " + std::to_string(out_.held()) +
          " message(s) to the members were never sent");
      LOG(ERROR) << "coordinator: " << failure_.message();
    }
    return out_.FlushStateless(socket_.get());
  }
  if (!save_error_.ok()) {
    LOG(WARNING) << "coordinator: its state is saved again; sending the "
                 << out_.held() << " message(s) held meanwhile";
    save_error_ = Status::Ok();
  }
  if (!out_.empty()) out_.Flush(socket_.get());
}

bool CoordinatorNode::finished() const {
  if (!ctx_.shutting_down || env_->Now() < shutdown_at_) return false;
  // Every server still in the job must have been told, or it would run
  // on forever: one not heard from since a restart of this coordinator is
  // told when it reconnects, unless it stays silent past the heartbeat
  // timeout (then it is dead, or cut off).
  if (!save_error_.ok() && out_.held() > 0) {
    // The shutdown notices wait for the state to be written; past the
    // deadline the coordinator ends without them, as a failure.
    return !failure_.ok();
  }
  // As of the last empty read of the inbox: a reconnecting server's
  // heartbeat a pause left unread is read first.
  if (ctx_.inbox_read_at >= shutdown_deadline_) return true;
  for (const auto& [id, m] : ctx_.state.servers) {
    if (!m.dead && !m.left() && m.identity.empty()) return false;
  }
  return true;
}

CoordinatorNode::TimePoint CoordinatorNode::NextWakeup() const {
  return env_->Now() + kTimerPeriod;
}

void CoordinatorNode::MoveSlot(int32_t slot, int32_t server_id,
                               std::function<void(const Status&)> done) {
  migrations_.MoveSlot(slot, server_id, std::move(done));
}

void CoordinatorNode::Checkpoint(
    std::function<void(const Result<int64_t>&)> done) {
  checkpoints_.Request(std::move(done));
}

void CoordinatorNode::DrainServer(int32_t server,
                                  std::function<void(const Status&)> done) {
  migrations_.Drain(server, std::move(done));
}

void CoordinatorNode::CancelWaits(const Status& status) {
  routing_.CancelWaits(status);
}

namespace {

// Requests only an administrator may make (with keys; in plain mode every
// sender counts as one).
bool NeedsAdmin(wire::MessageType type) {
  switch (type) {
    case wire::SHUTDOWN:
    case wire::CHECKPOINT:
    case wire::RESIZE:
    case wire::DRAIN:
    case wire::SET_CONSISTENCY:
    case wire::MEMBER_EXIT:
      return true;
    default:
      return false;
  }
}

// The role of the member a message's member_id names as its sender
// (ROLE_UNKNOWN: its member_id names no sender, or it has none).
wire::Role SenderRole(const wire::Header& h) {
  switch (h.type()) {
    case wire::CHECKPOINT_ACK:
    case wire::RECOVER_ACK:
    case wire::TABLE_CREATE_ACK:
    case wire::ROUTING_ACK:
    case wire::WORKERS_ACK:
    case wire::MIGRATE_DONE:
      return wire::ROLE_SERVER;
    case wire::BARRIER:
    case wire::FINISH:
    case wire::LEAVE:
    case wire::DATA_CLAIM:
      return wire::ROLE_WORKER;
    case wire::CHECKPOINT_DONE:
    case wire::CONSISTENCY_ACK:  // servers and caching workers
      return h.role() == wire::ROLE_WORKER ? wire::ROLE_WORKER
                                           : wire::ROLE_SERVER;
    case wire::HEARTBEAT:
      return h.has_counters() ? wire::ROLE_SERVER : wire::ROLE_WORKER;
    default:
      return wire::ROLE_UNKNOWN;
  }
}

}  // namespace

Status CoordinatorNode::CheckSender(const Member* member, const wire::Header& h,
                                    const std::string& key) const {
  const wire::Role role = SenderRole(h);
  if (role == wire::ROLE_UNKNOWN) return Status::Ok();
  const char* what = role == wire::ROLE_SERVER ? "server " : "worker ";
  if (member != nullptr) {
    if (member->role == role && member->id == h.member_id()) {
      return Status::Ok();
    }
    return PermissionDeniedError(
        wire::MessageType_Name(h.type()) + " names " + what +
        std::to_string(h.member_id()) + " but comes from " +
        (member->role == wire::ROLE_SERVER ? "server " : "worker ") +
        std::to_string(member->id) + ": a member acts for itself only");
  }
  // Not a member's connection: only a member that has none (a coordinator
  // restarted since it was last heard from) may be named.
  const auto& group =
      role == wire::ROLE_SERVER ? state_.servers : state_.workers;
  auto it = group.find(h.member_id());
  if (it == group.end()) return Status::Ok();
  if (!it->second.KeyFits(key)) {
    return PermissionDeniedError(
        wire::MessageType_Name(h.type()) + " names " + what +
        std::to_string(h.member_id()) +
        ", which registered with a member key this connection does not "
        "hold");
  }
  if (it->second.identity.empty()) return Status::Ok();
  return PermissionDeniedError(wire::MessageType_Name(h.type()) + " names " +
                               what + std::to_string(h.member_id()) +
                               ", which is connected elsewhere");
}

wire::ClusterState CoordinatorNode::ClusterStateNow() const {
  wire::ClusterState c = membership_.Status(recovery_.in_progress());
  c.set_slots_moving(migrations_.slots_moving());
  c.set_replicas(options_.replicas);
  c.set_takeovers(state_.takeovers);
  if (options_.replicas >= 2)
    c.set_slots_without_copy(state_.SlotsWithoutCopy());
  c.set_problem(!save_error_.ok()
                    ? "the coordinator cannot save its state (" +
                          save_error_.ToString() +
                          "); every message to the members is held until it "
                          "can"
                : recovery_.in_progress() ? recovery_.problem()
                                          : checkpoints_.problem());
  const RouterRefusals refused = socket_->refusals();
  wire::Refusals* r = c.mutable_coordinator_refusals();
  r->set_refused_connections(refused.connections);
  r->set_failed_accepts(refused.failed_accepts);
  r->set_failed_handshakes(refused.failed_handshakes);
  r->set_refused_replies(refused.refused_replies);
  r->set_dropped_replies(refused.dropped_replies);
  c.set_target_workers(state_.target_workers);
  c.set_target_servers(state_.target_servers);
  const DataPlan& plan = state_.data_plan;
  c.set_data_epochs(plan.epochs());
  c.set_data_batches_per_epoch(plan.batches_per_epoch());
  c.set_data_epoch(plan.current_epoch());
  c.set_data_batches_done(plan.batches_done_in_current());
  c.set_data_batches_per_step(plan.batches_per_step());
  for (int32_t id : state_.replace_workers) {
    auto it = state_.workers.find(id);
    if (it != state_.workers.end() && it->second.live_worker()) {
      c.add_replace_workers(id);
    }
  }
  return c;
}

void CoordinatorNode::Handle(InMessage& message) {
  if (message.size() < 2) return;  // no header: nothing to answer
  const std::string identity(message.frame_view(0));
  wire::Header h;
  Status s = ParseHeader(message.frame(1), &h);
  // A header that parses but fails a check is answered under its seq.
  if (!s.ok()) return out_.Reply(identity, h.seq(), s);

  const std::string& key = message.member_key();
  const MembershipManager::Touched touched =
      membership_.Touch(h, identity, key);
  if (const Member* owner = touched.impostor_of) {
    // A router hands an identity to whoever connects with it: without the
    // member's key, nothing sent under it counts, whatever it names, nor
    // may it register as someone else.
    LOG(WARNING) << "coordinator: refused " << wire::MessageType_Name(h.type())
                 << " from a connection with the identity of " << owner->name()
                 << " but not its member key";
    return out_.Reply(
        identity, h.seq(),
        PermissionDeniedError("this connection has the identity "
                              "of " +
                              owner->name() + " but not its member key"));
  }
  if (const Member* gone = touched.from_exited) {
    VLOG(1) << "coordinator: ignored " << wire::MessageType_Name(h.type())
            << " from " << gone->name() << ", whose process exited";
    return;
  }
  if (TellReplaced(touched.member, identity, key, h)) return;
  if (Status sender = CheckSender(touched.member, h, key); !sender.ok()) {
    LOG(WARNING) << "coordinator: refused: " << sender.message();
    return out_.Reply(identity, h.seq(), sender);
  }
  if (touched.back_from_dead && touched.member->role == wire::ROLE_WORKER) {
    OnWorkersChanged();
  } else if (touched.back_from_dead) {
    // Its REJOIN names only the tables that exist.
    tables_.OnServerUp(*touched.member);
  }
  if (touched.reconnected && ctx_.shutting_down) {
    // The job ended while it was away: it learns so now.
    wire::Header notice;
    notice.set_type(wire::SHUTDOWN_NOTICE);
    out_.Send(touched.member->identity, notice);
    LOG(INFO) << "coordinator: " << wire::Role_Name(touched.member->role) << " "
              << touched.member->id
              << " reconnected after the job ended; told to shut down";
  } else if (touched.reconnected) {
    // Bring it up to date with what it may have missed.
    const Member& m = *touched.member;
    if (m.role == wire::ROLE_SERVER) {
      routing_.Publish();
      membership_.PublishWorkers();
      recovery_.Resend(m);
      // Moves it was making for the coordinator before its restart are
      // abandoned, and any such move still on its way to it is refused
      // (ids below this process's); the routing it just got says who owns
      // what.
      wire::Header abort;
      abort.set_type(wire::MIGRATE_ABORT);
      abort.set_change_id(0);
      abort.set_seq(migrations_.IdFloor());
      out_.Send(m.identity, abort);
    } else if (!ctx_.state.routing.empty()) {
      // A routing it missed may name a server that died: no reply from
      // that one would ever tell it of the new owners (a takeover).
      wire::Header update;
      update.set_type(wire::ROUTING_UPDATE);
      ctx_.state.routing.ToWire(update.mutable_routing());
      out_.Send(m.identity, update);
    }
    checkpoints_.Resend(m);
  }

  if (NeedsAdmin(h.type()) && !message.from_admin()) {
    LOG(WARNING) << "coordinator: refused " << wire::MessageType_Name(h.type())
                 << " from a peer without the admin key";
    return out_.Reply(
        identity, h.seq(),
        PermissionDeniedError(wire::MessageType_Name(h.type()) +
                              " needs the admin key (ductile keygen's "
                              "admin.key; the CLI reads it with --keys)"));
  }

  switch (h.type()) {
    case wire::REGISTER:
      return HandleRegister(identity, key, message.member_key_name(), h);
    case wire::HEARTBEAT:
      return HandleHeartbeat(identity, h);
    case wire::CHECKPOINT:
      return checkpoints_.HandleRequest(identity, h);
    case wire::CHECKPOINT_ACK:
      return checkpoints_.HandleAck(h);
    case wire::CHECKPOINT_DONE:
      return checkpoints_.HandleDone(h);
    case wire::RECOVER_ACK:
      if (recovery_.HandleAck(h, membership_.Joining())) {
        // A rollback that just finished restarts the checkpoint interval
        // and lets in the workers that registered meanwhile.
        checkpoints_.RestartInterval();
        membership_.AdmitAfterRollback();
      }
      return;
    case wire::GET_ROUTING:
      return routing_.HandleGet(identity, h);
    case wire::CREATE_TABLE:
      return tables_.HandleCreate(identity, h);
    case wire::TABLE_CREATE_ACK:
      return tables_.HandleCreateAck(h);
    case wire::ROUTING_ACK:
      return routing_.HandleAck(h);
    case wire::WORKERS_ACK:
      return membership_.HandleWorkersAck(h);
    case wire::SET_CONSISTENCY:
      return tables_.HandleSetConsistency(identity, h);
    case wire::CONSISTENCY_ACK:
      return tables_.HandleConsistencyAck(h);
    case wire::GET_TABLE:
      return tables_.HandleGet(identity, h);
    case wire::BARRIER:
      return barriers_.HandleBarrier(identity, h);
    case wire::FINISH:
      return HandleFinish(identity, h);
    case wire::LEAVE:
      return HandleLeave(identity, h);
    case wire::DRAIN:
      if (h.role() == wire::ROLE_SERVER) return HandleDrainServer(identity, h);
      return membership_.Drain(identity, h);
    case wire::MIGRATE_DONE:
      return migrations_.HandleDone(h);
    case wire::DATA_CLAIM:
      return HandleDataClaim(identity, h);
    case wire::STATUS: {
      wire::Header reply;
      reply.set_type(wire::CONTROL_REPLY);
      reply.set_seq(h.seq());
      *reply.mutable_cluster() = ClusterStateNow();
      return out_.SendStateless(identity, reply);
    }
    case wire::RESIZE:
      return HandleResize(identity, h);
    case wire::MEMBER_EXIT:
      return HandleMemberExit(identity, h);
    case wire::SHUTDOWN:
      out_.Reply(identity, h.seq(), Status::Ok());
      LOG(INFO) << "coordinator: shutdown requested";
      return BeginShutdown();
    default:
      return out_.Reply(
          identity, h.seq(),
          InvalidArgumentError("the coordinator does not take message type " +
                               std::to_string(h.type())));
  }
}

void CoordinatorNode::HandleHeartbeat(const std::string& identity,
                                      const wire::Header& h) {
  Member* m = membership_.Heartbeat(identity, h);
  if (m == nullptr) return;
  recovery_.ResendIfBehind(*m, h.generation());
  if (m->role == wire::ROLE_SERVER) {
    // A server that hears nothing for its coordinator_timeout_ms stops.
    // The answer tells of no change: it goes out even while the state
    // cannot be saved.
    wire::Header alive;
    alive.set_type(wire::HEARTBEAT);
    alive.set_job_noise_scale(state_.JobNoiseScale());
    out_.SendStateless(identity, alive);
    checkpoints_.OnServerClock(m->counters.min_clock());
    m->backups_synced_epoch = h.backups_synced_epoch();
    NoteBackupsWhole();
    if (m->rejoining) Rejoin(*m, h);
  }
}

void CoordinatorNode::NoteBackupsWhole() {
  if (options_.replicas < 2 || state_.routing.empty()) return;
  const bool whole = state_.SlotsWithoutCopy() == 0;
  if (whole && !backups_whole_) {
    LOG(INFO) << "coordinator: every slot has a backup with a whole copy "
                 "again (routing epoch "
              << state_.routing.epoch() << ")";
  }
  backups_whole_ = whole;
}

void CoordinatorNode::StartRecovery(const std::string& why) {
  if (state_.routing.empty() || ctx_.shutting_down) return;
  checkpoints_.Fail(AbortedError("a server failed: " + why),
                    /*counts=*/false);
  migrations_.AbortAll(AbortedError("the job is rolling back: " + why));
  // Every wait of the abandoned timeline ends now.
  barriers_.AbortAll(AbortedError("the job is rolling back to a checkpoint"));
  recovery_.Start(why);
}

void CoordinatorNode::BeginShutdown() {
  if (ctx_.shutting_down) return;
  ctx_.shutting_down = true;
  // Moves under way end; a drain waiting for its server's linger is
  // answered (its slots had moved).
  migrations_.AbortAll(UnavailableError("the cluster is shutting down"));
  membership_.AnnounceShutdown();
  barriers_.AbortAll(UnavailableError("cluster shut down"));
  shutdown_at_ = env_->Now() + kShutdownFlush;
  shutdown_deadline_ =
      env_->Now() + milliseconds(ctx_.options.heartbeat_timeout_ms);
  for (const auto& [id, m] : ctx_.state.servers) {
    if (!m.dead && !m.left() && m.identity.empty()) {
      LOG(INFO) << "coordinator: server " << id
                << " not heard from since this coordinator started; it is "
                   "told of the shutdown when it reconnects";
    }
  }
}

}  // namespace ductile
