// CheckpointStore on RocksDB: the one file that talks to RocksDB.
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
#include <array>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdarg>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>
#include <system_error>
#include <tuple>

#include "glog/logging.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/table.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/write_batch.h"

namespace ductile {
namespace {

namespace fs = std::filesystem;

// ---- Persistent format (see the header; never change) ----

constexpr uint32_t kFormatVersion = 1;
constexpr char kMetaType = 0x01;
constexpr char kTableType = 0x02;
constexpr char kEntryType = 0x03;
constexpr size_t kTableKeySize = 1 + 4;
constexpr size_t kEntryKeySize = 1 + 4 + 8;
constexpr size_t kEntryHeaderSize = 4 + 4 + 8;
// format_version, clock, epoch, entry_count, table_count, blob_size.
constexpr size_t kMetaHeaderSize = 4 + 8 + 8 + 8 + 4 + 4;
constexpr size_t kCrcSize = 4;
constexpr uint64_t kMaxField = 0xffffffffu;

void PutFixed32(std::string* dst, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>(v >> (8 * i));
  dst->append(b, 4);
}

void PutFixed64(std::string* dst, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
  dst->append(b, 8);
}

uint32_t DecodeFixed32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

uint64_t DecodeFixed64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

void PutBigEndian(std::string* dst, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i)
    dst->push_back(static_cast<char>(v >> (8 * i)));
}

uint64_t DecodeBigEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

const std::string& MetaKey() {
  static const std::string* const key = new std::string(1, kMetaType);
  return *key;
}

std::string TableKey(TableId table) {
  std::string key(1, kTableType);
  PutBigEndian(&key, table, 4);
  return key;
}

void AppendEntryKey(std::string* dst, TableId table, Key key) {
  dst->push_back(kEntryType);
  PutBigEndian(dst, table, 4);
  PutBigEndian(dst, key, 8);
}

void PutFloats(std::string* dst, const std::vector<float>& v) {
  if constexpr (std::endian::native == std::endian::little) {
    dst->append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  } else {
    for (float f : v) PutFixed32(dst, std::bit_cast<uint32_t>(f));
  }
}

void DecodeFloats(const char* p, size_t n, std::vector<float>* out) {
  out->resize(n);
  if constexpr (std::endian::native == std::endian::little) {
    if (n > 0) std::memcpy(out->data(), p, n * 4);
  } else {
    for (size_t i = 0; i < n; ++i) {
      (*out)[i] = std::bit_cast<float>(DecodeFixed32(p + 4 * i));
    }
  }
}

void EncodeEntryValue(const EntryRecord& e, std::string* dst) {
  dst->clear();
  dst->reserve(kEntryHeaderSize + 4 * (e.value.size() + e.state.size()));
  PutFixed32(dst, static_cast<uint32_t>(e.value.size()));
  PutFixed32(dst, static_cast<uint32_t>(e.state.size()));
  PutFixed64(dst, static_cast<uint64_t>(e.steps));
  PutFloats(dst, e.value);
  PutFloats(dst, e.state);
}

// Empty on success, else why the bytes are not an entry.
std::string DecodeEntryValue(std::string_view in, EntryRecord* e) {
  if (in.size() < kEntryHeaderSize) return "entry value too short";
  const uint64_t value_count = DecodeFixed32(in.data());
  const uint64_t state_count = DecodeFixed32(in.data() + 4);
  if (in.size() != kEntryHeaderSize + 4 * (value_count + state_count)) {
    return "entry value size does not match its float counts";
  }
  e->steps = static_cast<int64_t>(DecodeFixed64(in.data() + 8));
  DecodeFloats(in.data() + kEntryHeaderSize, value_count, &e->value);
  DecodeFloats(in.data() + kEntryHeaderSize + 4 * value_count, state_count,
               &e->state);
  return "";
}

// CRC-32C (Castagnoli), bytewise.
constexpr std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = MakeCrcTable();

uint32_t Crc32cExtend(uint32_t crc, std::string_view data) {
  crc = ~crc;
  for (char ch : data) {
    crc = kCrcTable[(crc ^ static_cast<uint8_t>(ch)) & 0xff] ^ (crc >> 8);
  }
  return ~crc;
}

uint32_t ExtendCrcWithTable(uint32_t crc, TableId table,
                            std::string_view config) {
  std::string head;
  PutFixed32(&head, table);
  PutFixed32(&head, static_cast<uint32_t>(config.size()));
  return Crc32cExtend(Crc32cExtend(crc, head), config);
}

struct Metadata {
  int64_t clock = 0;
  uint64_t epoch = 0;
  uint64_t entry_count = 0;
  uint32_t table_count = 0;
  std::string blob;
};

std::string EncodeMetadata(const Metadata& meta,
                           const std::map<TableId, std::string>& tables) {
  std::string out;
  PutFixed32(&out, kFormatVersion);
  PutFixed64(&out, static_cast<uint64_t>(meta.clock));
  PutFixed64(&out, meta.epoch);
  PutFixed64(&out, meta.entry_count);
  PutFixed32(&out, meta.table_count);
  PutFixed32(&out, static_cast<uint32_t>(meta.blob.size()));
  out += meta.blob;
  uint32_t crc = Crc32cExtend(0, out);
  for (const auto& [id, config] : tables) {
    crc = ExtendCrcWithTable(crc, id, config);
  }
  PutFixed32(&out, crc);
  return out;
}

// ---- Errors ----

bool MentionsNoSpace(const std::string& text) {
  return text.find("No space left on device") != std::string::npos ||
         text.find("ENOSPC") != std::string::npos;
}

// `what` names the object, e.g. "checkpoint at clock 40".
Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  const std::string text = s.ToString();
  if (s.IsNoSpace() || MentionsNoSpace(text)) {
    return ResourceExhaustedError(what + ": disk full: " + text);
  }
  if (s.IsCorruption()) {
    return FailedPreconditionError(what + " is corrupt (" + text + ")");
  }
  if (s.IsNotFound()) return NotFoundError(what + ": " + text);
  if (s.IsBusy() || s.IsTryAgain() || s.IsTimedOut()) {
    return UnavailableError(what + ": " + text);
  }
  if (s.IsIOError() || s.IsInvalidArgument() || s.IsNotSupported() ||
      s.IsIncomplete() || s.IsAborted()) {
    return FailedPreconditionError(what + ": " + text);
  }
  return InternalError(what + ": " + text);
}

