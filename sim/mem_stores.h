// In-memory checkpoint and coordinator stores for the simulation, on a
// "disk" (MemDisk) that outlives the nodes using it, so a node restarted
// on the same directory finds what its predecessor wrote. They keep the
// contracts of storage/checkpoint_store.h and storage/coordinator_store.h
// (versions, keep_last, incremental writes, rollbacks), without files.
//
// Not thread-safe: the simulation runs in one thread.
#ifndef DUCTILE_SIM_MEM_STORES_H_
#define DUCTILE_SIM_MEM_STORES_H_

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "storage/checkpoint_store.h"
#include "storage/coordinator_store.h"

namespace ductile::sim {

enum class DiskFault { kNone, kReadOnly, kFull };

class MemDisk {
 public:
  MemDisk();
  ~MemDisk();

  // From now on, every write to a store in or under `dir` fails as on a
  // read-only (kFailedPrecondition) or full (kResourceExhausted) disk;
  // kNone ends the fault. Reads keep working.
  void SetFault(const std::string& dir, DiskFault fault);
  // OK, or the error a write to the store in `dir` gets now.
  Status WriteError(const std::string& dir) const;

  Result<std::unique_ptr<CheckpointStore>> OpenCheckpointStore(
      const CheckpointStoreOptions& options);
  Result<LoadedCheckpoint> LoadCheckpointFrom(const std::string& dir,
                                              int64_t clock);
  Result<std::unique_ptr<CoordinatorStore>> OpenCoordinatorStore(
      const std::string& dir);

  struct StoreData;

 private:
  std::map<std::string, std::shared_ptr<StoreData>> stores_;
  std::map<std::string, std::optional<wire::CoordinatorState>> coordinators_;
  std::map<std::string, std::optional<wire::DataPlanState>> data_plans_;
  std::map<std::string, bool> coordinator_open_;
  std::map<std::string, DiskFault> faults_;  // by directory
};

}  // namespace ductile::sim

#endif  // DUCTILE_SIM_MEM_STORES_H_
