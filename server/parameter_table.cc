#include "server/parameter_table.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "glog/logging.h"
#include "server/initializer.h"
#include "storage/checkpoint_format.h"
#include "util/finite.h"

namespace ductile {
ParameterTable::ParameterTable(TableId id, const TableOptions& options,
                               const CustomRule* custom)
    : id_(id),
      options_(options),
      kernel_(options, custom),
      filter_(id, options.rows.admit_after_pushes,
              options.rows.admission_counters != 0
                  ? options.rows.admission_counters
                  : uint64_t{1} << 20),
      use_(UINT16_MAX, UseCounters(options.rows)),
      batch_ramp_(options.batch_scaling.ramp_clocks) {}

uint64_t ParameterTable::UseCounters(const RowPolicy& rows) {
  if (rows.eviction != RowPolicy::Eviction::kLeastUsed || rows.max_rows == 0) {
    return AdmissionFilter::kDepth;  // never allocated: nothing counted
  }
  // 16 counters (32 bytes) per row of the budget, up to 2^24: it ages
  // after as many pushes.
  return std::clamp<uint64_t>(kUseCountersPerRow * rows.max_rows, 1024,
                              uint64_t{1} << 24);
}

float ParameterTable::BatchFactor(int64_t clock, int32_t batches,
                                  BspCombine combine) {
  if (options_.batch_scaling.rule == BatchScaling::Rule::kNone ||
      combine != BspCombine::kMean || options_.rule == UpdateRule::kAssign) {
    return 1.0f;
  }
  const float target =
      BatchScalingFactor(options_.batch_scaling, batches, noise_scale_);
  // AdaScale's gain moves every clock: logged when it moved by a tenth.
  const bool moved =
      options_.batch_scaling.rule == BatchScaling::Rule::kAdaScale
          ? !batch_seen_ || std::abs(target - batch_target_) >
                                0.1f * std::max(batch_target_, 1.0f)
          : target != batch_target_;
  if (moved && (!batch_seen_ || clock > batch_clock_)) {
    LOG(INFO) << "table '" << options_.name << "': learning-rate batch factor "
              << target << " (" << batches << " worker batches a clock, base "
              << options_.batch_scaling.base_pushes
              << (options_.batch_scaling.rule == BatchScaling::Rule::kAdaScale
                      ? ", noise scale " + std::to_string(noise_scale_) +
                            " worker batches"
                      : std::string())
              << ") from clock " << clock << ", reached over "
              << options_.batch_scaling.ramp_clocks << " clocks";
    batch_target_ = target;
  }
  batch_clock_ = batch_seen_ ? std::max(batch_clock_, clock) : clock;
  batch_seen_ = true;
  return batch_ramp_.Next(clock, target);
}

Status ParameterTable::CheckWidths(const DataFrames& request) const {
  if (options_.value_width != 0) return Status::Ok();  // checked by the codec
  const auto keys = request.keys();
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = entries_.find(keys[i]);
    if (it != entries_.end() && it->second.value.size() != request.length(i)) {
      return InvalidArgumentError(
          "key " + std::to_string(keys[i]) + " of table '" + options_.name +
          "' has width " + std::to_string(it->second.value.size()) +
          ", request says " + std::to_string(request.length(i)));
    }
  }
  return Status::Ok();
}

Status ParameterTable::CheckPush(const DataFrames& request) const {
  DUCTILE_RETURN_IF_ERROR(CheckWidths(request));
  if (!options_.reject_non_finite) return Status::Ok();
  if (AllValuesFinite(request)) return Status::Ok();
  const auto keys = request.keys();
  size_t i = 0;  // the first key holding a non-finite value
  while (i + 1 < keys.size() && AllFinite(request.value(i))) ++i;
  return InvalidArgumentError("non-finite value (NaN or Inf) pushed to key " +
                              std::to_string(keys[i]) + " of table '" +
                              options_.name + "'; table left unchanged");
}

