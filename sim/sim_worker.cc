// The simulated worker's state machine (sim/sim_cluster_parts.h).
#include "sim/sim_cluster_parts.h"

namespace ductile::sim::internal {

Worker::Worker(Cluster* cluster, int index)
    : cluster_(*cluster),
      index_(index),
      joiner_(index >= cluster->options().workers),
      end_(cluster->end_of(index)) {
  const SimOptions& o = cluster_.options();
  env_ = std::make_unique<SimEnv>(&cluster_.net(), &cluster_.disk(),
                                  "worker-" + std::to_string(index));
  pid_ = env_->ProcessId();
  for (const SimOptions::WorkerKill& k : o.worker_kills) {
    if (k.worker == index) stop_at_ = k.at_clock;
  }
  ClientOptions c;
  c.coordinator_address = kCoordinatorAddress;
  c.prefer_ipc = false;
  c.enable_cache = o.cache;
  c.connect_timeout_ms = o.time_limit_ms;
  c.request_timeout_ms = 60000;
  c.requested_worker_id = index;
  client_ = std::make_unique<ClientImpl>(c, env_.get(), /*own_thread=*/false);
  Status s = client_->Start();
  if (!s.ok())
    cluster_.Fail("worker " + std::to_string(index) + ": " + s.ToString());
  own_key_ = {static_cast<Key>(index)};
  all_keys_.resize(cluster_.total_workers());
  std::iota(all_keys_.begin(), all_keys_.end(), Key{0});
  out_.assign(all_keys_.size(), -1.0f);
  leaves_ = end_ < o.clocks && stop_at_ < 0;
}

std::string Worker::Where() const {
  static const char* kNames[] = {
      "register",   "create table", "start barrier", "step",  "barrier",
      "final read", "finish",       "recover",       "leave", "done"};
  return "worker " + std::to_string(index_) + " at clock " +
         std::to_string(clock_) + " (" + kNames[static_cast<int>(phase_)] + ")";
}

void Worker::Failed(const Status& s, const char* what) {
  if (s.code() == StatusCode::kAborted) {
    // A rollback: take it once announced.
    phase_ = Phase::kRecover;
    issued_ = false;
    return;
  }
  cluster_.Fail(Where() + ": " + what + ": " + s.ToString());
}

void Worker::CheckRead() {
  const SimOptions& o = cluster_.options();
  const Consistency& c = o.consistency;
  ++cluster_.result().reads_checked;
  for (int w = 0; w < cluster_.total_workers(); ++w) {
    const int64_t value = static_cast<int64_t>(out_[w]);
    std::ostringstream what;
    what << Where() << " read counter[" << w << "] = " << out_[w];
    if (static_cast<float>(value) != out_[w]) {
      return cluster_.Fail(what.str() + ", not a count");
    }
    // A read is served in its request's generation (a server still in an
    // older one serves that one's state).
    const int64_t sent = cluster_.sent(generation_)[w];
    if (value > sent) {
      return cluster_.Fail(what.str() + ", above the " + std::to_string(sent) +
                           " pushes worker " + std::to_string(w) +
                           " sent: a push applied twice");
    }
    // Its own push of this clock is made before the read.
    const counter_oracle::Range range =
        counter_oracle::ReadRange(c, cluster_.Span(w, generation_), clock_,
                                  /*own=*/w == index_,
                                  /*pushed_at_clock=*/true);
    if (range.exact() && value != range.least) {
      return cluster_.Fail(what.str() +
                           (w == index_ ? ": its own counter must be exactly "
                                        : ": BSP reads at clock " +
                                              std::to_string(clock_) +
                                              " see exactly ") +
                           std::to_string(range.least));
    }
    if (!range.exact() && value < range.least) {
      return cluster_.Fail(what.str() + ": SSP(" + std::to_string(c.staleness) +
                           ") needs at least " + std::to_string(range.least));
    }
  }
}

void Worker::CheckFinal() {
  const SimOptions& o = cluster_.options();
  for (int w = 0; w < cluster_.total_workers(); ++w) {
    const int64_t want = cluster_.CountBefore(w, o.clocks, generation_);
    if (out_[w] != static_cast<float>(want)) {
      std::ostringstream what;
      what << Where() << ": after the final barrier counter[" << w
           << "] = " << out_[w] << ", not " << want
           << " (a push lost or applied twice)";
      return cluster_.Fail(what.str());
    }
  }
}

void Worker::Advance() {
  const SimOptions& o = cluster_.options();
  while (!cluster_.failed()) {
    switch (phase_) {
      case Phase::kRegister: {
        if (!issued_) {
          control_ = client_->StartRegister();
          issued_ = true;
        }
        if (!control_->done()) return;
        if (Status s = control_->Wait(); !s.ok()) {
          return cluster_.Fail(Where() + ": registration: " + s.ToString());
        }
        issued_ = false;
        // A joiner starts at the job's clock, in its generation.
        clock_ = client_->clock();
        generation_ = client_->generation();
        if (joiner_) ++cluster_.result().joined;
        if (!joiner_ && clock_ != 0) {
          return cluster_.Fail(Where() + ": a worker of the job's start " +
                               "registered at clock " + std::to_string(clock_));
        }
        int64_t resumed_at = 0;
        if (generation_ > 0 &&
            !cluster_.ResumeClockOf(generation_, &resumed_at)) {
          return cluster_.Fail(Where() + ": admitted in generation " +
                               std::to_string(generation_) +
                               ", which the coordinator does not know");
        }
        cluster_.start_of(index_) = clock_;
        cluster_.starts(generation_, resumed_at)[index_] = clock_;
        cluster_.sent(generation_, resumed_at)[index_] = clock_;
        phase_ = Phase::kCreateTable;
        break;
      }
      case Phase::kCreateTable:
        if (!issued_) {
          TableOptions t;
          t.name = "counters";
          t.value_width = 1;
          t.rule = UpdateRule::kAdd;
          t.consistency = o.consistency;
          control_ = client_->StartCreateTable(t);
          issued_ = true;
        }
        if (!control_->done()) return;
        issued_ = false;
        // A rollback meanwhile (a server died while the workers started):
        // the start begins again once it is taken.
        if (Status s = control_->Wait(); !s.ok()) {
          return Failed(s, "create table");
        }
        table_ = control_->reply.table().id();
        // A joiner comes after the start barrier.
        started_ = joiner_;
        phase_ = joiner_ ? Phase::kStep : Phase::kStartBarrier;
        break;
      case Phase::kStartBarrier:
        // Every worker is in the job before anyone steps.
        if (!issued_) {
          control_ = client_->StartBarrier(o.time_limit_ms);
          issued_ = true;
        }
        if (!control_->done()) return;
        issued_ = false;
        if (Status s = control_->Wait(); !s.ok()) {
          return Failed(s, "start barrier");
        }
        started_ = true;
        phase_ = Phase::kStep;
        break;
      case Phase::kStep: {
        if (stopped()) return;  // until it is killed
        if (clock_ >= end_) {
          phase_ = leaves_ ? Phase::kLeave : Phase::kBarrier;
          break;
        }
        if (!issued_ && o.pause_ms > 0 && clock_ == o.pause_at_clock &&
            !paused_) {
          if (!pause_until_) {
            pause_until_ = cluster_.now() + milliseconds(o.pause_ms);
          }
          if (cluster_.now() < *pause_until_) return;
          paused_ = true;
        }
        if (!issued_) {
          // Push, then read everything, on one connection per server:
          // the read sees the push.
          push_ = o.push_pull ? client_->PushPullAsync(table_, own_key_, one_,
                                                       own_out_, {})
                              : client_->PushAsync(table_, own_key_, one_, {});
          ++cluster_.sent(generation_)[index_];
          pull_ = client_->PullAsync(table_, all_keys_, out_, {});
          issued_ = true;
        }
        if (!push_.done() || !pull_.done()) return;
        issued_ = false;
        if (Status s = push_.Wait(); !s.ok()) return Failed(s, "push");
        if (Status s = pull_.Wait(); !s.ok()) return Failed(s, "pull");
        CheckRead();
        client_->Clock();
        ++clock_;
        break;
      }
      case Phase::kBarrier:
        // Everyone to join is in before the end: a joiner admitted after
        // the final barrier would push under the final reads.
        if (!cluster_.all_joined()) return;
        if (!issued_) {
          control_ = client_->StartBarrier(o.time_limit_ms);
          issued_ = true;
        }
        if (!control_->done()) return;
        issued_ = false;
        if (Status s = control_->Wait(); !s.ok()) return Failed(s, "barrier");
        phase_ = Phase::kFinalRead;
        break;
      case Phase::kFinalRead:
        if (!issued_) {
          pull_ = client_->PullAsync(table_, all_keys_, out_, {});
          issued_ = true;
        }
        if (!pull_.done()) return;
        issued_ = false;
        if (Status s = pull_.Wait(); !s.ok()) return Failed(s, "final pull");
        CheckFinal();
        phase_ = o.idle_after_ms > 0 ? Phase::kIdle : Phase::kFinish;
        break;
      case Phase::kIdle:
        if (!cluster_.idle_over()) return;
        phase_ = Phase::kFinish;
        break;
      case Phase::kFinish:
        if (!issued_) {
          control_ = client_->StartFinish();
          issued_ = true;
        }
        if (!control_->done()) return;
        issued_ = false;
        // The job may shut down before the answer arrives (the coordinator
        // shuts it down once this worker's request is in): done, as
        // Client::Finish() says.
        if (Status s = control_->Wait(); !s.ok() && !client_->shutting_down()) {
          return Failed(s, "finish");
        }
        phase_ = Phase::kDone;
        break;
      case Phase::kRecover: {
        Result<Client::Recovery> r = client_->AwaitRecovery(0);
        if (!r.ok()) return;  // not announced yet
        ++cluster_.result().rollbacks;
        cluster_.result().resume_clocks.push_back(r->clock);
        // A worker that joined after the checkpoint redoes the clocks
        // from it.
        const int64_t start = cluster_.starts(generation_, r->clock)[index_];
        clock_ = r->clock;
        generation_ = r->generation;
        int64_t& now = cluster_.starts(generation_, r->clock)[index_];
        now = start < 0 ? r->clock : std::min(start, r->clock);
        // The checkpoint holds exactly the pushes of the clocks before it.
        cluster_.sent(generation_, r->clock);
        // As StartUp in train/trainer.cc: a worker not past its start
        // starts again (its table, then the start barrier).
        phase_ = started_ ? Phase::kStep : Phase::kCreateTable;
        break;
        break;
      }
      case Phase::kLeave:
        if (!issued_) {
          control_ = client_->StartLeave();
          issued_ = true;
        }
        if (!control_->done()) return;
        issued_ = false;
        if (Status s = control_->Wait(); !s.ok() && !client_->shutting_down()) {
          return Failed(s, "leave");  // (as for finish above)
        }
        ++cluster_.result().left;
        phase_ = Phase::kDone;
        break;
      case Phase::kDone:
        return;
    }
  }
}

}  // namespace ductile::sim::internal
