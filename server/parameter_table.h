// One table's keys on one server: values, optimizer state, update rule.
//
// Push is all-or-nothing: CheckPush validates every key of a request before
// ApplyPush changes anything, so a refused request leaves the table as it
// was. Not thread-safe: owned by a server's request thread, which may hand
// the pieces of a large push to a ParallelRunner's threads and waits for
// them (set_runner).
#ifndef DUCTILE_SERVER_PARAMETER_TABLE_H_
#define DUCTILE_SERVER_PARAMETER_TABLE_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "ductile/status.h"
#include "ductile/table.h"
#include "proto/codec.h"
#include "storage/checkpoint_store.h"
#include "util/parallel_runner.h"
#include "util/update_rule.h"

namespace ductile {

class ParameterTable {
 public:
  ParameterTable(TableId id, const TableOptions& options,
                 const CustomRule* custom);

  TableId id() const { return id_; }
  // Pushes (and BSP clocks) of kParallelMinFloats floats or more in all
  // are split into pieces of at least kMinPieceFloats that `runner`'s
  // threads apply at once, the request thread among them; the result is
  // the same, float for float. Null (the default): all on the caller.
  // Custom rules always run on the caller.
  void set_runner(ParallelRunner* runner) { runner_ = runner; }
  static constexpr size_t kParallelMinFloats = size_t{1} << 15;
  static constexpr size_t kMinPieceFloats = size_t{1} << 13;
  // Pushes of this many floats or more are checked for NaN and infinities
  // in pieces on the runner's threads. Higher than kParallelMinFloats: the
  // check reads each float once at memory speed, and below 4 MB waking the
  // threads costs more than it saves (a 1 MiB push on 2 cores went 0.74x).
  static constexpr size_t kParallelCheckMinFloats = size_t{1} << 20;
  const TableOptions& options() const { return options_; }

  // Refuses non-finite values (when the table asks for it) and widths that
  // differ from an existing key's (variable-width tables).
  Status CheckPush(const DataFrames& request) const;
  // Applies a checked push made at `clock` (its learning-rate factor,
  // TableOptions::lr_schedule).
  void ApplyPush(const DataFrames& request, int64_t clock);
  // Applies one vector to one key (a BSP clock's combined pushes). An
  // existing key of another width is left unchanged (InvalidArgument): a
  // push from a peer that is no worker may have created it, with its own
  // width, after the pushes were checked and buffered.
  // `batch_factor` multiplies the learning rate as well (BatchFactor).
  Status ApplyOne(Key key, std::span<const float> update, int64_t clock,
                  float batch_factor = 1.0f);
  // Applies one BSP clock's pushes to `key`, summed in `sum` (weighted by
  // their batches for a mean, BspBuffer::Add), standing for `batches`
  // worker batches: their mean over the batches under BspCombine::kMean
  // (not for assign tables), else the sum. `sum` is scaled in place.
  Status ApplyCombined(Key key, std::span<float> sum, int32_t batches,
                       BspCombine combine, int64_t clock) {
    const float scale = CombinedScale(batches, combine);
    if (scale != 1.0f) {
      for (float& x : sum) x *= scale;
    }
    return ApplyOne(key, sum, clock, BatchFactor(clock, batches, combine));
  }
  // The learning-rate factor TableOptions::batch_scaling gives BSP clock
  // `clock`, whose keys' pushes stood for at most `batches` worker batches
  // here (ignored unless combined by the mean), ramped from the factor of
  // the clocks before.
  float BatchFactor(int64_t clock, int32_t batches, BspCombine combine);
  // The gradient noise scale this server estimates, in worker batches (0:
  // none yet), for BatchScaling::Rule::kAdaScale.
  void SetNoiseScale(double worker_batches) { noise_scale_ = worker_batches; }
  // What a combined sum standing for `batches` worker batches (BatchesOf)
  // is multiplied by before it is applied: 1 / batches for a mean (not for
  // assign tables), else 1.
  float CombinedScale(int32_t batches, BspCombine combine) const {
    return options_.rule != UpdateRule::kAssign &&
                   combine == BspCombine::kMean && batches > 1
               ? 1.0f / static_cast<float>(batches)
               : 1.0f;
  }
  // The worker batches a combined entry's pushes stood for (`batches`, or
  // `pushes` when it says none).
  template <typename Combined>
  static int32_t BatchesOf(const Combined& c) {
    return c.batches > 0 ? c.batches : c.pushes;
  }
  // ApplyCombined for each of `keys`' (key, pushes combined) pairs of one
  // BSP clock; a key of another width is skipped and named in `errors`.
  template <typename Combined>
  void ApplyCombinedAll(std::unordered_map<Key, Combined>& keys,
                        BspCombine combine, int64_t clock,
                        std::vector<Status>* errors);
  // Checks a pull's widths against stored keys (variable-width tables).
  Status CheckPull(const DataFrames& request) const;
  // Appends the requested keys' values to `out`; an absent key reads as its
  // initial value and is not stored (only a push stores a key).
  void Pull(const DataFrames& request, std::vector<float>* out);
  // The same into `out`, which holds request.total_floats() floats (a
  // worker's shared memory).
  void PullInto(const DataFrames& request, float* out);

