// Reading and verifying the versions of a checkpoint store (the RocksDB
// instances under <dir>/checkpoints/ and <dir>/live/) record by record,
// against the persistent format of checkpoint_format.h: listing, loading
// and copying frozen versions, and the errors of RocksDB and of the file
// system as ours. Shared by the store (checkpoint_store.cc) and
// LoadCheckpointFrom, which reads a frozen version without opening the
// store.
//
// Internal to storage/ (its callers link RocksDB privately): not for
// inclusion outside it.
#ifndef DUCTILE_STORAGE_CHECKPOINT_READER_H_
#define DUCTILE_STORAGE_CHECKPOINT_READER_H_

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "ductile/status.h"
#include "ductile/table.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/status.h"
#include "storage/checkpoint_format.h"
#include "storage/checkpoint_store.h"

namespace ductile::checkpoint_reader {

// The options of the working RocksDB instance (live/), and of the copies
// made from frozen versions.
rocksdb::Options LiveOptions();

// A RocksDB status as ours; `what` names the object, e.g. "checkpoint at
// clock 40". A full disk is ResourceExhausted, corruption
// FailedPrecondition ("<what> is corrupt (...)").
Status FromRocks(const rocksdb::Status& s, const std::string& what);

// An OS error (errno, or a std::filesystem error code) as ours: "<what>
// '<path>': <error>", ResourceExhausted for a full disk or quota, else
// FailedPrecondition.
Status FromErrno(int err, const std::string& what,
                 const std::filesystem::path& path);
Status FromErrorCode(const std::error_code& ec, const std::string& what,
                     const std::filesystem::path& path);

// OK if writing about `bytes` into `dir` leaves at least `reserve` bytes
// free on its file system (for an unprivileged writer); else
// ResourceExhausted: "<what> needs about X MiB in '<dir>', which has Y MiB
// free; Z MiB are kept free ...: <remedy>". RocksDB aborts the process on
// some writes that fail on a full disk, so a store refuses before it gets
// there. `reserve` 0: no check.
Status CheckFreeSpace(
    const std::filesystem::path& dir, uint64_t bytes, uint64_t reserve,
    const std::string& what,
    const std::string& remedy = "free some space (or keep fewer checkpoints)");
// Bytes of the regular files under `dir` (0 if it cannot be listed).
uint64_t BytesUnder(const std::filesystem::path& dir);

// "checkpoint at clock <clock>", how messages name a frozen version.
std::string VersionName(int64_t clock);

// <dir>/checkpoints: where a store in `dir` keeps its frozen versions.
std::filesystem::path VersionsPath(const std::filesystem::path& dir);
// <versions>/<clock>: the frozen version at `clock`.
std::filesystem::path VersionPath(const std::filesystem::path& versions,
                                  int64_t clock);

// Clocks of the frozen versions in `versions`, ascending (names that are
// not a clock are ignored). Does not check them.
Result<std::vector<int64_t>> ListVersions(
    const std::filesystem::path& versions);

// ScanVersion's callbacks.
using OnTable = std::function<std::string(
    const rocksdb::Slice& key, const rocksdb::Slice& value, TableId id)>;
using OnEntry = std::function<std::string(const rocksdb::Slice& raw_key,
                                          const rocksdb::Slice& value,
                                          TableId table, Key key)>;
using OnFilter = std::function<std::string(const rocksdb::Slice& raw_key,
                                           const rocksdb::Slice& value,
                                           TableId table, int32_t slot)>;

// Reads and verifies one version's records in key order. Tables,
// entries and filter counts are passed to on_table(raw_key, raw_value,
// id), on_entry(raw_key, raw_value, table, key) and on_filter(raw_key,
// raw_value, table, slot) (if not null), which return "" or why the
// record is bad. With visit_entries false, entries and filter counts are
// neither read nor counted (Open of live/ reads only metadata and tables).
// `raw_meta` (may be null) receives the metadata record as stored. `empty` (may
// be null) allows a version with no records at all and reports it.
Status ScanVersion(rocksdb::DB* db, const std::string& what, bool visit_entries,
                   checkpoint_format::Metadata* meta, std::string* raw_meta,
                   bool* empty, const OnTable& on_table,
                   const OnEntry& on_entry, const OnFilter& on_filter = {});

// Counting the records of a writable instance (`what` names it in errors):
// `*count` is increased by the entries that `sorted` (ascending by table and
// key, none twice) adds and decreased by those it deletes.
Status CountEntriesAfter(
    rocksdb::DB* db, const std::string& what,
    const std::vector<checkpoint_format::KeyChange>& sorted, uint64_t* count);
// The same for filter records written by `filters` (none twice; empty
// counts delete). InvalidArgument past 2^32 - 1 records.
Status CountFiltersAfter(rocksdb::DB* db, const std::string& what,
                         const std::vector<FilterRecord>& filters,
                         uint32_t* count);
// The filter records `db` holds.
Status CountFilters(rocksdb::DB* db, const std::string& what, uint32_t* count);

// Opens the frozen version at `clock` in `versions` read-only. NotFound if
// there is none.
Status OpenFrozen(const std::filesystem::path& versions, int64_t clock,
                  std::unique_ptr<rocksdb::DB>* db);

// Reads and verifies the frozen version at `clock` in `versions`. Errors as
// CheckpointStore::Load.
Result<LoadedCheckpoint> LoadVersion(const std::filesystem::path& versions,
                                     int64_t clock);

// Reads and verifies the newest usable frozen version in `versions`,
// skipping corrupt ones with a warning. Errors as
// CheckpointStore::LoadLatest.
Result<LoadedCheckpoint> LoadLatestVersion(
    const std::filesystem::path& versions);

// Verifies the frozen version at `clock` in `versions` and copies its
// records into a new RocksDB instance at `target` (which must not exist),
// opened with `options`, flushed and closed before it returns.
Status CopyVersion(const std::filesystem::path& versions, int64_t clock,
                   rocksdb::Options options,
                   const std::filesystem::path& target);

}  // namespace ductile::checkpoint_reader

#endif  // DUCTILE_STORAGE_CHECKPOINT_READER_H_
