#include "storage/checkpoint_format.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <tuple>

namespace ductile::checkpoint_format {
namespace {

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

}  // namespace

const std::string& MetaKey() {
  static const std::string* const key = new std::string(1, kMetaType);
  return *key;
}

std::string TableKey(TableId table) {
  std::string key(1, kTableType);
  PutBigEndian(&key, table, 4);
  return key;
}

void AppendFloats(std::span<const float> floats, std::string* dst) {
  if constexpr (std::endian::native == std::endian::little) {
    dst->append(reinterpret_cast<const char*>(floats.data()),
                floats.size() * 4);
  } else {
    for (float f : floats) PutFixed32(dst, std::bit_cast<uint32_t>(f));
  }
}

void EncodeEntryValue(const EntryRecord& e, std::string* dst) {
  dst->clear();
  dst->reserve(kEntryHeaderSize + 4 * (e.value.size() + e.state.size()));
  AppendEntryHeader(e, dst);
  AppendFloats(e.value, dst);
  AppendFloats(e.state, dst);
}

namespace {

// The entry value's float counts, read once (the bytes may be another
// process's shared memory) and checked against its size; else why not.
std::string EntryCounts(std::string_view in, uint64_t* value_count,
                        uint64_t* state_count) {
  if (in.size() < kEntryHeaderSize) return "entry value too short";
  *value_count = DecodeFixed32(in.data());
  *state_count = DecodeFixed32(in.data() + 4);
  if (in.size() != kEntryHeaderSize + 4 * (*value_count + *state_count)) {
    return "entry value size does not match its float counts";
  }
  return "";
}

}  // namespace

std::string CheckEntryValue(std::string_view in) {
  uint64_t value_count = 0, state_count = 0;
  return EntryCounts(in, &value_count, &state_count);
}

std::string DecodeEntryValue(std::string_view in, EntryRecord* e) {
  uint64_t value_count = 0, state_count = 0;
  if (std::string why = EntryCounts(in, &value_count, &state_count);
      !why.empty()) {
    return why;
  }
  e->steps = static_cast<int64_t>(DecodeFixed64(in.data() + 8));
  DecodeFloats(in.data() + kEntryHeaderSize, value_count, &e->value);
  DecodeFloats(in.data() + kEntryHeaderSize + 4 * value_count, state_count,
               &e->state);
  return "";
}

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
  PutFixed32(&out, meta.filter_count.value_or(0));
  uint32_t crc = Crc32cExtend(0, out);
  for (const auto& [id, config] : tables) {
    crc = ExtendCrcWithTable(crc, id, config);
  }
  PutFixed32(&out, crc);
  return out;
}

Status DecodeMetadata(std::string_view value, const std::string& what,
                      Metadata* meta, uint32_t* stored_crc, uint32_t* crc) {
  if (value.size() < kMetaHeaderSize + kCrcSize) {
    return Corrupt(what, "its metadata record is too short");
  }
  const uint32_t version = DecodeFixed32(value.data());
  if (version < kOldestFormatVersion || version > kFormatVersion) {
    // Checked before the crc, whose coverage a later format may change.
    return FailedPreconditionError(
        what + " has format version " + std::to_string(version) +
        " (corrupt, or written by a newer build); this build reads " +
        std::to_string(kOldestFormatVersion) + " to " +
        std::to_string(kFormatVersion));
  }
  meta->clock = static_cast<int64_t>(DecodeFixed64(value.data() + 4));
  meta->epoch = DecodeFixed64(value.data() + 12);
  meta->entry_count = DecodeFixed64(value.data() + 20);
  meta->table_count = DecodeFixed32(value.data() + 28);
  const uint32_t blob_size = DecodeFixed32(value.data() + 32);
  const bool counts_filters = version >= kFirstVersionCountingFilters;
  const size_t crc_at = kMetaHeaderSize + size_t{blob_size} +
                        (counts_filters ? kFilterCountSize : 0);
  if (value.size() != crc_at + kCrcSize) {
    return Corrupt(what, "its metadata record has the wrong size");
  }
  meta->blob.assign(value.data() + kMetaHeaderSize, blob_size);
  meta->filter_count.reset();
  if (counts_filters) {
    meta->filter_count =
        DecodeFixed32(value.data() + crc_at - kFilterCountSize);
  }
  *stored_crc = DecodeFixed32(value.data() + crc_at);
  *crc = Crc32cExtend(0, value.substr(0, crc_at));
  return Status::Ok();
}

Status Corrupt(const std::string& what, const std::string& reason) {
  return FailedPreconditionError(what + " is corrupt (" + reason + ")");
}

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

Status CheckFilters(const std::vector<FilterRecord>& filters,
                    const std::map<TableId, std::string>& tables_after) {
  std::vector<std::pair<TableId, int32_t>> slots;
  slots.reserve(filters.size());
  for (const FilterRecord& f : filters) {
    const std::string name = "admission counts (table " +
                             std::to_string(f.table) + ", slot " +
                             std::to_string(f.slot) + ")";
    if (!tables_after.contains(f.table)) {
      return InvalidArgumentError(name +
                                  " belong to a table with no "
                                  "TableRecord");
    }
    if (f.slot < 0) return InvalidArgumentError(name + ": negative slot");
    if (f.counts.size() > kMaxField) {
      return InvalidArgumentError(name + " are larger than 4 GiB");
    }
    slots.emplace_back(f.table, f.slot);
  }
  std::sort(slots.begin(), slots.end());
  const auto dup = std::adjacent_find(slots.begin(), slots.end());
  if (dup != slots.end()) {
    return InvalidArgumentError(
        "admission counts (table " + std::to_string(dup->first) + ", slot " +
        std::to_string(dup->second) + ") are listed twice in one checkpoint");
  }
  return Status::Ok();
}

size_t EstimateBatchBytes(const std::vector<TableRecord>& tables,
                          const std::vector<EntryRecord>& changed_entries,
                          const std::vector<std::pair<TableId, Key>>& deleted,
                          const std::vector<FilterRecord>& filters,
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
  for (const FilterRecord& f : filters) {
    bytes += kRecordOverhead + f.counts.size();
  }
  return bytes + kRecordOverhead * deleted.size();
}

}  // namespace ductile::checkpoint_format
