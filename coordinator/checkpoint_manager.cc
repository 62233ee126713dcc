#include "coordinator/checkpoint_manager.h"

#include <algorithm>
#include <limits>

#include "glog/logging.h"
#include "proto/codec.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;

// How long servers hold pushes between a checkpoint's prepare and commit.
constexpr int64_t kPrepareHoldMs = 3000;
// How long servers hold pushes beyond a committed cut for the workers to
// reach it before dropping the checkpoint: below clients' request timeout
// (60 s by default), so a straggler under async fails the checkpoint, not
// the faster workers' pushes.
constexpr int64_t kCutHoldMs = 30000;

}  // namespace

void CheckpointManager::MaybeStart(bool on_demand) {
  ClusterState& state = ctx_.state;
  if (!state.durable() || round_ || state.recovering || ctx_.shutting_down ||
      state.routing.empty() || ctx_.migrating) {
    return;  // (a move's slots change owners under a checkpoint's catalog)
  }
  if (!on_demand && ctx_.Now() < retry_after_) return;  // backing off
  if (!on_demand) {
    // Nothing to save when no server clock moved since the last one.
    int64_t progress = -1;
    for (const auto& [id, m] : state.servers) {
      if (!m.dead) progress = std::max(progress, m.counters.min_clock());
    }
    if (progress <= state.LastCheckpointClock()) {
      last_started_ = ctx_.Now();
      return;
    }
  }
  Round round;
  round.id = next_round_++;
  wire::Header prepare;
  prepare.set_type(wire::CHECKPOINT_PREPARE);
  prepare.set_change_id(round.id);
  prepare.set_generation(state.generation);
  prepare.set_timeout_ms(kPrepareHoldMs);
  // A server with no slots (one that joined late, or came back after its
  // slots moved) has nothing to save.
  const std::set<int32_t> servers = state.ServersWithSlots();
  round.servers =
      AckRound(prepare, servers,
               ctx_.Now() + milliseconds(ctx_.options.checkpoint_timeout_ms));
  ctx_.SendTo(state.servers, servers, prepare);
  VLOG(1) << "coordinator: checkpoint round " << round.id << " prepared";
  round_ = std::move(round);
  last_started_ = ctx_.Now();
}

void CheckpointManager::HandleRequest(const std::string& identity,
                                      const wire::Header& h) {
  const ClusterState& state = ctx_.state;
  if (!state.durable()) {
    return ctx_.out.Reply(identity, h.seq(),
                          FailedPreconditionError(
                              "the coordinator keeps no checkpoints (start it "
                              "with a state directory)"));
  }
  if (state.recovering) {
    return ctx_.out.Reply(
        identity, h.seq(),
        UnavailableError("the job is rolling back to a checkpoint; retry"));
  }
  if (ctx_.migrating) {
    return ctx_.out.Reply(identity, h.seq(),
                          UnavailableError("slots are moving between servers; "
                                           "retry once they are in place"));
  }
  if (state.routing.empty()) {
    return ctx_.out.Reply(
        identity, h.seq(),
        UnavailableError("the servers have not all registered yet"));
  }
  MaybeStart(/*on_demand=*/true);
  if (!round_) {
    return ctx_.out.Reply(identity, h.seq(),
                          UnavailableError("the cluster is shutting down"));
  }
  round_->waiters.push_back({identity, h.seq()});
}

void CheckpointManager::Request(Callback done) {
  if (!ctx_.state.durable()) {
    return done(FailedPreconditionError(
        "the coordinator keeps no checkpoints (no state_dir)"));
  }
  MaybeStart(/*on_demand=*/true);
  if (!round_) {
    return done(UnavailableError(
        ctx_.state.recovering ? "the job is rolling back to a checkpoint"
        : ctx_.migrating      ? "slots are moving between servers; retry once "
                                "they are in place"
                              : "the cluster is not running"));
  }
  round_->callbacks.push_back(std::move(done));
}

