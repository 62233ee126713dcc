// A thread-safe wake-up signal that a transport's Wait can include (an
// eventfd, waited on as a plain file descriptor).
#ifndef DUCTILE_TRANSPORT_WAKEUP_H_
#define DUCTILE_TRANSPORT_WAKEUP_H_

#include <atomic>

namespace ductile {

class Wakeup {
 public:
  Wakeup();
  ~Wakeup();
  Wakeup(const Wakeup&) = delete;
  Wakeup& operator=(const Wakeup&) = delete;

  // Any thread: makes fd() readable.
  void Signal();
  // The waiting thread: clears the signal (no system call when there was
  // none).
  void Drain();
  int fd() const { return fd_; }

 private:
  int fd_;
  std::atomic<bool> signalled_{false};
};

}  // namespace ductile

#endif  // DUCTILE_TRANSPORT_WAKEUP_H_
