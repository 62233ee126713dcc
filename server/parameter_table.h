// One table's keys on one server: values, optimizer state, update rule.
//
// Push is all-or-nothing: CheckPush validates every key of a request before
// ApplyPush changes anything, so a refused request leaves the table as it
// was.
//
// Rows (TableOptions::rows, RowPolicy): a key is stored at the push that
// admits it (its first, or its admit_after_pushes-th: the filter_ counts
// the pushes before, which are dropped) and removed when idle for
// evict_idle_clocks server clocks (SetClock) or when it is beyond max_rows
// (after each push): the least recently updated, or with
// RowPolicy::Eviction::kLeastUsed those pushed the fewest times among the
// least recently updated (2 x those over + kLeastUsedWindow), as use_
// counts them (the pushes of every id, stored or not, in a sketch that
// ages: TinyLFU's; a row restored or moved in counts its steps). The filter's
// counts are kept per slot (SlotAdmissionFilter): checkpoints store them
// (TakeCountChanges, RestoreCounts) and slot moves carry them
// (ExportCounts, EraseCounts) along with the rows. Invariants, when
// the policy evicts (tracks_use()):
//   - the use list, oldest_ -> ... -> newest_ through Entry::newer, holds
//     every entry once, in the order of their last update (or restore);
//   - Entry::used_clock never decreases along it (each is clock_ when the
//     entry was put at the newest end, and clock_ only grows between
//     RestartClock calls, which stamp every entry alike), so idle entries
//     are found from the oldest end, without scanning the table;
//   - evicted_ holds the keys evicted (or moved away, EraseIf) since the
//     last TakeEvicted that are not stored again and that the store may
//     hold (Entry::in_store; keeps_evicted_): the checkpoint deletes them. Keys
//     admitted and evicted between two checkpoints are not listed, so it stays
//     within the rows the store holds;
//   - changed_ lists every entry with Entry::changed at least once; keys
//     evicted since, or listed twice after an eviction, are skipped by
//     TakeChanges and dropped when they are half the list (Evict).
// Not thread-safe: owned by a server's request thread, which may hand
// the pieces of a large push to a ParallelRunner's threads and waits for
// them (set_runner).
#ifndef DUCTILE_SERVER_PARAMETER_TABLE_H_
#define DUCTILE_SERVER_PARAMETER_TABLE_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ductile/status.h"
#include "ductile/table.h"
#include "proto/codec.h"
#include "server/admission_filter.h"
#include "server/slot_admission_filter.h"
#include "storage/checkpoint_store.h"
#include "util/parallel_runner.h"
#include "util/sharded_map.h"
#include "util/taken_nodes.h"
#include "util/update_rule.h"

