// A backup's copies of other servers' slots (--replicas=2): for each slot
// this server backs, the rows as its primary last reported them, the
// admission filter's counts, the BSP pushes the primary has acknowledged
// but not combined yet, and the exactly-once windows of the requests whose
// effect the copies hold.
//
// The primary sends records (RecordCodec) of every change before it
// answers the request that made it; Apply takes one payload whole. When the
// primary dies, the coordinator makes this server the slots' owner and
// Take hands their state to the server's tables, consistency controller
// and window: the requests the primary applied are duplicates here, and
// the others its clients send again.
//
// Invariants: a row is held once, with its latest record ('E' replaces,
// 'D' removes); a buffered push is held, under the primary that sent it,
// until that primary reports its clock combined ('C') or its slot moves to
// another primary (which sends it again), so that what a worker was told
// is applied is in the rows or in the pushes; windows are kept per
// primary, until it backs nothing here.
//
// Not thread-safe: owned by a server's request thread.
#ifndef DUCTILE_SERVER_REPLICA_STORE_H_
#define DUCTILE_SERVER_REPLICA_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "consistency/bsp_buffer.h"
#include "ductile/table.h"
#include "server/record_codec.h"
#include "server/request_dedup.h"
#include "storage/checkpoint_store.h"
#include "util/sharded_map.h"
#include "util/taken_nodes.h"

namespace ductile {

class ReplicaStore {
 private:
  struct Row {
    std::vector<float> value;
    std::vector<float> state;
    int64_t steps = 0;
    uint64_t changed = 0;  // order of the last record (Take's order)
  };

 public:
  // Rows taken out by Drop: their memory goes back when this is destroyed,
  // wherever the caller likes (a thread of its own: a million rows take a
  // while to free).
  using Dropped = TakenNodes<ShardedMap<Key, Row>>;

  // What a promotion takes over: rows, least recently changed first (a
  // table that evicts keeps that order of use), and pushes.
  struct Taken {
    std::vector<EntryRecord> rows;
    std::vector<RecordCodec::Buffered> buffered;
  };

  // Takes `primary`'s records (`entries`, and `entry_views`, decoded here:
  // their payload must live until this returns); the caller checked that
  // every record's slot is backed here for `primary`. A slot's admission counts
  // ('F') replace those held (empty counts: none). A 'C' record drops the
  // pushes `primary` sent of the clocks below it: it combined them.
  void Apply(int32_t primary, RecordCodec::Records&& records);

  // Takes out the rows and pushes for which `in(table, key)` holds (a key
  // whose pushes of a clock two primaries sent, before and after a move,
  // gets the later primary's, which has the more of them).
  Taken Take(const std::function<bool(TableId, Key)>& in);
  // Every window entry held, of every primary (they merge by union:
  // sequence numbers are unique per client).
  std::vector<RequestDedup::Window> Windows() const;
  // Drops the rows and pushes for which `in(table, key)` holds (slots this
  // server no longer backs); returns how many. The rows go to `dropped`
  // when given, to be freed there.
  size_t Drop(const std::function<bool(TableId, Key)>& in,
              Dropped* dropped = nullptr);
  // Takes out, and drops, the admission counts of the slots for which
  // `in(slot)` holds.
  std::vector<FilterRecord> TakeFilters(const std::function<bool(int32_t)>& in);
  size_t DropFilters(const std::function<bool(int32_t)>& in) {
    return TakeFilters(in).size();
  }
  // Drops `primary`'s windows (its slots have no copy here any more).
  void DropWindows(int32_t primary) { windows_.erase(primary); }
  // Drops everything (a rollback: the copies belong to the old timeline).
  void Clear();

  uint64_t rows() const { return rows_; }
  // Floats held (values, optimizer state, buffered pushes).
  uint64_t floats() const { return floats_; }

 private:
  static uint64_t Floats(const Row& r) {
    return r.value.size() + r.state.size();
  }
  // Pushes by the primary that sent them, table and clock: each key's as
  // last reported.
  using Pushes = std::map<std::pair<TableId, int64_t>, BspBuffer::Clock>;
  // Removes from `pushes` those of clocks below `below` (all clocks if
  // unset) for which `in(table, key)` holds; appends them to `out` if
  // not null.
  size_t TakePushes(Pushes& pushes, const std::function<bool(TableId, Key)>& in,
                    std::optional<int64_t> below,
                    std::vector<RecordCodec::Buffered>* out);

  std::map<TableId, ShardedMap<Key, Row>> tables_;
  std::map<int32_t, Pushes> buffered_;
  std::map<int32_t, RequestDedup> windows_;
  // Admission counts by (table, slot).
  std::map<std::pair<TableId, int32_t>, FilterRecord> filters_;
  uint64_t rows_ = 0;
  uint64_t floats_ = 0;
  uint64_t records_ = 0;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_REPLICA_STORE_H_
