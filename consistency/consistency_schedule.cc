#include "consistency/consistency_schedule.h"

#include <iterator>

namespace ductile {

ConsistencySchedule::ConsistencySchedule(const Consistency& initial) {
  by_clock_[kNoWait] = initial;
}

void ConsistencySchedule::Set(int64_t from_clock, const Consistency& c) {
  by_clock_.erase(by_clock_.lower_bound(from_clock), by_clock_.end());
  by_clock_[from_clock] = c;
  latest_from_ = from_clock;
}

const Consistency& ConsistencySchedule::At(int64_t clock) const {
  return std::prev(by_clock_.upper_bound(clock))->second;
}

int64_t ConsistencySchedule::RequiredServerClock(int64_t clock) const {
  const Consistency& c = At(clock);
  switch (c.mode) {
    case ConsistencyMode::kSsp:
      return clock - c.staleness;
    case ConsistencyMode::kBsp:
      return clock;
    case ConsistencyMode::kAsync:
      break;
  }
  return kNoWait;
}

void ConsistencySchedule::ForgetBefore(int64_t clock) {
  // Keep the entry in force at `clock` (re-keyed to kNoWait) and later ones.
  auto in_force = std::prev(by_clock_.upper_bound(clock));
  if (in_force == by_clock_.begin()) return;
  const Consistency c = in_force->second;
  by_clock_.erase(by_clock_.begin(), std::next(in_force));
  by_clock_[kNoWait] = c;
}

}  // namespace ductile