void CheckpointManager::HandleAck(const wire::Header& h) {
  if (!round_ || round_->id != h.change_id() || round_->clock >= 0) return;
  if (!round_->servers.Awaits(h.member_id())) return;
  Status s = StatusFromWire(h);
  if (!s.ok()) {
    return Fail(Status(s.code(), "server " + std::to_string(h.member_id()) +
                                     ": " + s.message()));
  }
  if (h.clock() < -1 || h.clock() >= std::numeric_limits<int64_t>::max() / 2) {
    return Fail(InvalidArgumentError("server " + std::to_string(h.member_id()) +
                                     " reported an impossible clock " +
                                     std::to_string(h.clock())));
  }
  round_->max_clock = std::max(round_->max_clock, h.clock());
  round_->servers.Ack(h.member_id());
  if (round_->servers.complete()) Commit();
}

void CheckpointManager::Commit() {
  ClusterState& state = ctx_.state;
  // No server has let a push with a timestamp beyond max_clock through
  // since it was prepared: the cut at max_clock + 1 is one every server can
  // still take.
  const int64_t clock = std::max<int64_t>(
      {round_->max_clock + 1, state.LastCheckpointClock() + 1, 1});
  round_->clock = clock;
  wire::Header commit;
  commit.set_type(wire::CHECKPOINT_COMMIT);
  commit.set_change_id(round_->id);
  commit.set_clock(clock);
  commit.set_generation(state.generation);
  commit.set_data_clock(state.LastCheckpointClock());
  commit.set_timeout_ms(kCutHoldMs);
  const std::set<int32_t> servers = state.ServersWithSlots();
  const std::set<int32_t> workers = state.LiveWorkers();
  const auto deadline = round_->servers.deadline();
  round_->servers = AckRound(commit, servers, deadline);
  round_->workers = AckRound(commit, workers, deadline);
  ctx_.SendTo(state.servers, servers, commit);
  ctx_.SendTo(state.workers, workers, commit);
  VLOG(1) << "coordinator: checkpoint round " << round_->id << " at clock "
          << clock;
}

void CheckpointManager::HandleDone(const wire::Header& h) {
  if (h.role() == wire::ROLE_WORKER &&
      h.generation() == ctx_.state.generation) {
    // The data-plan batches it trained before the clock and had no claim
    // answered for yet: in the plan before the checkpoint records it.
    for (const wire::DataBatch& b : h.data_done()) {
      ctx_.state.data_plan.Done(h.member_id(), b.epoch(), b.batch(), b.clock());
    }
  }
  if (!round_ || round_->clock < 0 || h.clock() != round_->clock ||
      h.generation() != ctx_.state.generation) {
    return;
  }
  if (h.role() == wire::ROLE_WORKER) {
    if (!round_->workers.Ack(h.member_id())) return;
    round_->resume_states[h.member_id()] = h.resume_state();
  } else {
    if (!round_->servers.Awaits(h.member_id())) return;
    Status s = StatusFromWire(h);
    if (!s.ok()) {
      return Fail(Status(s.code(), "server " + std::to_string(h.member_id()) +
                                       ": " + s.message()));
    }
    round_->servers.Ack(h.member_id());
  }
  MaybeComplete();
}

void CheckpointManager::MaybeComplete() {
  if (!round_ || round_->clock < 0 || !round_->servers.complete() ||
      !round_->workers.complete()) {
    return;
  }
  ClusterState& state = ctx_.state;
  CatalogEntry entry;
  entry.set_clock(round_->clock);
  entry.set_generation(state.generation);
  state.routing.ToWire(entry.mutable_routing());
  std::map<int32_t, wire::CheckpointSource> sources;
  for (int32_t slot = 0; slot < state.routing.num_slots(); ++slot) {
    const int32_t owner = state.routing.owner(slot);
    wire::CheckpointSource& source = sources[owner];
    source.set_server_id(owner);
    source.add_slots(slot);
  }
  for (auto& [id, source] : sources) {
    auto m = state.servers.find(id);
    if (m != state.servers.end()) source.set_state_dir(m->second.state_dir);
    *entry.add_sources() = std::move(source);
  }
  for (const auto& [id, resume] : round_->resume_states) {
    auto* w = entry.add_workers();
    w->set_worker_id(id);
    w->set_resume_state(resume);
  }
  entry.set_written_unix_ms(ctx_.env->UnixMs());
  // Every batch pushed before the clock was reported done by now (in a
  // claim, or with its worker's report at this clock), so the plan
  // records exactly those.
  *entry.mutable_data_plan() = state.data_plan.At(round_->clock);
  state.data_plan.Forget(round_->clock);
  state.catalog.push_back(std::move(entry));
  // Only checkpoints every server still keeps can be restored.
  size_t keep = ClusterState::kMaxCatalog;
  for (const auto& [id, m] : state.servers) {
    if (!m.dead && m.keep_checkpoints > 0) {
      keep = std::min<size_t>(keep, m.keep_checkpoints);
    }
  }
  while (state.catalog.size() > keep)
    state.catalog.erase(state.catalog.begin());
  const int64_t clock = round_->clock;
  LOG(INFO) << "coordinator: checkpoint at clock " << clock << " complete";
  failures_in_a_row_ = 0;
  retry_after_ = {};
  problem_.clear();
  wire::Header reply;
  reply.set_type(wire::CONTROL_REPLY);
  reply.set_clock(clock);
  for (const Waiter& w : round_->waiters) {
    reply.set_seq(w.seq);
    ctx_.out.Send(w.identity, reply);
  }
  std::vector<Callback> callbacks = std::move(round_->callbacks);
  round_.reset();
  for (Callback& done : callbacks) done(clock);
}

