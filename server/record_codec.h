// The records servers send each other about a slot's state: a slot move's
// chunks (SlotMover) and a primary's replication records to its backup
// (Replicator, ReplicaStore). Part of the wire format between servers.
//
// A payload is records end to end, each a type byte then
//   'E': table u32 LE | key u64 LE | size u32 LE | entry (the entry value
//        of storage/checkpoint_format.h): a row as it is now;
//   'B': table u32 LE | key u64 LE | clock i64 LE | pushes i32 LE |
//        batches i32 LE | rate_sum f32 LE | floats u32 LE | floats x f32:
//        a BSP push buffered for a clock not combined yet;
//   'W': client i64 LE | done_below u64 LE | count u32 LE |
//        count x applied seq u64 LE: exactly-once windows;
//   'F': table u32 LE | slot u32 LE | size u32 LE | the slot's admission
//        counts (AdmissionFilter::Encode);
//   'D': table u32 LE | key u64 LE: a row removed (evicted);
//   'C': clock i64 LE: every clock below it is combined (BSP), so the
//        pushes buffered for them are in the rows.
// Parse checks every length against the payload; nothing here aborts on
// input.
//
// Stateless; thread-safe.
#ifndef DUCTILE_SERVER_RECORD_CODEC_H_
#define DUCTILE_SERVER_RECORD_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "consistency/bsp_buffer.h"
#include "ductile/status.h"
#include "ductile/table.h"
#include "server/parameter_table.h"
#include "server/request_dedup.h"
#include "storage/checkpoint_store.h"

namespace ductile {

class RecordCodec {
 public:
  // A BSP push buffered for a key (its clock not combined yet).
  using Buffered = std::pair<TableId, BspBuffer::Entry>;

  // An 'E' record as it lies in the payload: its row's entry value
  // (storage/checkpoint_format.h), checked but not decoded.
  struct EntryView {
    TableId table = 0;
    Key key = 0;
    std::string_view value;
  };

  // What a payload holds, record kinds apart, each in its order.
  struct Records {
    std::vector<EntryRecord> entries;
    std::vector<EntryView> entry_views;  // Parse with rows_in_place
    std::vector<Buffered> buffered;
    std::vector<RequestDedup::Window> windows;
    std::vector<FilterRecord> filters;
    std::vector<std::pair<TableId, Key>> deleted;
    std::optional<int64_t> combined_below;  // the last 'C' record's
  };

  // Appends every record of `payload` to `out`; kInvalidArgument, naming
  // `what` (e.g. "a chunk of moved keys"), if one is cut short or of an
  // unknown type. With `rows_in_place`, the 'E' records go to
  // out->entry_views, which point into `payload` (the caller decodes each
  // row where it keeps it, while `payload` lives).
  static Status Parse(std::string_view payload, std::string_view what,
                      Records* out, bool rows_in_place = false);

  static void AppendEntry(const EntryRecord& e, std::string* out);
  // The same record for a row read in place (ParameterTable::RowRef's
  // terms), and the bytes it takes.
  static void AppendRow(const ParameterTable& table, ParameterTable::RowRef row,
                        std::string* out);
  static size_t RowRecordBytes(const ParameterTable& table,
                               ParameterTable::RowRef row);
  static void AppendBuffered(const Buffered& b, std::string* out);
  static void AppendBuffered(TableId table, int64_t clock, Key key,
                             const BspBuffer::Combined& c, std::string* out);
  static size_t BufferedRecordBytes(const Buffered& b);
  static void AppendWindow(const RequestDedup::Window& w, std::string* out);
  static void AppendFilter(const FilterRecord& f, std::string* out);
  static void AppendDeleted(TableId table, Key key, std::string* out);
  static void AppendCombinedBelow(int64_t clock, std::string* out);
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_RECORD_CODEC_H_
