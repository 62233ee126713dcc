#include "server/record_codec.h"

#include <cstring>

#include "storage/checkpoint_format.h"

namespace ductile {

namespace cf = checkpoint_format;

namespace {

// An 'E' record's bytes before its entry value.
constexpr size_t kEntryRecordHead = 1 + 4 + 8 + 4;

void AppendEntryHead(TableId table, Key key, size_t value_bytes,
                     std::string* out) {
  out->push_back('E');
  cf::PutFixed32(out, table);
  cf::PutFixed64(out, key);
  cf::PutFixed32(out, static_cast<uint32_t>(value_bytes));
}

}  // namespace

void RecordCodec::AppendEntry(const EntryRecord& e, std::string* out) {
  std::string value;
  cf::EncodeEntryValue(e, &value);
  AppendEntryHead(e.table, e.key, value.size(), out);
  out->append(value);
}

void RecordCodec::AppendRow(const ParameterTable& table,
                            ParameterTable::RowRef row, std::string* out) {
  AppendEntryHead(table.id(), row.key(), table.EntryValueBytes(row), out);
  table.AppendEntryValue(row, out);
}

size_t RecordCodec::RowRecordBytes(const ParameterTable& table,
                                   ParameterTable::RowRef row) {
  return kEntryRecordHead + table.EntryValueBytes(row);
}

size_t RecordCodec::BufferedRecordBytes(const Buffered& b) {
  return 1 + 36 + b.second.combined.values.size() * sizeof(float);
}

void RecordCodec::AppendFilter(const FilterRecord& f, std::string* out) {
  out->push_back('F');
  cf::PutFixed32(out, f.table);
  cf::PutFixed32(out, static_cast<uint32_t>(f.slot));
  cf::PutFixed32(out, static_cast<uint32_t>(f.counts.size()));
  out->append(f.counts);
}

void RecordCodec::AppendWindow(const RequestDedup::Window& w,
                               std::string* out) {
  out->push_back('W');
  cf::PutFixed64(out, static_cast<uint64_t>(w.client));
  cf::PutFixed64(out, w.done_below);
  cf::PutFixed32(out, static_cast<uint32_t>(w.applied.size()));
  for (uint64_t seq : w.applied) cf::PutFixed64(out, seq);
}

void RecordCodec::AppendBuffered(const Buffered& b, std::string* out) {
  AppendBuffered(b.first, b.second.clock, b.second.key, b.second.combined, out);
}

void RecordCodec::AppendBuffered(TableId table, int64_t clock, Key key,
                                 const BspBuffer::Combined& c,
                                 std::string* out) {
  out->push_back('B');
  cf::PutFixed32(out, table);
  cf::PutFixed64(out, key);
  cf::PutFixed64(out, static_cast<uint64_t>(clock));
  cf::PutFixed32(out, static_cast<uint32_t>(c.pushes));
  cf::PutFixed32(out, static_cast<uint32_t>(c.batches));
  uint32_t rate_bits;
  std::memcpy(&rate_bits, &c.rate_sum, sizeof(rate_bits));
  cf::PutFixed32(out, rate_bits);
  cf::PutFixed32(out, static_cast<uint32_t>(c.values.size()));
  out->append(reinterpret_cast<const char*>(c.values.data()),
              c.values.size() * sizeof(float));
}

void RecordCodec::AppendDeleted(TableId table, Key key, std::string* out) {
  out->push_back('D');
  cf::PutFixed32(out, table);
  cf::PutFixed64(out, key);
}

void RecordCodec::AppendCombinedBelow(int64_t clock, std::string* out) {
  out->push_back('C');
  cf::PutFixed64(out, static_cast<uint64_t>(clock));
}

Status RecordCodec::Parse(std::string_view payload, std::string_view what,
                          Records* out, bool rows_in_place) {
  const Status truncated =
      InvalidArgumentError(std::string(what) + " ends inside a record");
  size_t at = 0;
  auto need = [&](size_t n) { return payload.size() - at >= n; };
  while (at < payload.size()) {
    const char type = payload[at++];
    if (type == 'E') {
      if (!need(16)) return truncated;
      const TableId table = cf::DecodeFixed32(payload.data() + at);
      const Key key = cf::DecodeFixed64(payload.data() + at + 4);
      const uint32_t size = cf::DecodeFixed32(payload.data() + at + 12);
      at += 16;
      if (!need(size)) return truncated;
      const std::string_view value = payload.substr(at, size);
      std::string why;
      if (rows_in_place) {
        why = cf::CheckEntryValue(value);
        out->entry_views.push_back({table, key, value});
      } else {
        EntryRecord& e = out->entries.emplace_back();
        e.table = table;
        e.key = key;
        why = cf::DecodeEntryValue(value, &e);
      }
      if (!why.empty()) {
        return InvalidArgumentError(std::string(what) +
                                    " has an unreadable row: " + why);
      }
      at += size;
    } else if (type == 'B') {
      if (!need(36)) return truncated;
      Buffered& b = out->buffered.emplace_back();
      b.first = cf::DecodeFixed32(payload.data() + at);
      b.second.key = cf::DecodeFixed64(payload.data() + at + 4);
      b.second.clock =
          static_cast<int64_t>(cf::DecodeFixed64(payload.data() + at + 12));
      b.second.combined.pushes =
          static_cast<int32_t>(cf::DecodeFixed32(payload.data() + at + 20));
      b.second.combined.batches =
          static_cast<int32_t>(cf::DecodeFixed32(payload.data() + at + 24));
      const uint32_t rate_bits = cf::DecodeFixed32(payload.data() + at + 28);
      std::memcpy(&b.second.combined.rate_sum, &rate_bits, sizeof(rate_bits));
      const uint32_t floats = cf::DecodeFixed32(payload.data() + at + 32);
      at += 36;
      if (!need(uint64_t{floats} * sizeof(float))) return truncated;
      b.second.combined.values.resize(floats);
      std::memcpy(b.second.combined.values.data(), payload.data() + at,
                  floats * sizeof(float));
      at += floats * sizeof(float);
    } else if (type == 'W') {
      if (!need(20)) return truncated;
      RequestDedup::Window& w = out->windows.emplace_back();
      w.client = static_cast<int64_t>(cf::DecodeFixed64(payload.data() + at));
      w.done_below = cf::DecodeFixed64(payload.data() + at + 8);
      const uint32_t count = cf::DecodeFixed32(payload.data() + at + 16);
      at += 20;
      if (!need(uint64_t{count} * sizeof(uint64_t))) return truncated;
      w.applied.resize(count);
      for (uint32_t i = 0; i < count; ++i) {
        w.applied[i] = cf::DecodeFixed64(payload.data() + at + 8 * i);
      }
      at += uint64_t{count} * sizeof(uint64_t);
    } else if (type == 'F') {
      if (!need(12)) return truncated;
      FilterRecord& f = out->filters.emplace_back();
      f.table = cf::DecodeFixed32(payload.data() + at);
      f.slot = static_cast<int32_t>(cf::DecodeFixed32(payload.data() + at + 4));
      const uint32_t size = cf::DecodeFixed32(payload.data() + at + 8);
      at += 12;
      if (!need(size)) return truncated;
      f.counts.assign(payload.data() + at, size);
      at += size;
    } else if (type == 'D') {
      if (!need(12)) return truncated;
      out->deleted.emplace_back(cf::DecodeFixed32(payload.data() + at),
                                cf::DecodeFixed64(payload.data() + at + 4));
      at += 12;
    } else if (type == 'C') {
      if (!need(8)) return truncated;
      out->combined_below =
          static_cast<int64_t>(cf::DecodeFixed64(payload.data() + at));
      at += 8;
    } else {
      return InvalidArgumentError(std::string(what) +
                                  " has a record of unknown type " +
                                  std::to_string(static_cast<int>(type)));
    }
  }
  return Status::Ok();
}

}  // namespace ductile
