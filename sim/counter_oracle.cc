#include "sim/counter_oracle.h"

#include <algorithm>
#include <bit>

namespace ductile::counter_oracle {

bool Holds(const PushSpan& span, int64_t t, int64_t clock) {
  return span.start >= 0 && span.start <= t && t < span.end && t < clock;
}

int64_t CountBefore(const PushSpan& span, int64_t clock) {
  if (span.start < 0) return 0;
  return std::max<int64_t>(0, std::min(clock, span.end) - span.start);
}

Range ReadRange(const Consistency& consistency, const PushSpan& span,
                int64_t clock, bool own, bool pushed_at_clock) {
  Range r;
  const bool bsp = consistency.mode == ConsistencyMode::kBsp;
  if (own) {
    r.least = r.most =
        CountBefore(span, clock + (pushed_at_clock && !bsp ? 1 : 0));
  } else if (bsp) {
    r.least = r.most = CountBefore(span, clock);
  } else if (consistency.mode == ConsistencyMode::kSsp) {
    r.least = CountBefore(span, clock - consistency.staleness);
  } else {
    r.least = std::numeric_limits<int64_t>::min();  // async: no bound
  }
  return r;
}

float BitsAfter(int64_t m) {
  return static_cast<float>((uint64_t{1} << m) - 1);
}

int64_t BitsPrefixLength(float value) {
  if (value < 0 || value >= 16777216.0f) return -1;
  const auto x = static_cast<uint64_t>(value);
  if (static_cast<float>(x) != value || (x & (x + 1)) != 0) return -1;
  return std::popcount(x);
}

std::vector<std::string> CheckRead(const Read& read, int self, int workers,
                                   const Consistency& consistency) {
  std::vector<std::string> bad;
  const int64_t c = read.clock;
  for (int w = 0; w < workers; ++w) {
    const std::string of = "[" + std::to_string(w) + "]";
    const auto counter = static_cast<int64_t>(read.counter[w]);
    const int64_t prefix = BitsPrefixLength(read.bits[w]);
    const auto last = static_cast<int64_t>(read.last[w]);
    if (prefix < 0) bad.push_back("(8) bits" + of + " is not 2^m - 1");
    const Range r = ReadRange(consistency, PushSpan{}, c, w == self,
                              /*pushed_at_clock=*/false);
    const std::string want = std::to_string(r.least);
    if (r.exact()) {
      // (2) its own updates exactly; BSP: everyone's of clocks < c.
      if (counter != r.least) {
        bad.push_back("(2) counter" + of + " is " + std::to_string(counter) +
                      ", not " + want);
      }
      if (prefix != r.least) {
        bad.push_back("(8) bits" + of + " is not 2^" + want + " - 1");
      }
      if (last != r.least) {
        bad.push_back("(8) last" + of + " is " + std::to_string(last) +
                      ", not " + want);
      }
    } else {
      // (1) every update with timestamp <= c - s - 1 (async: no bound).
      if (counter < r.least) {
        bad.push_back("(1) counter" + of + " is " + std::to_string(counter) +
                      ", below " + want);
      }
      if (prefix >= 0 && prefix < r.least) {
        bad.push_back("(1) bits" + of + " misses a clock below " + want);
      }
      if (last < r.least) {
        bad.push_back("(1) last" + of + " is " + std::to_string(last) +
                      ", below " + want);
      }
    }
  }
  return bad;
}

std::string CheckSharedCounter(const Read& read, int workers,
                               const Consistency& consistency) {
  const float shared = read.counter[workers];
  const int64_t c = read.clock;
  if (consistency.mode == ConsistencyMode::kBsp) {
    const float want = consistency.combine == BspCombine::kSum
                           ? static_cast<float>(workers * c)
                           : static_cast<float>(c);
    if (shared != want) return "(6) shared counter is not this clock's state";
  } else if (consistency.mode == ConsistencyMode::kSsp &&
             shared <
                 static_cast<float>(workers * (c - consistency.staleness))) {
    return "(1) shared counter misses updates older than c - s";
  }
  return "";
}

FinalState Final(int workers, int64_t clocks, const Consistency& consistency) {
  FinalState f;
  f.counter = static_cast<float>(CountBefore(PushSpan{}, clocks));
  f.bits = BitsAfter(clocks);
  f.last = static_cast<float>(clocks);
  const bool mean = consistency.mode == ConsistencyMode::kBsp &&
                    consistency.combine == BspCombine::kMean;
  f.shared = static_cast<float>(mean ? clocks : workers * clocks);
  return f;
}

}  // namespace ductile::counter_oracle
