#include "coordinator/coordinator_impl.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <utility>

#include "admin/cluster_status_wire.h"
#include "coordinator/policy_loop.h"
#include "glog/logging.h"
#include "transport/queued_bytes.h"

namespace ductile {

using std::chrono::milliseconds;

Status Validate(const CoordinatorOptions& options) {
  DUCTILE_RETURN_IF_ERROR(ValidateConnectionLimits(options.security));
  DUCTILE_RETURN_IF_ERROR(ValidatePeerQueueLimits(options.max_queued_replies,
                                                  options.max_queued_reply_mb,
                                                  options.max_queued_requests));
  if (options.num_servers < 1) {
    return InvalidArgumentError("num_servers must be >= 1");
  }
  if (options.num_workers < 0) {
    return InvalidArgumentError("num_workers must be >= 0");
  }
  if (options.max_workers < 0 ||
      (options.max_workers > 0 && options.max_workers < options.num_workers)) {
    return InvalidArgumentError(
        "max_workers must be 0 (no bound) or >= num_workers");
  }
  if (options.num_slots < 1 || options.num_slots > RoutingTable::kMaxSlots) {
    return InvalidArgumentError("num_slots must be in [1, 1048576]");
  }
  if (options.heartbeat_timeout_ms < 100 ||
      options.heartbeat_timeout_ms > 86400000) {
    return InvalidArgumentError(
        "heartbeat_timeout_ms must be in [100, 86400000]");
  }
  if (options.no_worker_timeout_ms != 0 &&
      (options.no_worker_timeout_ms < 1000 ||
       options.no_worker_timeout_ms > 604800000)) {
    return InvalidArgumentError(
        "no_worker_timeout_ms must be 0 or in [1000, 604800000]");
  }
  if (options.drain_linger_ms < 0 || options.drain_linger_ms > 60000) {
    return InvalidArgumentError("drain_linger_ms must be in [0, 60000]");
  }
  if (options.num_slots < options.num_servers) {
    return InvalidArgumentError("num_slots must be >= num_servers");
  }
  if (options.checkpoint_every_clocks < 0) {
    return InvalidArgumentError(
        "checkpoint_every_clocks must be >= 0 (0: not by clock)");
  }
  if (!(options.checkpoint_interval_s >= 0) ||
      !std::isfinite(options.checkpoint_interval_s)) {
    return InvalidArgumentError(
        "checkpoint_interval_s must be a number of seconds >= 0 (0: not by "
        "time)");
  }
  if (options.disk_reserve_mb < 0 || options.disk_reserve_mb > (1 << 20)) {
    return InvalidArgumentError("disk_reserve_mb must be in [0, 1048576]");
  }
  if (options.checkpoint_timeout_ms < 1000) {
    return InvalidArgumentError("checkpoint_timeout_ms must be >= 1000");
  }
  if (options.replicas != 1 && options.replicas != 2) {
    return InvalidArgumentError(
        "replicas must be 1 (no copies) or 2 (a backup per slot), not " +
        std::to_string(options.replicas));
  }
  if (options.policy_interval_ms < 100 ||
      options.policy_interval_ms > 3600000) {
    return InvalidArgumentError("policy_interval_ms must be in [100, 3600000]");
  }
  for (const auto& policy : options.policies) {
    if (policy == nullptr) return InvalidArgumentError("a policy is null");
  }
  if (options.state_dir.empty() && (options.checkpoint_every_clocks > 0 ||
                                    options.checkpoint_interval_s > 0)) {
    return InvalidArgumentError(
        "checkpoints (checkpoint_every_clocks, checkpoint_interval_s) need "
        "a state_dir, where the coordinator keeps their catalog");
  }
  return Status::Ok();
}

Result<std::unique_ptr<Coordinator>> Coordinator::Start(
    const CoordinatorOptions& options) {
  DUCTILE_RETURN_IF_ERROR(Validate(options));
  auto coordinator = std::make_unique<CoordinatorImpl>(options);
  DUCTILE_RETURN_IF_ERROR(coordinator->Init());
  return std::unique_ptr<Coordinator>(std::move(coordinator));
}

CoordinatorImpl::CoordinatorImpl(const CoordinatorOptions& options)
    : options_(options), env_(SystemEnv()), node_(options_, env_) {}

CoordinatorImpl::~CoordinatorImpl() {
  Stop();
  Wait().IgnoreError();
}

Status CoordinatorImpl::Init() {
  DUCTILE_RETURN_IF_ERROR(node_.Start());
  thread_ = std::thread([this] { Run(); });
  if (!options_.policies.empty()) {
    policy_thread_ = std::thread([this] { RunPolicies(); });
  }
  return Status::Ok();
}

Status CoordinatorImpl::Wait() {
  if (thread_.joinable()) thread_.join();
  StopPolicies();
  return node_.failure();
}

void CoordinatorImpl::StopPolicies() {
  {
    MutexLock lock(&policy_mu_);
    policy_stop_ = true;
  }
  policy_cv_.SignalAll();
  if (policy_thread_.joinable()) policy_thread_.join();
}

Status CoordinatorImpl::CallOnLoop(std::function<Status()> task) {
  // 0: waiting; 1: the task runs; 2: the waiter gave up, so it must not.
  auto state = std::make_shared<std::atomic<int>>(0);
  auto result = std::make_shared<std::promise<Status>>();
  std::future<Status> done = result->get_future();
  RunOnLoop([task = std::move(task), result, state] {
    int waiting = 0;
    if (!state->compare_exchange_strong(waiting, 1)) {
      result->set_value(CancelledError("abandoned"));
      return;
    }
    result->set_value(task());
  });
  // Only the task holds the promise now: a task that never runs breaks it.
  result.reset();
  if (done.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    int waiting = 0;
    if (state->compare_exchange_strong(waiting, 2)) {
      // It will not run: what it would have done is not done.
      return DeadlineExceededError(
          "the coordinator's loop did not answer within 10 s; nothing was "
          "changed");
    }
    done.wait();  // it is running on the loop now: its answer comes
  }
  try {
    return done.get();
  } catch (const std::future_error&) {  // the loop ended before answering
    return CancelledError("coordinator stopped");
  }
}

// A policy's actions, carried out on the loop.
class CoordinatorImpl::LoopActions final : public PolicyActions {
 public:
  explicit LoopActions(CoordinatorImpl* impl) : impl_(impl) {}
  // The tasks hold the coordinator, not this: one that outlives its wait
  // still finds what it uses.
  Status Resize(int32_t workers, int32_t servers) override {
    return impl_->CallOnLoop([impl = impl_, workers, servers] {
      return impl->node_.SetTargetSize(workers, servers);
    });
  }
  Status ReplaceWorker(int32_t id) override {
    return impl_->CallOnLoop(
        [impl = impl_, id] { return impl->node_.RequestReplacement(id); });
  }
  Status SetConsistency(const std::string& table,
                        const Consistency& consistency) override {
    return impl_->CallOnLoop([impl = impl_, table, consistency] {
      return impl->node_.ChangeConsistency(table, consistency);
    });
  }
  Status SetBatchesPerStep(int32_t batches) override {
    return impl_->CallOnLoop([impl = impl_, batches] {
      return impl->node_.SetBatchesPerStep(batches);
    });
  }