void CheckpointManager::Fail(const Status& status, bool counts) {
  if (!round_) return;
  int64_t wait_ms = 0;
  if (counts) {
    ++failures_in_a_row_;
    wait_ms = BackoffMs(failures_in_a_row_);
    retry_after_ = ctx_.Now() + milliseconds(wait_ms);
    problem_ = std::to_string(failures_in_a_row_) +
               " checkpoint(s) failed in a row; the last: " + status.ToString();
  }
  LOG(WARNING) << "coordinator: checkpoint"
               << (round_->clock >= 0
                       ? " at clock " + std::to_string(round_->clock)
                       : std::string())
               << " failed: " << status
               << (counts ? "; the next one in " + std::to_string(wait_ms) +
                                " ms at the earliest"
                          : std::string());
  if (round_->clock < 0) {
    // Release the holds of the servers that prepared: a commit they cannot
    // take tells them the round is over.
    wire::Header commit;
    commit.set_type(wire::CHECKPOINT_COMMIT);
    commit.set_change_id(round_->id);
    commit.set_clock(-1);
    commit.set_generation(ctx_.state.generation);
    ctx_.SendTo(ctx_.state.servers, ctx_.state.LiveServers(), commit);
  }
  for (const Waiter& w : round_->waiters) {
    ctx_.out.Reply(w.identity, w.seq, status);
  }
  std::vector<Callback> callbacks = std::move(round_->callbacks);
  round_.reset();
  for (Callback& done : callbacks) done(status);
}

void CheckpointManager::Postpone(std::chrono::steady_clock::duration pause) {
  if (!round_) return;
  round_->servers.Postpone(pause);
  round_->workers.Postpone(pause);
}

void CheckpointManager::CheckTimers() {
  const auto now = ctx_.Now();
  if (round_ && ctx_.RoundExpired(round_->servers)) {
    Fail(DeadlineExceededError(
        "the checkpoint was not complete within " +
        std::to_string(ctx_.options.checkpoint_timeout_ms) + " ms"));
  }
  if (ctx_.options.checkpoint_interval_s > 0 &&
      now - last_started_ >=
          std::chrono::duration<double>(ctx_.options.checkpoint_interval_s)) {
    MaybeStart(/*on_demand=*/false);
  }
}

void CheckpointManager::OnServerClock(int64_t server_clock) {
  const int64_t every = ctx_.options.checkpoint_every_clocks;
  if (every > 0 &&
      server_clock >=
          std::max<int64_t>(ctx_.state.LastCheckpointClock(), 0) + every) {
    MaybeStart(/*on_demand=*/false);
  }
}

void CheckpointManager::ForgetGoneWorkers() {
  if (!round_ || round_->clock < 0) return;
  const std::set<int32_t> live = ctx_.state.LiveWorkers();
  for (int32_t id : std::set<int32_t>(round_->workers.awaiting())) {
    if (live.count(id) == 0) round_->workers.Forget(id);
  }
  MaybeComplete();
}

void CheckpointManager::Resend(const Member& member) {
  if (!round_) return;
  const AckRound& r =
      member.role == wire::ROLE_SERVER ? round_->servers : round_->workers;
  if (r.Awaits(member.id)) ctx_.out.Send(member.identity, r.message());
}

}  // namespace ductile