Status FromErrno(int err, const std::string& what, const fs::path& path) {
  const std::string text = what + " '" + path.string() +
                           "': " + std::generic_category().message(err);
  if (err == ENOSPC || err == EDQUOT) return ResourceExhaustedError(text);
  return FailedPreconditionError(text);
}

Status FromErrorCode(const std::error_code& ec, const std::string& what,
                     const fs::path& path) {
  return FromErrno(ec.value(), what, path);
}

Status Corrupt(const std::string& what, const std::string& reason) {
  return FailedPreconditionError(what + " is corrupt (" + reason + ")");
}

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

// Frozen versions are opened read-only and must not gain a LOG file.
class DiscardingLogger final : public rocksdb::Logger {
 public:
  void Logv(const char* /*format*/, va_list /*ap*/) override {}
  void Logv(const rocksdb::InfoLogLevel /*level*/, const char* /*format*/,
            va_list /*ap*/) override {}
};

rocksdb::Options LiveOptions() {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  // Trained floats hardly compress; compressing would only cost time.
  options.compression = rocksdb::kNoCompression;
  options.keep_log_file_num = 2;
  options.max_log_file_size = 4 << 20;
  rocksdb::BlockBasedTableOptions table;
  // Cheap "is this key new?" lookups while counting entries.
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

rocksdb::Options FrozenOptions() {
  rocksdb::Options options;
  options.create_if_missing = false;
  options.paranoid_checks = true;
  options.info_log = std::make_shared<DiscardingLogger>();
  return options;
}

std::optional<int64_t> ParseClock(const std::string& name) {
  if (name.empty() || name.size() > 19) return std::nullopt;
  if (name.size() > 1 && name[0] == '0') return std::nullopt;
  int64_t clock = 0;
  const auto [end, ec] =
      std::from_chars(name.data(), name.data() + name.size(), clock);
  if (ec != std::errc() || end != name.data() + name.size() || clock < 0) {
    return std::nullopt;
  }
  return clock;
}

// Reads and verifies one version's records in key order. Tables and
// entries are passed to on_table(raw_key, raw_value, id) and
// on_entry(raw_key, raw_value, table, key), which return "" or why the
// record is bad. With visit_entries false, entries are neither read nor
// counted (Open of live/ reads only metadata and tables). `empty` (may be
// null) allows a version with no records at all and reports it.
template <typename OnTable, typename OnEntry>
Status ScanVersion(rocksdb::DB* db, const std::string& what, bool visit_entries,
                   Metadata* meta, std::string* raw_meta, bool* empty,
                   OnTable on_table, OnEntry on_entry) {
  rocksdb::ReadOptions read;
  read.verify_checksums = true;
  read.fill_cache = false;
  read.readahead_size = 2 << 20;

  std::string value;
  rocksdb::Status s = db->Get(read, MetaKey(), &value);
  if (s.IsNotFound()) {
    if (empty != nullptr) {
      std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(read));
      it->SeekToFirst();
      if (!it->Valid() && it->status().ok()) {
        *empty = true;
        return Status::Ok();
      }
      DUCTILE_RETURN_IF_ERROR(FromRocks(it->status(), what));
    }
    return Corrupt(what, "its metadata record is missing");
  }
  DUCTILE_RETURN_IF_ERROR(FromRocks(s, what));
  if (empty != nullptr) *empty = false;

  if (value.size() < kMetaHeaderSize + kCrcSize) {
    return Corrupt(what, "its metadata record is too short");
  }
  const uint32_t version = DecodeFixed32(value.data());
  if (version != kFormatVersion) {
    // Checked before the crc, whose coverage a later format may change.
    return FailedPreconditionError(
        what + " has format version " + std::to_string(version) +
        " (corrupt, or written by a newer build); this build reads only " +
        std::to_string(kFormatVersion));
  }
  meta->clock = static_cast<int64_t>(DecodeFixed64(value.data() + 4));
  meta->epoch = DecodeFixed64(value.data() + 12);
  meta->entry_count = DecodeFixed64(value.data() + 20);
  meta->table_count = DecodeFixed32(value.data() + 28);
  const uint32_t blob_size = DecodeFixed32(value.data() + 32);
  if (value.size() != kMetaHeaderSize + blob_size + kCrcSize) {
    return Corrupt(what, "its metadata record has the wrong size");
  }
  meta->blob.assign(value.data() + kMetaHeaderSize, blob_size);
  const size_t crc_at = kMetaHeaderSize + blob_size;
  const uint32_t stored_crc = DecodeFixed32(value.data() + crc_at);
  uint32_t crc = Crc32cExtend(0, std::string_view(value.data(), crc_at));

  uint64_t entries = 0;
  std::vector<TableId> tables;  // ascending: table records come in key order
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(read));
  for (it->Seek(rocksdb::Slice(&kTableType, 1)); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    if (k[0] == kTableType) {
      if (k.size() != kTableKeySize) {
        return Corrupt(what, "a table record has a key of the wrong size");
      }
      const auto id = static_cast<TableId>(DecodeBigEndian(k.data() + 1, 4));
      crc = ExtendCrcWithTable(crc, id, std::string_view(v.data(), v.size()));
      tables.push_back(id);
      std::string bad = on_table(k, v, id);
      if (!bad.empty()) return Corrupt(what, bad);
    } else if (k[0] == kEntryType) {
      if (!visit_entries) break;
      if (k.size() != kEntryKeySize) {
        return Corrupt(what, "an entry record has a key of the wrong size");
      }
      const auto table = static_cast<TableId>(DecodeBigEndian(k.data() + 1, 4));
      const Key key = DecodeBigEndian(k.data() + 5, 8);
      // Table records sort before entries, so all of them are known here.
      if (!std::binary_search(tables.begin(), tables.end(), table)) {
        return Corrupt(what, "an entry of table " + std::to_string(table) +
                                 " has no table record");
      }
      ++entries;
      std::string bad = on_entry(k, v, table, key);
      if (!bad.empty()) return Corrupt(what, bad);
    } else {
      return Corrupt(what, "a record has the unknown type " +
                               std::to_string(static_cast<uint8_t>(k[0])));
    }
  }
  DUCTILE_RETURN_IF_ERROR(FromRocks(it->status(), what));

  if (crc != stored_crc) {
    return Corrupt(what, "its metadata checksum does not match");
  }
  if (tables.size() != meta->table_count) {
    return Corrupt(what, "it holds " + std::to_string(tables.size()) +
                             " tables, its metadata says " +
                             std::to_string(meta->table_count));
  }
  if (visit_entries && entries != meta->entry_count) {
    return Corrupt(what, "it holds " + std::to_string(entries) +
                             " entries, its metadata says " +
                             std::to_string(meta->entry_count));
  }
  if (raw_meta != nullptr) *raw_meta = std::move(value);
  return Status::Ok();
}