namespace ductile {

class ParameterTable {
  struct Entry;  // a stored key (below)

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
  void ApplyPush(const DataFrames& request, int64_t clock,
                 float rate_factor = 1.0f);
  // Applies one vector to one key (a BSP clock's combined pushes). An
  // existing key of another width is left unchanged (InvalidArgument): a
  // push from a peer that is no worker may have created it, with its own
  // width, after the pushes were checked and buffered.
  // `batch_factor` multiplies the learning rate as well (BatchFactor).
  // `pushes`: the pushes `update` stands for (admission counts them).
  Status ApplyOne(Key key, std::span<const float> update, int64_t clock,
                  float batch_factor = 1.0f, uint32_t pushes = 1);
  // Applies one BSP clock's pushes to `key`, summed in `sum` (weighted by
  // their batches for a mean, BspBuffer::Add), standing for `batches`
  // worker batches: their mean over the batches under BspCombine::kMean
  // (not for assign tables), else the sum. `sum` is scaled in place.
  // `pushes`: the pushes summed (admission counts them); `rate_factor`
  // multiplies the learning rate (RateOf).
  Status ApplyCombined(Key key, std::span<float> sum, int32_t batches,
                       BspCombine combine, int64_t clock, uint32_t pushes,
                       float rate_factor = 1.0f) {
    const float scale = CombinedScale(batches, combine);
    if (scale != 1.0f) {
      for (float& x : sum) x *= scale;
    }
    return ApplyOne(key, sum, clock,
                    BatchFactor(clock, batches, combine) * rate_factor, pushes);
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
  // The learning-rate factor of a combined entry's pushes
  // (Client::SetRateFactor): their mean, weighted by their batches.
  template <typename Combined>
  static float RateOf(const Combined& c) {
    return c.rate_sum > 0 && c.batches > 0
               ? c.rate_sum / static_cast<float>(c.batches)
               : 1.0f;
  }
  // ApplyCombined for each of `keys`' (key, pushes combined) pairs of one
  // BSP clock; a key of another width is skipped and named in `errors`.
  template <typename Combined>
  void ApplyCombinedAll(std::unordered_map<Key, Combined>& keys,
                        BspCombine combine, int64_t clock,
                        std::vector<Status>* errors);
  // ---- Rows (RowPolicy).
  // The server clock is now `clock`: rows idle for evict_idle_clocks are
  // removed (unless evictions are held). Updates are stamped with it.
  void SetClock(int64_t clock);
  // The server clock is `clock` after a rollback or a rejoin: every row
  // counts as updated at it (the checkpoint does not keep update clocks).
  void RestartClock(int64_t clock);
  // While held (a slot move out is under way: its rows were copied out and
  // must stay as sent), no row is evicted; released, the budget and the
  // idle clocks apply again at the next push or clock.
  void HoldEvictions(bool held) { evictions_held_ = held; }
  // Whether evicted keys are listed for the next checkpoint to delete (a
  // server with a checkpoint store); off, none are kept.
  void set_keeps_evicted(bool keeps) {
    keeps_evicted_ = keeps;
    if (!keeps) evicted_.clear();
  }
  bool tracks_use() const {
    return options_.rows.evict_idle_clocks > 0 || options_.rows.max_rows > 0;
  }
  struct RowCounts {
    uint64_t admitted = 0;        // rows created (by a push)
    uint64_t dropped_pushes = 0;  // pushes of an id not admitted, per id
    uint64_t evicted_idle = 0;    // rows removed by evict_idle_clocks
    uint64_t evicted_budget = 0;  // rows removed by max_rows
  };
  // Since the table was made (rollbacks do not take them back).
  const RowCounts& row_counts() const { return row_counts_; }
  // The pushes the admission filter holds for `key` (tests).
  uint32_t AdmissionCount(Key key) const { return filter_.Count(key); }
  // The routing's number of slots, which the filter keeps its counts by
  // (1 until set; a change drops the counts).
  void set_num_slots(int32_t num_slots) { filter_.set_num_slots(num_slots); }
  // ---- The admission filter's counts, by slot (SlotAdmissionFilter).
  // Appends the counts of the slots for which `in(slot)` holds.
  void ExportCounts(const std::function<bool(int32_t)>& in,
                    std::vector<FilterRecord>* out) const {
    filter_.Export(in, out);
  }
  // Drops the counts of those slots (moved away); the store deletes them
  // at the next checkpoint. Returns how many slots held counts.
  size_t EraseCounts(const std::function<bool(int32_t)>& in) {
    return filter_.EraseIf(in);
  }
  // Puts a slot's counts back (restore, slot moved in); `changed`: the
  // store does not hold them. InvalidArgument if they do not fit the
  // table's filter; nothing changes then.
  Status RestoreCounts(const FilterRecord& record, bool changed) {
    return filter_.Import(record, changed);
  }
  // Whether RestoreCounts would take `record`: OK, or its error.
  Status CheckCounts(const FilterRecord& record) const {
    return filter_.Check(record);
  }
  // The store's record of `slot` is to be deleted (not this server's).
  void ForgetCounts(int32_t slot) { filter_.Forget(slot); }
  // Appends the slots whose counts changed or went since the last call,
  // for a checkpoint, and forgets the changes.
  void TakeCountChanges(std::vector<FilterRecord>* out) {
    filter_.TakeChanges(out);
  }
  // Counts `slot` as changed again (its checkpoint write failed).
  void MarkCountsChanged(int32_t slot) { filter_.MarkChanged(slot); }
  // Every slot's counts count as changed (the store starts over).
  void MarkAllCountsChanged() { filter_.MarkAllChanged(); }
  // Appends the keys evicted since the last call (that are not stored
  // again) to `out`, for a checkpoint to delete.
  void TakeEvicted(std::vector<std::pair<TableId, Key>>* out);
  // Lists `key` as evicted again (its checkpoint delete failed); if it is
  // stored again since, the store may still hold its old row, which its
  // next eviction deletes.
  void MarkEvicted(Key key) {
    if (!keeps_evicted_) return;
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      evicted_.insert(key);
    } else {
      it->second.in_store = true;
    }
  }

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
  // Removes every key and admission count (a rollback starts from the
  // checkpoint's state).
  void Clear();
  // Copies out the keys for which `pred(key)` holds; when the policy
  // evicts, least recently updated first, so that a table restoring them
  // in this order (a slot move's target) keeps their order of use.
  template <typename Pred>
  void Export(Pred&& pred, std::vector<EntryRecord>* out) const {
    if (tracks_use()) {
      for (const Entry* e = oldest_; e != nullptr; e = e->newer) {
        if (pred(e->key)) out->push_back(ToRecord(e->key, *e));
      }
      return;
    }
    for (const auto& [key, e] : entries_) {
      if (pred(key)) out->push_back(ToRecord(key, e));
    }
  }
  // ---- Rows read in place, off the request thread (a slot move's sender).
  // A reference to a stored row. The row it names stays as it is, and may
  // be read from another thread, while nothing changes it: no push,
  // restore or eviction reaches its key (a slot move bounces its slots'
  // requests and holds evictions) and the table is not cleared.
  class RowRef {
   public:
    Key key() const { return entry_->key; }

