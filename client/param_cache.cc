#include "client/param_cache.h"

#include <algorithm>
#include <cstring>

#include "routing/slot_map.h"
#include "util/split_mix.h"

namespace ductile {

size_t ParamCache::Hash::operator()(const std::pair<TableId, Key>& k) const {
  return SplitMix64(k.second ^ (uint64_t{k.first} << 48));
}

bool ParamCache::TryRead(TableId table, std::span<const Key> keys,
                         const Offset& offset, const Length& length,
                         int64_t min_data_clock, std::span<float> out) {
  MutexLock lock(&mu_);
  std::vector<const Entry*> found(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = entries_.find({table, keys[i]});
    if (it == entries_.end() || !it->second.valid ||
        it->second.data_clock < min_data_clock ||
        it->second.value.size() != length(i)) {
      return false;
    }
    found[i] = &it->second;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    std::memcpy(out.data() + offset(i), found[i]->value.data(),
                found[i]->value.size() * sizeof(float));
  }
  return true;
}

void ParamCache::Write(TableId table, std::span<const Key> keys,
                       const Offset& offset, const Length& length,
                       std::span<const float> values,
                       const UpdateRuleKernel& rule, float lr_factor) {
  MutexLock lock(&mu_);
  const uint64_t write = ++writes_;
  for (size_t i = 0; i < keys.size(); ++i) {
    Entry& e = entries_[{table, keys[i]}];
    e.last_write = write;
    if (!e.valid || e.value.size() != length(i)) {
      e.valid = false;
      continue;
    }
    if (!rule.stateless()) {
      // The server's optimizer state is not here: fetch again.
      e.valid = false;
      e.value.clear();
      continue;
    }
    int64_t steps = 0;  // stateless rules do not read it
    rule.Apply(e.value, values.subspan(offset(i), e.value.size()), {}, &steps,
               lr_factor);
  }
}

uint64_t ParamCache::Mark() const {
  MutexLock lock(&mu_);
  return writes_;
}

void ParamCache::Install(TableId table, Key key, std::span<const float> value,
                         int64_t data_clock, uint64_t mark) {
  MutexLock lock(&mu_);
  Entry& e = entries_[{table, key}];
  if (e.last_write > mark) return;  // a newer local write is not in `value`
  if (e.valid && e.data_clock > data_clock) return;  // have a fresher copy
  e.value.assign(value.begin(), value.end());
  e.data_clock = data_clock;
  e.valid = true;
}

void ParamCache::Clear() {
  MutexLock lock(&mu_);
  for (auto& [key, e] : entries_) {
    e.valid = false;
    e.value.clear();
  }
}

void ParamCache::DropTable(TableId table) {
  MutexLock lock(&mu_);
  for (auto& [key, e] : entries_) {
    if (key.first != table) continue;
    e.valid = false;
    e.value.clear();
  }
}

size_t ParamCache::size() const {
  MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace ductile
