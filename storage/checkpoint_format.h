// The persistent format of a server's checkpoints (storage/checkpoint_store.h):
// how records are laid out as RocksDB keys and values, and the pure checks
// and encodings around them. No RocksDB here; checkpoint_reader.cc and
// checkpoint_store.cc put these bytes into and take them out of RocksDB.
//
// Persistent format (version 3; version 2 is version 3 without the
// metadata's filter_count, version 1 is version 2 without 0x04 records, and
// both are read as such). Part of the persistent format: never change
// the meaning of a record type, key or field; add new record types instead,
// and a new version where older builds must not read them.
//
// Keys start with a one-byte record type; integers in keys are big-endian so
// that RocksDB's bytewise order sorts records by type, then table, then key:
//
//   type  key bytes                          value bytes
//   0x01  01                                 metadata (below)
//   0x02  02 | table u32 BE                  the table's config (opaque,
//                                            serialized by the caller)
//   0x03  03 | table u32 BE | key u64 BE     entry (below)
//   0x04  04 | table u32 BE | slot u32 BE    the admission filter's counts
//                                            of one slot of the table
//                                            (opaque, serialized by the
//                                            caller; never empty)
//
// Values use little-endian fixed-width integers; floats are stored as their
// IEEE-754 binary32 bit patterns (so NaN payloads and -0 round-trip):
//
//   entry:    value_count u32 | state_count u32 | steps i64 |
//             value_count x f32 | state_count x f32
//   metadata: format_version u32 (= 3) | clock i64 | epoch u64 |
//             entry_count u64 | table_count u32 | blob_size u32 | blob |
//             filter_count u32 | crc u32
//
// `crc` is CRC-32C (Castagnoli) over the metadata bytes before it, followed
// by every table record in ascending table order, each as
// table u32 LE | config_size u32 LE | config. `entry_count`,
// `table_count` and `filter_count` are the numbers of 0x03, 0x02 and 0x04
// records in the version. A version whose crc, counts or any record do not
// check out is corrupt. A version 2 checkpoint does not count its 0x04
// records (one missing there reads as a slot with no counts: ids pushed
// before need their pushes again), and a version 1 checkpoint has none
// (every slot reads so). Each version was introduced with its addition:
// older readers refuse it by its number rather than misread it.
//
// Everything in this header that encodes or decodes bytes (the constants,
// the key and value encodings, the CRC and the metadata record) is part of
// the persistent format; the input checks at the end are not.
#ifndef DUCTILE_STORAGE_CHECKPOINT_FORMAT_H_
#define DUCTILE_STORAGE_CHECKPOINT_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ductile/status.h"
#include "ductile/table.h"
#include "storage/checkpoint_store.h"

namespace ductile::checkpoint_format {

// ---- Persistent format (see above; never change) ----

constexpr uint32_t kFormatVersion = 3;
// The oldest version this build reads.
constexpr uint32_t kOldestFormatVersion = 1;
constexpr char kMetaType = 0x01;
constexpr char kTableType = 0x02;
constexpr char kEntryType = 0x03;
constexpr char kFilterType = 0x04;
constexpr size_t kTableKeySize = 1 + 4;
constexpr size_t kEntryKeySize = 1 + 4 + 8;
constexpr size_t kFilterKeySize = 1 + 4 + 4;
constexpr size_t kEntryHeaderSize = 4 + 4 + 8;
// format_version, clock, epoch, entry_count, table_count, blob_size.
constexpr size_t kMetaHeaderSize = 4 + 8 + 8 + 8 + 4 + 4;
// filter_count, after the blob (version 3 on).
constexpr size_t kFilterCountSize = 4;
constexpr uint32_t kFirstVersionCountingFilters = 3;
constexpr size_t kCrcSize = 4;
// The largest count or size a u32 field holds.
constexpr uint64_t kMaxField = 0xffffffffu;

// Little-endian fixed-width integers (values).
inline void PutFixed32(std::string* dst, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>(v >> (8 * i));
  dst->append(b, 4);
}

inline void PutFixed64(std::string* dst, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
  dst->append(b, 8);
}

inline uint32_t DecodeFixed32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

inline uint64_t DecodeFixed64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

// Big-endian integers of `bytes` bytes (keys).
inline void PutBigEndian(std::string* dst, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i)
    dst->push_back(static_cast<char>(v >> (8 * i)));
}

