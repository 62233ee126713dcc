#include "transport/wakeup.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

#include "glog/logging.h"

namespace ductile {

Wakeup::Wakeup() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  PCHECK(fd_ >= 0) << "eventfd";  // out of file descriptors: unrecoverable
}

Wakeup::~Wakeup() { close(fd_); }

void Wakeup::Signal() {
  // The write first: were the flag set first, a Drain between the two
  // would clear it and read nothing, and the write after would leave the
  // descriptor readable with the flag clear, waking every Wait at once.
  uint64_t one = 1;
  // EAGAIN only when the counter is saturated: it is readable anyway.
  [[maybe_unused]] ssize_t n = write(fd_, &one, sizeof(one));
  signalled_.store(true, std::memory_order_release);
}

void Wakeup::Drain() {
  if (!signalled_.exchange(false, std::memory_order_acq_rel)) return;
  uint64_t value;
  [[maybe_unused]] ssize_t n = read(fd_, &value, sizeof(value));
}

}  // namespace ductile
