// Per-worker clocks of one table and their minimum (the server clock).
//
// Invariant: min_clock() == the smallest clock over tracked workers (0 when
// none). A worker's clock never moves backwards; a smaller update is
// ignored. Not thread-safe: owned by a server's request thread.
#ifndef DUCTILE_CONSISTENCY_CLOCK_VECTOR_H_
#define DUCTILE_CONSISTENCY_CLOCK_VECTOR_H_

#include <cstddef>
#include <cstdint>
#include <map>

namespace ductile {

class ClockVector {
 public:
  // Records that `worker` has reached `clock`. Returns true if the minimum
  // moved.
  bool Advance(int64_t worker, int64_t clock);
  // Stops tracking `worker` (it left or died). Returns true if the minimum
  // moved.
  bool Remove(int64_t worker);

  int64_t min_clock() const { return min_clock_; }
  int64_t clock_of(int64_t worker) const;
  size_t size() const { return clocks_.size(); }

 private:
  void Recompute();
  std::map<int64_t, int64_t> clocks_;
  int64_t min_clock_ = 0;
};

}  // namespace ductile

#endif  // DUCTILE_CONSISTENCY_CLOCK_VECTOR_H_
