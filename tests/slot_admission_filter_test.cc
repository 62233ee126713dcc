// SlotAdmissionFilter: the admission filter's counts kept per slot, so
// that a slot's counts move with it and a checkpoint stores them by slot,
// within the table's bound, with the sketch's error behaviour per slot.
#include "server/slot_admission_filter.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "routing/slot_map.h"

namespace ductile {
namespace {

constexpr TableId kTable = 7;
constexpr int32_t kSlots = 16;

// `n` ids of slot `slot` (and of no other), ascending.
std::vector<Key> IdsOfSlot(int32_t slot, int n) {
  std::vector<Key> ids;
  for (Key k = 1; static_cast<int>(ids.size()) < n; ++k) {
    if (SlotOf(kTable, k, kSlots) == slot) ids.push_back(k);
  }
  return ids;
}

TEST(SlotAdmissionFilter, EachSlotHoldsItsShareOfTheCountersOnceItSeesAnId) {
  SlotAdmissionFilter filter(kTable, 3, 4096);
  filter.set_num_slots(kSlots);
  // 4096 counters over 16 slots: 256 a slot, 2 bytes each.
  EXPECT_EQ(filter.slot_bytes(), 512u);
  EXPECT_EQ(filter.bytes(), 0u);
  for (Key id : IdsOfSlot(3, 5)) EXPECT_FALSE(filter.Add(id, 1));
  EXPECT_EQ(filter.slots(), 1u);
  EXPECT_EQ(filter.bytes(), 512u);
  for (Key id : IdsOfSlot(9, 1)) EXPECT_FALSE(filter.Add(id, 1));
  EXPECT_EQ(filter.bytes(), 1024u);
  // Exact counts with room to spare; an id of another slot counts nothing.
  for (Key id : IdsOfSlot(3, 5)) EXPECT_EQ(filter.Count(id), 1u);
  EXPECT_EQ(filter.Count(IdsOfSlot(4, 1)[0]), 0u);
  EXPECT_TRUE(filter.Add(IdsOfSlot(3, 1)[0], 2));
  // A table with many slots gives each at least kMinSlotCounters.
  SlotAdmissionFilter many(kTable, 3, 1024);
  many.set_num_slots(1 << 20);
  EXPECT_EQ(many.slot_bytes(),
            SlotAdmissionFilter::kMinSlotCounters * sizeof(uint16_t));
  // Admitting every id, it holds nothing.
  SlotAdmissionFilter all(kTable, 1, 4096);
  EXPECT_TRUE(all.Add(5, 1));
  EXPECT_EQ(all.bytes(), 0u);
  EXPECT_EQ(all.slot_bytes(), 0u);
}

// A slot's counts age with its own pushes only: a flood of ids in one
// slot leaves another slot's counts as they were, wherever that slot is.
TEST(SlotAdmissionFilter, ASlotAgesWithItsOwnPushesOnly) {
  SlotAdmissionFilter filter(kTable, 2, 64 * kSlots);
  filter.set_num_slots(kSlots);  // 64 counters a slot
  const Key quiet = IdsOfSlot(1, 1)[0];
  const std::vector<Key> busy = IdsOfSlot(2, 200);
  EXPECT_FALSE(filter.Add(quiet, 1));
  for (Key id : busy) filter.Add(id, 1);
  EXPECT_EQ(filter.Count(quiet), 1u);
  EXPECT_TRUE(filter.Add(quiet, 1));
  // In its own slot, as many pushes as counters age it (AdmissionFilter).
  const std::vector<Key> same = IdsOfSlot(1, 65);
  SlotAdmissionFilter again(kTable, 2, 64 * kSlots);
  again.set_num_slots(kSlots);
  EXPECT_FALSE(again.Add(same[0], 1));
  for (int i = 0; i < 64; ++i) again.Add(same[64], 1);
  EXPECT_EQ(again.Count(same[0]), 0u);
}

// A slot move: the source exports the slots' counts, the target imports
// them, the source drops them; the counts are the same on the target,
// and the source lists the slots for its store to delete.
TEST(SlotAdmissionFilter, ASlotsCountsMoveExactlyAndLeaveNothingBehind) {
  SlotAdmissionFilter source(kTable, 5, 4096);
  SlotAdmissionFilter target(kTable, 5, 4096);
  source.set_num_slots(kSlots);
  target.set_num_slots(kSlots);
  std::map<Key, uint32_t> pushes;
  for (int32_t slot = 0; slot < kSlots; ++slot) {
    int i = 0;
    for (Key id : IdsOfSlot(slot, 4)) {
      const uint32_t n = 1 + (slot + i++) % 4;
      EXPECT_FALSE(source.Add(id, n));
      pushes[id] = n;
    }
  }
  std::vector<FilterRecord> taken;
  source.TakeChanges(&taken);
  EXPECT_EQ(taken.size(), static_cast<size_t>(kSlots));
  auto moving = [](int32_t slot) { return slot % 2 == 1; };
  std::vector<FilterRecord> moved;
  source.Export(moving, &moved);
  ASSERT_EQ(moved.size(), static_cast<size_t>(kSlots / 2));
  for (const FilterRecord& f : moved) {
    EXPECT_EQ(f.table, kTable);
    ASSERT_TRUE(target.Import(f, /*changed=*/true).ok());
  }
  EXPECT_EQ(source.EraseIf(moving), static_cast<size_t>(kSlots / 2));
  for (const auto& [id, n] : pushes) {
    const bool moves = moving(SlotOf(kTable, id, kSlots));
    EXPECT_EQ(target.Count(id), moves ? n : 0u) << id;
    EXPECT_EQ(source.Count(id), moves ? 0u : n) << id;
  }
  EXPECT_EQ(source.bytes() + target.bytes(), kSlots * source.slot_bytes());
  // The source's store deletes the moved slots' records; the target's
  // writes them.
  std::vector<FilterRecord> source_changes, target_changes;
  source.TakeChanges(&source_changes);
  target.TakeChanges(&target_changes);
  ASSERT_EQ(source_changes.size(), static_cast<size_t>(kSlots / 2));
  for (const FilterRecord& f : source_changes) {
    EXPECT_TRUE(moving(f.slot));
    EXPECT_TRUE(f.counts.empty());
  }
  ASSERT_EQ(target_changes.size(), static_cast<size_t>(kSlots / 2));
  for (const FilterRecord& f : target_changes) EXPECT_FALSE(f.counts.empty());
  // Taken once.
  target_changes.clear();
  target.TakeChanges(&target_changes);
  EXPECT_TRUE(target_changes.empty());
  // The next id pushed to its threshold is admitted where its slot is.
  for (const auto& [id, n] : pushes) {
    SlotAdmissionFilter& owner =
        moving(SlotOf(kTable, id, kSlots)) ? target : source;
    if (n < 4) {
      EXPECT_FALSE(owner.Add(id, 4 - n)) << id;
    }
    EXPECT_TRUE(owner.Add(id, 1)) << id;
  }
}

// Restored counts (changed = false) are the store's: not written again
// until they change; a failed write's slots are listed again.
TEST(SlotAdmissionFilter, RestoredCountsAreWrittenOnlyOnceTheyChange) {
  SlotAdmissionFilter filter(kTable, 4, 4096);
  filter.set_num_slots(kSlots);
  const Key id = IdsOfSlot(5, 1)[0];
  filter.Add(id, 2);
  std::vector<FilterRecord> records;
  filter.TakeChanges(&records);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].slot, 5);

