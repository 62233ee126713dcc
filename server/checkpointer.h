// A server's part of consistent-cut checkpoints (docs/fault_tolerance.md).
//
// A round: the coordinator's prepare makes the server hold every push
// beyond the largest push timestamp it has let through (reported in the
// ack); the commit names the cut C above every server's report. Pushes of
// timestamp >= C are then held until the state at C is written, which
// happens once the server clock reaches C (every live worker has sent
// CLOCK C). A prepare with no commit within its timeout, and a cut the
// workers do not reach in time, release the held pushes.
//
// Writing a cut: the request thread copies the rows changed since the
// previous cut (the pause a cut costs it), and a CheckpointWriter writes
// and freezes the version beside it, on a background thread where the Env
// has one (in line in the simulation). The pushes held for the cut are
// let through once the copy is taken; the version counts only once its
// write is done and reported (CHECKPOINT_DONE), so a crash meanwhile loses
// nothing the job could restore. One write at a time: a cut due while one
// is in flight waits for it (its pushes stay held, until it is written or
// its deadline passes), and so do rollbacks.
//
// It decides and writes; the server replays what it held (TakeHeld), tells
// it the server clock, and lets it take finished writes (Poll). Not
// thread-safe: owned by the request thread.
#ifndef DUCTILE_SERVER_CHECKPOINTER_H_
#define DUCTILE_SERVER_CHECKPOINTER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "env/env.h"
#include "proto/ductile.pb.h"
#include "server/checkpoint_writer.h"
#include "server/coordinator_link.h"
#include "server/live_counters.h"
#include "server/table_set.h"
#include "storage/checkpoint_store.h"
#include "transport/message.h"

namespace ductile {

class Checkpointer {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // "1 (at clock 4)": the live workers below a clock (for messages).
  using Laggards = std::function<std::string(int64_t clock)>;

  Checkpointer(Env* env, CoordinatorLink* link, LiveCounters* counters)
      : env_(env), link_(link), counters_(counters) {}

  // Called from the writer's thread when a write is done, for the thread
  // that owns this to wake up and Poll (thread-safe). Set before Open.
  void set_wakeup(std::function<void()> wakeup) { wakeup_ = std::move(wakeup); }
  // Opens <state_dir>/server-<id>; without a state_dir the server keeps no
  // checkpoints (enabled() is false).
  Status Open(const std::string& state_dir, int32_t server_id,
              int keep_checkpoints, int64_t disk_reserve_mb = 64);
  bool enabled() const { return writer_ != nullptr; }
  const std::string& store_dir() const { return store_dir_; }
  // The store; only while no write is in flight (FinishWrite first).
  CheckpointStore* store() { return writer_ ? writer_->store() : nullptr; }
  void set_server_id(int32_t id) { server_id_ = id; }
  // Clocks between checkpoints the coordinator asks for (0: on demand or
  // by time only).
  void set_checkpoint_every(int64_t clocks) { checkpoint_every_ = clocks; }

  // ---- Pushes.
  // A worker's push of timestamp `clock` was let through.
  void NotePush(int64_t clock) {
    max_push_clock_ = std::max(max_push_clock_, clock);
  }
  // True when a worker's push of timestamp `clock` lies beyond a cut.
  bool Holds(int64_t clock) const;
  // True while a push of `client` is held: its later requests wait behind
  // it, or a pull would read without the client's own write.
  bool HoldsClient(int64_t client) const {
    return held_clients_.count(client) > 0;
  }
  void Hold(InMessage message, int64_t client);
  // The held pushes, in arrival order, taken out (to handle again: those
  // still beyond a cut are held again).
  std::vector<InMessage> TakeHeld();

  // ---- Rounds. Each returns true when the held pushes should be handled
  // again.
  void Prepare(const wire::Header& prepare, uint64_t generation);
  bool Commit(const wire::Header& commit, uint64_t generation);
  bool Expire(const Laggards& laggards, uint64_t generation);
  std::optional<TimePoint> NextDeadline() const;