bool ParameterTable::AllValuesFinite(const DataFrames& request) const {
  const size_t n = request.keys().size();
  if (runner_ == nullptr || runner_->threads() <= 1 ||
      request.total_floats() < kParallelCheckMinFloats) {
    for (size_t i = 0; i < n; ++i) {
      if (!AllFinite(request.value(i))) return false;
    }
    return true;
  }
  // Every byte of the push read once, on all the runner's threads.
  std::vector<size_t> starts(n + 1, 0);
  for (size_t i = 0; i < n; ++i) starts[i + 1] = starts[i] + request.length(i);
  std::atomic<bool> finite{true};
  InPieces(starts, [&](size_t i, size_t begin, size_t stop) {
    if (finite.load(std::memory_order_relaxed) &&
        !AllFinite(request.value(i).subspan(begin, stop - begin))) {
      finite.store(false, std::memory_order_relaxed);
    }
  });
  return finite.load(std::memory_order_relaxed);
}

Status ParameterTable::CheckPull(const DataFrames& request) const {
  return CheckWidths(request);
}

ParameterTable::Entry* ParameterTable::Admit(Key key, uint32_t width,
                                             uint32_t pushes) {
  if (counts_use()) use_.Add(key, pushes);
  auto it = entries_.find(key);
  if (it != entries_.end()) return &it->second;
  if (!filter_.Add(key, pushes)) {
    row_counts_.dropped_pushes += pushes;
    return nullptr;
  }
  Entry& e = entries_[key];
  e.key = key;
  e.value.resize(width);
  InitializeValue(options_.init, id_, key, e.value);
  e.state.assign(kernel_.state_floats(width), 0.0f);
  stored_floats_ += e.value.size() + e.state.size();
  ++row_counts_.admitted;
  // Evicted before and not deleted yet: the store still holds it.
  e.in_store = keeps_evicted_ && evicted_.erase(key) > 0;
  return &e;
}

void ParameterTable::Touch(Entry& e) {
  if (!tracks_use()) return;
  e.used_clock = clock_;
  if (newest_ == &e) return;
  Unlink(e);
  e.older = newest_;
  if (newest_ != nullptr) newest_->newer = &e;
  newest_ = &e;
  if (oldest_ == nullptr) oldest_ = &e;
}

void ParameterTable::Unlink(Entry& e) {
  if (e.older != nullptr) e.older->newer = e.newer;
  if (e.newer != nullptr) e.newer->older = e.older;
  if (oldest_ == &e) oldest_ = e.newer;
  if (newest_ == &e) newest_ = e.older;
  e.older = e.newer = nullptr;
}

void ParameterTable::Evict(Key key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  Unlink(e);
  stored_floats_ -= e.value.size() + e.state.size();
  if (e.changed) ++changed_stale_;  // still listed in changed_
  const bool in_store = e.in_store;
  entries_.erase(it);
  if (keeps_evicted_ && in_store) evicted_.insert(key);
  if (replicating_) replica_evicted_.push_back(key);
  // Listed keys no longer stored are dropped once they are half the list,
  // so that the list stays within twice the changed rows.
  if (changed_stale_ > 64 && 2 * changed_stale_ > changed_.size()) {
    std::erase_if(changed_, [&](Key k) {
      auto found = entries_.find(k);
      return found == entries_.end() || !found->second.changed;
    });
    // A key evicted and stored again may be listed twice: once is enough.
    for (Key k : changed_) entries_.at(k).changed = false;
    std::erase_if(changed_, [&](Key k) {
      Entry& x = entries_.at(k);
      if (x.changed) return true;
      x.changed = true;
      return false;
    });
    changed_stale_ = 0;
  }
}

