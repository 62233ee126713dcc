#include "client/row_batch.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace ductile {

RowBatch::RowBatch(std::span<const Key> ids) {
  std::vector<std::pair<Key, uint32_t>> sorted(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    sorted[i] = {ids[i], static_cast<uint32_t>(i)};
  }
  std::sort(sorted.begin(), sorted.end());
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
