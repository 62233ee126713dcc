// One user call in flight (a push, pull, or control request) and the
// reference count that decides when it is done.
//
// Invariant: `outstanding_` counts what still holds the operation open:
// one per request part awaiting a reply, one per frame ZeroMQ still reads in
// place from the caller's memory, plus one held by the dispatcher while it
// is still adding parts. The operation is done exactly when it drops to 0;
// only then may the caller reuse its buffers. The first error reported wins.
//
// Thread-safe: parts complete on the client's I/O thread, frames are
// released on ZeroMQ's threads, and Wait() runs on the caller's.
#ifndef DUCTILE_CLIENT_OPERATION_H_
#define DUCTILE_CLIENT_OPERATION_H_

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "ductile/status.h"

namespace ductile::internal {

class Operation {
 public:
  Operation() = default;
  virtual ~Operation() = default;

  // Adds `n` holders.
  void Hold(int n = 1) { outstanding_.fetch_add(n, std::memory_order_relaxed); }
  // Drops a holder, recording `status` if it is the first error.
  void Release(const Status& status = Status::Ok());
  // Records an error without dropping a holder.
  void Fail(const Status& status);

  Status Wait();
  bool done() const { return done_.load(std::memory_order_acquire); }
  // True once an error has been recorded (the op will fail).
  bool failed() const { return failed_.load(std::memory_order_acquire); }

 private:
  std::atomic<int> outstanding_{0};
  std::atomic<bool> done_{false};
  std::atomic<bool> failed_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  Status status_;  // guarded by mu_
};

}  // namespace ductile::internal

#endif  // DUCTILE_CLIENT_OPERATION_H_
