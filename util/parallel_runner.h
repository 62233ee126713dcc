// A fixed set of threads that run the pieces of one job together with the
// thread that hands it in: a server's request thread splits a large push
// into pieces (ParameterTable) and applies them on all of them at once.
//
// One job at a time: Run() returns when every piece has run, so what the
// pieces wrote is visible to the caller afterwards. The pieces of a job
// must not depend on each other's order. Run() may be called from one
// thread at a time (the owner's); the helpers sleep between jobs.
//
//   ParallelRunner runner(4);  // the caller and 3 helper threads
//   runner.Run(pieces, [&](size_t i) { ApplyPiece(i); });
#ifndef DUCTILE_UTIL_PARALLEL_RUNNER_H_
#define DUCTILE_UTIL_PARALLEL_RUNNER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "util/mutex.h"
#include "util/thread_annotations.h"

namespace ductile {

class ParallelRunner {
 public:
  // `threads` >= 1 counts the caller: threads - 1 helpers are started.
  explicit ParallelRunner(int threads);
  ~ParallelRunner();  // joins the helpers
  ParallelRunner(const ParallelRunner&) = delete;
  ParallelRunner& operator=(const ParallelRunner&) = delete;

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // Runs piece(0) .. piece(pieces - 1), each once, on the caller and the
  // helpers; returns when all have returned. `piece` must not throw.
  void Run(size_t pieces, const std::function<void(size_t)>& piece)
      EXCLUDES(mu_);

  // The default thread count for `cores` cores: all of them, at most 8 (a
  // push's pieces run at memory bandwidth, which a few cores reach).
  static int DefaultThreads(
      unsigned cores = std::thread::hardware_concurrency());

 private:
  void HelperLoop() EXCLUDES(mu_);
  void StopHelpers() EXCLUDES(mu_);
  // Takes and runs pieces of the current job until none is left.
  // `piece` is dereferenced only while `job` is still the current one.
  void Drain(const std::function<void(size_t)>* piece, size_t pieces,
             uint64_t job) EXCLUDES(mu_);

  Mutex mu_;
  CondVar work_;  // a new job, or stopping
  CondVar done_;  // the last piece of a job finished
  // The current job: its number (0: none yet), pieces, next piece to take
  // and pieces finished.
  uint64_t job_ GUARDED_BY(mu_) = 0;
  const std::function<void(size_t)>* piece_ GUARDED_BY(mu_) = nullptr;
  size_t pieces_ GUARDED_BY(mu_) = 0;
  size_t next_ GUARDED_BY(mu_) = 0;
  size_t finished_ GUARDED_BY(mu_) = 0;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> helpers_;
};

}  // namespace ductile

#endif  // DUCTILE_UTIL_PARALLEL_RUNNER_H_
