#include "server/noise_monitor.h"

#include <algorithm>

#include "util/split_mix.h"

namespace ductile {

size_t GradientNoiseMonitor::TableKeyHash::operator()(const TableKey& k) const {
  return static_cast<size_t>(SplitMix64(k.key ^ (uint64_t{k.table} << 48)));
}

bool GradientNoiseMonitor::Sampled(TableId table, Key key) const {
  if (sample_one_in_ <= 1) return sample_one_in_ == 1;
  return SplitMix64(key * 0x9e3779b97f4a7c15ULL + table) % sample_one_in_ == 0;
}

void GradientNoiseMonitor::OnPush(
    TableId table, int32_t worker, int64_t clock, std::span<const Key> keys,
    std::span<const std::span<const float>> values, int32_t weight) {
  if (!enabled() || clock < folded_below_ || skipped_.contains(clock)) return;
  auto it = open_.find(clock);
  if (it == open_.end()) {
    if (open_.size() >= kMaxOpenClocks || open_bytes_ >= max_open_bytes_) {
      // Workers far apart: the clocks open already fold first.
      Skip(clock);
      return;
    }
    it = open_.emplace(clock, OpenClock()).first;
  }
  OpenClock& c = it->second;
  c.workers.insert(worker);
  weight = std::max(weight, 1);
  if (c.weight != 0 && c.weight != weight) c.mixed_weights = true;
  c.weight = weight;
  for (size_t i = 0; i < keys.size() && i < values.size(); ++i) {
    if (!Sampled(table, keys[i])) continue;
    const std::span<const float> g = values[i];
    auto [entry, added] = c.sum.try_emplace(TableKey{table, keys[i]});
    std::vector<float>& sum = entry->second;
    if (added || sum.size() < g.size()) {
      const uint64_t bytes =
          (g.size() > sum.size() ? (g.size() - sum.size()) * sizeof(float)
                                 : 0) +
          (added ? kKeyOverheadBytes : 0);
      c.bytes += bytes;
      open_bytes_ += bytes;
      if (sum.size() < g.size()) sum.resize(g.size());
      if (open_bytes_ > max_open_bytes_) {
        // Its sums so far would be a part of the clock only.
        Skip(clock);
        return;
      }
    }
    double sq = 0;
    for (size_t j = 0; j < g.size(); ++j) {
      sq += double{g[j]} * g[j];
      sum[j] += g[j];
    }
    c.sum_sq += sq;
  }
}

void GradientNoiseMonitor::Skip(int64_t clock) {
  auto it = open_.find(clock);
  if (it != open_.end()) {
    open_bytes_ -= it->second.bytes;
    Drop(std::move(it->second.sum));
    open_.erase(it);
  }
  skipped_.insert(clock);
}

bool GradientNoiseMonitor::OnServerClock(int64_t server_clock) {
  bool folded = false;
  while (!open_.empty() && open_.begin()->first < server_clock) {
    folded = Fold(open_.begin()->second) || folded;
    open_bytes_ -= open_.begin()->second.bytes;
    Drop(std::move(open_.begin()->second.sum));
    open_.erase(open_.begin());
  }
  if (server_clock > folded_below_) folded_below_ = server_clock;
  skipped_.erase(skipped_.begin(), skipped_.lower_bound(folded_below_));
  return folded;
}

bool GradientNoiseMonitor::Fold(const OpenClock& c) {
  const double n = static_cast<double>(c.workers.size());
  if (n < 2) return false;  // one batch size only: nothing to compare
  double big = 0;
  for (const auto& [key, sum] : c.sum) {
    for (float v : sum) big += double{v} * v;
  }
  const double small_sq = c.sum_sq / n;  // S
  const double big_sq = big / (n * n);   // B
  const double gradient_sq = (n * big_sq - small_sq) / (n - 1);
  const double noise_trace = n * (small_sq - big_sq) / (n - 1);
  if (clocks_ == 0) {
    gradient_sq_ = gradient_sq;
    noise_trace_ = noise_trace;
  } else {
    gradient_sq_ = smoothing_ * gradient_sq_ + (1 - smoothing_) * gradient_sq;
    noise_trace_ = smoothing_ * noise_trace_ + (1 - smoothing_) * noise_trace;
  }
  ++clocks_;
  if (!c.mixed_weights && c.weight >= 1) {
    worker_gradient_sq_ =
        smoothing_ * worker_gradient_sq_ + (1 - smoothing_) * gradient_sq;
    worker_noise_trace_ = smoothing_ * worker_noise_trace_ +
                          (1 - smoothing_) * noise_trace * c.weight;
    ++worker_clocks_;
  }
  return true;
}

}  // namespace ductile