 private:
  CoordinatorImpl* const impl_;
};

// Logs each action with the policy that took it and what came of it.
class LoggedActions final : public PolicyActions {
 public:
  explicit LoggedActions(PolicyActions* actions) : actions_(actions) {}
  void set_policy(std::string name) { policy_ = std::move(name); }
  Status Resize(int32_t workers, int32_t servers) override {
    Status s = actions_->Resize(workers, servers);
    LOG(INFO) << "policy " << policy_ << ": resize to " << workers
              << " worker(s), " << servers << " server(s) (0: unchanged)"
              << (s.ok() ? "" : ": " + s.ToString());
    return s;
  }
  Status ReplaceWorker(int32_t id) override {
    Status s = actions_->ReplaceWorker(id);
    LOG(INFO) << "policy " << policy_ << ": replace worker " << id
              << (s.ok() ? "" : ": " + s.ToString());
    return s;
  }
  Status SetConsistency(const std::string& table,
                        const Consistency& consistency) override {
    Status s = actions_->SetConsistency(table, consistency);
    LOG(INFO) << "policy " << policy_ << ": table '" << table << "' to "
              << ToString(consistency) << (s.ok() ? "" : ": " + s.ToString());
    return s;
  }
  Status SetBatchesPerStep(int32_t batches) override {
    Status s = actions_->SetBatchesPerStep(batches);
    LOG(INFO) << "policy " << policy_ << ": " << batches << " batch(es) a step"
              << (s.ok() ? "" : ": " + s.ToString());
    return s;
  }

