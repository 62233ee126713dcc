#include "consistency/clock_vector.h"

#include <algorithm>

namespace ductile {

bool ClockVector::Advance(int64_t worker, int64_t clock) {
  auto [it, inserted] = clocks_.try_emplace(worker, clock);
  if (!inserted) {
    if (clock <= it->second) return false;
    it->second = clock;
  }
  const int64_t before = min_clock_;
  Recompute();
  return min_clock_ != before;
}

bool ClockVector::Remove(int64_t worker) {
  if (clocks_.erase(worker) == 0) return false;
  const int64_t before = min_clock_;
  Recompute();
  return min_clock_ != before;
}

int64_t ClockVector::clock_of(int64_t worker) const {
  auto it = clocks_.find(worker);
  return it == clocks_.end() ? -1 : it->second;
}

void ClockVector::Recompute() {
  if (clocks_.empty()) {
    min_clock_ = 0;
    return;
  }
  min_clock_ = std::min_element(clocks_.begin(), clocks_.end(),
                                [](const auto& a, const auto& b) {
                                  return a.second < b.second;
                                })
                   ->second;
}

}  // namespace ductile
