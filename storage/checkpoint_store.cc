// CheckpointStore on RocksDB: opening the store, writing and freezing
// checkpoints, rolling back and discarding. The bytes of the records are
// checkpoint_format.h's; reading and verifying versions (Load, LoadLatest,
// ListCheckpoints, the copy of RollBackTo) is checkpoint_reader.h's.
//
// Invariants (between calls):
//   - live/ holds the state of the last WriteCheckpoint whose batch was
//     written, or of the version restored by RollBackTo; its metadata
//     record says which clock (absent only while live/ is empty).
//   - checkpoints/<c>/ exists only once complete: RocksDB builds it as
//     <c>.tmp and renames it, and leftovers are removed at Open.
//   - live_trusted_: this instance may build on live/. True when live/'s
//     clock is the newest version's (or both are absent) at Open, after
//     RollBackTo/DiscardAll, and after this instance wrote the batch (even if
//     freezing it then failed: the caller still holds the changes).
//   - RollBackTo builds live.next/ completely, then renames live/ to
//     live.old/ and live.next/ to live/: at Open, a live.next/ beside a
//     live/ is an unfinished copy (removed), and one beside only live.old/ is
//     complete (renamed into place).
#include "storage/checkpoint_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <filesystem>
#include <map>
#include <optional>
#include <system_error>

#include "glog/logging.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"
#include "storage/checkpoint_format.h"
#include "storage/checkpoint_reader.h"

namespace ductile {
namespace {

namespace fs = std::filesystem;

using checkpoint_format::AppendEntryHeader;
using checkpoint_format::AppendEntryKey;
using checkpoint_format::CheckChanges;
using checkpoint_format::CheckFilters;
using checkpoint_format::EncodeEntryValue;
using checkpoint_format::EncodeMetadata;
using checkpoint_format::EstimateBatchBytes;
using checkpoint_format::FilterKey;
using checkpoint_format::KeyChange;
using checkpoint_format::kMaxField;
using checkpoint_format::Metadata;
using checkpoint_format::MetaKey;
using checkpoint_format::TableKey;
using checkpoint_reader::CheckFreeSpace;
using checkpoint_reader::CountEntriesAfter;
using checkpoint_reader::CountFilters;
using checkpoint_reader::CountFiltersAfter;
using checkpoint_reader::FromErrno;
using checkpoint_reader::FromErrorCode;
using checkpoint_reader::FromRocks;
using checkpoint_reader::LiveOptions;
using checkpoint_reader::ScanVersion;
using checkpoint_reader::VersionName;

// ---- Directories ----

// fsync of a directory, so that entries created or removed in it persist.
Status SyncDir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FromErrno(errno, "cannot open directory", dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return FromErrno(err, "cannot sync directory", dir);
  return Status::Ok();
}

// ---- RocksDB setup ----

// Adds one entry record to `batch`; `key` and `value` are scratch space.
void PutEntry(const EntryRecord& e, std::string* key, std::string* value,
              rocksdb::WriteBatch* batch) {
  key->clear();
  AppendEntryKey(key, e.table, e.key);
  if constexpr (std::endian::native == std::endian::little) {
    // Gathered, so the floats are copied once, into the batch.
    value->clear();
    AppendEntryHeader(e, value);
    const rocksdb::Slice key_part(*key);
    const rocksdb::Slice value_parts[3] = {
        rocksdb::Slice(*value),
        rocksdb::Slice(reinterpret_cast<const char*>(e.value.data()),
                       e.value.size() * 4),
        rocksdb::Slice(reinterpret_cast<const char*>(e.state.data()),
                       e.state.size() * 4)};
    batch->Put(rocksdb::SliceParts(&key_part, 1),
               rocksdb::SliceParts(value_parts, 3));
  } else {
    EncodeEntryValue(e, value);
    batch->Put(*key, *value);
  }
}

class RocksCheckpointStore final : public CheckpointStore {
 public:
  RocksCheckpointStore(const CheckpointStoreOptions& options,
                       const fs::path& dir)
      : options_(options),
        dir_(dir),
        live_path_(dir / "live"),
        next_path_(dir / "live.next"),
        old_path_(dir / "live.old"),
        versions_path_(checkpoint_reader::VersionsPath(dir)) {}