struct KeyChange {
  TableId table;
  Key key;
  bool deleted;
};

// Checks a checkpoint's changes; on success `tables_after` holds every
// table's config after them and `sorted` the changed and deleted keys in
// (table, key) order, which is their encoded keys' order.
Status CheckChanges(const std::vector<TableRecord>& tables,
                    const std::vector<EntryRecord>& changed_entries,
                    const std::vector<std::pair<TableId, Key>>& deleted,
                    std::map<TableId, std::string>* tables_after,
                    std::vector<KeyChange>* sorted) {
  for (const TableRecord& t : tables) {
    if (t.config.size() > kMaxField) {
      return InvalidArgumentError("config of table " + std::to_string(t.id) +
                                  " is larger than 4 GiB");
    }
    (*tables_after)[t.id] = t.config;
  }
  std::vector<KeyChange>& keys = *sorted;
  keys.reserve(changed_entries.size() + deleted.size());
  for (const EntryRecord& e : changed_entries) {
    if (!tables_after->contains(e.table)) {
      return InvalidArgumentError("entry (table " + std::to_string(e.table) +
                                  ", key " + std::to_string(e.key) +
                                  ") belongs to a table with no TableRecord");
    }
    if (e.value.size() > kMaxField || e.state.size() > kMaxField) {
      return InvalidArgumentError("entry (table " + std::to_string(e.table) +
                                  ", key " + std::to_string(e.key) +
                                  ") has more than 2^32 floats");
    }
    keys.push_back(KeyChange{e.table, e.key, false});
  }
  for (const auto& [table, key] : deleted) {
    keys.push_back(KeyChange{table, key, true});
  }
  std::sort(keys.begin(), keys.end(),
            [](const KeyChange& a, const KeyChange& b) {
              return std::tie(a.table, a.key) < std::tie(b.table, b.key);
            });
  const auto dup = std::adjacent_find(
      keys.begin(), keys.end(), [](const KeyChange& a, const KeyChange& b) {
        return a.table == b.table && a.key == b.key;
      });
  if (dup != keys.end()) {
    return InvalidArgumentError(
        "key (table " + std::to_string(dup->table) + ", key " +
        std::to_string(dup->key) +
        ") is listed twice in one checkpoint (changed and/or deleted)");
  }
  return Status::Ok();
}

