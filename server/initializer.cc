#include "server/initializer.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "routing/slot_map.h"
#include "util/split_mix.h"

namespace ductile {
namespace {

// Uniform in (0, 1) from 64 random bits.
double Unit(uint64_t bits) {
  return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

}  // namespace

void InitializeValue(const Initializer& init, TableId table, Key key,
                     std::span<float> value) {
  switch (init.kind) {
    case InitKind::kZeros:
      std::fill(value.begin(), value.end(), 0.0f);
      return;
    case InitKind::kConstant:
      std::fill(value.begin(), value.end(), init.value);
      return;
    default:
      break;
  }
  const uint64_t base = SplitMix64(SplitMix64(init.seed) ^
                                   SplitMix64(uint64_t{table} + 0x7ab1e5ull) ^
                                   SplitMix64(key ^ 0x6b6579ull));
  for (size_t i = 0; i < value.size(); ++i) {
    const uint64_t r1 = SplitMix64(base + 2 * i);
    if (init.kind == InitKind::kUniform) {
      const float x =
          init.low + static_cast<float>(Unit(r1)) * (init.high - init.low);
      // Float rounding can land on `high`; the range is [low, high).
      value[i] = x < init.high ? x : std::nextafter(init.high, init.low);
    } else {  // kNormal, Box-Muller
      const double u1 = Unit(r1), u2 = Unit(SplitMix64(base + 2 * i + 1));
      const double z = std::sqrt(-2.0 * std::log(u1)) *
                       std::cos(2.0 * std::numbers::pi * u2);
      value[i] = init.mean + init.stddev * static_cast<float>(z);
    }
  }
}

}  // namespace ductile
