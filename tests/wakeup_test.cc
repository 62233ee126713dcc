// Wakeup: an eventfd that a transport's Wait includes, signalled from any
// thread and drained by the waiting one.
#include "transport/wakeup.h"

#include <poll.h>

#include "gtest/gtest.h"

namespace ductile {
namespace {

bool Readable(const Wakeup& w) {
  pollfd p{w.fd(), POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

TEST(Wakeup, ASignalMakesItReadableUntilDrained) {
  Wakeup w;
  EXPECT_FALSE(Readable(w));
  w.Signal();
  w.Signal();
  EXPECT_TRUE(Readable(w));
  w.Drain();
  EXPECT_FALSE(Readable(w));
  w.Drain();  // nothing to drain: still quiet
  EXPECT_FALSE(Readable(w));
}

}  // namespace
}  // namespace ductile
