// A server's durable checkpoints: frozen, consistent versions of its tables.
//
// A checkpoint at clock C holds one server's state after every update with
// timestamp < C (docs/fault_tolerance.md): per (table, key) the value, the
// optimizer state and the step count; per table its configuration; per
// (table, slot) the admission filter's counts (opaque bytes the caller
// fills); and the checkpoint's metadata (clock, membership epoch and an
// opaque blob the caller fills, e.g. worker clocks and data cursors).
//
// On disk, under CheckpointStoreOptions::dir:
//   live/                the working RocksDB instance. Each WriteCheckpoint
//                        applies only the entries changed since the previous
//                        one, in one atomic WriteBatch.
//   checkpoints/<clock>/ frozen versions, one per checkpoint clock (decimal),
//                        each a complete RocksDB instance made by hard-linking
//                        live/'s files (so an unchanged key costs no space per
//                        version). The newest `keep_last` are kept.
//
// Usage:
//   auto store = CheckpointStore::Open({.dir = "/var/lib/ductile/server-3"});
//   if (!store.ok()) return store.status();
//   // Restore:
//   Result<LoadedCheckpoint> ckpt = (*store)->LoadLatest();
//   if (ckpt.ok()) {
//     for (const std::string& w : ckpt->warnings) LOG(WARNING) << w;
//     ... put ckpt->tables and ckpt->entries back into the server ...
//     DUCTILE_RETURN_IF_ERROR((*store)->RollBackTo(ckpt->clock));
//   }
//   // Each checkpoint clock, with the keys changed since the previous one:
//   DUCTILE_RETURN_IF_ERROR((*store)->WriteCheckpoint(clock, epoch, tables,
//   changed,
//                                             deleted, blob));
//
// Thread compatibility: not thread-safe. A CheckpointStore is owned by one
// thread, the server's request thread or a dedicated checkpoint thread; calls
// from other threads must be serialized by the owner. Two CheckpointStores
// must not share a `dir` (the second Open fails: RocksDB locks live/).
#ifndef DUCTILE_STORAGE_CHECKPOINT_STORE_H_
#define DUCTILE_STORAGE_CHECKPOINT_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ductile/status.h"
#include "ductile/table.h"

namespace ductile {

// The records' persistent format (keys, values, the metadata record and its
// checksum) is described in storage/checkpoint_format.h.

struct TableRecord {
  TableId id = 0;
  // The table's configuration, serialized by the caller; stored as is.
  std::string config;
};

struct EntryRecord {
  TableId table = 0;
  Key key = 0;
  std::vector<float> value;
  // Optimizer state (momentum, AdaGrad or Adam accumulators); any length.
  std::vector<float> state;
  // Updates applied to this key (Adam's bias correction).
  int64_t steps = 0;
};

// The admission filter's counts of one slot of a table (RowPolicy's ids
// pushed but not admitted yet), serialized by the caller; stored as is.
// Empty `counts`: the slot holds none here (a write deletes its record).
struct FilterRecord {
  TableId table = 0;
  int32_t slot = 0;
  std::string counts;
};

struct LoadedCheckpoint {
  int64_t clock = 0;
  uint64_t epoch = 0;
  // The caller's blob, as written.
  std::string blob;
  // Ascending by id.
  std::vector<TableRecord> tables;
  // Ascending by (table, key).
  std::vector<EntryRecord> entries;
  // Ascending by (table, slot), none empty. None in a version written
  // before the format held them (format version 1).
  std::vector<FilterRecord> filters;
  // Newer versions that were skipped and why, e.g. "checkpoint at clock 40
  // is corrupt (...); using clock 30". Empty when the newest one was used.
  std::vector<std::string> warnings;
};

struct CheckpointStoreOptions {
  // Directory holding live/ and checkpoints/; created if missing (with its
  // parents). Required.
  std::string dir;
  // Frozen versions to keep (K); older ones are deleted, oldest first, after
  // each WriteCheckpoint. Range: >= 1. Default: 3.
  int keep_last = 3;
  // Whether WriteCheckpoint also fsyncs the directories it changes
  // (checkpoints/, and dir for RollBackTo), so that once it returns OK a
  // machine crash, not only a process crash, cannot lose the new version.
  // The version's files are synced by RocksDB's flush either way.
  bool sync = true;
  // WriteCheckpoint and RollBackTo refuse (ResourceExhausted, naming the
  // space needed and free) a write that would leave less than this free on
  // the store's file system: RocksDB aborts the process on some writes
  // that fail on a full disk, and the reserve keeps the store from getting
  // there. 0: no check. Default: 64 MiB.
  uint64_t min_free_bytes = uint64_t{64} << 20;
};

class CheckpointStore {
 public:
  // Opens or creates the store in options.dir. Errors:
  //   InvalidArgument      bad options;
  //   FailedPrecondition   the directory cannot be created or written (the
  //                        message names the path and the OS error), or
  //                        another store holds it;
  //   ResourceExhausted    the disk is full.
  // A corrupt live/ does not fail Open (the frozen versions may be fine): it
  // fails WriteCheckpoint until RollBackTo or DiscardAll rebuilds it.
  [[nodiscard]] static Result<std::unique_ptr<CheckpointStore>> Open(
      const CheckpointStoreOptions& options);

