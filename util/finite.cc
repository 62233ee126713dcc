#include "util/finite.h"

#include <algorithm>
#include <bit>
#include <cstdint>

namespace ductile {
namespace {

constexpr uint32_t kExponent = 0x7f800000u;

}  // namespace

// NaN and infinities are exactly the floats whose exponent bits are all
// ones. An integer max over the exponents has no dependency chain on float
// adds and vectorises.
bool AllFinite(std::span<const float> values) {
  uint32_t largest = 0;
  for (float x : values) {
    largest = std::max(largest, std::bit_cast<uint32_t>(x) & kExponent);
  }
  return largest != kExponent;
}

size_t FirstNonFinite(std::span<const float> values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if ((std::bit_cast<uint32_t>(values[i]) & kExponent) == kExponent) return i;
  }
  return values.size();
}

}  // namespace ductile
