#include "server/admission_filter.h"

#include <algorithm>

#include "util/split_mix.h"

namespace ductile {

AdmissionFilter::AdmissionFilter(uint32_t threshold, uint64_t counters)
    : threshold_(std::min<uint32_t>(threshold, UINT16_MAX)),
      width_(std::max<uint64_t>(1, counters / kDepth)) {}

size_t AdmissionFilter::Index(Key key, uint32_t row) const {
  // One independent-looking hash per row: the key mixed with the row's
  // own odd constant.
  const uint64_t h = SplitMix64(key ^ (0xd6e8feb86659fd93ULL * (row + 1)));
  return static_cast<size_t>(row * width_ + h % width_);
}

uint32_t AdmissionFilter::Count(Key key) const {
  if (counts_.empty()) return 0;
  uint32_t count = UINT16_MAX;
  for (uint32_t row = 0; row < kDepth; ++row) {
    count = std::min<uint32_t>(count, counts_[Index(key, row)]);
  }
  return count;
}

bool AdmissionFilter::Add(Key key, uint32_t pushes) {
  if (admits_all()) return true;
  if (counts_.empty()) counts_.assign(kDepth * width_, 0);
  if (++adds_ > counts_.size()) {
    for (uint16_t& c : counts_) c >>= 1;
    adds_ = 1;
  }
  const uint32_t now = static_cast<uint32_t>(
      std::min<uint64_t>(uint64_t{Count(key)} + pushes, threshold_));
  for (uint32_t row = 0; row < kDepth; ++row) {
    uint16_t& c = counts_[Index(key, row)];
    c = std::max(c, static_cast<uint16_t>(now));
  }
  return now >= threshold_;
}

}  // namespace ductile
