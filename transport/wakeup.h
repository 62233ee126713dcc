// A thread-safe wake-up signal that a ZeroMQ poll loop can wait on
// (an eventfd, polled as a plain file descriptor).
#ifndef DUCTILE_TRANSPORT_WAKEUP_H_
#define DUCTILE_TRANSPORT_WAKEUP_H_

#include <zmq.hpp>

namespace ductile {

class Wakeup {
 public:
  Wakeup();
  ~Wakeup();
  Wakeup(const Wakeup&) = delete;
  Wakeup& operator=(const Wakeup&) = delete;

  // Any thread: makes the poll item readable.
  void Signal();
  // Poll thread: clears the signal.
  void Drain();
  zmq::pollitem_t PollItem() const { return {nullptr, fd_, ZMQ_POLLIN, 0}; }

 private:
  int fd_;
};

}  // namespace ductile

#endif  // DUCTILE_TRANSPORT_WAKEUP_H_
