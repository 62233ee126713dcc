// A worker's side of rollbacks and checkpoints (docs/fault_tolerance.md):
// the generation its requests carry, a rollback announced and not yet
// taken by the caller, the resume states it recorded per clock, the
// checkpoint whose resume state it still owes the coordinator, and the
// live workers as last published.
//
// When the coordinator announces a rollback (RESUME), every call fails
// with kAborted until the caller takes it with Await(), which moves the
// generation and says where to resume. Once it announces that the job is
// shutting down (SHUTDOWN_NOTICE), every call fails with kUnavailable,
// for good.
//
// Thread-safe: the I/O thread announces rollbacks and checkpoints, caller
// threads record states and take rollbacks.
#ifndef DUCTILE_CLIENT_RECOVERY_STATE_H_
#define DUCTILE_CLIENT_RECOVERY_STATE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ductile/client.h"
#include "proto/ductile.pb.h"
#include "util/mutex.h"

namespace ductile {

// What every call of a worker fails with once the job is shutting down
// (the coordinator's words to a worker that registers then, too).
Status ShutDownError();

class RecoveryState {
 public:
  // The generation the caller has resumed in (stamped on every request).
  uint64_t generation() const { return generation_.load(); }

  // ---- I/O thread.
  // True when a RESUME is news (a rollback newer than any known).
  bool IsNews(const wire::Header& resume) const EXCLUDES(mu_);
  // Makes a rollback pending (the caller takes it with Await). Announce
  // only once everything in flight of the old timeline has failed: a caller
  // that takes the rollback must not see its next call failed by it.
  void Announce(const wire::Header& resume) EXCLUDES(mu_);
  // A committed checkpoint at `clock`: true when this worker's resume
  // state for it is to be reported now (it keeps none, has one for that
  // clock, or is past it); otherwise it is reported once the worker gets
  // there (OnClock, Record).
  bool OnCheckpointCommit(int64_t clock, uint64_t generation,
                          int64_t worker_clock) EXCLUDES(mu_);
  void SetLiveWorkers(std::vector<int32_t> live) EXCLUDES(mu_);
  // The coordinator asks this worker to leave (a drain).
  void RequestLeave() { leave_requested_.store(true); }
  // The coordinator says the job is shutting down (it ended, or was asked
  // to end): wakes a caller waiting in Await().
  void MarkShutDown() EXCLUDES(mu_);
  // Registration: the job's generation when this worker joined it.
  void Join(uint64_t generation) { generation_.store(generation); }

  // ---- Caller threads.
  // kAborted while a rollback is announced and not taken; kUnavailable
  // (ShutDownError) once the job is shutting down.
  Status RefuseIfPending() const EXCLUDES(mu_);
  // Waits up to `timeout_ms` for an announced rollback and takes it; fails
  // at once with ShutDownError when the job is shutting down.
  Result<Client::Recovery> Await(int64_t timeout_ms) EXCLUDES(mu_);
  // The worker's clock reached `clock`: returns the checkpoint clock whose
  // resume state is now due (the worker went past it without recording
  // one). *pending: a rollback is announced (nothing is to be sent).
  std::optional<int64_t> OnClock(int64_t clock, bool* pending) EXCLUDES(mu_);
  // Records the resume state at `clock`; returns the checkpoint clock now
  // due, if any.
  std::optional<int64_t> Record(int64_t clock, std::string state) EXCLUDES(mu_);
  // The state recorded at `clock` ("" if none).
  std::string StateAt(int64_t clock) const EXCLUDES(mu_);
  std::vector<int32_t> live_workers() const EXCLUDES(mu_);
  bool leave_requested() const { return leave_requested_.load(); }
  bool shut_down() const { return shut_down_.load(); }

 private:
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> leave_requested_{false};
  std::atomic<bool> shut_down_{false};
  mutable Mutex mu_;
  CondVar cv_;
  std::optional<Client::Recovery> pending_ GUARDED_BY(mu_);
  std::map<int64_t, std::string> states_ GUARDED_BY(mu_);
  bool uses_resume_state_ GUARDED_BY(mu_) = false;
  // A committed checkpoint whose state this worker has not reported yet.
  std::optional<int64_t> report_clock_ GUARDED_BY(mu_);
  std::vector<int32_t> live_workers_ GUARDED_BY(mu_);
};

}  // namespace ductile

#endif  // DUCTILE_CLIENT_RECOVERY_STATE_H_
