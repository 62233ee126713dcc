#include "server/slot_admission_filter.h"

#include <algorithm>
#include <string>

#include "routing/slot_map.h"

namespace ductile {

SlotAdmissionFilter::SlotAdmissionFilter(TableId table, uint32_t threshold,
                                         uint64_t counters)
    : table_(table), threshold_(threshold), counters_(counters) {
  set_num_slots(1);
}

void SlotAdmissionFilter::set_num_slots(int32_t num_slots) {
  num_slots = std::max(num_slots, 1);
  if (num_slots == num_slots_ && slot_counters_ != 0) return;
  Clear();
  num_slots_ = num_slots;
  slot_counters_ = std::max<uint64_t>(
      kMinSlotCounters, counters_ / static_cast<uint64_t>(num_slots));
  // AdmissionFilter keeps whole rows of kDepth.
  slot_counters_ -= slot_counters_ % AdmissionFilter::kDepth;
}

int32_t SlotAdmissionFilter::SlotOf(Key key) const {
  return ductile::SlotOf(table_, key, num_slots_);
}

uint32_t SlotAdmissionFilter::Count(Key key) const {
  auto it = slots_.find(SlotOf(key));
  return it == slots_.end() ? 0 : it->second.filter.Count(key);
}

SlotAdmissionFilter::Slot& SlotAdmissionFilter::SlotOfKey(Key key) {
  const int32_t slot = SlotOf(key);
  auto [it, added] = slots_.try_emplace(slot, threshold_, slot_counters_);
  if (added) {
    bytes_ += slot_bytes();
    if (!erased_.empty()) erased_.erase(slot);
  }
  return it->second;
}

bool SlotAdmissionFilter::Add(Key key, uint32_t pushes) {
  if (admits_all()) return true;
  Slot& slot = SlotOfKey(key);
  slot.changed = true;
  if (replicating_) replica_changed_.insert(SlotOf(key));
  return slot.filter.Add(key, pushes);
}

void SlotAdmissionFilter::Clear() {
  slots_.clear();
  erased_.clear();
  replica_changed_.clear();
  bytes_ = 0;
}

void SlotAdmissionFilter::Export(const std::function<bool(int32_t)>& in,
                                 std::vector<FilterRecord>* out) const {
  for (const auto& [slot, s] : slots_) {
    if (in(slot)) out->push_back(FilterRecord{table_, slot, s.filter.Encode()});
  }
}

size_t SlotAdmissionFilter::EraseIf(const std::function<bool(int32_t)>& in) {
  size_t erased = 0;
  for (auto it = slots_.begin(); it != slots_.end();) {
    if (!in(it->first)) {
      ++it;
      continue;
    }
    erased_.insert(it->first);
    bytes_ -= slot_bytes();
    it = slots_.erase(it);
    ++erased;
  }
  return erased;
}

void SlotAdmissionFilter::Forget(int32_t slot) {
  if (slots_.count(slot) > 0) return;  // held: written at the next take
  erased_.insert(slot);
}

Status SlotAdmissionFilter::Check(const FilterRecord& record) const {
  if (record.table != table_ || record.slot < 0 || record.slot >= num_slots_) {
    return InvalidArgumentError(
        "admission counts of table " + std::to_string(record.table) +
        ", slot " + std::to_string(record.slot) + " do not belong to table " +
        std::to_string(table_) + " of " + std::to_string(num_slots_) +
        " slots");
  }
  if (admits_all()) {
    if (record.counts.empty()) return Status::Ok();
    return InvalidArgumentError("table " + std::to_string(table_) +
                                " admits every id: it keeps no counts");
  }
  AdmissionFilter decoded(threshold_, slot_counters_);
  Status s = decoded.Decode(record.counts);
  if (!s.ok()) {
    return Status(s.code(), "table " + std::to_string(table_) + ", slot " +
                                std::to_string(record.slot) + ": " +
                                s.message());
  }
  return Status::Ok();
}

Status SlotAdmissionFilter::Import(const FilterRecord& record, bool changed) {
  DUCTILE_RETURN_IF_ERROR(Check(record));
  if (admits_all()) return Status::Ok();
  AdmissionFilter decoded(threshold_, slot_counters_);
  if (Status s = decoded.Decode(record.counts); !s.ok()) return s;
  if (slots_.erase(record.slot) > 0) bytes_ -= slot_bytes();
  if (record.counts.empty()) {
    Forget(record.slot);
    return Status::Ok();
  }
  Slot& slot =
      slots_.try_emplace(record.slot, std::move(decoded)).first->second;
  slot.changed = changed;
  bytes_ += slot_bytes();
  erased_.erase(record.slot);
  return Status::Ok();
}

void SlotAdmissionFilter::TakeChanges(std::vector<FilterRecord>* out) {
  for (auto& [slot, s] : slots_) {
    if (!s.changed) continue;
    s.changed = false;
    out->push_back(FilterRecord{table_, slot, s.filter.Encode()});
  }
  for (int32_t slot : erased_) out->push_back(FilterRecord{table_, slot, {}});
  erased_.clear();
}

void SlotAdmissionFilter::MarkChanged(int32_t slot) {
  auto it = slots_.find(slot);
  if (it != slots_.end()) {
    it->second.changed = true;
  } else {
    erased_.insert(slot);
  }
}

void SlotAdmissionFilter::MarkAllChanged() {
  for (auto& [slot, s] : slots_) s.changed = true;
}

void SlotAdmissionFilter::TakeReplicaChanges(std::vector<FilterRecord>* out) {
  if (replica_changed_.empty()) return;
  Export([this](int32_t slot) { return replica_changed_.count(slot) > 0; },
         out);
  replica_changed_.clear();
}

void SlotAdmissionFilter::MarkReplicaChanged(int32_t slot) {
  if (replicating_ && slots_.count(slot) > 0) replica_changed_.insert(slot);
}

}  // namespace ductile
