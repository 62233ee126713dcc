#include "server/restorer.h"

#include <string>
#include <utility>
#include <vector>

namespace ductile {

Result<uint64_t> Restorer::Restore(const wire::Header& recover,
                                   const RoutingTable& routing,
                                   int32_t server_id, TableSet& tables,
                                   Checkpointer& checkpointer,
                                   bool* unreadable) {
  *unreadable = false;
  const int64_t clock = recover.clock();
  checkpointer.pending_deletes().clear();
  tables.ClearKeys();
  if (routing.empty()) {
    return FailedPreconditionError("no routing table to restore into");
  }
  const int32_t num_slots = routing.num_slots();
  CheckpointStore* store = checkpointer.store();
  uint64_t restored = 0;
  bool own_version = false;
  if (clock > 0) {
    for (const wire::CheckpointSource& source : recover.sources()) {
      std::vector<uint8_t> wanted(num_slots, 0);
      bool any = false;
      for (int32_t slot : source.slots()) {
        if (slot >= 0 && slot < num_slots && routing.Serves(server_id, slot)) {
          wanted[slot] = 1;
          any = true;
        }
      }
      const bool mine =
          store != nullptr && source.state_dir() == checkpointer.store_dir();
      if (!any && !mine) continue;
      if (source.state_dir().empty()) {
        *unreadable = true;
        return FailedPreconditionError(
            "server " + std::to_string(source.server_id()) +
            " kept no checkpoints; its slots cannot be restored");
      }
      Result<LoadedCheckpoint> loaded =
          mine ? store->Load(clock)
               : env_->LoadCheckpointFrom(source.state_dir(), clock);
      if (!loaded.ok()) {
        *unreadable = true;
        return Status(loaded.status().code(),
                      "checkpoint at clock " + std::to_string(clock) +
                          " of server " + std::to_string(source.server_id()) +
                          " in " + source.state_dir() + ": " +
                          loaded.status().message());
      }
      own_version = own_version || mine;
      for (EntryRecord& e : loaded->entries) {
        ParameterTable* table = tables.Find(e.table);
        const int32_t slot = routing.SlotOf(e.table, e.key);
        if (table == nullptr || !wanted[slot]) {
          // Stored here but no longer ours: drop it from the store too.
          if (mine) checkpointer.pending_deletes().emplace_back(e.table, e.key);
          continue;
        }
        // Entries from another server's store are new to this one's.
        table->Restore(std::move(e), /*changed=*/!mine);
        ++restored;
      }
      // The admission filters' counts as at the cut, slot by slot.
      for (const FilterRecord& f : loaded->filters) {
        ParameterTable* table = tables.Find(f.table);
        if (table == nullptr || f.slot >= num_slots || !wanted[f.slot]) {
          if (mine && table != nullptr) table->ForgetCounts(f.slot);
          continue;
        }
        Status s = table->RestoreCounts(f, /*changed=*/!mine);
        if (!s.ok()) {
          *unreadable = true;
          return Status(s.code(), "checkpoint at clock " +
                                      std::to_string(clock) + " of server " +
                                      std::to_string(source.server_id()) +
                                      ": " + s.message());
        }
      }
    }
  }
  if (store != nullptr) {
    if (own_version) {
      DUCTILE_RETURN_IF_ERROR(store->RollBackTo(clock));
    } else {
      // Nothing of this server's own at that clock: start its store over,
      // and write everything it now holds at the next checkpoint. Its
      // versions before the clock stay: older checkpoints of the catalog
      // may name them (a rollback there reads them); those after belong
      // to the abandoned timeline.
      Result<std::vector<int64_t>> versions = store->ListCheckpoints();
      if (!versions.ok()) return versions.status();
      std::vector<int64_t> older;
      for (int64_t v : *versions) {
        if (v < clock) older.push_back(v);
      }
      DUCTILE_RETURN_IF_ERROR(store->StartOver(older));
      tables.ForEach([](TableId, ParameterTable& t) {
        std::vector<Key> keys;
        t.ForEachKey([&](Key k) { keys.push_back(k); });
        for (Key k : keys) t.MarkChanged(k);
        t.MarkAllCountsChanged();
      });
      checkpointer.pending_deletes().clear();
    }
  }
  checkpointer.Reset(clock);
  return restored;
}

}  // namespace ductile
