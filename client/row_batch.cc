#include "client/row_batch.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

namespace ductile {

namespace {

using IdAt = std::pair<Key, uint32_t>;  // an id and its place in the batch

// Below this many ids a comparison sort is as fast.
constexpr size_t kRadixMinIds = 256;

// Sorts `a` by id, stably: a least-significant-digit radix sort on 8-bit
// digits, skipping a digit every id shares (small ids skip the high ones).
// `scratch` has a's size.
void RadixSort(std::vector<IdAt>& a, std::vector<IdAt>& scratch) {
  std::array<std::array<uint32_t, 256>, 8> counts{};
  for (const IdAt& p : a) {
    for (int d = 0; d < 8; ++d) ++counts[d][(p.first >> (8 * d)) & 255];
  }
  for (int d = 0; d < 8; ++d) {
    std::array<uint32_t, 256>& count = counts[d];
    if (count[(a[0].first >> (8 * d)) & 255] == a.size()) continue;
    uint32_t start = 0;
    for (uint32_t& c : count) start += std::exchange(c, start);
    for (const IdAt& p : a) scratch[count[(p.first >> (8 * d)) & 255]++] = p;
    a.swap(scratch);
  }
}

}  // namespace

RowBatch::RowBatch(std::span<const Key> ids) {
  std::vector<IdAt> sorted(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    sorted[i] = {ids[i], static_cast<uint32_t>(i)};
  }
  if (ids.size() < kRadixMinIds) {
    std::sort(sorted.begin(), sorted.end());
  } else {
    std::vector<IdAt> scratch(ids.size());
    RadixSort(sorted, scratch);
  }
  rows_.resize(ids.size());
  for (const auto& [id, i] : sorted) {
    if (keys_.empty() || keys_.back() != id) keys_.push_back(id);
    rows_[i] = static_cast<uint32_t>(keys_.size() - 1);
  }
}

bool RowBatch::IsStrictlyIncreasing(std::span<const Key> ids) {
  for (size_t i = 1; i < ids.size(); ++i) {
    if (ids[i] <= ids[i - 1]) return false;
  }
  return true;
}

void RowBatch::Expand(std::span<const float> unique, uint32_t width,
                      std::span<float> out) const {
  for (size_t i = 0; i < rows_.size(); ++i) {
    std::memcpy(out.data() + i * width,
                unique.data() + uint64_t{rows_[i]} * width,
                width * sizeof(float));
  }
}

void RowBatch::Sum(std::span<const float> rows, uint32_t width,
                   std::span<float> sums) const {
  std::fill(sums.begin(), sums.end(), 0.0f);
  for (size_t i = 0; i < rows_.size(); ++i) {
    const float* from = rows.data() + i * width;
    float* to = sums.data() + uint64_t{rows_[i]} * width;
    for (uint32_t j = 0; j < width; ++j) to[j] += from[j];
  }
}

void RowsOperation::OnDone(bool ok) {
  // The width is the one SubmitData found (the table's, known before the
  // rows were sized): expand only rows of that shape.
  if (!ok || rows.size() != batch.keys().size() * uint64_t{width}) return;
  if (!expand_into.empty()) batch.Expand(rows, width, expand_into);
}

}  // namespace ductile
