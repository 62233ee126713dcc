#include "storage/checkpoint_reader.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <optional>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "rocksdb/env.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace ductile {

namespace fs = std::filesystem;

namespace checkpoint_reader {
namespace {

using checkpoint_format::AppendEntryKey;
using checkpoint_format::Corrupt;
using checkpoint_format::DecodeBigEndian;
using checkpoint_format::DecodeEntryValue;
using checkpoint_format::DecodeMetadata;
using checkpoint_format::ExtendCrcWithTable;
using checkpoint_format::FilterKey;
using checkpoint_format::kEntryKeySize;
using checkpoint_format::kEntryType;
using checkpoint_format::KeyChange;
using checkpoint_format::kFilterKeySize;
using checkpoint_format::kFilterType;
using checkpoint_format::kMaxField;
using checkpoint_format::kTableKeySize;
using checkpoint_format::kTableType;
using checkpoint_format::Metadata;
using checkpoint_format::MetaKey;

bool MentionsNoSpace(const std::string& text) {
  return text.find("No space left on device") != std::string::npos ||
         text.find("ENOSPC") != std::string::npos;
}

// Frozen versions are opened read-only and must not gain a LOG file.
class DiscardingLogger final : public rocksdb::Logger {
 public:
  void Logv(const char* /*format*/, va_list /*ap*/) override {}
  void Logv(const rocksdb::InfoLogLevel /*level*/, const char* /*format*/,
            va_list /*ap*/) override {}
};

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

rocksdb::Options FrozenOptions() {
  rocksdb::Options options;
  options.create_if_missing = false;
  options.paranoid_checks = true;
  options.info_log = std::make_shared<DiscardingLogger>();
  return options;
}

}  // namespace

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

namespace {
// In MiB, or in KiB below 1 MiB (a record of a few hundred bytes is not
// "0.0 MiB").
std::string Megabytes(uint64_t bytes) {
  char text[32];
  if (bytes < (1 << 20)) {
    std::snprintf(text, sizeof(text), "%.1f KiB",
                  static_cast<double>(bytes) / (1 << 10));
  } else {
    std::snprintf(text, sizeof(text), "%.1f MiB",
                  static_cast<double>(bytes) / (1 << 20));
  }
  return text;
}
}  // namespace

Status CheckFreeSpace(const fs::path& dir, uint64_t bytes, uint64_t reserve,
                      const std::string& what, const std::string& remedy) {
  if (reserve == 0) return Status::Ok();
  struct statvfs st;
  if (::statvfs(dir.c_str(), &st) != 0) {
    return FromErrno(errno, "cannot tell the free space of", dir);
  }
  const uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  if (free_bytes >= reserve && free_bytes - reserve >= bytes) {
    return Status::Ok();
  }
  return ResourceExhaustedError(
      what + " needs about " + Megabytes(bytes) + " in '" + dir.string() +
      "', which has " + Megabytes(free_bytes) + " free; " + Megabytes(reserve) +
      " are kept free so that the disk never fills under the store: " + remedy);
}

uint64_t BytesUnder(const fs::path& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_regular_file(type_ec)) {
      const uintmax_t size = it->file_size(type_ec);
      if (!type_ec) bytes += size;
    }
  }
  return bytes;
}

std::string VersionName(int64_t clock) {
  return "checkpoint at clock " + std::to_string(clock);
}

fs::path VersionsPath(const fs::path& dir) { return dir / "checkpoints"; }

fs::path VersionPath(const fs::path& versions, int64_t clock) {
  return versions / std::to_string(clock);
}

Result<std::vector<int64_t>> ListVersions(const fs::path& versions) {
  std::vector<int64_t> clocks;
  std::error_code ec;
  for (fs::directory_iterator it(versions, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code type_ec;
    if (!it->is_directory(type_ec)) continue;
    if (std::optional<int64_t> clock =
            ParseClock(it->path().filename().string())) {
      clocks.push_back(*clock);
    }
  }
  if (ec) return FromErrorCode(ec, "cannot list checkpoints in", versions);
  std::sort(clocks.begin(), clocks.end());
  return clocks;
}

Status ScanVersion(rocksdb::DB* db, const std::string& what, bool visit_entries,
                   Metadata* meta, std::string* raw_meta, bool* empty,
                   const OnTable& on_table, const OnEntry& on_entry,
                   const OnFilter& on_filter) {
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

  uint32_t stored_crc = 0;
  uint32_t crc = 0;
  DUCTILE_RETURN_IF_ERROR(DecodeMetadata(value, what, meta, &stored_crc, &crc));

  uint64_t entries = 0;
  uint64_t filters = 0;
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
    } else if (k[0] == kFilterType) {
      if (!visit_entries) break;
      if (k.size() != kFilterKeySize || v.size() == 0) {
        return Corrupt(what, "a filter record has the wrong size");
      }
      const auto table = static_cast<TableId>(DecodeBigEndian(k.data() + 1, 4));
      const auto slot = static_cast<int32_t>(DecodeBigEndian(k.data() + 5, 4));
      if (!std::binary_search(tables.begin(), tables.end(), table) ||
          slot < 0) {
        return Corrupt(what, "filter counts of table " + std::to_string(table) +
                                 ", slot " + std::to_string(slot) +
                                 " belong nowhere");
      }
      ++filters;
      if (on_filter) {
        std::string bad = on_filter(k, v, table, slot);
        if (!bad.empty()) return Corrupt(what, bad);
      }
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
  if (visit_entries && meta->filter_count && filters != *meta->filter_count) {
    return Corrupt(what, "it holds " + std::to_string(filters) +
                             " filter records, its metadata says " +
                             std::to_string(*meta->filter_count));
  }
  if (raw_meta != nullptr) *raw_meta = std::move(value);
  return Status::Ok();
}

Status CountEntriesAfter(rocksdb::DB* db, const std::string& what,
                         const std::vector<KeyChange>& sorted,
                         uint64_t* count) {
  constexpr size_t kChunk = 1024;
  rocksdb::ReadOptions read;
  read.fill_cache = false;
  std::string key_bytes;
  std::vector<rocksdb::Slice> keys;
  std::vector<rocksdb::PinnableSlice> values(kChunk);
  std::vector<rocksdb::Status> statuses(kChunk);
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
    db->MultiGet(read, db->DefaultColumnFamily(), n, keys.data(), values.data(),
                 statuses.data(), /*sorted_input=*/true);
    for (size_t i = 0; i < n; ++i) {
      const rocksdb::Status& s = statuses[i];
      if (!s.ok() && !s.IsNotFound()) return FromRocks(s, what);
      if (sorted[begin + i].deleted) {
        if (s.ok()) --*count;
      } else {
        if (!s.ok()) ++*count;
      }
    }
  }
  return Status::Ok();
}

