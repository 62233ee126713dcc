#include "client/operation.h"

#include <chrono>

#include "client/stats_recorder.h"
#include "ductile/client.h"
#include "util/finite.h"

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
  OnDone(!failed());
  {
    MutexLock lock(&mu_);
    done_.store(true, std::memory_order_release);
  }
  cv_.SignalAll();
}

Status Operation::Wait() {
  if (wait_stats_ == nullptr || done()) return WaitDone();
  const auto start = std::chrono::steady_clock::now();
  Status status = WaitDone();
  wait_stats_->RecordWait(
      wait_is_pull_, static_cast<uint64_t>(
                         std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count()));
  return status;
}

Status Operation::WaitDone() {
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

bool Handle::refused() const { return op_ && op_->done() && op_->refused(); }

Status CheckFiniteValues(DataOperation& op, const std::string& table_name) {
  if (!AllFinite(op.values)) {
    const size_t bad = FirstNonFinite(op.values);
    size_t i = 0;  // the key holding float `bad`
    while (i + 1 < op.keys.size() && op.offset(i + 1) <= bad) ++i;
    return InvalidArgumentError("non-finite value (NaN or Inf) pushed to key " +
                                std::to_string(op.keys[i]) + " of " +
                                table_name +
                                "; nothing was sent, table left unchanged");
  }
  op.values_checked = true;
  return Status::Ok();
}

}  // namespace ductile
