// The coordinator (implements ductile::Coordinator): a CoordinatorNode
// stepped by a loop thread of its own.
//
// Threads: the loop thread (Run) waits on the node's socket and steps it;
// it alone touches the node. Other threads reach the node only through
// RunOnLoop(), which queues a task for the loop and waits for its result.
// With policies, a policy thread (RunPolicies) reads the status and runs
// their hooks every policy interval (PolicyLoop, on the Env's clock); their
// actions go through RunOnLoop.
#ifndef DUCTILE_COORDINATOR_COORDINATOR_IMPL_H_
#define DUCTILE_COORDINATOR_COORDINATOR_IMPL_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "coordinator/coordinator_node.h"
#include "ductile/coordinator.h"
#include "env/env.h"
#include "transport/wakeup.h"
#include "util/mutex.h"

namespace ductile {

class CoordinatorImpl final : public Coordinator {
 public:
  explicit CoordinatorImpl(const CoordinatorOptions& options);
  ~CoordinatorImpl() override;

  Status Init();

  Status Wait() override;
  void Stop() override;
  std::string address() const override { return node_.address(); }
  Status MoveSlot(int32_t slot, int32_t server_id) override;
  Result<int64_t> Checkpoint(int64_t timeout_ms) override;
  Result<ClusterStatus> QueryStatus(int64_t timeout_ms) override;

 private:
  class LoopActions;

  void Run();
  // Queues `task` for the loop thread.
  void RunOnLoop(std::function<void()> task) EXCLUDES(tasks_mu_);
  // Runs `task` on the loop and waits (up to 10 s) for what it returns.
  Status CallOnLoop(std::function<Status()> task);
  // The policy thread's body, until StopPolicies().
  void RunPolicies() EXCLUDES(policy_mu_);
  void StopPolicies() EXCLUDES(policy_mu_);

  const CoordinatorOptions options_;
  Env* const env_;
  CoordinatorNode node_;  // stepped by the loop thread only, once started
  Wakeup wakeup_;
  std::atomic<bool> stop_{false};
  std::thread thread_;

  Mutex tasks_mu_;
  std::deque<std::function<void()>> tasks_ GUARDED_BY(tasks_mu_);
  bool loop_done_ GUARDED_BY(tasks_mu_) = false;  // Run() has returned

  std::thread policy_thread_;
  Mutex policy_mu_;
  CondVar policy_cv_;
  bool policy_stop_ GUARDED_BY(policy_mu_) = false;
};

}  // namespace ductile

#endif  // DUCTILE_COORDINATOR_COORDINATOR_IMPL_H_