  // True once (the first time) the server clock passes the next
  // checkpoint by clock: the server then heartbeats at once, so the
  // coordinator starts the round without waiting for the next heartbeat.
  bool DueByClock(int64_t server_clock);
  // The next committed cut that can be written now (the server clock
  // reached it, or no worker is live, and no write is in flight), taken
  // out.
  std::optional<int64_t> TakeDue(int64_t server_clock, bool workers_live);
  // Takes the state at `clock` (a copy of the rows changed since the last
  // cut) and starts writing it; the held pushes may then be replayed. Once
  // written it is reported to the coordinator: here already where writes
  // run in line, else at the Poll or FinishWrite that takes it. Requires
  // !writing() (TakeDue gives no cut while it is).
  void Write(int64_t clock, TableSet& tables, uint64_t epoch,
             uint64_t generation);
  // A write started and not yet taken.
  bool writing() const { return writer_ && writer_->busy(); }
  // Takes the write in flight if it is done: reports it, and if it failed,
  // counts its rows changed again in `tables`. True if one was taken (a
  // due cut may be written now).
  bool Poll(TableSet& tables);
  // Waits for the write in flight, if any, and takes it (as Poll); its
  // status (OK if there was none). For what needs the store or the cut
  // state back (rollbacks, starting over) and for tests. Tells the
  // coordinator first that no heartbeat may come for as long as the write
  // may take.
  Status FinishWrite(TableSet& tables);

  // ---- Rollbacks.
  int64_t last_checkpoint() const { return last_checkpoint_; }
  // Keys the store holds but the server no longer owns (after a restore):
  // deleted from the store at the next write.
  std::vector<std::pair<TableId, Key>>& pending_deletes() {
    return pending_deletes_;
  }
  // The state is now the one at `clock` (0: the start); rounds under way
  // are abandoned. Requires !writing().
  void Reset(int64_t clock);
  // The server rejoins the job with no keys; the job's newest complete
  // checkpoint is at `newest` (0: none). The store keeps only the versions
  // at `keep` and empties its working state, now or, if that fails (a
  // read-only disk), before the next write, which fails until it is done.
  // Requires !writing().
  Status StartOver(std::vector<int64_t> keep, int64_t newest);

 private:
  // Reports a write taken from the writer; a failed one's rows count as
  // changed (and evicted) again.
  void Finish(CheckpointOutcome outcome, TableSet& tables);
  void Report(int64_t clock, uint64_t generation, uint64_t round,
              const Status& status);

  Env* const env_;
  CoordinatorLink* const link_;
  LiveCounters* const counters_;
  int32_t server_id_ = -1;
  std::function<void()> wakeup_;
  // The store's owner; null without a state_dir.
  std::unique_ptr<CheckpointWriter> writer_;
  uint64_t write_bytes_ = 0;    // the last write's payload (CheckpointJob)
  int64_t writing_clock_ = -1;  // the last write's clock
  std::string store_dir_;
  int64_t checkpoint_every_ = 0;

  // Largest timestamp of a worker's push let through (applied or
  // buffered): a checkpoint's clock must lie above it on every server.
  int64_t max_push_clock_ = -1;
  int64_t last_checkpoint_ = -1;  // clock of the last one written
  // The newest checkpoint the coordinator knows complete: versions above
  // it not being written belong to rounds that failed.
  int64_t last_complete_checkpoint_ = -1;
  int64_t due_reported_ = 0;  // the checkpoint by clock last reported due
  // Between a prepare and its commit: pushes beyond this are held.
  std::optional<int64_t> prepare_above_;
  uint64_t prepare_id_ = 0;
  TimePoint prepare_deadline_{};
  // Committed cuts not yet written, each with the time by which the
  // workers must reach it (past that it is dropped: under async a
  // straggler could hold pushes past their senders' deadlines).
  std::map<int64_t, TimePoint> pending_;
  std::vector<InMessage> held_;     // arrival order
  std::set<int64_t> held_clients_;  // the clients of held_
  std::vector<std::pair<TableId, Key>> pending_deletes_;
  // The versions to keep while the store still has to start over.
  std::optional<std::vector<int64_t>> start_over_;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_CHECKPOINTER_H_
