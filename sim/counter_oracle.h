// The counter workload that the consistency, recovery and simulation tests
// run, and what its reads must show: the one definition of the arithmetic
// that predicts a counter's value from the clocks its worker pushed at.
//
// Worker w pushes at each clock t of its span [start, end), before calling
// Clock(), so each push carries timestamp t: 1 to its counter (key w) and
// to the shared key P that every worker adds to, 2^t to its "bits" key and
// t + 1 (assigned) to its "last" key. The state "at clock C" holds every
// push with a timestamp below C, so worker w's counter there is the number
// of clocks of [start, min(C, end)).
//
//   using namespace ductile::counter_oracle;
//   const Range r = ReadRange(consistency, PushSpan{}, /*clock=*/5,
//                             /*own=*/false, /*pushed_at_clock=*/false);
//   if (!r.Contains(value)) ...  // SSP(2): value >= 3
//
// Pure functions: thread-safe.
#ifndef DUCTILE_SIM_COUNTER_ORACLE_H_
#define DUCTILE_SIM_COUNTER_ORACLE_H_

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "ductile/table.h"

namespace ductile::counter_oracle {

inline constexpr int64_t kNoEnd = std::numeric_limits<int64_t>::max();

// The clocks a worker pushed at: [start, end). start < 0: it never pushed
// (not admitted in this timeline).
struct PushSpan {
  int64_t start = 0;
  int64_t end = kNoEnd;
};

// Whether the state at `clock` holds the worker's push of clock `t`.
bool Holds(const PushSpan& span, int64_t t, int64_t clock);
// The worker's pushes the state at `clock` holds: its counter there.
int64_t CountBefore(const PushSpan& span, int64_t clock);

// The values a read of a counter may show: [least, most].
struct Range {
  int64_t least = 0;
  int64_t most = std::numeric_limits<int64_t>::max();  // max: no bound
  bool exact() const { return least == most; }
  bool Contains(int64_t value) const { return least <= value && value <= most; }
};

// What a read made at clock `clock` (the reader has called Clock() that
// many times) may show of the counter of a worker with span `span`:
// - its own counter (`own`): exactly its pushes so far, one of timestamp
//   `clock` among them when it pushed before reading (`pushed_at_clock`),
//   unless BSP holds that one back;
// - under BSP: exactly the pushes with timestamps below `clock`;
// - under SSP(s): at least those below clock - s (every push with a
//   timestamp <= clock - s - 1);
// - async: anything (no bound).
Range ReadRange(const Consistency& consistency, const PushSpan& span,
                int64_t clock, bool own, bool pushed_at_clock);

// The bits key's value after the pushes of clocks [0, m): 2^m - 1.
float BitsAfter(int64_t m);
// The m a bits value shows, or -1 if it is not 2^m - 1 (a push lost,
// doubled, or applied out of prefix order). Exact up to m = 24.
int64_t BitsPrefixLength(float value);

// One read of the three tables over keys 0..P (key P: the shared counter),
// made by a worker after its Clock() calls reached `clock` (its pushes of
// timestamps below `clock` made, none at `clock`).
struct Read {
  int64_t clock = 0;
  std::span<const float> counter, bits, last;
};

// Properties 1, 2 and 8 of docs/consistency.md on each worker's keys of a
// read made by worker `self`, every worker having pushed at every clock
// from 0; under BSP, the exact snapshot. Returns one text per violation
// (none: the read is right).
std::vector<std::string> CheckRead(const Read& read, int self, int workers,
                                   const Consistency& consistency);
// The shared counter of such a read: BSP's exact state (the sum, or the
// mean with BspCombine::kMean), SSP's least. Returns the violation, or "".
std::string CheckSharedCounter(const Read& read, int workers,
                               const Consistency& consistency);

// The state after every worker's `clocks` clocks: each worker's counter,
// bits and last key, and the shared counter (the mean of the workers' adds
// under BSP with BspCombine::kMean, else their sum).
struct FinalState {
  float counter = 0, bits = 0, last = 0, shared = 0;
};
FinalState Final(int workers, int64_t clocks, const Consistency& consistency);

}  // namespace ductile::counter_oracle

#endif  // DUCTILE_SIM_COUNTER_ORACLE_H_
