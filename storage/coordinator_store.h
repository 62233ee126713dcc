// The coordinator's durable state: one RocksDB instance holding the
// cluster's members, routing table, tables and checkpoint catalog as one
// record, rewritten (synced) on every change. The state is small (a few
// kilobytes per member and checkpoint), so one record keeps every update
// atomic without a schema of its own.
//
// Thread compatibility: not thread-safe; owned by the coordinator's loop.
#ifndef DUCTILE_STORAGE_COORDINATOR_STORE_H_
#define DUCTILE_STORAGE_COORDINATOR_STORE_H_

#include <memory>
#include <optional>
#include <string>

#include "ductile/status.h"
#include "proto/ductile.pb.h"

namespace ductile {

class CoordinatorStore {
 public:
  // Opens or creates the store in `dir` (created with its parents).
  // FailedPrecondition if the directory cannot be used or another
  // coordinator holds it; ResourceExhausted if the disk is full.
  static Result<std::unique_ptr<CoordinatorStore>> Open(const std::string& dir);

  virtual ~CoordinatorStore() = default;

  // The state last saved; nullopt in a new store. FailedPrecondition
  // ("corrupt") if the record cannot be read.
  virtual Result<std::optional<wire::CoordinatorState>> Load() const = 0;
  // Replaces the saved state, durably (synced) before it returns.
  // ResourceExhausted, with nothing written, if it would leave less than
  // 64 MiB free on the directory's file system (a full disk could make
  // RocksDB abort the process); a later call goes on once there is space.
  virtual Status Save(const wire::CoordinatorState& state) = 0;

  // The job's data plan (coordinator/data_plan.h), a record of its own that
  // changes at every step: written without a sync, so it survives the
  // coordinator's process (the write is in the operating system's hands)
  // but not its machine. nullopt if none was saved.
  virtual Result<std::optional<wire::DataPlanState>> LoadDataPlan() const = 0;
  virtual Status SaveDataPlan(const wire::DataPlanState& plan) = 0;
};

}  // namespace ductile

#endif  // DUCTILE_STORAGE_COORDINATOR_STORE_H_
