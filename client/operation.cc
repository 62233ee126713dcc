#include "client/operation.h"

#include "ductile/client.h"

namespace ductile {
namespace internal {

void Operation::Fail(const Status& status) {
  if (status.ok()) return;
  MutexLock lock(&mu_);
  if (status_.ok()) status_ = status;
  failed_.store(true, std::memory_order_release);
}

void Operation::Release(const Status& status) {
  Fail(status);
  if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  {
    MutexLock lock(&mu_);
    done_.store(true, std::memory_order_release);
  }
  cv_.SignalAll();
}

Status Operation::Wait() {
  MutexLock lock(&mu_);
  while (!done_.load(std::memory_order_acquire)) cv_.Wait(&mu_);
  return status_;
}

}  // namespace internal

Handle::Handle(std::shared_ptr<internal::Operation> op) : op_(std::move(op)) {}

Status Handle::Wait() const {
  if (!op_) return FailedPreconditionError("Wait() on an empty Handle");
  return op_->Wait();
}

bool Handle::done() const { return !op_ || op_->done(); }

}  // namespace ductile
