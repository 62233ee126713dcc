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
  store_ = std::move(*store);
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
  if (!store_) {
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
  const bool valid =
      ours && clock > *prepare_above_ && clock > last_checkpoint_;
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
    if (now < it->second) {
      ++it;
      continue;
    }
    const int64_t clock = it->first;
    const std::string who = laggards(clock);
    LOG(WARNING) << "server " << server_id_
                 << ": dropping the checkpoint at clock " << clock
                 << ": workers " << who << " did not reach it in time";
    Report(clock, generation, 0,
           DeadlineExceededError("server " + std::to_string(server_id_) +
                                 ": workers " + who + " did not reach clock " +
                                 std::to_string(clock) + " in time"));
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
  if (checkpoint_every_ <= 0 || !store_) return false;
  const int64_t due =
      std::max<int64_t>(last_checkpoint_, 0) + checkpoint_every_;
  if (server_clock < due || due_reported_ >= due) return false;
  due_reported_ = due;
  return true;
}

std::optional<int64_t> Checkpointer::TakeDue(int64_t server_clock,
                                             bool workers_live) {
  if (pending_.empty()) return std::nullopt;
  const int64_t clock = pending_.begin()->first;
  // Every live worker has finished clock - 1, and the BSP clocks below it
  // are applied (the server applies them first): the state is the cut.
  if (workers_live && server_clock < clock) return std::nullopt;
  pending_.erase(pending_.begin());
  return clock;
}

Status Checkpointer::Write(int64_t clock, TableSet& tables, uint64_t epoch,
                           uint64_t generation) {
  if (start_over_) {
    // What the store holds belongs to the time before this server
    // rejoined: the changes below would be written on top of it.
    Status s = store_->StartOver(*start_over_);
    if (!s.ok()) {
      s = Status(s.code(),
                 "the store cannot drop the state it kept from "
                 "before this server rejoined the job: " +
                     s.message());
      LOG(ERROR) << "server " << server_id_ << ": checkpoint at clock " << clock
                 << " failed: " << s;
      Report(clock, generation, 0, s);
      return s;
    }
    start_over_.reset();
  }
  const TimePoint start = env_->Now();
  // No heartbeat goes out while copying and writing the changes: say for
  // how long at most first, at a pessimistic 10 MB/s (a crash meanwhile is
  // noticed after that).
  uint64_t bytes = 0;
  tables.ForEach([&](TableId, ParameterTable& t) {
    bytes += t.changed_bytes() + 32 * t.changed();
  });
  link_->Heartbeat(/*busy_ms=*/2000 + static_cast<int64_t>(bytes / 10000));
  std::vector<TableRecord> records;
  std::vector<EntryRecord> changed;
  std::vector<std::pair<TableId, Key>> evicted;
  std::vector<FilterRecord> counts;  // the admission filters', by slot
  tables.ForEach([&](TableId id, ParameterTable& t) {
    records.push_back({id, ToWire(t.options(), id).SerializeAsString()});
    t.TakeChanges(&changed);
    t.TakeEvicted(&evicted);
    t.TakeCountChanges(&counts);
  });
  // Rows evicted since the last checkpoint are deleted from the store
  // (each key once, and none that this checkpoint writes).
  std::vector<std::pair<TableId, Key>> deleted = pending_deletes_;
  deleted.insert(deleted.end(), evicted.begin(), evicted.end());
  if (!evicted.empty()) {
    std::sort(deleted.begin(), deleted.end());
    deleted.erase(std::unique(deleted.begin(), deleted.end()), deleted.end());
    std::set<std::pair<TableId, Key>> written;
    for (const EntryRecord& e : changed) written.emplace(e.table, e.key);
    std::erase_if(deleted, [&](const auto& k) { return written.count(k) > 0; });
  }
  // Versions of rounds that failed will never be restored: drop them, or
  // they would push complete ones out of the newest keep_last.
  Result<std::vector<int64_t>> versions = store_->ListCheckpoints();
  if (versions.ok()) {
    for (int64_t v : *versions) {
      if (v > last_complete_checkpoint_ && v < clock) {
        Status dropped = store_->DropCheckpoint(v);
        if (!dropped.ok()) {
          LOG(WARNING) << "server " << server_id_ << ": " << dropped;
        }
      }
    }
  }
  Status s =
      store_->WriteCheckpoint(clock, epoch, records, changed, deleted, counts,
                              "generation=" + std::to_string(generation));
  if (s.ok()) {
    pending_deletes_.clear();
    last_checkpoint_ = clock;
    counters_->Set(&ServerCounters::checkpoint_clock, clock);
    counters_->Add(&ServerCounters::checkpoints_written);
  } else {
    // Not written: the changes belong to the next attempt.
    for (const EntryRecord& e : changed) {
      if (ParameterTable* t = tables.Find(e.table)) t->MarkChanged(e.key);
    }
    for (const auto& [table, key] : evicted) {
      if (ParameterTable* t = tables.Find(table)) t->MarkEvicted(key);
    }
    for (const FilterRecord& f : counts) {
      ParameterTable* t = tables.Find(f.table);
      if (t != nullptr) t->MarkCountsChanged(f.slot);
    }
  }
  link_->Heartbeat(0);  // done: silence means death again
  const double ms =
      std::chrono::duration<double, std::milli>(env_->Now() - start).count();
  if (s.ok()) {
    LOG(INFO) << "server " << server_id_ << ": checkpoint at clock " << clock
              << " written in " << ms << " ms";
  } else {
    LOG(ERROR) << "server " << server_id_ << ": checkpoint at clock " << clock
               << " failed: " << s;
  }
  Report(clock, generation, 0, s);
  return s;
}

Status Checkpointer::StartOver(std::vector<int64_t> keep, int64_t newest) {
  pending_deletes_.clear();
  Reset(newest);
  if (store_ == nullptr) return Status::Ok();
  start_over_ = std::move(keep);
  Status s = store_->StartOver(*start_over_);
  if (s.ok()) start_over_.reset();
  return s;
}

void Checkpointer::Reset(int64_t clock) {
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