// Bytes to reserve for a checkpoint's batch: growing a 100 MB batch by
// doubling costs more than copying it once.
size_t EstimateBatchBytes(const std::vector<TableRecord>& tables,
                          const std::vector<EntryRecord>& changed_entries,
                          const std::vector<std::pair<TableId, Key>>& deleted,
                          const std::string& blob) {
  constexpr size_t kRecordOverhead = 32;  // type, varint lengths, key
  size_t bytes = 2 * kRecordOverhead + blob.size();
  for (const TableRecord& t : tables) {
    bytes += kRecordOverhead + t.config.size();
  }
  for (const EntryRecord& e : changed_entries) {
    bytes += kRecordOverhead + kEntryHeaderSize +
             4 * (e.value.size() + e.state.size());
  }
  return bytes + kRecordOverhead * deleted.size();
}

// Adds one entry record to `batch`; `key` and `value` are scratch space.
void PutEntry(const EntryRecord& e, std::string* key, std::string* value,
              rocksdb::WriteBatch* batch) {
  key->clear();
  AppendEntryKey(key, e.table, e.key);
  if constexpr (std::endian::native == std::endian::little) {
    // Gathered, so the floats are copied once, into the batch.
    value->clear();
    PutFixed32(value, static_cast<uint32_t>(e.value.size()));
    PutFixed32(value, static_cast<uint32_t>(e.state.size()));
    PutFixed64(value, static_cast<uint64_t>(e.steps));
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

std::string VersionName(int64_t clock) {
  return "checkpoint at clock " + std::to_string(clock);
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
        versions_path_(dir / "checkpoints") {}

  Status Init();

  Status WriteCheckpoint(int64_t clock, uint64_t epoch,
                         const std::vector<TableRecord>& tables,
                         const std::vector<EntryRecord>& changed_entries,
                         const std::vector<std::pair<TableId, Key>>& deleted,
                         const std::string& blob) override;
  Result<std::vector<int64_t>> ListCheckpoints() const override;
  Result<LoadedCheckpoint> LoadLatest() const override;
  Result<LoadedCheckpoint> Load(int64_t clock) const override;
  Status RollBackTo(int64_t clock) override;
  Status DiscardAll() override;
  Status DropCheckpoint(int64_t clock) override {
    DUCTILE_RETURN_IF_ERROR(RemoveVersion(clock));
    return options_.sync ? SyncDir(versions_path_) : Status::Ok();
  }

 private:
  fs::path VersionPath(int64_t clock) const {
    return versions_path_ / std::to_string(clock);
  }
  Status OpenFrozen(int64_t clock, std::unique_ptr<rocksdb::DB>* db) const;
  // Opens live/ and reads its metadata and tables; a corrupt live/ leaves
  // db_ null and live_error_ set, and is not an error of OpenLive.
  Status OpenLive();
  Status CleanUpLeftovers();
  // OK if live/ may take a checkpoint at `clock`.
  Status CheckCanWrite(int64_t clock) const;
  // The entry count after applying `sorted` (ascending, no key twice).
  Status CountChanges(const std::vector<KeyChange>& sorted,
                      uint64_t* entry_count);
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
  std::map<TableId, std::string> live_tables_;
};

Status RocksCheckpointStore::Init() {
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
  db_ = std::move(db);
  if (!empty) {
    live_clock_ = meta.clock;
    live_entry_count_ = meta.entry_count;
    live_tables_ = std::move(tables);
  }
  return Status::Ok();
}

Result<std::vector<int64_t>> RocksCheckpointStore::ListCheckpoints() const {
  std::vector<int64_t> clocks;
  std::error_code ec;
  for (fs::directory_iterator it(versions_path_, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code type_ec;
    if (!it->is_directory(type_ec)) continue;
    if (std::optional<int64_t> clock =
            ParseClock(it->path().filename().string())) {
      clocks.push_back(*clock);
    }
  }
  if (ec)
    return FromErrorCode(ec, "cannot list checkpoints in", versions_path_);
  std::sort(clocks.begin(), clocks.end());
  return clocks;
}

Status RocksCheckpointStore::CountChanges(const std::vector<KeyChange>& sorted,
                                          uint64_t* entry_count) {
  constexpr size_t kChunk = 1024;
  rocksdb::ReadOptions read;
  read.fill_cache = false;
  std::string key_bytes;
  std::vector<rocksdb::Slice> keys;
  std::vector<rocksdb::PinnableSlice> values(kChunk);
  std::vector<rocksdb::Status> statuses(kChunk);
  uint64_t count = live_entry_count_;
  for (size_t begin = 0; begin < sorted.size(); begin += kChunk) {
    const size_t n = std::min(kChunk, sorted.size() - begin);
    key_bytes.clear();
    for (size_t i = 0; i < n; ++i) {
      AppendEntryKey(&key_bytes, sorted[begin + i].table,
                     sorted[begin + i].key);
    }
    keys.clear();
    for (size_t i = 0; i < n; ++i) {
      keys.emplace_back(key_bytes.data() + i * kEntryKeySize, kEntryKeySize);
      values[i].Reset();
    }
    db_->MultiGet(read, db_->DefaultColumnFamily(), n, keys.data(),
                  values.data(), statuses.data(), /*sorted_input=*/true);
    for (size_t i = 0; i < n; ++i) {
      const rocksdb::Status& s = statuses[i];
      if (!s.ok() && !s.IsNotFound()) {
        return FromRocks(s, "working DB " + live_path_.string());
      }
      if (sorted[begin + i].deleted) {
        if (s.ok()) --count;
      } else {
        if (!s.ok()) ++count;
      }
    }
  }
  *entry_count = count;
  return Status::Ok();
}

Status RocksCheckpointStore::CheckCanWrite(int64_t clock) const {
  if (!live_error_.ok()) {
    return FailedPreconditionError(
        live_error_.message() +
        "; restore a checkpoint and call RollBackTo(its clock), or call "
        "DiscardAll() to start over");
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
    const std::string& blob) {
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
  DUCTILE_RETURN_IF_ERROR(CheckCanWrite(clock));

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
  DUCTILE_RETURN_IF_ERROR(CountChanges(keys, &meta.entry_count));

  // One atomic batch, written without the WAL: Freeze flushes it right away
  // (RocksDB syncs the flushed files), and a crash before that loses the
  // whole batch, leaving live/ at the newest version, a consistent state.
  rocksdb::WriteBatch batch(
      EstimateBatchBytes(tables, changed_entries, deleted, blob));
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

Status RocksCheckpointStore::OpenFrozen(
    int64_t clock, std::unique_ptr<rocksdb::DB>* db) const {
  const fs::path path = VersionPath(clock);
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    return NotFoundError("no checkpoint at clock " + std::to_string(clock) +
                         " in " + versions_path_.string());
  }
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s =
      rocksdb::DB::OpenForReadOnly(FrozenOptions(), path.string(), &raw);
  DUCTILE_RETURN_IF_ERROR(FromRocks(s, VersionName(clock)));
  db->reset(raw);
  return Status::Ok();
}

Result<LoadedCheckpoint> RocksCheckpointStore::Load(int64_t clock) const {
  std::unique_ptr<rocksdb::DB> db;
  DUCTILE_RETURN_IF_ERROR(OpenFrozen(clock, &db));
  const std::string what = VersionName(clock);
  LoadedCheckpoint out;
  Metadata meta;
  DUCTILE_RETURN_IF_ERROR(ScanVersion(
      db.get(), what, /*visit_entries=*/true, &meta, nullptr, nullptr,
      [&](const rocksdb::Slice&, const rocksdb::Slice& v, TableId id) {
        out.tables.push_back(TableRecord{id, v.ToString()});
        // The metadata is read before any record.
        if (out.tables.size() == 1) {
          out.entries.reserve(std::min<uint64_t>(meta.entry_count, 1 << 24));
        }
        return std::string();
      },
      [&](const rocksdb::Slice&, const rocksdb::Slice& v, TableId table,
          Key key) {
        EntryRecord& e = out.entries.emplace_back();
        e.table = table;
        e.key = key;
        return DecodeEntryValue(std::string_view(v.data(), v.size()), &e);
      }));
  if (meta.clock != clock) {
    return Corrupt(what,
                   "its metadata says clock " + std::to_string(meta.clock));
  }
  out.clock = meta.clock;
  out.epoch = meta.epoch;
  out.blob = std::move(meta.blob);
  return out;
}

Result<LoadedCheckpoint> RocksCheckpointStore::LoadLatest() const {
  Result<std::vector<int64_t>> clocks = ListCheckpoints();
  if (!clocks.ok()) return clocks.status();
  if (clocks->empty()) {
    return NotFoundError("no checkpoint in " + versions_path_.string());
  }
  std::vector<std::string> problems;
  for (auto it = clocks->rbegin(); it != clocks->rend(); ++it) {
    Result<LoadedCheckpoint> loaded = Load(*it);
    if (loaded.ok()) {
      for (const std::string& problem : problems) {
        loaded->warnings.push_back(problem + "; using clock " +
                                   std::to_string(*it));
      }
      return loaded;
    }
    if (loaded.status().code() == StatusCode::kResourceExhausted) {
      return loaded.status();
    }
    problems.push_back(loaded.status().message());
  }
  std::string message = "no usable checkpoint in " + versions_path_.string();
  for (const std::string& problem : problems) message += "; " + problem;
  return FailedPreconditionError(message);
}

Status RocksCheckpointStore::CopyVersionToNext(int64_t clock) {
  std::error_code ec;
  fs::remove_all(next_path_, ec);
  if (ec) return FromErrorCode(ec, "cannot remove", next_path_);

  std::unique_ptr<rocksdb::DB> source;
  DUCTILE_RETURN_IF_ERROR(OpenFrozen(clock, &source));
  rocksdb::Options options = LiveOptions();
  options.error_if_exists = true;
  rocksdb::DB* raw = nullptr;
  const std::string what = "rebuilt working DB " + next_path_.string();
  DUCTILE_RETURN_IF_ERROR(
      FromRocks(rocksdb::DB::Open(options, next_path_.string(), &raw), what));
  std::unique_ptr<rocksdb::DB> target(raw);

  // No WAL: the final flush makes the copy durable, and an unfinished copy
  // is discarded anyway.
  rocksdb::WriteOptions write;
  write.disableWAL = true;
  rocksdb::WriteBatch batch;
  Status write_status;
  const auto copy = [&](const rocksdb::Slice& k, const rocksdb::Slice& v) {
    batch.Put(k, v);
    if (batch.GetDataSize() >= (8u << 20)) {
      write_status = FromRocks(target->Write(write, &batch), what);
      batch.Clear();
      if (!write_status.ok()) return write_status.message();
    }
    return std::string();
  };
  Metadata meta;
  std::string raw_meta;
  Status scan = ScanVersion(
      source.get(), VersionName(clock), /*visit_entries=*/true, &meta,
      &raw_meta, nullptr,
      [&](const rocksdb::Slice& k, const rocksdb::Slice& v, TableId) {
        return copy(k, v);
      },
      [&](const rocksdb::Slice& k, const rocksdb::Slice& v, TableId, Key) {
        return copy(k, v);
      });
  // A failed write surfaces as a "corrupt" scan; report the write instead.
  DUCTILE_RETURN_IF_ERROR(write_status);
  DUCTILE_RETURN_IF_ERROR(scan);
  batch.Put(MetaKey(), raw_meta);
  DUCTILE_RETURN_IF_ERROR(FromRocks(target->Write(write, &batch), what));
  rocksdb::FlushOptions flush;
  flush.wait = true;
  DUCTILE_RETURN_IF_ERROR(FromRocks(target->Flush(flush), what));
  DUCTILE_RETURN_IF_ERROR(FromRocks(target->Close(), what));
  return Status::Ok();
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
  if (!live_is_there) DUCTILE_RETURN_IF_ERROR(CopyVersionToNext(clock));
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

Status RocksCheckpointStore::DiscardAll() {
  Result<std::vector<int64_t>> clocks = ListCheckpoints();
  if (!clocks.ok()) return clocks.status();
  for (auto it = clocks->rbegin(); it != clocks->rend(); ++it) {
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

Result<LoadedCheckpoint> LoadCheckpointFrom(const std::string& dir,
                                            int64_t clock) {
  if (dir.empty()) return InvalidArgumentError("no checkpoint directory given");
  CheckpointStoreOptions options;
  options.dir = dir;
  // Load reads only checkpoints/<clock>/ (read-only); live/ is not opened.
  const RocksCheckpointStore reader(options, fs::path(dir));
  return reader.Load(clock);
}

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