void ParameterTable::EnforceBudget() {
  const uint64_t budget = options_.rows.max_rows;
  if (budget == 0 || evictions_held_ || entries_.size() <= budget) return;
  if (options_.rows.eviction != RowPolicy::Eviction::kLeastUsed) {
    while (entries_.size() > budget && oldest_ != nullptr) {
      Evict(oldest_->key);
      ++row_counts_.evicted_budget;
    }
    return;
  }
  // The `excess` rows pushed the fewest times (the oldest of equals) among
  // the 2 x excess + kLeastUsedWindow least recently updated, at a cost in
  // proportion to the rows the push brought: a push of about max_rows -
  // kLeastUsedWindow rows or more has its own rows among them.
  const uint64_t excess = entries_.size() - budget;
  const uint64_t compared = std::min<uint64_t>(
      entries_.size(), 2 * excess + uint64_t{kLeastUsedWindow});
  struct Candidate {
    uint32_t uses;
    uint64_t age;  // 0: the least recently updated
    Key key;
  };
  std::vector<Candidate> candidates;
  candidates.reserve(compared);
  for (const Entry* e = oldest_; e != nullptr && candidates.size() < compared;
       e = e->newer) {
    candidates.push_back(
        Candidate{use_.Count(e->key), candidates.size(), e->key});
  }
  const auto fewer = [](const Candidate& a, const Candidate& b) {
    return a.uses != b.uses ? a.uses < b.uses : a.age < b.age;
  };
  const size_t going = std::min<size_t>(excess, candidates.size());
  std::nth_element(candidates.begin(), candidates.begin() + going,
                   candidates.end(), fewer);
  // Evicted oldest first, as the list would have them go one by one.
  std::sort(
      candidates.begin(), candidates.begin() + going,
      [](const Candidate& a, const Candidate& b) { return a.age < b.age; });
  for (size_t i = 0; i < going; ++i) {
    Evict(candidates[i].key);
    ++row_counts_.evicted_budget;
  }
}

void ParameterTable::SetClock(int64_t clock) {
  clock_ = clock;
  const int64_t idle = options_.rows.evict_idle_clocks;
  if (idle > 0 && !evictions_held_) {
    while (oldest_ != nullptr && clock - oldest_->used_clock >= idle) {
      Evict(oldest_->key);
      ++row_counts_.evicted_idle;
    }
  }
  EnforceBudget();  // held back while evictions were
}

void ParameterTable::RestartClock(int64_t clock) {
  clock_ = clock;
  for (Entry* e = oldest_; e != nullptr; e = e->newer) e->used_clock = clock;
}

void ParameterTable::TakeEvicted(std::vector<std::pair<TableId, Key>>* out) {
  for (Key key : evicted_) out->emplace_back(id_, key);
  evicted_.clear();
}

uint64_t ParameterTable::NewFloats(const DataFrames& request) const {
  uint64_t floats = 0;
  const auto keys = request.keys();
  for (size_t i = 0; i < keys.size(); ++i) {
    // Counted whether the push admits the key or not: under BSP the
    // pushes of a clock are combined, and may admit it, after this check.
    if (entries_.count(keys[i]) == 0) {
      floats += request.length(i) + kernel_.state_floats(request.length(i));
    }
  }
  // A new key's push may allocate its slot's admission counters.
  if (floats > 0 && !filter_.admits_all()) {
    std::unordered_set<int32_t> slots;
    for (Key key : keys) {
      if (entries_.count(key) == 0 && !filter_.Allocated(key)) {
        slots.insert(filter_.SlotOf(key));
      }
    }
    floats += slots.size() * filter_.slot_bytes() / sizeof(float);
  }
  // The first push allocates the use counts (eviction by use).
  if (counts_use() && use_.bytes() == 0 && !keys.empty()) {
    floats += use_.full_bytes() / sizeof(float);
  }
  return floats;
}

void ParameterTable::ApplyPush(const DataFrames& request, int64_t clock,
                               float rate_factor) {
  const auto keys = request.keys();
  const float factor = kernel_.Factor(clock) * rate_factor;
  if (Parallel(request.total_floats())) {
    // The codec admits strictly increasing keys only: no entry comes twice.
    std::vector<Work> work;
    work.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      Entry* e = Admit(keys[i], request.length(i), 1);
      if (e == nullptr) continue;  // not admitted: dropped
      ++e->steps;
      MarkUpdated(keys[i], *e);
      Touch(*e);
      work.push_back(Work{e, nullptr, request.value(i).data(), 1.0f});
    }
    RunWork(work, factor);
    EnforceBudget();
    return;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    Entry* e = Admit(keys[i], request.length(i), 1);
    if (e == nullptr) continue;  // not admitted: dropped
    kernel_.Apply(e->value, request.value(i), e->state, &e->steps, factor);
    MarkUpdated(keys[i], *e);
    Touch(*e);
  }
  EnforceBudget();
}