Status CountFiltersAfter(rocksdb::DB* db, const std::string& what,
                         const std::vector<FilterRecord>& filters,
                         uint32_t* count) {
  rocksdb::ReadOptions read;
  read.fill_cache = false;
  uint64_t n = *count;
  std::string ignored;
  for (const FilterRecord& f : filters) {
    const rocksdb::Status s =
        db->Get(read, FilterKey(f.table, f.slot), &ignored);
    if (!s.ok() && !s.IsNotFound()) return FromRocks(s, what);
    if (f.counts.empty()) {
      if (s.ok()) --n;
    } else if (!s.ok()) {
      ++n;
    }
  }
  if (n > kMaxField) {
    return InvalidArgumentError(
        "a checkpoint holds at most 2^32 - 1 filter records");
  }
  *count = static_cast<uint32_t>(n);
  return Status::Ok();
}

Status CountFilters(rocksdb::DB* db, const std::string& what, uint32_t* count) {
  rocksdb::ReadOptions read;
  read.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(read));
  uint32_t n = 0;
  for (it->Seek(rocksdb::Slice(&kFilterType, 1));
       it->Valid() && it->key()[0] == kFilterType; it->Next()) {
    ++n;
  }
  DUCTILE_RETURN_IF_ERROR(FromRocks(it->status(), what));
  *count = n;
  return Status::Ok();
}

Status OpenFrozen(const fs::path& versions, int64_t clock,
                  std::unique_ptr<rocksdb::DB>* db) {
  const fs::path path = VersionPath(versions, clock);
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    return NotFoundError("no checkpoint at clock " + std::to_string(clock) +
                         " in " + versions.string());
  }
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s =
      rocksdb::DB::OpenForReadOnly(FrozenOptions(), path.string(), &raw);
  DUCTILE_RETURN_IF_ERROR(FromRocks(s, VersionName(clock)));
  db->reset(raw);
  return Status::Ok();
}

Result<LoadedCheckpoint> LoadVersion(const fs::path& versions, int64_t clock) {
  std::unique_ptr<rocksdb::DB> db;
  DUCTILE_RETURN_IF_ERROR(OpenFrozen(versions, clock, &db));
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
      },
      [&](const rocksdb::Slice&, const rocksdb::Slice& v, TableId table,
          int32_t slot) {
        out.filters.push_back(FilterRecord{table, slot, v.ToString()});
        return std::string();
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

Result<LoadedCheckpoint> LoadLatestVersion(const fs::path& versions) {
  Result<std::vector<int64_t>> clocks = ListVersions(versions);
  if (!clocks.ok()) return clocks.status();
  if (clocks->empty()) {
    return NotFoundError("no checkpoint in " + versions.string());
  }
  std::vector<std::string> problems;
  for (auto it = clocks->rbegin(); it != clocks->rend(); ++it) {
    Result<LoadedCheckpoint> loaded = LoadVersion(versions, *it);
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
  std::string message = "no usable checkpoint in " + versions.string();
  for (const std::string& problem : problems) message += "; " + problem;
  return FailedPreconditionError(message);
}

Status CopyVersion(const fs::path& versions, int64_t clock,
                   rocksdb::Options options, const fs::path& target_path) {
  std::unique_ptr<rocksdb::DB> source;
  DUCTILE_RETURN_IF_ERROR(OpenFrozen(versions, clock, &source));
  options.error_if_exists = true;
  rocksdb::DB* raw = nullptr;
  const std::string what = "rebuilt working DB " + target_path.string();
  DUCTILE_RETURN_IF_ERROR(
      FromRocks(rocksdb::DB::Open(options, target_path.string(), &raw), what));
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
      },
      [&](const rocksdb::Slice& k, const rocksdb::Slice& v, TableId, int32_t) {
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

}  // namespace checkpoint_reader

Result<LoadedCheckpoint> LoadCheckpointFrom(const std::string& dir,
                                            int64_t clock) {
  if (dir.empty()) return InvalidArgumentError("no checkpoint directory given");
  // Reads only checkpoints/<clock>/ (read-only); live/ is not opened.
  return checkpoint_reader::LoadVersion(
      checkpoint_reader::VersionsPath(fs::path(dir)), clock);
}

}  // namespace ductile
