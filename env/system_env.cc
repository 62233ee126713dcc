#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <random>
#include <thread>
#include <utility>

#include "env/env.h"
#include "transport/zmq_transport.h"
#include "util/mutex.h"

namespace ductile {
namespace {

// One std::thread and a queue of tasks; at kLower, at a lower CPU priority
// than the process's other threads (nice + 10): where cores are short, the
// threads that serve requests run first.
class TaskThread final : public BackgroundThread {
 public:
  TaskThread(const std::string& name, Priority priority)
      : lower_(priority == Priority::kLower), thread_([this] { Run(); }) {
    // Linux names are at most 15 characters.
    pthread_setname_np(thread_.native_handle(), name.substr(0, 15).c_str());
  }

  ~TaskThread() override {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    wake_.Signal();
    thread_.join();
  }

  void Schedule(std::function<void()> task) override {
    {
      MutexLock lock(&mu_);
      tasks_.push_back(std::move(task));
    }
    wake_.Signal();
  }

 private:
  void Run() {
    // Linux: a thread's nice value is its own. Best effort.
    if (lower_) {
      setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()),
                  getpriority(PRIO_PROCESS, 0) + 10);
    }
    while (true) {
      std::function<void()> task;
      {
        MutexLock lock(&mu_);
        while (tasks_.empty() && !stopping_) wake_.Wait(&mu_);
        if (tasks_.empty()) return;  // stopping, and every task has run
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  const bool lower_;
  Mutex mu_;
  CondVar wake_;
  std::deque<std::function<void()>> tasks_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once the members above exist
};

class RealEnv final : public Env {
 public:
  TimePoint Now() override { return std::chrono::steady_clock::now(); }

  int64_t UnixMs() override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  uint64_t RandomU64() override {
    std::random_device rd;
    return (uint64_t{rd()} << 32) | rd();
  }

  int32_t ProcessId() override { return static_cast<int32_t>(getpid()); }

  std::unique_ptr<Transport> NewTransport(const std::string&,
                                          const Security& security,
                                          int io_threads) override {
    return NewZmqTransport(security, io_threads);
  }

  Result<std::unique_ptr<CheckpointStore>> OpenCheckpointStore(
      const CheckpointStoreOptions& options) override {
    return CheckpointStore::Open(options);
  }

  Result<LoadedCheckpoint> LoadCheckpointFrom(const std::string& dir,
                                              int64_t clock) override {
    return ::ductile::LoadCheckpointFrom(dir, clock);
  }

  Result<std::unique_ptr<CoordinatorStore>> OpenCoordinatorStore(
      const CoordinatorStoreOptions& options) override {
    return CoordinatorStore::Open(options);
  }

  std::unique_ptr<BackgroundThread> NewBackgroundThread(
      const std::string& name, BackgroundThread::Priority priority) override {
    return std::make_unique<TaskThread>(name, priority);
  }
};

}  // namespace

Env* SystemEnv() {
  static Env* env = new RealEnv;
  return env;
}

}  // namespace ductile
