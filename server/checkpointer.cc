#include "server/checkpointer.h"

#include <algorithm>
#include <chrono>

#include "glog/logging.h"
#include "proto/codec.h"
#include "proto/table_config.h"

namespace ductile {

using std::chrono::milliseconds;

Status Checkpointer::Open(const std::string& state_dir, int32_t server_id,
                          int keep_checkpoints, int64_t disk_reserve_mb) {
  server_id_ = server_id;
  if (state_dir.empty()) return Status::Ok();
  store_dir_ = state_dir + "/server-" + std::to_string(server_id);
  CheckpointStoreOptions o;
  o.dir = store_dir_;
  // One more than the complete versions to keep: the version being
  // written belongs to a round that may still fail, and must not push a
  // complete one out (versions of failed rounds are dropped at the next
  // write).
  o.keep_last = keep_checkpoints + 1;
  o.min_free_bytes = static_cast<uint64_t>(disk_reserve_mb) << 20;
  Result<std::unique_ptr<CheckpointStore>> store = env_->OpenCheckpointStore(o);
  if (!store.ok()) {
    return Status(
        store.status().code(),
        "server " + std::to_string(server_id) +
            " cannot open its checkpoint store: " + store.status().message());
  }
  writer_ =
      std::make_unique<CheckpointWriter>(env_, std::move(*store), wakeup_);
  return Status::Ok();
}

bool Checkpointer::Holds(int64_t clock) const {
  if (prepare_above_ && clock > *prepare_above_) return true;
  return !pending_.empty() && clock >= pending_.begin()->first;
}

void Checkpointer::Hold(InMessage message, int64_t client) {
  held_.push_back(std::move(message));
  held_clients_.insert(client);
  counters_->Set(&ServerCounters::held_pushes, held_.size());
}

std::vector<InMessage> Checkpointer::TakeHeld() {
  std::vector<InMessage> held = std::move(held_);
  held_.clear();
  held_clients_.clear();
  counters_->Set(&ServerCounters::held_pushes, 0);
  return held;
}

void Checkpointer::Prepare(const wire::Header& prepare, uint64_t generation) {
  wire::Header ack;
  ack.set_type(wire::CHECKPOINT_ACK);
  ack.set_member_id(server_id_);
  ack.set_change_id(prepare.change_id());
  ack.set_generation(generation);
  if (!writer_) {
    StatusToWire(FailedPreconditionError(
                     "server " + std::to_string(server_id_) +
                     " keeps no checkpoints (it was started without a "
                     "state directory)"),
                 &ack);
  } else if (prepare.generation() != generation) {
    StatusToWire(
        AbortedError("server " + std::to_string(server_id_) +
                     " is at generation " + std::to_string(generation)),
        &ack);
  } else {
    // Pushes beyond every push let through so far wait until the
    // coordinator has picked the checkpoint's clock (above the largest of
    // all servers'), so none lands on the wrong side of the cut.
    prepare_above_ = max_push_clock_;
    prepare_id_ = prepare.change_id();
    prepare_deadline_ = env_->Now() + milliseconds(std::max<int64_t>(
                                          prepare.timeout_ms(), 1000));
    ack.set_clock(max_push_clock_);
  }
  link_->Send(ack);
}

bool Checkpointer::Commit(const wire::Header& commit, uint64_t generation) {
  const int64_t clock = commit.clock();
  const bool ours = prepare_above_ && prepare_id_ == commit.change_id() &&
                    commit.generation() == generation;
  // (Not at or below a write still in flight either: the coordinator gave
  // up on that round, and its report must not stand for this one.)
  const bool valid = ours && clock > *prepare_above_ &&
                     clock > last_checkpoint_ &&
                     !(writing() && clock <= writing_clock_);
  if (ours) {
    // The round is over either way: its holds end here.
    prepare_above_.reset();
    if (valid) {
      last_complete_checkpoint_ = commit.data_clock();
      pending_[clock] =
          env_->Now() +
          milliseconds(std::max<int64_t>(
              commit.timeout_ms() > 0 ? commit.timeout_ms() : 30000, 1000));
    }
  }
  if (!valid && clock >= 0) {
    // The prepare expired (pushes beyond it were let through since) or
    // belongs to another round: this cut cannot be taken here.
    Report(clock, generation, commit.change_id(),
           AbortedError("server " + std::to_string(server_id_) +
                        " cannot take the checkpoint at clock " +
                        std::to_string(clock) +
                        " (its prepare expired or was replaced)"));
  }
  return ours;
}

bool Checkpointer::Expire(const Laggards& laggards, uint64_t generation) {
  const TimePoint now = env_->Now();
  bool release = false;
  if (prepare_above_ && now >= prepare_deadline_) {
    LOG(WARNING) << "server " << server_id_
                 << ": no checkpoint clock from the coordinator in time; "
                    "releasing the held pushes";
    prepare_above_.reset();
    release = true;
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    // A cut expires on its deadline, also while it waits for a write in
    // flight: a store that hangs fails the rounds (and says why) rather
    // than holding the pushes beyond them for good.
    if (now < it->second) {
      ++it;
      continue;
    }
    const int64_t clock = it->first;
    const std::string why =
        writing() ? "the checkpoint write at clock " +
                        std::to_string(writing_clock_) + " was still in flight"
                  : "workers " + laggards(clock) + " did not reach clock " +
                        std::to_string(clock);
    LOG(WARNING) << "server " << server_id_
                 << ": dropping the checkpoint at clock " << clock << ": "
                 << why << " in time";
    Report(clock, generation, 0,
           DeadlineExceededError("server " + std::to_string(server_id_) + ": " +
                                 why + " in time"));
    it = pending_.erase(it);
    release = true;
  }
  return release;
}

std::optional<Checkpointer::TimePoint> Checkpointer::NextDeadline() const {
  std::optional<TimePoint> next;
  if (prepare_above_) next = prepare_deadline_;
  for (const auto& [clock, deadline] : pending_) {
    if (!next || deadline < *next) next = deadline;
  }
  return next;
}

bool Checkpointer::DueByClock(int64_t server_clock) {
  if (checkpoint_every_ <= 0 || !writer_) return false;
  const int64_t due =
      std::max<int64_t>(last_checkpoint_, 0) + checkpoint_every_;
  if (server_clock < due || due_reported_ >= due) return false;
  due_reported_ = due;
  return true;
}

std::optional<int64_t> Checkpointer::TakeDue(int64_t server_clock,
                                             bool workers_live) {
  if (pending_.empty() || writing()) return std::nullopt;
  const int64_t clock = pending_.begin()->first;
  // Every live worker has finished clock - 1, and the BSP clocks below it
  // are applied (the server applies them first): the state is the cut.
  if (workers_live && server_clock < clock) return std::nullopt;
  pending_.erase(pending_.begin());
  return clock;
}

void Checkpointer::Write(int64_t clock, TableSet& tables, uint64_t epoch,
                         uint64_t generation) {
  auto job = std::make_unique<CheckpointJob>();
  job->clock = clock;
  job->epoch = epoch;
  job->generation = generation;
  job->blob = "generation=" + std::to_string(generation);
  job->last_complete = last_complete_checkpoint_;
  job->start_over = start_over_;
  // No heartbeat goes out while copying the changes (and writing them,
  // where that is done in line): say for how long at most first, at a
  // pessimistic 10 MB/s (a crash meanwhile is noticed after that).
  tables.ForEach([&](TableId, ParameterTable& t) {
    job->bytes += t.changed_bytes() + 32 * t.changed();
  });
  link_->Heartbeat(/*busy_ms=*/2000 + static_cast<int64_t>(job->bytes / 10000));
  write_bytes_ = job->bytes;
  writing_clock_ = clock;
  tables.ForEach([&](TableId id, ParameterTable& t) {
    job->tables.push_back({id, ToWire(t.options(), id).SerializeAsString()});
    t.TakeChanges(&job->changed);
    t.TakeEvicted(&job->evicted);
    t.TakeCountChanges(&job->counts);  // the admission filters', by slot
  });
  // Rows evicted since the last checkpoint, and the pending deletes, are
  // deleted from the store: each key once, and none that this checkpoint
  // writes (a pending delete's row may have come back since: a slot moved
  // away and back).
  job->pending_deletes = std::move(pending_deletes_);
  pending_deletes_.clear();
  job->deleted = job->pending_deletes;
  job->deleted.insert(job->deleted.end(), job->evicted.begin(),
                      job->evicted.end());
  if (!job->deleted.empty()) {
    std::vector<std::pair<TableId, Key>>& deleted = job->deleted;
    std::sort(deleted.begin(), deleted.end());
    deleted.erase(std::unique(deleted.begin(), deleted.end()), deleted.end());
    std::set<std::pair<TableId, Key>> written;
    for (const EntryRecord& e : job->changed) written.emplace(e.table, e.key);
    std::erase_if(deleted, [&](const auto& k) { return written.count(k) > 0; });
  }
  writer_->Start(std::move(job));
  link_->Heartbeat(0);  // done: silence means death again
  // In line, it is written already.
  if (std::optional<CheckpointOutcome> done = writer_->TakeDone()) {
    Finish(std::move(*done), tables);
  }
}

bool Checkpointer::Poll(TableSet& tables) {
  if (!writing()) return false;
  std::optional<CheckpointOutcome> done = writer_->TakeDone();
  if (!done) return false;
  Finish(std::move(*done), tables);
  return true;
}

Status Checkpointer::FinishWrite(TableSet& tables) {
  if (!writing()) return Status::Ok();
  // No heartbeat goes out while waiting: at most the whole write, at the
  // pessimistic 10 MB/s of Write.
  link_->Heartbeat(/*busy_ms=*/2000 +
                   static_cast<int64_t>(write_bytes_ / 10000));
  std::optional<CheckpointOutcome> done = writer_->TakeDone();
  if (!done) {
    LOG(INFO) << "server " << server_id_
              << ": waiting for the checkpoint write in flight";
    done = writer_->Wait();
  }
  const Status s = done->status;
  Finish(std::move(*done), tables);
  link_->Heartbeat(0);  // done: silence means death again
  return s;
}

void Checkpointer::Finish(CheckpointOutcome outcome, TableSet& tables) {
  const CheckpointJob& job = *outcome.job;
  if (outcome.started_over) start_over_.reset();
  const Status& s = outcome.status;
  if (s.ok()) {
    last_checkpoint_ = job.clock;
    counters_->Set(&ServerCounters::checkpoint_clock, job.clock);
    counters_->Add(&ServerCounters::checkpoints_written);
    LOG(INFO) << "server " << server_id_ << ": checkpoint at clock "
              << job.clock << " written in " << outcome.write_ms << " ms";
  } else {
    // Not written: the changes belong to the next attempt. Rows changed
    // again since are listed already; rows gone since need nothing.
    for (const EntryRecord& e : job.changed) {
      if (ParameterTable* t = tables.Find(e.table)) t->MarkChanged(e.key);
    }
    for (const auto& [table, key] : job.evicted) {
      if (ParameterTable* t = tables.Find(table)) t->MarkEvicted(key);
    }
    for (const FilterRecord& f : job.counts) {
      if (ParameterTable* t = tables.Find(f.table))
        t->MarkCountsChanged(f.slot);
    }
    pending_deletes_.insert(pending_deletes_.end(), job.pending_deletes.begin(),
                            job.pending_deletes.end());
    LOG(ERROR) << "server " << server_id_ << ": checkpoint at clock "
               << job.clock << " failed: " << s;
  }
  Report(job.clock, job.generation, 0, s);
}

Status Checkpointer::StartOver(std::vector<int64_t> keep, int64_t newest) {
  CHECK(!writing()) << "starting over with a checkpoint write in flight";
  pending_deletes_.clear();
  Reset(newest);
  if (writer_ == nullptr) return Status::Ok();
  start_over_ = std::move(keep);
  Status s = writer_->store()->StartOver(*start_over_);
  if (s.ok()) start_over_.reset();
  return s;
}

void Checkpointer::Reset(int64_t clock) {
  CHECK(!writing()) << "a rollback with a checkpoint write in flight";
  start_over_.reset();
  prepare_above_.reset();
  pending_.clear();
  last_checkpoint_ = clock > 0 ? clock : -1;
  last_complete_checkpoint_ = last_checkpoint_;
  due_reported_ = 0;
  max_push_clock_ = clock - 1;
  counters_->Set(&ServerCounters::checkpoint_clock, last_checkpoint_);
}

void Checkpointer::Report(int64_t clock, uint64_t generation, uint64_t round,
                          const Status& status) {
  wire::Header done;
  done.set_type(wire::CHECKPOINT_DONE);
  done.set_member_id(server_id_);
  if (round != 0) done.set_change_id(round);
  done.set_clock(clock);
  done.set_generation(generation);
  StatusToWire(status, &done);
  link_->Send(done);
}

}  // namespace ductile
