// How much of the coordinator's own pauses is forgiven.
//
// A gap between two turns of the coordinator's loop longer than a second
// is a pause of its own (stopped, or starved on a loaded host): the
// members' silence over it, and the lateness of the rounds it waits for,
// are not theirs. But a loop whose every turn is slow (its state saves
// stalling on a disk) looks the same, and forgiving every such gap would
// stop every deadline, a dead member's included. So pauses are forgiven
// out of a credit: it starts at kMaxCredit, each pause forgiven takes its
// length from it, and every gap adds half its length back, up to
// kMaxCredit. One stop of up to a minute is forgiven whole; on a loop that
// is always slow, deadlines still run at half speed or more.
//
// Not thread-safe: the coordinator's loop owns it.
#ifndef DUCTILE_COORDINATOR_PAUSE_CREDIT_H_
#define DUCTILE_COORDINATOR_PAUSE_CREDIT_H_

#include <algorithm>
#include <chrono>

#include "env/env.h"

namespace ductile {

class PauseCredit {
 public:
  using Duration = Env::TimePoint::duration;
  // A gap this long between two turns is a pause.
  static constexpr Duration kPause = std::chrono::milliseconds(1000);
  static constexpr Duration kMaxCredit = std::chrono::seconds(60);

  // `gap` passed since the loop's last turn: returns how much of it is
  // forgiven (zero unless it is a pause).
  Duration Forgive(Duration gap) {
    Duration forgiven{};
    if (gap > kPause) {
      forgiven = std::min(gap, credit_);
      credit_ -= forgiven;
    }
    credit_ = std::min(kMaxCredit, credit_ + gap / 2);
    return forgiven;
  }

 private:
  Duration credit_ = kMaxCredit;
};

}  // namespace ductile

#endif  // DUCTILE_COORDINATOR_PAUSE_CREDIT_H_