void ParameterTable::RunWork(const std::vector<Work>& work, float factor) {
  std::vector<size_t> starts(work.size() + 1, 0);
  for (size_t i = 0; i < work.size(); ++i) {
    starts[i + 1] = starts[i] + work[i].entry->value.size();
  }
  InPieces(starts, [&](size_t i, size_t begin, size_t stop) {
    const Work& w = work[i];
    Entry& e = *w.entry;
    if (w.scale != 1.0f) {
      for (size_t k = begin; k < stop; ++k) w.scaled[k] *= w.scale;
    }
    kernel_.ApplyRange(e.value, std::span<const float>(w.g, e.value.size()),
                       e.state, e.steps, factor * w.rate, begin, stop);
  });
}

void ParameterTable::InPieces(
    const std::vector<size_t>& starts,
    const std::function<void(size_t, size_t, size_t)>& range) const {
  // Cut end to end into pieces of equal length: a few per thread, so that
  // one slow thread does not hold up the others.
  const size_t total = starts.back();
  const size_t wanted = 4 * static_cast<size_t>(runner_->threads());
  const size_t piece = std::max(kMinPieceFloats, (total + wanted - 1) / wanted);
  runner_->Run((total + piece - 1) / piece, [&](size_t p) {
    size_t at = p * piece;
    const size_t end = std::min(total, at + piece);
    // The last entry that starts at or before `at`.
    size_t i = static_cast<size_t>(
        std::upper_bound(starts.begin(), starts.end() - 1, at) -
        starts.begin() - 1);
    while (at < end) {
      const size_t stop = std::min(end, starts[i + 1]) - starts[i];
      range(i, at - starts[i], stop);
      at = starts[i] + stop;
      ++i;
    }
  });
}

Status ParameterTable::ApplyOne(Key key, std::span<const float> update,
                                int64_t clock, float batch_factor,
                                uint32_t pushes) {
  Status s = ApplyEntry(key, update, clock, batch_factor, pushes);
  EnforceBudget();
  return s;
}

Status ParameterTable::ApplyEntry(Key key, std::span<const float> update,
                                  int64_t clock, float batch_factor,
                                  uint32_t pushes) {
  Entry* found = Admit(key, static_cast<uint32_t>(update.size()), pushes);
  if (found == nullptr) return Status::Ok();  // not admitted: dropped
  Entry& e = *found;
  if (e.value.size() != update.size()) {
    return InvalidArgumentError(
        "key " + std::to_string(key) + " of table '" + options_.name +
        "' has width " + std::to_string(e.value.size()) + ", its pushes of " +
        std::to_string(update.size()) + " floats are dropped");
  }
  kernel_.Apply(e.value, update, e.state, &e.steps,
                kernel_.Factor(clock) * batch_factor);
  MarkUpdated(key, e);
  Touch(e);
  return Status::Ok();
}

uint64_t ParameterTable::changed_bytes() const {
  uint64_t bytes = 0;
  for (Key key : changed_) {
    auto it = entries_.find(key);  // absent: evicted since
    if (it == entries_.end()) continue;
    bytes +=
        (it->second.value.size() + it->second.state.size()) * sizeof(float);
  }
  return bytes;
}

void ParameterTable::TakeChanges(std::vector<EntryRecord>* out) {
  out->reserve(out->size() + changed_.size());
  for (Key key : changed_) {
    // Skipped: evicted since it was listed, or listed again after it was
    // evicted and stored again (taken once already).
    auto it = entries_.find(key);
    if (it == entries_.end() || !it->second.changed) continue;
    it->second.changed = false;
    it->second.in_store = true;
    out->push_back(ToRecord(key, it->second));
  }
  changed_.clear();
  changed_stale_ = 0;
}