   private:
    friend class ParameterTable;
    explicit RowRef(const Entry* entry) : entry_(entry) {}
    const Entry* entry_;
  };
  // Appends references to the rows for which `pred(key)` holds, in
  // Export's order.
  template <typename Pred>
  void Rows(Pred&& pred, std::vector<RowRef>* out) const {
    if (tracks_use()) {
      for (const Entry* e = oldest_; e != nullptr; e = e->newer) {
        if (pred(e->key)) out->push_back(RowRef(e));
      }
      return;
    }
    for (const auto& [key, e] : entries_) {
      if (pred(key)) out->push_back(RowRef(&e));
    }
  }
  // The row stored for `key`, if any.
  std::optional<RowRef> FindRow(Key key) const {
    const auto it = entries_.find(key);
    if (it == entries_.end()) return std::nullopt;
    return RowRef(&it->second);
  }
  // The bytes of `row`'s entry value (storage/checkpoint_format.h), as
  // AppendEntryValue writes it.
  size_t EntryValueBytes(RowRef row) const;
  // Appends `row`'s entry value (the checkpoint's encoding, with its
  // optimizer state as ExportState gives it) to `out`: the same bytes as
  // EncodeEntryValue of Export's record, with no copy in between. Reads
  // only the row (and the table's constant rule): any thread, under
  // RowRef's terms.
  void AppendEntryValue(RowRef row, std::string* out) const;

  // Rows taken out by EraseIf: their memory goes back when this is
  // destroyed, wherever the caller likes (a thread of its own: many rows
  // of many MB take a while to free).
  using Erased = TakenNodes<ShardedMap<Key, Entry>>;