inline uint64_t DecodeBigEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// Keys.
const std::string& MetaKey();
std::string TableKey(TableId table);
inline void AppendEntryKey(std::string* dst, TableId table, Key key) {
  dst->push_back(kEntryType);
  PutBigEndian(dst, table, 4);
  PutBigEndian(dst, key, 8);
}

inline std::string FilterKey(TableId table, int32_t slot) {
  std::string key(1, kFilterType);
  PutBigEndian(&key, table, 4);
  PutBigEndian(&key, static_cast<uint32_t>(slot), 4);
  return key;
}

// An entry value's header (value_count, state_count, steps), appended to
// `dst`; the floats follow it.
inline void AppendEntryHeader(size_t value_count, size_t state_count,
                              int64_t steps, std::string* dst) {
  PutFixed32(dst, static_cast<uint32_t>(value_count));
  PutFixed32(dst, static_cast<uint32_t>(state_count));
  PutFixed64(dst, static_cast<uint64_t>(steps));
}
inline void AppendEntryHeader(const EntryRecord& e, std::string* dst) {
  AppendEntryHeader(e.value.size(), e.state.size(), e.steps, dst);
}
// Appends `floats` as the entry value holds them (little-endian).
void AppendFloats(std::span<const float> floats, std::string* dst);

// Replaces `dst` by e's value: header, then value and state floats.
void EncodeEntryValue(const EntryRecord& e, std::string* dst);
// Fills e's value, state and steps (reusing their vectors' room). Empty
// on success, else why the bytes are not an entry.
std::string DecodeEntryValue(std::string_view in, EntryRecord* e);
// Why the bytes are not an entry value (its size against its float
// counts), or empty: what DecodeEntryValue checks, without decoding.
std::string CheckEntryValue(std::string_view in);

// CRC-32C (Castagnoli) of `data`, continuing from `crc` (0 to start).
uint32_t Crc32cExtend(uint32_t crc, std::string_view data);
// Extends the metadata crc by one table record (table, config size,
// config).
uint32_t ExtendCrcWithTable(uint32_t crc, TableId table,
                            std::string_view config);

struct Metadata {
  int64_t clock = 0;
  uint64_t epoch = 0;
  uint64_t entry_count = 0;
  uint32_t table_count = 0;
  std::string blob;
  // The number of 0x04 records; unset in a version that does not count
  // them (1 and 2).
  std::optional<uint32_t> filter_count;
};

// The metadata record of a version holding `tables` (every table's config,
// ascending by id, as the crc covers them).
std::string EncodeMetadata(const Metadata& meta,
                           const std::map<TableId, std::string>& tables);

// Decodes the metadata record `value` of the version `what` (e.g.
// "checkpoint at clock 40") into `meta`. On success `stored_crc` is its crc
// field and `crc` the CRC-32C of the bytes before it, which the caller
// extends with every table record (ExtendCrcWithTable) and compares.
// FailedPrecondition if the record is corrupt or of another format version.
Status DecodeMetadata(std::string_view value, const std::string& what,
                      Metadata* meta, uint32_t* stored_crc, uint32_t* crc);

// "<what> is corrupt (<reason>)", FailedPrecondition.
Status Corrupt(const std::string& what, const std::string& reason);

// ---- Checks of a checkpoint's input (not part of the format) ----

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
                    std::vector<KeyChange>* sorted);
// Checks a checkpoint's filter records against `tables_after`
// (CheckChanges'): a known table, a slot >= 0 listed once, counts under
// 4 GiB.
Status CheckFilters(const std::vector<FilterRecord>& filters,
                    const std::map<TableId, std::string>& tables_after);

// Bytes to reserve for a checkpoint's batch: growing a 100 MB batch by
// doubling costs more than copying it once.
size_t EstimateBatchBytes(const std::vector<TableRecord>& tables,
                          const std::vector<EntryRecord>& changed_entries,
                          const std::vector<std::pair<TableId, Key>>& deleted,
                          const std::vector<FilterRecord>& filters,
                          const std::string& blob);

}  // namespace ductile::checkpoint_format

#endif  // DUCTILE_STORAGE_CHECKPOINT_FORMAT_H_
