#include "consistency/bsp_buffer.h"

#include <algorithm>
#include <string>

namespace ductile {

Status BspBuffer::Check(int64_t clock, Key key, size_t width) const {
  auto c = clocks_.find(clock);
  if (c == clocks_.end()) return Status::Ok();
  auto k = c->second.find(key);
  if (k == c->second.end() || k->second.values.size() == width) {
    return Status::Ok();
  }
  return InvalidArgumentError(
      "key " + std::to_string(key) + " was pushed with " +
      std::to_string(k->second.values.size()) + " floats earlier in clock " +
      std::to_string(clock) + ", now with " + std::to_string(width));
}

void BspBuffer::Add(int64_t clock, Key key, std::span<const float> values,
                    bool replace, int32_t batches, bool weigh,
                    float rate_factor) {
  Combined& c = clocks_[clock][key];
  batches = std::max(batches, 1);
  const float w = weigh && !replace ? static_cast<float>(batches) : 1.0f;
  if (c.pushes == 0 || replace) {
    c.values.assign(values.begin(), values.end());
    if (w != 1.0f) {
      for (float& x : c.values) x *= w;
    }
  } else if (w == 1.0f) {
    float* __restrict acc = c.values.data();
    for (size_t i = 0; i < values.size(); ++i) acc[i] += values[i];
  } else {
    float* __restrict acc = c.values.data();
    for (size_t i = 0; i < values.size(); ++i) acc[i] += w * values[i];
  }
  ++c.pushes;
  c.batches += batches;
  c.rate_sum += rate_factor * static_cast<float>(batches);
}

std::vector<std::pair<int64_t, BspBuffer::Clock>> BspBuffer::TakeBefore(
    int64_t server_clock) {
  std::vector<std::pair<int64_t, Clock>> out;
  auto end = clocks_.lower_bound(server_clock);
  for (auto it = clocks_.begin(); it != end; ++it) {
    out.emplace_back(it->first, std::move(it->second));
  }
  clocks_.erase(clocks_.begin(), end);
  return out;
}

}  // namespace ductile
