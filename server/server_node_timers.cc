// A server's timers: its heartbeat, and their companions run by Step() (a pause
// of the server noticed, the coordinator's silence, idle clients' windows,
// parked pulls past their deadline, checkpoint cuts and requests held too
// long), and parked pulls answered with an error.
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "glog/logging.h"
#include "server/server_node.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;

// A gap between two runs of the timers this much longer than the heartbeat
// interval is a pause of this server's own.
constexpr std::chrono::milliseconds kPauseForgiven{1000};

}  // namespace

void ServerNode::FailParked(
    std::vector<ConsistencyController::ParkedPull> pulls,
    const std::function<Status(const ConsistencyController::ParkedPull&)>&
        why) {
  if (pulls.empty()) return;
  for (ConsistencyController::ParkedPull& p : pulls) {
    const Status s = why(p);
    std::vector<InMessage> one;
    one.push_back(std::move(p.message));
    replies_.FailAll(std::move(one), s, /*applied=*/p.duplicate);
  }
  counters_.Set(&ServerCounters::parked_pulls, consistency_.parked());
}

RequestDedup::TimePoint ServerNode::DedupNow() const {
  return env_->Now() - paused_;
}

void ServerNode::SweepIdleClients() {
  RequestDedup& dedup = admission_.dedup();
  const TimePoint now = DedupNow();
  dedup.SetNow(now);
  if (now >= next_window_sweep_) {
    // Often enough that a client is forgotten soon after it may be.
    next_window_sweep_ = now + std::chrono::seconds(std::max<int64_t>(
                                   15, options_.client_idle_expiry_s / 4));
    const size_t dropped =
        dedup.Sweep(now, std::chrono::seconds(options_.client_idle_expiry_s));
    if (dropped > 0) {
      counters_.Add(&ServerCounters::window_expired, dropped);
      VLOG(1) << "server " << id_ << ": forgot the exactly-once windows of "
              << dropped << " idle client(s)";
    }
  }
  counters_.Set(&ServerCounters::window_clients, dedup.clients());
}

void ServerNode::HandleTimers() {
  const TimePoint now = env_->Now();
  // The timers run at least once per heartbeat interval; a longer gap is
  // time this server did not run (stopped, starved, or busy writing), and
  // the coordinator's answer to the heartbeat it just sent is on its way.
  const auto expected = milliseconds(heartbeat_interval_ms_) + kPauseForgiven;
  if (last_timers_ != TimePoint{} && now - last_timers_ > expected) {
    last_heard_ += now - last_timers_ - milliseconds(heartbeat_interval_ms_);
    // Nor did clients' requests reach it meanwhile: their windows' idle
    // time does not count this.
    paused_ += now - last_timers_ - milliseconds(heartbeat_interval_ms_);
  }
  last_timers_ = now;
  if (options_.coordinator_timeout_ms > 0 &&
      now - last_heard_ >= milliseconds(options_.coordinator_timeout_ms)) {
    // Gone for good, or the job ended while this server was cut off.
    failure_ = UnavailableError(
        "server " + std::to_string(id_) + " heard nothing from the " +
        "coordinator at " + options_.coordinator_address + " for " +
        std::to_string(options_.coordinator_timeout_ms) +
        " ms (coordinator_timeout_ms): stopping");
    LOG(ERROR) << failure_.message();
    shut_down_ = true;
    return;
  }
  SweepIdleClients();
  FailParked(consistency_.TakeExpired(env_->Now()), [this](const auto& p) {
    return DeadlineExceededError(
        "pull at clock " + std::to_string(p.clock) + " needs server clock " +
        std::to_string(p.required) + ", which is " +
        std::to_string(consistency_.server_clock()) + "; waiting for workers " +
        consistency_.Laggards(p.required));
  });
  const auto laggards = [this](int64_t clock) {
    return consistency_.Laggards(clock);
  };
  if (checkpointer_.Expire(laggards, generation_)) ReplayCheckpointHeld();
  if (!behind_.empty() && env_->Now() - behind_since_ >= kBehindWait) {
    // The newer routing did not come: they are answered (and sent again).
    refuse_behind_ = true;
    ReplayBehind();
    refuse_behind_ = false;
  }
}

void ServerNode::Heartbeat(int64_t busy_ms) {
  shm_regions_.ForgetExited();
  wire::Header hb;
  hb.set_type(wire::HEARTBEAT);
  hb.set_member_id(id_);
  hb.set_incarnation(incarnation_);  // which process under that id
  hb.set_generation(generation_);
  if (busy_ms != 0) {
    hb.set_busy(true);
    hb.set_timeout_ms(std::max<int64_t>(busy_ms, 0));
  }
  const RouterRefusals refused = router_->refusals();
  counters_.Set(&ServerCounters::refused_connections, refused.connections);
  counters_.Set(&ServerCounters::failed_accepts, refused.failed_accepts);
  counters_.Set(&ServerCounters::failed_handshakes, refused.failed_handshakes);
  counters_.Set(&ServerCounters::refused_replies, refused.refused_replies);
  counters_.Set(&ServerCounters::dropped_replies, refused.dropped_replies);
  CountersToWire(counters_.Snapshot(), hb.mutable_counters());
  hb.set_backups_synced_epoch(replicator_->synced_epoch());
  // A new interval's peak starts from the run under way (heartbeats sent
  // within an interval, for a long request or a checkpoint, start none).
  if (env_->Now() >= run_peak_until_) {
    busy_run_peak_ = run_ > 0 ? run_ - 1 : 0;
    counters_.Set(&ServerCounters::busy_run_peak, busy_run_peak_);
    run_peak_until_ = env_->Now() + milliseconds(heartbeat_interval_ms_);
  }
  Send(hb);  // a lost heartbeat is not an error
  next_heartbeat_ = env_->Now() + milliseconds(heartbeat_interval_ms_);
}

}  // namespace ductile