  // Checkpoints. Keys whose value or optimizer state changed since the last
  // TakeChanges (keys only ever pulled hold their initial value, which the
  // initializer reproduces, so they need not be written).
  // Appends a copy of each changed entry to `out` and forgets the changes.
  void TakeChanges(std::vector<EntryRecord>* out);
  size_t changed() const { return changed_.size(); }
  // Bytes TakeChanges would copy now (values and optimizer state).
  uint64_t changed_bytes() const;
  // Counts `key` as changed again (its checkpoint write failed).
  void MarkChanged(Key key) {
    auto it = entries_.find(key);
    if (it != entries_.end()) MarkChanged(key, it->second);
  }
  // Calls f(key) for every key.
  template <typename F>
  void ForEachKey(F&& f) const {
    for (const auto& [key, e] : entries_) f(key);
  }
  // Puts a stored entry back (restore). `changed`: count it as changed
  // since the last checkpoint (an entry this server's store does not hold).
  void Restore(EntryRecord&& record, bool changed);
  // Removes every key (a rollback starts from the checkpoint's state).
  void Clear();
  // Copies out the keys for which `pred(key)` holds.
  template <typename Pred>
  void Export(Pred&& pred, std::vector<EntryRecord>* out) const {
    for (const auto& [key, e] : entries_) {
      if (pred(key)) out->push_back(ToRecord(key, e));
    }
  }
  // Removes the keys for which `pred(key)` holds (their slots moved away);
  // returns how many.
  template <typename Pred>
  size_t EraseIf(Pred&& pred) {
    const size_t before = entries_.size();
    std::erase_if(entries_, [&](const auto& kv) {
      if (!pred(kv.first)) return false;
      stored_floats_ -= kv.second.value.size() + kv.second.state.size();
      return true;
    });
    if (entries_.size() != before) {
      std::erase_if(changed_, [&](Key k) { return entries_.count(k) == 0; });
    }
    return before - entries_.size();
  }

  // Floats held (values and optimizer state), over every key.
  uint64_t stored_floats() const { return stored_floats_; }
  // Floats a push of `request` would add: its keys not held yet, with
  // their optimizer state.
  uint64_t NewFloats(const DataFrames& request) const;

  // Reads one key (tests, debugging); false if absent.
  bool Get(Key key, std::vector<float>* value) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::vector<float> value;
    std::vector<float> state;
    int64_t steps = 0;
    bool changed = false;  // listed in changed_
  };
  void MarkChanged(Key key, Entry& e) {
    if (!e.changed) {
      e.changed = true;
      changed_.push_back(key);
    }
  }
  Entry& FindOrCreate(Key key, uint32_t width);
  // One key's share of a parallel apply: `g` (scaled in place by `scale`
  // first, when not 1) applied to `entry`, whose steps count it already.
  struct Work {
    Entry* entry;
    float* scaled;  // g, writable, when scale != 1
    const float* g;
    float scale;
  };
  // Applies `work` (distinct entries) on the runner's threads.
  void RunWork(const std::vector<Work>& work, float factor);
  // Entries laid end to end (entry i holds floats [starts[i], starts[i +
  // 1])), cut into pieces on the runner's threads (a runner of 2 threads or
  // more): range(i, begin, stop) for each part [begin, stop) of entry i,
  // every float once. Returns when all are done.
  void InPieces(const std::vector<size_t>& starts,
                const std::function<void(size_t, size_t, size_t)>& range) const;
  // True if `work` may run in pieces: a runner with helpers, a splittable
  // rule and at least kParallelMinFloats floats.
  bool Parallel(size_t floats) const {
    return runner_ != nullptr && runner_->threads() > 1 &&
           kernel_.splittable() && floats >= kParallelMinFloats;
  }
  EntryRecord ToRecord(Key key, const Entry& e) const {
    return EntryRecord{id_, key, e.value,
                       kernel_.ExportState(e.state, e.value.size()), e.steps};
  }
  Status CheckWidths(const DataFrames& request) const;
  // Whether every value of the push is finite; on the runner's threads for
  // a large push.
  bool AllValuesFinite(const DataFrames& request) const;

  const TableId id_;
  const TableOptions options_;
  const UpdateRuleKernel kernel_;
  std::unordered_map<Key, Entry> entries_;
  uint64_t stored_floats_ = 0;
  std::vector<Key> changed_;  // keys with Entry::changed set
  BatchScaleRamp batch_ramp_;
  float batch_target_ = 1.0f;  // the factor last logged
  double noise_scale_ = 0;     // SetNoiseScale
  int64_t batch_clock_ = 0;    // the newest BSP clock seen
  bool batch_seen_ = false;    // any clock yet
  ParallelRunner* runner_ = nullptr;
};

template <typename Combined>
void ParameterTable::ApplyCombinedAll(std::unordered_map<Key, Combined>& keys,
                                      BspCombine combine, int64_t clock,
                                      std::vector<Status>* errors) {
  size_t floats = 0;
  int32_t batches = 0;
  for (const auto& kv : keys) {
    floats += kv.second.values.size();
    batches = std::max(batches, BatchesOf(kv.second));
  }
  const float batch = BatchFactor(clock, batches, combine);
  if (!Parallel(floats)) {
    for (auto& [key, c] : keys) {
      const float scale = CombinedScale(BatchesOf(c), combine);
      if (scale != 1.0f) {
        for (float& x : c.values) x *= scale;
      }
      Status s = ApplyOne(key, c.values, clock, batch);
      if (!s.ok()) errors->push_back(std::move(s));
    }
    return;
  }
  // Keys of a map are distinct: no entry is taken twice.
  std::vector<Work> work;
  work.reserve(keys.size());
  for (auto& [key, c] : keys) {
    Entry& e = FindOrCreate(key, static_cast<uint32_t>(c.values.size()));
    if (e.value.size() != c.values.size()) {
      errors->push_back(ApplyOne(key, c.values, clock, batch));  // refuses
      continue;
    }
    ++e.steps;
    MarkChanged(key, e);
    work.push_back(Work{&e, c.values.data(), c.values.data(),
                        CombinedScale(BatchesOf(c), combine)});
  }
  RunWork(work, kernel_.Factor(clock) * batch);
}

}  // namespace ductile

#endif  // DUCTILE_SERVER_PARAMETER_TABLE_H_