 private:
  PolicyActions* const actions_;
  std::string policy_;
};

void CoordinatorImpl::RunPolicies() {
  LoopActions actions(this);
  LoggedActions logged(&actions);
  PolicyLoop loop(env_, options_.policies,
                  milliseconds(options_.policy_interval_ms), &logged,
                  [&logged](const Policy& p) { logged.set_policy(p.name()); });
  while (true) {
    {
      MutexLock lock(&policy_mu_);
      // Until the Env's clock says the reading is due, or a stop.
      while (!policy_stop_ && !loop.Due()) {
        policy_cv_.WaitFor(&policy_mu_, loop.TimeToNextTick());
      }
      if (policy_stop_) return;
    }
    if (!loop.Tick([this] { return QueryStatus(10000); })) return;
  }
}

void CoordinatorImpl::Stop() {
  stop_.store(true);
  wakeup_.Signal();
}

void CoordinatorImpl::RunOnLoop(std::function<void()> task) {
  {
    MutexLock lock(&tasks_mu_);
    if (!loop_done_) {
      tasks_.push_back(std::move(task));
      task = nullptr;
    }
  }
  // After the loop: the task is dropped here, outside the lock, and with
  // it the promise its caller waits on (which then reads "stopped").
  if (task) {
    task = nullptr;
    return;
  }
  wakeup_.Signal();
}

void CoordinatorImpl::Run() {
  Socket* const sockets[] = {node_.socket()};
  while (!stop_.load() && !node_.finished()) {
    Status s =
        node_.transport()->Wait(sockets, wakeup_.fd(), node_.NextWakeup());
    if (!s.ok()) {
      LOG(ERROR) << "coordinator: " << s;
      break;
    }
    wakeup_.Drain();
    std::deque<std::function<void()>> tasks;
    {
      MutexLock lock(&tasks_mu_);
      tasks.swap(tasks_);
    }
    for (auto& task : tasks) node_.Run(task);
    node_.Step();
  }
  node_.CancelWaits(CancelledError("coordinator stopped"));
  // Tasks that will never run: dropping them breaks their callers' waits.
  std::deque<std::function<void()>> never;
  {
    MutexLock lock(&tasks_mu_);
    loop_done_ = true;
    never.swap(tasks_);
  }
  LOG(INFO) << "coordinator stopped";
}

Status CoordinatorImpl::MoveSlot(int32_t slot, int32_t server_id) {
  auto result = std::make_shared<std::promise<Status>>();
  std::future<Status> done = result->get_future();
  RunOnLoop([this, slot, server_id, result] {
    node_.MoveSlot(slot, server_id,
                   [result](const Status& s) { result->set_value(s); });
  });
  // Only the task holds the promise now: a task that never runs breaks it.
  result.reset();
  if (done.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    return DeadlineExceededError(
        "not every server confirmed the new routing table within 10 s");
  }
  try {
    return done.get();
  } catch (const std::future_error&) {  // the loop ended before answering
    return CancelledError("coordinator stopped");
  }
}

Result<ClusterStatus> CoordinatorImpl::QueryStatus(int64_t timeout_ms) {
  auto result = std::make_shared<std::promise<wire::ClusterState>>();
  std::future<wire::ClusterState> done = result->get_future();
  RunOnLoop([this, result] { result->set_value(node_.ClusterStateNow()); });
  // Only the task holds the promise now: a task that never runs breaks it.
  result.reset();
  if (done.wait_for(milliseconds(timeout_ms)) != std::future_status::ready) {
    return DeadlineExceededError(
        "the coordinator's loop did not answer within " +
        std::to_string(timeout_ms) + " ms");
  }
  try {
    return ClusterStatusFromWire(done.get());
  } catch (const std::future_error&) {  // the loop ended before answering
    return CancelledError("coordinator stopped");
  }
}

Result<int64_t> CoordinatorImpl::Checkpoint(int64_t timeout_ms) {
  auto result = std::make_shared<std::promise<Result<int64_t>>>();
  std::future<Result<int64_t>> done = result->get_future();
  RunOnLoop([this, result] {
    node_.Checkpoint(
        [result](const Result<int64_t>& r) { result->set_value(r); });
  });
  // Only the task holds the promise now: a task that never runs breaks it.
  result.reset();
  if (done.wait_for(milliseconds(timeout_ms)) != std::future_status::ready) {
    return DeadlineExceededError("no complete checkpoint within " +
                                 std::to_string(timeout_ms) + " ms");
  }
  try {
    return done.get();
  } catch (const std::future_error&) {  // the loop ended before answering
    return CancelledError("coordinator stopped");
  }
}

}  // namespace ductile