  SlotAdmissionFilter restored(kTable, 4, 4096);
  restored.set_num_slots(kSlots);
  ASSERT_TRUE(restored.Import(records[0], /*changed=*/false).ok());
  EXPECT_EQ(restored.Count(id), 2u);
  std::vector<FilterRecord> none;
  restored.TakeChanges(&none);
  EXPECT_TRUE(none.empty());
  restored.Add(id, 1);
  restored.TakeChanges(&none);
  ASSERT_EQ(none.size(), 1u);
  restored.MarkChanged(5);   // the write failed
  restored.MarkChanged(11);  // not held: deleted
  std::vector<FilterRecord> again;
  restored.TakeChanges(&again);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].slot, 5);
  EXPECT_EQ(again[0].counts, none[0].counts);
  EXPECT_EQ(again[1].slot, 11);
  EXPECT_TRUE(again[1].counts.empty());
  // A rollback forgets everything.
  restored.Clear();
  EXPECT_EQ(restored.Count(id), 0u);
  EXPECT_EQ(restored.bytes(), 0u);
}

// Counts that do not fit the table's filter are refused, naming why, and
// change nothing.
TEST(SlotAdmissionFilter, CountsThatDoNotFitAreRefusedAndChangeNothing) {
  SlotAdmissionFilter filter(kTable, 4, 4096);
  filter.set_num_slots(kSlots);
  const Key id = IdsOfSlot(2, 1)[0];
  filter.Add(id, 3);
  std::vector<FilterRecord> good;
  filter.Export([](int32_t) { return true; }, &good);
  ASSERT_EQ(good.size(), 1u);

  SlotAdmissionFilter target(kTable, 4, 4096);
  target.set_num_slots(kSlots);
  const Key other = IdsOfSlot(2, 2)[1];
  target.Add(other, 1);
  std::vector<FilterRecord> bad(6, good[0]);
  bad[0].counts.resize(bad[0].counts.size() - 1);  // cut short
  bad[1].counts += "xx";                           // too long
  bad[2].counts[12] = 9;                           // a count above 4
  bad[3].table = kTable + 1;                       // another table
  bad[4].slot = kSlots;                            // out of range
  bad[5].counts[0] = static_cast<char>(0xff);      // adds past the counters
  bad[5].counts[1] = static_cast<char>(0xff);
  for (size_t i = 0; i < bad.size(); ++i) {
    const Status s = target.Import(bad[i], true);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << i;
    EXPECT_FALSE(s.message().empty());
    EXPECT_EQ(target.Count(other), 1u) << i;
    EXPECT_EQ(target.Count(id), 0u) << i;
  }
  // A filter of another size refuses them too.
  SlotAdmissionFilter smaller(kTable, 4, 1024);
  smaller.set_num_slots(kSlots);
  EXPECT_EQ(smaller.Import(good[0], true).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(target.Import(good[0], true).ok());
  EXPECT_EQ(target.Count(id), 3u);
  EXPECT_EQ(target.Count(other), 0u);  // the slot's counts are the moved ones
}

// Replication: while on, each slot an Add changes is listed once for the
// backup, with its counts as they are when taken; a slot marked for a
// whole copy is listed if it holds counts; off, nothing is listed.
TEST(SlotAdmissionFilter,
     TheSlotsChangedSinceTheLastLookAreListedForTheBackup) {
  SlotAdmissionFilter filter(kTable, 3, 4096);
  filter.set_num_slots(kSlots);
  const Key a = IdsOfSlot(3, 1)[0], b = IdsOfSlot(9, 1)[0];
  filter.Add(a, 1);  // not replicating: not listed
  filter.set_replicating(true);
  EXPECT_FALSE(filter.has_replica_changes());
  filter.Add(a, 1);
  filter.Add(a, 1);
  filter.Add(b, 1);
  ASSERT_TRUE(filter.has_replica_changes());
  std::vector<FilterRecord> out;
  filter.TakeReplicaChanges(&out);
  ASSERT_EQ(out.size(), 2u);
  std::map<int32_t, FilterRecord> by_slot;
  for (FilterRecord& f : out) by_slot[f.slot] = f;
  ASSERT_EQ(by_slot.count(3), 1u);
  // The counts as they are now: a backup's filter of them counts a's 3.
  SlotAdmissionFilter backup(kTable, 3, 4096);
  backup.set_num_slots(kSlots);
  ASSERT_TRUE(backup.Import(by_slot[3], /*changed=*/true).ok());
  EXPECT_EQ(backup.Count(a), 3u);
  EXPECT_FALSE(filter.has_replica_changes());
  out.clear();
  filter.TakeReplicaChanges(&out);
  EXPECT_TRUE(out.empty());
  // A whole copy: a slot holding counts is listed, an empty one is not.
  filter.MarkReplicaChanged(9);
  filter.MarkReplicaChanged(4);
  filter.TakeReplicaChanges(&out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].slot, 9);
  filter.set_replicating(false);
  filter.Add(a, 1);
  EXPECT_FALSE(filter.has_replica_changes());
}

}  // namespace
}  // namespace ductile
