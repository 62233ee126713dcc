#include "util/parallel_runner.h"

#include <algorithm>

namespace ductile {

ParallelRunner::ParallelRunner(int threads) {
  const int helpers = std::max(threads, 1) - 1;
  helpers_.reserve(helpers);
  try {
    for (int i = 0; i < helpers; ++i) {
      helpers_.emplace_back([this] { HelperLoop(); });
    }
  } catch (...) {  // no thread to be had: stop the ones started
    StopHelpers();
    throw;
  }
}

ParallelRunner::~ParallelRunner() { StopHelpers(); }

void ParallelRunner::StopHelpers() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_.SignalAll();
  for (std::thread& t : helpers_) t.join();
  helpers_.clear();
}

int ParallelRunner::DefaultThreads(unsigned cores) {
  return static_cast<int>(std::clamp(cores, 1u, 8u));
}

void ParallelRunner::Run(size_t pieces,
                         const std::function<void(size_t)>& piece) {
  if (pieces == 0) return;
  if (helpers_.empty() || pieces == 1) {
    for (size_t i = 0; i < pieces; ++i) piece(i);
    return;
  }
  uint64_t job;
  {
    MutexLock lock(&mu_);
    job = ++job_;
    piece_ = &piece;
    pieces_ = pieces;
    next_ = 0;
    finished_ = 0;
  }
  work_.SignalAll();
  Drain(&piece, pieces, job);
  MutexLock lock(&mu_);
  while (finished_ < pieces_) done_.Wait(&mu_);
  piece_ = nullptr;  // no helper takes a piece of a finished job
}

void ParallelRunner::Drain(const std::function<void(size_t)>* piece,
                           size_t pieces, uint64_t job) {
  while (true) {
    size_t i;
    {
      MutexLock lock(&mu_);
      if (job_ != job || next_ >= pieces_) return;
      i = next_++;
    }
    (*piece)(i);
    MutexLock lock(&mu_);
    if (++finished_ == pieces) done_.Signal();
  }
}

void ParallelRunner::HelperLoop() {
  uint64_t seen = 0;  // the last job this helper worked on
  while (true) {
    const std::function<void(size_t)>* piece;
    size_t pieces;
    uint64_t job;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && (job_ == seen || piece_ == nullptr)) {
        work_.Wait(&mu_);
      }
      if (stopping_) return;
      seen = job = job_;
      piece = piece_;
      pieces = pieces_;
    }
    Drain(piece, pieces, job);
  }
}

}  // namespace ductile
