// One user call in flight (a push, pull, clock, notice or control request)
// and the reference count that decides when it is done.
//
// Invariant: `outstanding_` counts what still holds the operation open:
// one per request part awaiting a reply, one per frame the transport still
// reads in place from the caller's memory, plus one held by the dispatcher
// while it is still adding parts. The operation is done exactly when it
// drops to 0; only then may the caller reuse its buffers. The first error
// reported wins. OnDone() runs exactly once, on the thread that drops the
// count to 0, before any waiter is woken.
//
// Thread-safe: parts complete on the client's I/O thread, frames are
// released on the transport's threads, and Wait() runs on the caller's.
#ifndef DUCTILE_CLIENT_OPERATION_H_
#define DUCTILE_CLIENT_OPERATION_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <variant>
#include <vector>

#include "ductile/status.h"
#include "ductile/table.h"
#include "proto/ductile.pb.h"
#include "util/mutex.h"

namespace ductile {

class StatsRecorder;

namespace internal {

class Operation {
 public:
  Operation() = default;
  virtual ~Operation() = default;

  // Adds `n` holders.
  void Hold(int n = 1) { outstanding_.fetch_add(n, std::memory_order_relaxed); }
  // Drops a holder, recording `status` if it is the first error.
  void Release(const Status& status = Status::Ok()) EXCLUDES(mu_);
  // Records an error without dropping a holder.
  void Fail(const Status& status) EXCLUDES(mu_);
  // Drops the submitter's holder with `status`, an error found before
  // anything was sent (refused()).
  void Refuse(const Status& status) EXCLUDES(mu_) {
    refused_.store(true, std::memory_order_relaxed);  // before done_
    Release(status);
  }

  // Blocks until done; time spent blocked goes to `stats` if set
  // (SetWaitStats), which the operation keeps alive: a waiter may outlive
  // the client.
  Status Wait() EXCLUDES(mu_);
  // Callers' waits on this operation count as waits on pulls (`pull`) or
  // pushes, in `stats` (ClientStats::push_wait_us, pull_wait_us).
  void SetWaitStats(std::shared_ptr<StatsRecorder> stats, bool pull) {
    wait_stats_ = std::move(stats);
    wait_is_pull_ = pull;
  }
  bool done() const { return done_.load(std::memory_order_acquire); }
  // True once an error has been recorded (the op will fail).
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Refused before anything was sent (Refuse); meaningful once done().
  bool refused() const { return refused_.load(std::memory_order_relaxed); }

 protected:
  // Called once as the operation becomes done, before done() is true or
  // Wait() returns; `ok`: no error was recorded. What it writes is seen by
  // every waiter. It must not block, nor touch this operation's count.
  virtual void OnDone(bool ok) { static_cast<void>(ok); }

 private:
  Status WaitDone() EXCLUDES(mu_);

  std::shared_ptr<StatsRecorder> wait_stats_;
  bool wait_is_pull_ = false;
  std::atomic<int> outstanding_{0};
  std::atomic<bool> done_{false};
  std::atomic<bool> failed_{false};
  std::atomic<bool> refused_{false};
  Mutex mu_;
  CondVar cv_;
  Status status_ GUARDED_BY(mu_);
};

}  // namespace internal

using SteadyTime = std::chrono::steady_clock::time_point;

// A push, pull or push-pull call: borrows the caller's spans.
struct DataOperation : internal::Operation {
  wire::MessageType type = wire::PUSH;
  TableId table = 0;
  uint32_t width = 0;  // 0: variable, see offsets
  std::span<const Key> keys;
  std::span<const float> values;
  std::span<float> out;
  std::span<const uint32_t> lengths;
  std::vector<uint64_t> offsets;  // variable width: float offset of key i
  int64_t clock = 0;
  uint64_t generation = 0;   // the job's generation when submitted
  int32_t batch_weight = 1;  // pushes: Client::SetPushWeight when submitted
  float rate_factor = 1.0f;  // pushes: Client::SetRateFactor when submitted
  uint64_t order = 0;        // I/O thread: the call's place among all calls
  SteadyTime deadline;
  // Largest wait at a server among this call's replies so far (I/O thread):
  // the parts wait side by side, so the call waited that long.
  uint64_t blocked_us = 0;
  // Install pulled values into the cache (fetch issued at cache_mark).
  bool cache_install = false;
  uint64_t cache_mark = 0;
  // Pushes: the table refuses NaN and infinities; `values` were found
  // finite already (checked once, when the push is first split over
  // several servers).
  bool reject_non_finite = false;
  bool values_checked = false;

  uint64_t offset(size_t i) const { return width ? i * width : offsets[i]; }
  uint32_t length(size_t i) const { return width ? width : lengths[i]; }
};

// Clock(): tell every server this worker's new clock.
struct ClockOperation : internal::Operation {
  int64_t clock = 0;
  uint64_t generation = 0;
};

// A message to the coordinator that needs no answer (a worker's resume
// state for a checkpoint).
struct NoticeOperation : internal::Operation {
  wire::Header message;
};

// OK, or kInvalidArgument naming the key of `op`'s first NaN or infinity
// (a push refused before anything is sent). Marks the values checked.
Status CheckFiniteValues(DataOperation& op, const std::string& table_name);

// A request to the coordinator; `reply` is filled before completion.
struct ControlOperation : internal::Operation {
  wire::Header request;
  wire::Header reply;
  SteadyTime deadline;
  // Barrier and Finish are sent again while unanswered: a coordinator that
  // restarted lost them (the coordinator takes a resent one as the same).
  bool resend = false;
  SteadyTime resend_at{};
  // Runs on the I/O thread with an OK answer, before the operation
  // completes; its status becomes the operation's.
  std::function<Status(const wire::Header&)> on_reply;
};

// What the I/O thread is given to do.
using AnyOperation = std::variant<
    std::shared_ptr<DataOperation>, std::shared_ptr<ClockOperation>,
    std::shared_ptr<NoticeOperation>, std::shared_ptr<ControlOperation>>;

}  // namespace ductile

#endif  // DUCTILE_CLIENT_OPERATION_H_
