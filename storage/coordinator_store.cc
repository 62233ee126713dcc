#include "storage/coordinator_store.h"

#include <filesystem>
#include <system_error>

#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "storage/checkpoint_reader.h"

namespace ductile {
namespace {

namespace fs = std::filesystem;
using checkpoint_reader::FromRocks;

constexpr char kStateKey[] = "coordinator-state/v1";
constexpr char kDataPlanKey[] = "data-plan/v1";
// What a refusal for want of space tells the operator to do.
constexpr char kMoreSpace[] =
    "free some space, give the coordinator's state a larger volume, or "
    "lower the space kept free (--disk_reserve_mb)";

class RocksCoordinatorStore final : public CoordinatorStore {
 public:
  RocksCoordinatorStore(std::unique_ptr<rocksdb::DB> db, std::string dir,
                        uint64_t min_free_bytes)
      : db_(std::move(db)),
        dir_(std::move(dir)),
        min_free_bytes_(min_free_bytes) {}

  Result<std::optional<wire::CoordinatorState>> Load() const override {
    std::string bytes;
    rocksdb::ReadOptions read;
    read.verify_checksums = true;
    rocksdb::Status s = db_->Get(read, kStateKey, &bytes);
    if (s.IsNotFound()) return std::optional<wire::CoordinatorState>();
    DUCTILE_RETURN_IF_ERROR(
        FromRocks(s, "cannot read the coordinator state in " + dir_));
    wire::CoordinatorState state;
    if (!state.ParseFromString(bytes)) {
      return FailedPreconditionError("the coordinator state in " + dir_ +
                                     " is corrupt (unparseable record)");
    }
    return std::optional<wire::CoordinatorState>(std::move(state));
  }

  Status Save(const wire::CoordinatorState& state) override {
    return Put(kStateKey, state.SerializeAsString(), /*sync=*/true,
               "the coordinator state");
  }

  Result<std::optional<wire::DataPlanState>> LoadDataPlan() const override {
    std::string bytes;
    rocksdb::ReadOptions read;
    read.verify_checksums = true;
    rocksdb::Status s = db_->Get(read, kDataPlanKey, &bytes);
    if (s.IsNotFound()) return std::optional<wire::DataPlanState>();
    DUCTILE_RETURN_IF_ERROR(
        FromRocks(s, "cannot read the data plan in " + dir_));
    wire::DataPlanState plan;
    if (!plan.ParseFromString(bytes)) {
      return FailedPreconditionError("the data plan in " + dir_ +
                                     " is corrupt (unparseable record)");
    }
    return std::optional<wire::DataPlanState>(std::move(plan));
  }

  Status SaveDataPlan(const wire::DataPlanState& plan) override {
    return Put(kDataPlanKey, plan.SerializeAsString(), /*sync=*/false,
               "the data plan");
  }

 private:
  Status Put(const char* key, const std::string& bytes, bool sync,
             const std::string& what) {
    // The record goes to the log and, flushed, to a table file; RocksDB
    // aborts on some writes that fail on a full disk, so refuse first.
    DUCTILE_RETURN_IF_ERROR(checkpoint_reader::CheckFreeSpace(
        dir_, 2 * bytes.size(), min_free_bytes_,
        "saving " + what + " (" + std::to_string(bytes.size()) + " bytes)",
        kMoreSpace));
    if (needs_resume_) {
      // A failed write stopped the database; go on once space is back.
      DUCTILE_RETURN_IF_ERROR(
          FromRocks(db_->Resume(), "cannot save " + what + " in " + dir_));
      needs_resume_ = false;
    }
    rocksdb::WriteOptions write;
    write.sync = sync;
    rocksdb::Status s = db_->Put(write, key, bytes);
    if (!s.ok()) needs_resume_ = true;
    return FromRocks(s, "cannot save " + what + " in " + dir_);
  }

  bool needs_resume_ = false;
  std::unique_ptr<rocksdb::DB> db_;
  const std::string dir_;
  const uint64_t min_free_bytes_;
};

}  // namespace

Result<std::unique_ptr<CoordinatorStore>> CoordinatorStore::Open(
    const CoordinatorStoreOptions& store) {
  const std::string& dir = store.dir;
  if (dir.empty()) return InvalidArgumentError("no coordinator state dir");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return FailedPreconditionError(
        "cannot create the coordinator state "
        "directory " +
        dir + ": " + ec.message());
  }
  // Opening writes a new log, manifest and options file even to a store
  // that exists; on a disk too small RocksDB may abort instead of failing.
  DUCTILE_RETURN_IF_ERROR(checkpoint_reader::CheckFreeSpace(
      dir, kOpenBytes, store.min_free_bytes,
      "opening the coordinator's state store", kMoreSpace));
  rocksdb::Options options;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  options.max_open_files = 64;
  // The store holds two records, of a few kilobytes in most jobs. RocksDB
  // preallocates each write-ahead log at 1.1 times the write buffer (64 MiB
  // by default: 70 MiB for a log of a few kilobytes) and each manifest at
  // 4 MiB: a store sized so takes about 1.2 MiB when new.
  options.write_buffer_size = 1 << 20;
  options.manifest_preallocation_size = 64 << 10;
  options.max_log_file_size = 256 << 10;
  options.keep_log_file_num = 2;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  DUCTILE_RETURN_IF_ERROR(
      FromRocks(s, "cannot open the coordinator state in " + dir));
  return std::unique_ptr<CoordinatorStore>(new RocksCoordinatorStore(
      std::unique_ptr<rocksdb::DB>(raw), dir, store.min_free_bytes));
}

}  // namespace ductile