void ParameterTable::Restore(EntryRecord&& record, bool changed) {
  Entry& e = entries_[record.key];
  e.key = record.key;
  Touch(e);
  if (keeps_evicted_ && evicted_.erase(record.key) > 0) e.in_store = true;
  if (!changed) e.in_store = true;  // read from the store
  stored_floats_ -= e.value.size() + e.state.size();
  e.value = std::move(record.value);
  e.state = kernel_.ImportState(std::move(record.state), e.value.size());
  e.steps = record.steps;
  stored_floats_ += e.value.size() + e.state.size();
  // Its pushes before, as far as it knows them (the sketch is not stored).
  if (counts_use() && use_.Count(record.key) == 0 && record.steps > 0) {
    use_.Add(record.key, static_cast<uint32_t>(
                             std::min<int64_t>(record.steps, UINT16_MAX)));
  }
  if (changed) MarkChanged(record.key, e);
}

size_t ParameterTable::EntryValueBytes(RowRef row) const {
  const Entry& e = *row.entry_;
  const auto [first, second] = kernel_.ExportedParts(e.state, e.value.size());
  return checkpoint_format::kEntryHeaderSize +
         4 * (e.value.size() + first.size() + second.size());
}

void ParameterTable::AppendEntryValue(RowRef row, std::string* out) const {
  namespace cf = checkpoint_format;
  const Entry& e = *row.entry_;
  const auto [first, second] = kernel_.ExportedParts(e.state, e.value.size());
  cf::AppendEntryHeader(e.value.size(), first.size() + second.size(), e.steps,
                        out);
  cf::AppendFloats(e.value, out);
  cf::AppendFloats(first, out);
  cf::AppendFloats(second, out);
}

void ParameterTable::Clear() {
  entries_.clear();
  stored_floats_ = 0;
  changed_.clear();
  changed_stale_ = 0;
  replica_changed_.clear();
  replica_evicted_.clear();
  oldest_ = newest_ = nullptr;
  // The store goes back to the checkpoint too, and the counts of ids not
  // admitted come back from it (RestoreCounts).
  evicted_.clear();
  filter_.Clear();
  use_.Clear();  // restored rows count their steps (Restore)
  // The clocks start again from the checkpoint's: no ramp carries over.
  batch_ramp_ = BatchScaleRamp(options_.batch_scaling.ramp_clocks);
  batch_target_ = 1.0f;
  batch_clock_ = 0;
  batch_seen_ = false;
}

void ParameterTable::Pull(const DataFrames& request, std::vector<float>* out) {
  const auto keys = request.keys();
  out->reserve(out->size() + request.total_floats());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = entries_.find(keys[i]);
    if (it != entries_.end()) {
      out->insert(out->end(), it->second.value.begin(), it->second.value.end());
      continue;
    }
    // An absent key reads as its initial value, without being stored: the
    // value is a function of (table, key, element), the same whenever it
    // is made, and pulls of keys never pushed must not grow the server.
    const size_t at = out->size();
    out->resize(at + request.length(i));
    InitializeValue(options_.init, id_, keys[i],
                    std::span<float>(out->data() + at, request.length(i)));
  }
}

void ParameterTable::PullInto(const DataFrames& request, float* out) {
  const auto keys = request.keys();
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::span<float> to(out, request.length(i));
    out += to.size();
    auto it = entries_.find(keys[i]);
    if (it == entries_.end()) {
      InitializeValue(options_.init, id_, keys[i], to);
      continue;
    }
    // CheckPull and the codec: a stored key's width is the request's (the
    // bound keeps a broken invariant from reading past the value).
    const size_t n = std::min(to.size(), it->second.value.size());
    std::memcpy(to.data(), it->second.value.data(), n * sizeof(float));
    std::fill(to.begin() + n, to.end(), 0.0f);
  }
}

bool ParameterTable::Get(Key key, std::vector<float>* value) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  *value = it->second.value;
  return true;
}

}  // namespace ductile