  Status Init();

  Status WriteCheckpoint(int64_t clock, uint64_t epoch,
                         const std::vector<TableRecord>& tables,
                         const std::vector<EntryRecord>& changed_entries,
                         const std::vector<std::pair<TableId, Key>>& deleted,
                         const std::vector<FilterRecord>& filters,
                         const std::string& blob) override;
  Result<std::vector<int64_t>> ListCheckpoints() const override {
    return checkpoint_reader::ListVersions(versions_path_);
  }
  Result<LoadedCheckpoint> LoadLatest() const override {
    return checkpoint_reader::LoadLatestVersion(versions_path_);
  }
  Result<LoadedCheckpoint> Load(int64_t clock) const override {
    return checkpoint_reader::LoadVersion(versions_path_, clock);
  }
  Status RollBackTo(int64_t clock) override;
  Status DiscardAll() override;
  Status StartOver(const std::vector<int64_t>& keep) override;
  Status DropCheckpoint(int64_t clock) override {
    DUCTILE_RETURN_IF_ERROR(RemoveVersion(clock));
    return options_.sync ? SyncDir(versions_path_) : Status::Ok();
  }

 private:
  fs::path VersionPath(int64_t clock) const {
    return checkpoint_reader::VersionPath(versions_path_, clock);
  }
  // Opens live/ and reads its metadata and tables; a corrupt live/ leaves
  // db_ null and live_error_ set, and is not an error of OpenLive.
  Status OpenLive();
  Status CleanUpLeftovers();
  // OK if live/ may take a checkpoint at `clock`.
  Status CheckCanWrite(int64_t clock) const;
  Status Freeze(int64_t clock);
  void Prune();
  Status RemoveVersion(int64_t clock);
  Status CopyVersionToNext(int64_t clock);
  // Replaces live/ by live.next/ (empty live/ if there is no live.next/).
  Status SwapLive();

  const CheckpointStoreOptions options_;
  const fs::path dir_;
  const fs::path live_path_;
  const fs::path next_path_;
  const fs::path old_path_;
  const fs::path versions_path_;