  // Removes the keys for which `pred(key)` holds (their slots moved away);
  // returns how many. Those the store may hold are listed for the next
  // checkpoint to delete (TakeEvicted): the slots' new owner writes them,
  // and a version of them left here would come back with a rollback once
  // the slots return. The rows go to `erased` when given, to be freed
  // there.
  template <typename Pred>
  size_t EraseIf(Pred&& pred, Erased* erased = nullptr) {
    const size_t before = entries_.size();
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (!pred(it->first)) {
        ++it;
        continue;
      }
      stored_floats_ -= it->second.value.size() + it->second.state.size();
      Unlink(it->second);
      if (keeps_evicted_ && it->second.in_store) evicted_.insert(it->first);
      it = erased != nullptr ? erased->Take(entries_, it) : entries_.erase(it);
    }
    if (entries_.size() != before) {
      std::erase_if(changed_, [&](Key k) { return entries_.count(k) == 0; });
    }
    return before - entries_.size();
  }

  // Floats held (values and optimizer state, over every key, and the
  // admission filter's counters as floats of the same bytes).
  uint64_t stored_floats() const {
    return stored_floats_ + (filter_.bytes() + use_.bytes()) / sizeof(float);
  }
  // The pushes of `key` that eviction by use counts (tests).
  uint32_t UseCount(Key key) const { return use_.Count(key); }
  // Floats a push of `request` would add: its keys not held yet, with
  // their optimizer state.
  uint64_t NewFloats(const DataFrames& request) const;

  // ---- Replication (--replicas=2): what a backup must be told.
  // While on, every stored row a push or a BSP clock changes, and every
  // row evicted, is listed for TakeReplicaChanges; rows restored (a
  // rollback, a slot moved in) are not: the backup holds them already, or
  // gets them when it is made.
  void set_replicating(bool on) {
    replicating_ = on;
    filter_.set_replicating(on);
    if (!on) DropReplicaChanges();
  }
  // Appends the admission counts of the slots whose counts changed since
  // the last call (SlotAdmissionFilter::TakeReplicaChanges).
  void TakeReplicaCountChanges(std::vector<FilterRecord>* out) {
    filter_.TakeReplicaChanges(out);
  }
  // Lists `slot`'s counts for the next TakeReplicaCountChanges (a backup
  // new to the slot gets them whole).
  void MarkReplicaCountsChanged(int32_t slot) {
    filter_.MarkReplicaChanged(slot);
  }
  // Calls evicted(key) for each key evicted since the last call, then
  // changed(row) for each row changed since (a key evicted and stored
  // again is in both, in that order), and forgets them.
  template <typename Evicted, typename Changed>
  void TakeReplicaChanges(Evicted&& evicted, Changed&& changed) {
    for (Key key : replica_evicted_) evicted(key);
    replica_evicted_.clear();
    for (Key key : replica_changed_) {
      auto it = entries_.find(key);
      if (it == entries_.end() || !it->second.replica_changed) continue;
      it->second.replica_changed = false;
      changed(RowRef(&it->second));
    }
    replica_changed_.clear();
  }
  bool has_replica_changes() const {
    return !replica_evicted_.empty() || !replica_changed_.empty() ||
           filter_.has_replica_changes();
  }

