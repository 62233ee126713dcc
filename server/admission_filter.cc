#include "server/admission_filter.h"

#include <algorithm>

#include "storage/checkpoint_format.h"
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

std::string AdmissionFilter::Encode() const {
  namespace cf = checkpoint_format;
  std::string out;
  if (counts_.empty()) return out;
  out.reserve(12 + 2 * counts_.size());
  cf::PutFixed64(&out, adds_);
  cf::PutFixed32(&out, static_cast<uint32_t>(counts_.size()));
  for (uint16_t c : counts_) {
    out.push_back(static_cast<char>(c & 0xff));
    out.push_back(static_cast<char>(c >> 8));
  }
  return out;
}

Status AdmissionFilter::Decode(std::string_view bytes) {
  namespace cf = checkpoint_format;
  if (bytes.empty()) {
    Clear();
    return Status::Ok();
  }
  const uint64_t size = kDepth * width_;
  if (bytes.size() < 12 || cf::DecodeFixed32(bytes.data() + 8) != size ||
      bytes.size() != 12 + 2 * size) {
    return InvalidArgumentError(
        "admission counts of " + std::to_string(bytes.size()) +
        " bytes do not fit a filter of " + std::to_string(size) +
        " counters (" + std::to_string(12 + 2 * size) + " bytes)");
  }
  const uint64_t adds = cf::DecodeFixed64(bytes.data());
  if (adds > size) {
    return InvalidArgumentError("admission counts say " + std::to_string(adds) +
                                " adds since aging, over the " +
                                std::to_string(size) + " counters");
  }
  std::vector<uint16_t> counts(size);
  for (uint64_t i = 0; i < size; ++i) {
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data() + 12 + 2 * i);
    counts[i] = static_cast<uint16_t>(p[0] | (p[1] << 8));
    if (counts[i] > threshold_) {
      return InvalidArgumentError(
          "an admission count of " + std::to_string(counts[i]) +
          " is above the threshold " + std::to_string(threshold_));
    }
  }
  counts_ = std::move(counts);
  adds_ = adds;
  return Status::Ok();
}

}  // namespace ductile
