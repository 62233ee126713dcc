// The coordinator's durable state: one RocksDB instance holding the
// cluster's members, routing table, tables and checkpoint catalog as one
// record, rewritten (synced) on every change. The state is small (a few
// kilobytes per member and checkpoint), so one record keeps every update
// atomic without a schema of its own.
//
// Its RocksDB is sized for that: a write buffer of 1 MiB (the write-ahead
// log is preallocated from it) and a small manifest, so that a new store
// takes about 1.2 MiB on disk (with RocksDB's defaults it took 75 MiB),
// and one in use a few MiB besides its records.
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

struct CoordinatorStoreOptions {
  // Directory of the store; created if missing (with its parents).
  // Required.
  std::string dir;
  // Open and Save refuse (ResourceExhausted, naming the directory, the
  // space needed and free) to go on when that would leave less than this
  // free on the directory's file system: RocksDB aborts the process on
  // some writes that fail on a full disk. 0: no check. Default: 64 MiB.
  uint64_t min_free_bytes = uint64_t{64} << 20;
};

class CoordinatorStore {
 public:
  // About the most a store takes on disk once open (its write-ahead logs
  // preallocated, its tables, a manifest, RocksDB's own log files): what
  // Open asks to be free above min_free_bytes.
  static constexpr uint64_t kOpenBytes = uint64_t{4} << 20;

  // Opens or creates the store in options.dir. Errors:
  //   InvalidArgument      no directory;
  //   FailedPrecondition   the directory cannot be created or used, or
  //                        another coordinator holds it;
  //   ResourceExhausted    the disk has less than kOpenBytes free above
  //                        min_free_bytes, or is full.
  [[nodiscard]] static Result<std::unique_ptr<CoordinatorStore>> Open(
      const CoordinatorStoreOptions& options);

  virtual ~CoordinatorStore() = default;

  // The state last saved; nullopt in a new store. FailedPrecondition
  // ("corrupt") if the record cannot be read.
  virtual Result<std::optional<wire::CoordinatorState>> Load() const = 0;
  // Replaces the saved state, durably (synced) before it returns.
  // ResourceExhausted, with nothing written, if it would leave less than
  // min_free_bytes free on the directory's file system (a full disk could
  // make RocksDB abort the process); a later call goes on once there is
  // space.
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
