#include "coordinator/recovery_manager.h"

#include "glog/logging.h"
#include "proto/codec.h"

namespace ductile {

using std::chrono::milliseconds;

void RecoveryManager::Load() {
  const ClusterState& state = ctx_.state;
  if (state.recovering) {
    // Finish the rollback once the loop runs (members reconnect first).
    interrupted_ = true;
    return;
  }
  if (state.generation == 0) return;
  // Workers that missed the last rollback's RESUME get it again.
  wire::Header resume;
  resume.set_type(wire::RESUME);
  resume.set_generation(state.generation);
  resume.set_clock(state.resume_clock);
  state.routing.ToWire(resume.mutable_routing());
  last_resume_ = resume;
  for (const auto& e : state.catalog) {
    if (e.clock() != state.resume_clock) continue;
    for (const auto& w : e.workers()) {
      last_resume_states_[w.worker_id()] = w.resume_state();
    }
  }
}

bool RecoveryManager::TakeInterruptedByRestart() {
  const bool was = interrupted_;
  interrupted_ = false;
  return was;
}

void RecoveryManager::Start(const std::string& why) {
  ClusterState& state = ctx_.state;
  if (state.routing.empty() || ctx_.shutting_down) return;
  ++state.generation;
  const int64_t clock = std::max<int64_t>(state.LastCheckpointClock(), 0);
  const std::set<int32_t> live = state.LiveServers();
  Round round;
  round.clock = clock;
  state.recovering = true;
  // The data plan goes back with the model: batches pushed at or after
  // the clock are to do again, and nobody holds any.
  state.data_plan.Restore(clock > 0 ? state.catalog.back().data_plan()
                                    : wire::DataPlanState());
  if (live.empty()) {
    LOG(ERROR) << "coordinator: " << why
               << "; no server is left: waiting for one to register";
    round_ = std::move(round);
    return;
  }
  // The dead servers' slots go to the survivors, least loaded first. The
  // servers' backup copies are of the abandoned timeline: each slot runs
  // with none from now on.
  const int32_t moved = state.routing.Reassign(live);
  state.routing.ClearBackups();
  state.routing.SetServers(state.LiveEndpoints());
  LOG(WARNING) << "coordinator: " << why << "; rolling back to "
               << (clock > 0
                       ? "the checkpoint at clock " + std::to_string(clock)
                       : std::string("the start (no checkpoint yet)"))
               << ", generation " << state.generation << ", " << moved
               << " slot(s) moved to the survivors";
  wire::Header m;
  m.set_type(wire::RECOVER);
  m.set_generation(state.generation);
  m.set_clock(clock);
  state.routing.ToWire(m.mutable_routing());
  for (const auto& [name, t] : state.tables) *m.add_tables() = t;
  if (clock > 0) {
    for (const auto& source : state.catalog.back().sources()) {
      *m.add_sources() = source;
    }
  }
  state.AddLiveWorkers(&m);
  round.round = AckRound(
      m, live, ctx_.Now() + milliseconds(ctx_.options.checkpoint_timeout_ms));
  round_ = std::move(round);
  // The outbox sends this once the new generation is durable: a
  // coordinator killed right after restarts into this rollback, not into
  // the old generation.
  ctx_.SendTo(state.servers, live, m);
}

bool RecoveryManager::HandleAck(const wire::Header& h,
                                const std::set<int32_t>& joining) {
  ClusterState& state = ctx_.state;
  if (!round_ || h.generation() != state.generation) return false;
  if (!round_->round.Awaits(h.member_id())) return false;
  Status s = StatusFromWire(h);
  if (!s.ok() && !h.checkpoint_unreadable()) {
    // The server could not take it (its own store failed): the checkpoint
    // may be good, and dropping it would lose every clock since. Keep it
    // and ask the server again later.
    const int failures = ++failures_[h.member_id()];
    const int64_t wait_ms = BackoffMs(failures);
    const auto at = ctx_.Now() + milliseconds(wait_ms);
    round_->retry_at[h.member_id()] = at;
    // The round waits for the retry, not for its old deadline.
    round_->round.set_deadline(
        std::max(round_->round.deadline(),
                 at + milliseconds(ctx_.options.checkpoint_timeout_ms)));
    problem_ = "server " + std::to_string(h.member_id()) +
               " cannot take the checkpoint at " +
               (round_->clock > 0 ? "clock " + std::to_string(round_->clock)
                                  : std::string("the start")) +
               ": " + s.message();
    LOG(ERROR) << "coordinator: " << problem_ << " (failure " << failures
               << "); the checkpoint is kept, and the server is asked again in "
               << wait_ms << " ms";
    return false;
  }
  if (!s.ok()) {
    if (!state.catalog.empty()) {
      // That checkpoint cannot be restored: fall back to the one before.
      LOG(WARNING)
          << "coordinator: the checkpoint at clock "
          << state.catalog.back().clock() << " cannot be restored (server "
          << h.member_id() << ": " << s.message() << "); falling back to "
          << (state.catalog.size() > 1
                  ? "the one at clock " +
                        std::to_string(
                            state.catalog[state.catalog.size() - 2].clock())
                  : std::string("the start"));
      state.catalog.pop_back();
      Start("restore failed");
    } else {
      LOG(ERROR) << "coordinator: server " << h.member_id()
                 << " cannot restart from the start: " << s;
    }
    return false;
  }
  round_->round.Ack(h.member_id());
  if (!round_->round.complete()) return false;
  Finish(joining);
  return true;
}

void RecoveryManager::Finish(const std::set<int32_t>& joining) {
  ClusterState& state = ctx_.state;
  const int64_t clock = round_->clock;
  // Checkpoints after the one restored belong to the abandoned timeline.
  while (!state.catalog.empty() && state.catalog.back().clock() > clock) {
    state.catalog.pop_back();
  }
  std::map<int32_t, std::string> states;
  if (clock > 0 && !state.catalog.empty()) {
    for (const auto& w : state.catalog.back().workers()) {
      states[w.worker_id()] = w.resume_state();
    }
  }
  wire::Header resume;
  resume.set_type(wire::RESUME);
  resume.set_generation(state.generation);
  resume.set_clock(clock);
  state.routing.ToWire(resume.mutable_routing());
  for (int32_t id : state.LiveWorkers()) {
    if (joining.count(id) > 0) continue;
    auto it = states.find(id);
    resume.set_resume_state(it == states.end() ? std::string() : it->second);
    ctx_.out.Send(state.workers[id].identity, resume);
  }
  resume.clear_resume_state();
  last_resume_ = resume;
  last_resume_states_ = std::move(states);
  LOG(INFO) << "coordinator: every server restored clock " << clock
            << "; workers resume (generation " << state.generation << ")";
  round_.reset();
  failures_.clear();
  problem_.clear();
  state.recovering = false;
  state.resume_clock = clock;
}

void RecoveryManager::RetryFailed() {
  if (!round_) return;
  const auto now = ctx_.Now();
  for (auto it = round_->retry_at.begin(); it != round_->retry_at.end();) {
    const int32_t id = it->first;
    if (now < it->second) {
      ++it;
      continue;
    }
    it = round_->retry_at.erase(it);
    auto m = ctx_.state.servers.find(id);
    if (!round_->round.Awaits(id) || m == ctx_.state.servers.end() ||
        m->second.dead || m->second.identity.empty()) {
      continue;  // gone (a new rollback follows) or not reconnected yet
    }
    LOG(INFO) << "coordinator: asking server " << id
              << " again to restore the checkpoint at clock " << round_->clock;
    ctx_.out.Send(m->second.identity, round_->round.message());
  }
}

void RecoveryManager::Postpone(std::chrono::steady_clock::duration pause) {
  if (round_) round_->round.Postpone(pause);
}

bool RecoveryManager::Expired() const {
  return round_ && !round_->round.complete() &&
         ctx_.RoundExpired(round_->round);
}

void RecoveryManager::ResendIfBehind(const Member& member,
                                     uint64_t member_generation) {
  const ClusterState& state = ctx_.state;
  if (member_generation >= state.generation) return;
  // A member behind the job's generation missed the rollback's message
  // (lost with a coordinator that restarted): send it again.
  if (member.role == wire::ROLE_SERVER) {
    if (round_ && round_->round.Awaits(member.id)) {
      ctx_.out.Send(member.identity, round_->round.message());
    }
  } else if (!round_ && last_resume_ &&
             last_resume_->generation() == state.generation) {
    wire::Header resume = *last_resume_;
    auto it = last_resume_states_.find(member.id);
    if (it != last_resume_states_.end()) resume.set_resume_state(it->second);
    ctx_.out.Send(member.identity, resume);
  }
}

void RecoveryManager::Resend(const Member& member) {
  if (round_ && round_->round.Awaits(member.id)) {
    ctx_.out.Send(member.identity, round_->round.message());
  }
}

}  // namespace ductile