  // Reads one key (tests, debugging); false if absent.
  bool Get(Key key, std::vector<float>* value) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::vector<float> value;
    std::vector<float> state;
    int64_t steps = 0;
    bool changed = false;          // listed in changed_
    bool replica_changed = false;  // listed in replica_changed_
    // The checkpoint store may hold a version of it (it was restored from
    // it, or taken for a checkpoint): its eviction is to be deleted there.
    bool in_store = false;
    // The use list (tracks_use()): its key, the server clock of its last
    // update, its neighbours (null at the ends).
    Key key = 0;
    int64_t used_clock = 0;
    Entry* older = nullptr;
    Entry* newer = nullptr;
  };

  // The entry of `key` for a push standing for `pushes` pushes, created
  // if the push admits it; null if it does not (the push is dropped).
  Entry* Admit(Key key, uint32_t width, uint32_t pushes);
  // Puts `e` at the newest end of the use list, stamped clock_.
  void Touch(Entry& e);
  void Unlink(Entry& e);
  // Removes `key`'s entry (an eviction).
  void Evict(Key key);
  // ApplyOne without the budget (the caller enforces it).
  Status ApplyEntry(Key key, std::span<const float> update, int64_t clock,
                    float batch_factor, uint32_t pushes);
  // Whether use_ counts pushes (eviction by use with a budget).
  bool counts_use() const {
    return options_.rows.eviction == RowPolicy::Eviction::kLeastUsed &&
           options_.rows.max_rows > 0;
  }
  static constexpr uint64_t kUseCountersPerRow = 16;
  static uint64_t UseCounters(const RowPolicy& rows);
  // Evicts the rows beyond max_rows (RowPolicy::eviction).
  void EnforceBudget();
  void MarkChanged(Key key, Entry& e) {
    if (!e.changed) {
      e.changed = true;
      changed_.push_back(key);
    }
  }
  // A push or a BSP clock changed `e` (MarkChanged, which restores call
  // too, marks it for checkpoints).
  void MarkUpdated(Key key, Entry& e) {
    MarkChanged(key, e);
    if (replicating_ && !e.replica_changed) {
      e.replica_changed = true;
      replica_changed_.push_back(key);
    }
  }
  void DropReplicaChanges() {
    for (Key key : replica_changed_) {
      auto it = entries_.find(key);
      if (it != entries_.end()) it->second.replica_changed = false;
    }
    replica_changed_.clear();
    replica_evicted_.clear();
  }
  // One key's share of a parallel apply: `g` (scaled in place by `scale`
  // first, when not 1) applied to `entry`, whose steps count it already.
  struct Work {
    Entry* entry;
    float* scaled;  // g, writable, when scale != 1
    const float* g;
    float scale;
    float rate = 1.0f;  // multiplies RunWork's factor
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
  ShardedMap<Key, Entry> entries_;
  uint64_t stored_floats_ = 0;
  // Keys with Entry::changed set, and keys evicted since they were listed
  // (changed_stale_ of them; compacted when they are half).
  std::vector<Key> changed_;
  size_t changed_stale_ = 0;
  SlotAdmissionFilter filter_;
  // Eviction by use: the pushes of every id (RowPolicy::kLeastUsed;
  // admits nothing, only counts: its threshold is the counters' maximum).
  // Not in checkpoints: a restored row counts its steps.
  AdmissionFilter use_;
  Entry* oldest_ = nullptr;  // the use list's ends (tracks_use())
  Entry* newest_ = nullptr;
  int64_t clock_ = 0;  // the server clock (SetClock)
  bool evictions_held_ = false;
  bool keeps_evicted_ = false;
  // Replication: rows changed and keys evicted since TakeReplicaChanges.
  bool replicating_ = false;
  std::vector<Key> replica_changed_;
  std::vector<Key> replica_evicted_;
  std::unordered_set<Key> evicted_;
  RowCounts row_counts_;
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
      Status s = ApplyEntry(key, c.values, clock, batch * RateOf(c),
                            static_cast<uint32_t>(std::max(c.pushes, 1)));
      if (!s.ok()) errors->push_back(std::move(s));
    }
    EnforceBudget();
    return;
  }
  // Keys of a map are distinct: no entry is taken twice.
  std::vector<Work> work;
  work.reserve(keys.size());
  for (auto& [key, c] : keys) {
    Entry* e = Admit(key, static_cast<uint32_t>(c.values.size()),
                     static_cast<uint32_t>(std::max(c.pushes, 1)));
    if (e == nullptr) continue;  // not admitted: dropped
    if (e->value.size() != c.values.size()) {
      errors->push_back(ApplyEntry(key, c.values, clock, batch, 1));  // refuses
      continue;
    }
    ++e->steps;
    MarkUpdated(key, *e);
    Touch(*e);
    work.push_back(Work{e, c.values.data(), c.values.data(),
                        CombinedScale(BatchesOf(c), combine), RateOf(c)});
  }
  RunWork(work, kernel_.Factor(clock) * batch);
  EnforceBudget();
}

}  // namespace ductile

#endif  // DUCTILE_SERVER_PARAMETER_TABLE_H_