  std::unique_ptr<rocksdb::DB> db_;
  Status live_error_;
  bool live_trusted_ = false;
  bool needs_resume_ = false;
  std::optional<int64_t> live_clock_;
  uint64_t live_entry_count_ = 0;
  uint32_t live_filter_count_ = 0;
  std::map<TableId, std::string> live_tables_;
};

Status RocksCheckpointStore::Init() {
  // Compactions of live/ merge increments in the background (docs/
  // fault_tolerance.md); at a lower CPU priority (process-wide, for every
  // RocksDB of the default Env), they give way to the request threads
  // where cores are short.
  rocksdb::Env::Default()->LowerThreadPoolCPUPriority(
      rocksdb::Env::Priority::LOW);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return FromErrorCode(ec, "cannot create checkpoint directory", dir_);
  fs::create_directory(versions_path_, ec);
  if (ec) {
    return FromErrorCode(ec, "cannot create checkpoint directory",
                         versions_path_);
  }
  DUCTILE_RETURN_IF_ERROR(CleanUpLeftovers());
  DUCTILE_RETURN_IF_ERROR(OpenLive());

  Result<std::vector<int64_t>> clocks = ListCheckpoints();
  if (!clocks.ok()) return clocks.status();
  // live/ may be built on only if it is the newest version (or both are
  // absent): otherwise a checkpoint's batch reached live/ but its freeze did
  // not happen before a restart.
  if (clocks->empty()) {
    live_trusted_ = live_error_.ok() && !live_clock_.has_value();
  } else {
    live_trusted_ = live_error_.ok() && live_clock_.has_value() &&
                    *live_clock_ == clocks->back();
  }
  return Status::Ok();
}

Status RocksCheckpointStore::CleanUpLeftovers() {
  std::error_code ec;
  if (fs::exists(next_path_, ec)) {
    if (!fs::exists(live_path_, ec) && fs::exists(old_path_, ec)) {
      // RollBackTo stopped between its two renames: live.next/ is complete.
      fs::rename(next_path_, live_path_, ec);
      if (ec) return FromErrorCode(ec, "cannot rename", next_path_);
    } else {
      fs::remove_all(next_path_, ec);
      if (ec) return FromErrorCode(ec, "cannot remove", next_path_);
    }
  }
  fs::remove_all(old_path_, ec);
  if (ec) return FromErrorCode(ec, "cannot remove", old_path_);

  // Half-built versions (RocksDB's staging directories).
  std::vector<fs::path> staging;
  for (fs::directory_iterator it(versions_path_, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 4 && name.ends_with(".tmp"))
      staging.push_back(it->path());
  }
  if (ec) return FromErrorCode(ec, "cannot list", versions_path_);
  for (const fs::path& path : staging) {
    fs::remove_all(path, ec);
    if (ec) return FromErrorCode(ec, "cannot remove", path);
  }
  return Status::Ok();
}

Status RocksCheckpointStore::OpenLive() {
  db_.reset();
  live_error_ = Status::Ok();
  live_clock_.reset();
  live_entry_count_ = 0;
  live_filter_count_ = 0;
  live_tables_.clear();
  needs_resume_ = false;

  const std::string what = "working DB " + live_path_.string();
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s =
      rocksdb::DB::Open(LiveOptions(), live_path_.string(), &raw);
  if (s.IsCorruption()) {
    live_error_ = FromRocks(s, what);
    return Status::Ok();
  }
  DUCTILE_RETURN_IF_ERROR(FromRocks(s, "cannot open " + what));
  std::unique_ptr<rocksdb::DB> db(raw);

  Metadata meta;
  bool empty = false;
  std::map<TableId, std::string> tables;
  Status scan = ScanVersion(
      db.get(), what, /*visit_entries=*/false, &meta, nullptr, &empty,
      [&](const rocksdb::Slice&, const rocksdb::Slice& v, TableId id) {
        tables.emplace(id, v.ToString());
        return std::string();
      },
      [](const rocksdb::Slice&, const rocksdb::Slice&, TableId, Key) {
        return std::string();
      });
  if (!scan.ok()) {
    if (scan.code() == StatusCode::kResourceExhausted) return scan;
    live_error_ = scan;
    return Status::Ok();
  }
  // Counted here, not taken from the metadata: a version written before
  // the metadata counted them (format 2) may have been restored into live/.
  uint32_t filters = 0;
  Status counted = CountFilters(db.get(), what, &filters);
  if (!counted.ok()) {
    // As a bad scan: a damaged live/ is rebuilt by RollBackTo.
    if (counted.code() == StatusCode::kResourceExhausted) return counted;
    live_error_ = counted;
    return Status::Ok();
  }
  if (meta.filter_count && *meta.filter_count != filters) {
    live_error_ = checkpoint_format::Corrupt(
        what, "it holds " + std::to_string(filters) +
                  " filter records, its metadata says " +
                  std::to_string(*meta.filter_count));
    return Status::Ok();
  }
  db_ = std::move(db);
  if (!empty) {
    live_clock_ = meta.clock;
    live_entry_count_ = meta.entry_count;
    live_filter_count_ = filters;
    live_tables_ = std::move(tables);
  }
  return Status::Ok();
}

Status RocksCheckpointStore::CheckCanWrite(int64_t clock) const {
  if (!live_error_.ok()) {
    return FailedPreconditionError(
        live_error_.message() +
        "; restore a checkpoint and call RollBackTo(its clock), or call "
        "DiscardAll() to start over");
  }
  if (db_ == nullptr) {  // the last RollBackTo, DiscardAll or StartOver failed
    return FailedPreconditionError(
        "working DB " + live_path_.string() +
        " is not open (its last rebuild failed); call RollBackTo or "
        "DiscardAll again");
  }
  Result<std::vector<int64_t>> clocks = ListCheckpoints();
  if (!clocks.ok()) return clocks.status();
  if (!live_trusted_) {
    return FailedPreconditionError(
        "working DB " + live_path_.string() + " is at " +
        (live_clock_ ? "clock " + std::to_string(*live_clock_) : "no clock") +
        " but the newest checkpoint is " +
        (clocks->empty() ? "none"
                         : "at clock " + std::to_string(clocks->back())) +
        " (a checkpoint did not finish before a restart); restore a "
        "checkpoint and call RollBackTo(its clock), or call DiscardAll() to "
        "start over");
  }
  if (!clocks->empty() && clock <= clocks->back()) {
    return InvalidArgumentError("checkpoint clock " + std::to_string(clock) +
                                " is not after the newest checkpoint's clock " +
                                std::to_string(clocks->back()));
  }
  if (live_clock_ && clock < *live_clock_) {
    return InvalidArgumentError("checkpoint clock " + std::to_string(clock) +
                                " is before the clock of the last write, " +
                                std::to_string(*live_clock_));
  }
  return Status::Ok();
}

Status RocksCheckpointStore::WriteCheckpoint(
    int64_t clock, uint64_t epoch, const std::vector<TableRecord>& tables,
    const std::vector<EntryRecord>& changed_entries,
    const std::vector<std::pair<TableId, Key>>& deleted,
    const std::vector<FilterRecord>& filters, const std::string& blob) {
  if (clock < 0) {
    return InvalidArgumentError("checkpoint clock " + std::to_string(clock) +
                                " is negative");
  }
  if (blob.size() > kMaxField) {
    return InvalidArgumentError("checkpoint blob is larger than 4 GiB");
  }
  std::map<TableId, std::string> new_tables = live_tables_;
  std::vector<KeyChange> keys;
  DUCTILE_RETURN_IF_ERROR(
      CheckChanges(tables, changed_entries, deleted, &new_tables, &keys));
  DUCTILE_RETURN_IF_ERROR(CheckFilters(filters, new_tables));
  DUCTILE_RETURN_IF_ERROR(CheckCanWrite(clock));
  // The batch lands in the flushed files of the new version.
  const size_t batch_bytes =
      EstimateBatchBytes(tables, changed_entries, deleted, filters, blob);
  DUCTILE_RETURN_IF_ERROR(CheckFreeSpace(
      dir_, batch_bytes, options_.min_free_bytes, "the " + VersionName(clock)));

  const std::string what = "working DB " + live_path_.string();
  if (needs_resume_) {
    DUCTILE_RETURN_IF_ERROR(FromRocks(db_->Resume(), what));
    needs_resume_ = false;
  }
  Metadata meta;
  meta.clock = clock;
  meta.epoch = epoch;
  meta.table_count = static_cast<uint32_t>(new_tables.size());
  meta.blob = blob;
  meta.entry_count = live_entry_count_;
  DUCTILE_RETURN_IF_ERROR(
      CountEntriesAfter(db_.get(), what, keys, &meta.entry_count));
  uint32_t filter_count = live_filter_count_;
  DUCTILE_RETURN_IF_ERROR(
      CountFiltersAfter(db_.get(), what, filters, &filter_count));
  meta.filter_count = filter_count;

  // One atomic batch, written without the WAL: Freeze flushes it right away
  // (RocksDB syncs the flushed files), and a crash before that loses the
  // whole batch, leaving live/ at the newest version, a consistent state.
  rocksdb::WriteBatch batch(batch_bytes);
  for (const TableRecord& t : tables) batch.Put(TableKey(t.id), t.config);
  std::string key;
  std::string value;
  for (const EntryRecord& e : changed_entries) {
    PutEntry(e, &key, &value, &batch);
  }
  for (const auto& [table, k] : deleted) {
    key.clear();
    AppendEntryKey(&key, table, k);
    batch.Delete(key);
  }
  for (const FilterRecord& f : filters) {
    if (f.counts.empty()) {
      batch.Delete(FilterKey(f.table, f.slot));
    } else {
      batch.Put(FilterKey(f.table, f.slot), f.counts);
    }
  }
  batch.Put(MetaKey(), EncodeMetadata(meta, new_tables));

  rocksdb::WriteOptions write;
  write.disableWAL = true;
  rocksdb::Status s = db_->Write(write, &batch);
  if (!s.ok()) {
    needs_resume_ = true;
    return FromRocks(s, "cannot write checkpoint at clock " +
                            std::to_string(clock) + " to " + what);
  }
  live_clock_ = clock;
  live_entry_count_ = meta.entry_count;
  live_filter_count_ = filter_count;
  live_tables_ = std::move(new_tables);

  DUCTILE_RETURN_IF_ERROR(Freeze(clock));
  Prune();
  return Status::Ok();
}

Status RocksCheckpointStore::Freeze(int64_t clock) {
  const fs::path path = VersionPath(clock);
  std::error_code ec;
  fs::remove_all(fs::path(path.string() + ".tmp"), ec);

  rocksdb::Checkpoint* raw = nullptr;
  DUCTILE_RETURN_IF_ERROR(
      FromRocks(rocksdb::Checkpoint::Create(db_.get(), &raw),
                "cannot freeze " + VersionName(clock)));
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  // log_size_for_flush = 0: flush first, so the version is SST files only
  // (hard links) and holds the batch just written.
  rocksdb::Status s = checkpoint->CreateCheckpoint(path.string(), 0);
  if (!s.ok()) {
    needs_resume_ = true;
    fs::remove_all(fs::path(path.string() + ".tmp"), ec);
    return FromRocks(
        s, "cannot freeze " + VersionName(clock) + " into " + path.string());
  }
  if (options_.sync) DUCTILE_RETURN_IF_ERROR(SyncDir(versions_path_));
  return Status::Ok();
}

// Deletes versions beyond keep_last, oldest first. The new version is
// already durable, so a failure here is only logged: it costs disk space,
// not correctness, and the next checkpoint tries again.
void RocksCheckpointStore::Prune() {
  Result<std::vector<int64_t>> clocks = ListCheckpoints();
  if (!clocks.ok()) {
    LOG(WARNING) << "not pruning checkpoints: " << clocks.status();
    return;
  }
  const size_t keep = static_cast<size_t>(options_.keep_last);
  bool removed = false;
  for (size_t i = 0; i + keep < clocks->size(); ++i) {
    Status s = RemoveVersion((*clocks)[i]);
    if (!s.ok()) {
      LOG(WARNING) << "not pruning checkpoints: " << s;
      break;
    }
    removed = true;
  }
  if (removed && options_.sync) {
    Status s = SyncDir(versions_path_);
    if (!s.ok()) LOG(WARNING) << s;
  }
}

Status RocksCheckpointStore::RemoveVersion(int64_t clock) {
  std::error_code ec;
  const fs::path path = VersionPath(clock);
  fs::remove_all(path, ec);
  if (ec) return FromErrorCode(ec, "cannot remove checkpoint", path);
  return Status::Ok();
}

Status RocksCheckpointStore::CopyVersionToNext(int64_t clock) {
  std::error_code ec;
  fs::remove_all(next_path_, ec);
  if (ec) return FromErrorCode(ec, "cannot remove", next_path_);
  return checkpoint_reader::CopyVersion(versions_path_, clock, LiveOptions(),
                                        next_path_);
}

Status RocksCheckpointStore::SwapLive() {
  if (db_ != nullptr) {
    rocksdb::Status s = db_->Close();
    if (!s.ok()) LOG(WARNING) << "closing working DB: " << s.ToString();
    db_.reset();
  }
  std::error_code ec;
  if (fs::exists(live_path_, ec)) {
    fs::rename(live_path_, old_path_, ec);
    if (ec) return FromErrorCode(ec, "cannot rename", live_path_);
  }
  if (fs::exists(next_path_, ec)) {
    fs::rename(next_path_, live_path_, ec);
    if (ec) return FromErrorCode(ec, "cannot rename", next_path_);
  }
  if (options_.sync) DUCTILE_RETURN_IF_ERROR(SyncDir(dir_));
  fs::remove_all(old_path_, ec);
  if (ec) return FromErrorCode(ec, "cannot remove", old_path_);
  return Status::Ok();
}

Status RocksCheckpointStore::RollBackTo(int64_t clock) {
  Result<std::vector<int64_t>> clocks = ListCheckpoints();
  if (!clocks.ok()) return clocks.status();
  if (!std::binary_search(clocks->begin(), clocks->end(), clock)) {
    return NotFoundError("no checkpoint at clock " + std::to_string(clock) +
                         " in " + versions_path_.string());
  }
  const bool live_is_there =
      db_ != nullptr && live_error_.ok() && live_clock_ == clock;
  // Verify and copy the version before deleting anything.
  if (!live_is_there) {
    DUCTILE_RETURN_IF_ERROR(CheckFreeSpace(
        dir_, checkpoint_reader::BytesUnder(VersionPath(clock)),
        options_.min_free_bytes, "the copy of the " + VersionName(clock)));
    DUCTILE_RETURN_IF_ERROR(CopyVersionToNext(clock));
  }
  bool removed = false;
  for (auto it = clocks->rbegin(); it != clocks->rend() && *it > clock; ++it) {
    DUCTILE_RETURN_IF_ERROR(RemoveVersion(*it));
    removed = true;
  }
  if (removed && options_.sync)
    DUCTILE_RETURN_IF_ERROR(SyncDir(versions_path_));
  if (!live_is_there) {
    DUCTILE_RETURN_IF_ERROR(SwapLive());
    DUCTILE_RETURN_IF_ERROR(OpenLive());
    if (!live_error_.ok()) return live_error_;
  }
  live_trusted_ = true;
  return Status::Ok();
}

Status RocksCheckpointStore::DiscardAll() { return StartOver({}); }

Status RocksCheckpointStore::StartOver(const std::vector<int64_t>& keep) {
  Result<std::vector<int64_t>> clocks = ListCheckpoints();
  if (!clocks.ok()) return clocks.status();
  for (auto it = clocks->rbegin(); it != clocks->rend(); ++it) {
    if (std::find(keep.begin(), keep.end(), *it) != keep.end()) continue;
    DUCTILE_RETURN_IF_ERROR(RemoveVersion(*it));
  }
  if (options_.sync) DUCTILE_RETURN_IF_ERROR(SyncDir(versions_path_));
  std::error_code ec;
  fs::remove_all(next_path_, ec);
  if (ec) return FromErrorCode(ec, "cannot remove", next_path_);
  DUCTILE_RETURN_IF_ERROR(SwapLive());
  DUCTILE_RETURN_IF_ERROR(OpenLive());
  if (!live_error_.ok()) return live_error_;
  live_trusted_ = true;
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<CheckpointStore>> CheckpointStore::Open(
    const CheckpointStoreOptions& options) {
  if (options.dir.empty()) {
    return InvalidArgumentError("CheckpointStoreOptions::dir is empty");
  }
  if (options.keep_last < 1) {
    return InvalidArgumentError("CheckpointStoreOptions::keep_last is " +
                                std::to_string(options.keep_last) +
                                ", must be >= 1");
  }
  std::error_code ec;
  fs::path dir = fs::absolute(options.dir, ec);
  if (ec) return FromErrorCode(ec, "cannot resolve", options.dir);
  dir = dir.lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();
  auto store = std::make_unique<RocksCheckpointStore>(options, dir);
  DUCTILE_RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<CheckpointStore>(std::move(store));
}

}  // namespace ductile
