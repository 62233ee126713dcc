// Writes a server's checkpoint versions into its store, beside the request
// thread: the request thread copies the rows changed since the last cut
// into a job (the pause a cut costs it) and hands it over; the store's
// write and freeze run on a background thread of the Env's, and the
// outcome waits there until the request thread takes it. Where the Env
// has no background thread (the simulation) the job runs in line, inside
// Start, so its outcome is ready when Start returns.
//
// One write at a time: Start only when busy() is false. The store belongs
// to the job from Start until its outcome is taken (TakeDone or Wait), and
// to the request thread otherwise (store()).
//
// Thread safety: every method is the request thread's; the job runs on the
// background thread, and the two meet only in the outcome (mu_) and the
// hand-over of the store that Start and the outcome's taking order.
//
//   CheckpointWriter writer(env, std::move(store), wakeup);
//   writer.Start(std::move(job));       // returns at once
//   ...
//   if (auto done = writer.TakeDone()) { ... done->status ... }
#ifndef DUCTILE_SERVER_CHECKPOINT_WRITER_H_
#define DUCTILE_SERVER_CHECKPOINT_WRITER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ductile/status.h"
#include "env/env.h"
#include "storage/checkpoint_store.h"
#include "util/mutex.h"

namespace ductile {

// What one checkpoint writes: everything the request thread copied at the
// cut, so that the job reads nothing the request thread changes after.
struct CheckpointJob {
  int64_t clock = 0;
  uint64_t epoch = 0;
  uint64_t generation = 0;
  std::vector<TableRecord> tables;
  // Rows changed since the last version (CheckpointStore::WriteCheckpoint).
  std::vector<EntryRecord> changed;
  // Rows to delete from the store: `evicted` and the request thread's
  // pending deletes, none of them in `changed`.
  std::vector<std::pair<TableId, Key>> deleted;
  // The rows evicted since the last version, and the pending deletes taken
  // (given back to the request thread if the write fails).
  std::vector<std::pair<TableId, Key>> evicted;
  std::vector<std::pair<TableId, Key>> pending_deletes;
  // The admission filters' counts of the slots changed since the last
  // version (counted changed again if the write fails).
  std::vector<FilterRecord> counts;
  std::string blob;
  // Versions after this one and before `clock` belong to rounds that
  // failed: they are dropped first, so that they do not count among the
  // newest the store keeps.
  int64_t last_complete = -1;
  // Set: the store starts over first, keeping these versions
  // (CheckpointStore::StartOver).
  std::optional<std::vector<int64_t>> start_over;
  // Payload bytes (values and state), for the estimate of a wait.
  uint64_t bytes = 0;
};

struct CheckpointOutcome {
  Status status;
  // The job's start-over was done (its failure fails the write).
  bool started_over = false;
  double write_ms = 0;  // by the Env's clock
  // The job, given back. On success its `changed` rows are freed (on the
  // background thread); on failure they are kept, to be counted changed
  // again.
  std::unique_ptr<CheckpointJob> job;
};

class CheckpointWriter {
 public:
  // `wakeup`, if set, is called on the background thread as each outcome
  // is ready (the request thread then takes it); it must be thread-safe.
  CheckpointWriter(Env* env, std::unique_ptr<CheckpointStore> store,
                   std::function<void()> wakeup);
  // Waits for the write in flight, if any (its outcome is dropped).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // A job started and its outcome not taken yet.
  bool busy() const { return busy_; }
  // Whether jobs run on a background thread (false: in line, in Start).
  bool background() const { return thread_ != nullptr; }
  // Requires !busy().
  void Start(std::unique_ptr<CheckpointJob> job);
  // The outcome of the job started, once it is ready; then busy() is false.
  std::optional<CheckpointOutcome> TakeDone();
  // Blocks until the job started is done and takes its outcome. Requires
  // busy().
  CheckpointOutcome Wait();
  // The store, while no job has it. Requires !busy().
  CheckpointStore* store();

 private:
  // The job's work, on the background thread (or in line).
  CheckpointOutcome Run(std::unique_ptr<CheckpointJob> job);

  Env* const env_;
  // The job's from Start until its outcome is taken, else the request
  // thread's (not guarded: the hand-over is ordered by the thread's queue
  // and by mu_).
  const std::unique_ptr<CheckpointStore> store_;
  const std::function<void()> wakeup_;
  bool busy_ = false;  // request thread

  Mutex mu_;
  CondVar done_;
  std::optional<CheckpointOutcome> outcome_ GUARDED_BY(mu_);

  // Last: destroyed (its tasks run, its thread joined) before the members
  // the job uses.
  std::unique_ptr<BackgroundThread> thread_;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_CHECKPOINT_WRITER_H_
