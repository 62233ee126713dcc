// One table's keys on one server: values, optimizer state, update rule.
//
// Push is all-or-nothing: CheckPush validates every key of a request before
// ApplyPush changes anything, so a refused request leaves the table as it
// was. Not thread-safe: owned by a server's request thread.
#ifndef DUCTILE_SERVER_PARAMETER_TABLE_H_
#define DUCTILE_SERVER_PARAMETER_TABLE_H_

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "ductile/status.h"
#include "ductile/table.h"
#include "proto/codec.h"
#include "storage/checkpoint_store.h"
#include "util/update_rule.h"

namespace ductile {

class ParameterTable {
 public:
  ParameterTable(TableId id, const TableOptions& options,
                 const CustomRule* custom);

  TableId id() const { return id_; }
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
  Status ApplyOne(Key key, std::span<const float> update, int64_t clock);
  // Applies one BSP clock's `pushes` pushes to `key`, summed in `sum`:
  // their mean under BspCombine::kMean (not for assign tables), else the
  // sum. `sum` is scaled in place.
  Status ApplyCombined(Key key, std::span<float> sum, int32_t pushes,
                       BspCombine combine, int64_t clock) {
    if (options_.rule != UpdateRule::kAssign && combine == BspCombine::kMean &&
        pushes > 1) {
      const float scale = 1.0f / static_cast<float>(pushes);
      for (float& x : sum) x *= scale;
    }
    return ApplyOne(key, sum, clock);
  }
  // Checks a pull's widths against stored keys (variable-width tables).
  Status CheckPull(const DataFrames& request) const;
  // Appends the requested keys' values to `out`; an absent key reads as its
  // initial value and is not stored (only a push stores a key).
  void Pull(const DataFrames& request, std::vector<float>* out);

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
  EntryRecord ToRecord(Key key, const Entry& e) const {
    return EntryRecord{id_, key, e.value, e.state, e.steps};
  }
  Status CheckWidths(const DataFrames& request) const;

  const TableId id_;
  const TableOptions options_;
  const UpdateRuleKernel kernel_;
  std::unordered_map<Key, Entry> entries_;
  uint64_t stored_floats_ = 0;
  std::vector<Key> changed_;  // keys with Entry::changed set
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_PARAMETER_TABLE_H_
