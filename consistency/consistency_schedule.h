// Which consistency model governs each clock of one table.
//
// A table starts with one model; a runtime change adds "from clock B on,
// use M". Everything a server decides about a request of timestamp t (hold
// a push back for BSP, how long a pull at clock c must wait) asks At(t), so
// a change takes effect at the same clock boundary for every worker.
//
// Invariant: entries are ordered by from_clock; the first is from INT64_MIN.
// Not thread-safe: owned by a server's request thread.
#ifndef DUCTILE_CONSISTENCY_CONSISTENCY_SCHEDULE_H_
#define DUCTILE_CONSISTENCY_CONSISTENCY_SCHEDULE_H_

#include <cstdint>
#include <limits>
#include <map>

#include "ductile/table.h"

namespace ductile {

class ConsistencySchedule {
 public:
  // A pull that never has to wait needs this server clock.
  static constexpr int64_t kNoWait = std::numeric_limits<int64_t>::min();

  explicit ConsistencySchedule(const Consistency& initial);

  // From `from_clock` on, use `c`. Later changes replace earlier ones at or
  // after their own from_clock.
  void Set(int64_t from_clock, const Consistency& c);
  const Consistency& At(int64_t clock) const;
  // The model of the newest change (what new clocks will use).
  const Consistency& latest() const {
    return std::prev(by_clock_.end())->second;
  }
  // The clock the newest change applies from (0: none since the start).
  int64_t latest_from() const { return latest_from_; }

  // The server clock (minimum over live workers) a pull made at `clock`
  // needs: clock - s for SSP(s), clock for BSP, kNoWait for async.
  int64_t RequiredServerClock(int64_t clock) const;
  // True when pushes of timestamp `clock` are held back and combined (BSP).
  bool Buffers(int64_t clock) const {
    return At(clock).mode == ConsistencyMode::kBsp;
  }
  // Drops changes that no clock >= `clock` can still ask about.
  void ForgetBefore(int64_t clock);

 private:
  std::map<int64_t, Consistency> by_clock_;
  int64_t latest_from_ = 0;
};

}  // namespace ductile

#endif  // DUCTILE_CONSISTENCY_CONSISTENCY_SCHEDULE_H_
