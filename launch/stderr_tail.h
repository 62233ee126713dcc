// The standard error of a child process, passed on to the launcher's own
// and its end kept, so that a failed worker command's error can be
// reported with what it last wrote (`ductile local -- COMMAND`).
//
//   Result<std::unique_ptr<StderrTail>> tail = StderrTail::Open();
//   // fork(); in the child: dup2(tail->write_fd(), STDERR_FILENO); exec.
//   (*tail)->CloseWriteEnd();  // in the parent, after the fork
//   ...
//   std::string end = (*tail)->Tail(500);
//
// Thread safety: a thread of its own reads the pipe; the methods are
// called from one thread (the supervisor's).
#ifndef DUCTILE_LAUNCH_STDERR_TAIL_H_
#define DUCTILE_LAUNCH_STDERR_TAIL_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ductile/status.h"

namespace ductile::launch {

class StderrTail {
 public:
  // The most bytes kept: the last lines that fit.
  static constexpr size_t kMaxTailBytes = 2048;

  // A pipe, both ends close-on-exec, and the thread that reads it and
  // copies what it reads to `copy_fd` (-1: nowhere).
  static Result<std::unique_ptr<StderrTail>> Open(int copy_fd = 2);
  ~StderrTail();  // stops the reader and closes the pipe

  StderrTail(const StderrTail&) = delete;
  StderrTail& operator=(const StderrTail&) = delete;

  // The end the child writes to (dup2 it onto its stderr).
  int write_fd() const { return write_fd_; }
  // The parent's copy of the write end: closed once the child has it, so
  // that the pipe ends when the child (and whatever inherited it) does.
  void CloseWriteEnd();

  // What was written last, whole lines where the start was cut; waits up
  // to `wait_ms` for the writer's end to close first.
  std::string Tail(int wait_ms);

 private:
  StderrTail(int read_fd, int write_fd, int copy_fd);
  void Read();

  const int read_fd_;
  int write_fd_;
  const int copy_fd_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable ended_cv_;
  std::string tail_;    // guarded by mu_
  bool ended_ = false;  // guarded by mu_: the pipe's write end closed
  std::thread reader_;
};

}  // namespace ductile::launch

#endif  // DUCTILE_LAUNCH_STDERR_TAIL_H_