  virtual ~CheckpointStore() = default;

  // Records the checkpoint at `clock`: upserts `tables` (tables not listed
  // keep their stored config), writes `changed_entries` and removes `deleted`
  // keys (absent keys are ignored), and writes `filters` (removing the
  // records of those with empty counts) in one atomic write to live/, together
  // with the metadata (clock, epoch, blob); then freezes live/ as
  // checkpoints/<clock>/ and deletes the versions beyond keep_last.
  //
  // Entries not listed keep their stored value, so `changed_entries` must
  // hold every key changed since the previous WriteCheckpoint that returned
  // OK (or since the state restored by RollBackTo), or a superset of them;
  // the same holds for the slots of `filters`.
  //
  // Errors:
  //   InvalidArgument     clock < 0, clock not after the newest checkpoint,
  //                       a key listed twice (in changed_entries and/or
  //                       deleted) or a slot twice (in filters), or an entry
  //                       or filter of a table with no TableRecord (now or
  //                       stored);
  //   ResourceExhausted   the disk is full;
  //   FailedPrecondition  an I/O error, a corrupt live/, or live/ is ahead of
  //                       the newest checkpoint after a restart (call
  //                       RollBackTo or DiscardAll first).
  // After an error, nothing is frozen for `clock`; the same changes (or a
  // superset) may be written again at `clock` or later.
  [[nodiscard]] virtual Status WriteCheckpoint(
      int64_t clock, uint64_t epoch, const std::vector<TableRecord>& tables,
      const std::vector<EntryRecord>& changed_entries,
      const std::vector<std::pair<TableId, Key>>& deleted,
      const std::vector<FilterRecord>& filters, const std::string& blob) = 0;
  // The same with no filter records.
  [[nodiscard]] Status WriteCheckpoint(
      int64_t clock, uint64_t epoch, const std::vector<TableRecord>& tables,
      const std::vector<EntryRecord>& changed_entries,
      const std::vector<std::pair<TableId, Key>>& deleted,
      const std::string& blob) {
    return WriteCheckpoint(clock, epoch, tables, changed_entries, deleted, {},
                           blob);
  }

  // Clocks of the frozen versions present, ascending. Does not check them.
  [[nodiscard]] virtual Result<std::vector<int64_t>> ListCheckpoints()
      const = 0;

  // Reads and verifies the newest usable version (RocksDB paranoid checks
  // and block checksums, the metadata crc, the record counts); a corrupt or
  // unreadable one is skipped with a warning and the one before is tried.
  // NotFound if there is no version; FailedPrecondition, listing every
  // version's problem, if none is usable.
  [[nodiscard]] virtual Result<LoadedCheckpoint> LoadLatest() const = 0;

  // Reads and verifies the version at `clock`. NotFound if there is none;
  // FailedPrecondition (the message says "corrupt" where it is) if it
  // cannot be used.
  [[nodiscard]] virtual Result<LoadedCheckpoint> Load(int64_t clock) const = 0;

  // Makes live/ equal to the version at `clock` and deletes the versions
  // newer than it: call it after restoring a server from that version, so
  // that the next incremental WriteCheckpoint builds on the restored state.
  // Costs nothing when live/ already is that version (the usual restart);
  // otherwise it rewrites live/ from the frozen version (verifying it).
  // NotFound if there is no version at `clock`.
  [[nodiscard]] virtual Status RollBackTo(int64_t clock) = 0;

  // Deletes every version and empties live/: a job that starts over, with
  // nothing to restore, in a directory used before.
  [[nodiscard]] virtual Status DiscardAll() = 0;

  // Keeps the versions at `keep` (clocks absent from the store are
  // ignored), deletes every other one and empties live/: the next
  // WriteCheckpoint holds only what it lists. For a server that rejoins the
  // job with no state: the versions kept may still be read for rollbacks to
  // older checkpoints, the others belong to a timeline the job abandoned.
  [[nodiscard]] virtual Status StartOver(const std::vector<int64_t>& keep) = 0;

  // Deletes the frozen version at `clock` (one that will never be
  // restored, e.g. of a checkpoint that did not complete on every server),
  // so it does not count among the newest keep_last. live/ is unchanged.
  // OK if there is none.
  [[nodiscard]] virtual Status DropCheckpoint(int64_t clock) = 0;
};

// Reads and verifies the version at `clock` of the store in `dir` without
// opening the store: a frozen version never changes, so any number of
// readers may do this while the store's owner runs (or after it died).
// Errors as CheckpointStore::Load.
[[nodiscard]] Result<LoadedCheckpoint> LoadCheckpointFrom(
    const std::string& dir, int64_t clock);

}  // namespace ductile

#endif  // DUCTILE_STORAGE_CHECKPOINT_STORE_H_
