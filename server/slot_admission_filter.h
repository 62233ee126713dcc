// The admission filter of one table on one server, per slot: the push
// counts of ids not stored yet (RowPolicy::admit_after_pushes) kept in one
// AdmissionFilter sketch per slot that saw such an id, so that a slot's
// counts move with the slot (SlotMover) and a checkpoint stores them by
// slot (FilterRecord), and a rollback restores them as at the cut.
//
// A key's slot is SlotOf(table, key, num_slots) (routing/slot_map.h), the
// slot the routing moves it with. Each slot's sketch holds
// max(kMinSlotCounters, counters / num_slots) counters: over every server
// the table's counters stay within max(counters, kMinSlotCounters x
// num_slots), whatever the number of ids, and a server holds its slots'
// share. Ids spread evenly over the slots, so each slot's sketch sees its
// share of the ids: the errors are those of one sketch of all the
// counters (AdmissionFilter: never under-counts within an aging window,
// may admit early, ages after as many Adds as it has counters), and a
// slot's counts depend on its own ids' pushes only, wherever it lives.
//
// Invariants:
//   - slots_ holds only slots whose sketch is allocated (an Add or an
//     Import of non-empty counts);
//   - a slot whose counts changed since the last TakeChanges is in slots_
//     with Slot::changed set; one whose counts went (moved away, dropped)
//     is in erased_, for the store to delete, and not in slots_.
//
// Not thread-safe: owned by a table, on the server's request thread.
#ifndef DUCTILE_SERVER_SLOT_ADMISSION_FILTER_H_
#define DUCTILE_SERVER_SLOT_ADMISSION_FILTER_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ductile/status.h"
#include "ductile/table.h"
#include "server/admission_filter.h"
#include "storage/checkpoint_store.h"

namespace ductile {

class SlotAdmissionFilter {
 public:
  // The fewest counters a slot's sketch holds.
  static constexpr uint64_t kMinSlotCounters = 16 * AdmissionFilter::kDepth;

  // `threshold` and `counters` as AdmissionFilter's, `counters` for the
  // whole table; one slot until set_num_slots.
  SlotAdmissionFilter(TableId table, uint32_t threshold, uint64_t counters);

  // The routing's number of slots (fixed for a job). A change drops every
  // count (they were kept by other slots).
  void set_num_slots(int32_t num_slots);
  int32_t num_slots() const { return num_slots_; }
  int32_t SlotOf(Key key) const;

  bool admits_all() const { return threshold_ <= 1; }
  // AdmissionFilter::Count and Add, in `key`'s slot.
  uint32_t Count(Key key) const;
  bool Add(Key key, uint32_t pushes);
  // Whether `key`'s slot holds an allocated sketch.
  bool Allocated(Key key) const { return slots_.count(SlotOf(key)) > 0; }
  // Bytes of counters held now, and the bytes one slot's sketch takes.
  uint64_t bytes() const { return bytes_; }
  uint64_t slot_bytes() const {
    return admits_all() ? 0 : slot_counters_ * sizeof(uint16_t);
  }
  // Slots holding counts.
  size_t slots() const { return slots_.size(); }

  // Forgets every count and every pending change (a rollback).
  void Clear();
  // Appends the counts of the slots for which `in(slot)` holds (the
  // allocated ones) to `out`.
  void Export(const std::function<bool(int32_t)>& in,
              std::vector<FilterRecord>* out) const;
  // Drops the counts of the slots for which `in(slot)` holds (moved away);
  // each is listed for the store to delete. Returns how many held counts.
  size_t EraseIf(const std::function<bool(int32_t)>& in);
  // Lists `slot` for the store to delete (a checkpoint's record of a slot
  // this server no longer holds), unless the slot holds counts here (they
  // are written over the record).
  void Forget(int32_t slot);
  // Puts a slot's counts back (a restore or a slot moving in): `record`'s
  // table must be this filter's. `changed`: the store does not hold them
  // (written at the next TakeChanges). InvalidArgument if they do not fit
  // this filter (AdmissionFilter::Decode), or the slot is out of range;
  // nothing changes then.
  Status Import(const FilterRecord& record, bool changed);
  // Whether Import would take `record`: OK, or its error.
  Status Check(const FilterRecord& record) const;
  // Appends the slots changed since the last call (their counts) and those
  // whose counts went (empty counts), and forgets them.
  void TakeChanges(std::vector<FilterRecord>* out);
  // Counts `slot` as changed again (its checkpoint write failed); one not
  // held is listed for deletion.
  void MarkChanged(int32_t slot);
  // Every slot held counts as changed (the store starts over).
  void MarkAllChanged();

  // ---- Replication: the slots whose counts a backup must be told of.
  // While on, each slot an Add changes is listed for TakeReplicaChanges.
  void set_replicating(bool on) {
    replicating_ = on;
    if (!on) replica_changed_.clear();
  }
  // Appends the counts of the slots listed since the last call (those
  // still held), and forgets the list.
  void TakeReplicaChanges(std::vector<FilterRecord>* out);
  // Lists `slot` for the next TakeReplicaChanges if it holds counts (its
  // backup's copy is to come from here whole).
  void MarkReplicaChanged(int32_t slot);
  bool has_replica_changes() const { return !replica_changed_.empty(); }

 private:
  struct Slot {
    Slot(uint32_t threshold, uint64_t counters) : filter(threshold, counters) {}
    explicit Slot(AdmissionFilter&& counts) : filter(std::move(counts)) {}
    AdmissionFilter filter;
    bool changed = false;  // since the last TakeChanges
  };
  Slot& SlotOfKey(Key key);

  const TableId table_;
  const uint32_t threshold_;
  const uint64_t counters_;  // for the whole table
  int32_t num_slots_ = 1;
  uint64_t slot_counters_ = 0;
  uint64_t bytes_ = 0;
  std::unordered_map<int32_t, Slot> slots_;
  std::set<int32_t> erased_;
  bool replicating_ = false;
  std::set<int32_t> replica_changed_;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_SLOT_ADMISSION_FILTER_H_
