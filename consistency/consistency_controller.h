// The consistency models of one server's tables, applied (docs/consistency.md).
//
// It keeps the clocks of the live workers and their minimum (the server
// clock), the pulls parked on a staleness bound, the BSP pushes held back
// and combined per clock, and the requests held while a runtime change of a
// table's model is agreed.
//
// It decides; the server acts. Parked pulls come back (TakeReleasable,
// TakeExpired) for the server to serve or refuse; combined BSP clocks come
// back (TakeCombined) for it to apply; requests held during a change come
// back (Commit) for it to handle again. No sockets and no clock of its own:
// unit and simulation tests drive it directly.
//
// Invariants:
//   - server_clock() is the smallest clock of the live workers (with
//     none, the highest it has been); a worker's clock never moves
//     backwards; a worker joining or
//     coming back starts at the highest server clock so far or its own
//     clock, whichever is higher, so the server clock never moves
//     backwards either (but for a rollback);
//   - a parked pull's `required` is its table's RequiredServerClock at its
//     clock under the model in force, and it is parked only while required
//     > server_clock();
//   - BSP pushes of clock t stay buffered until server_clock() > t;
//   - parked_per_worker_[w] is the number of parked pulls of worker w
//     (no entry for 0), and parked() never exceeds max_parked_, nor any
//     worker's count max_parked_per_worker_.
//
// Not thread-safe: owned by a server's request thread.
#ifndef DUCTILE_CONSISTENCY_CONSISTENCY_CONTROLLER_H_
#define DUCTILE_CONSISTENCY_CONSISTENCY_CONTROLLER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "consistency/bsp_buffer.h"
#include "consistency/clock_vector.h"
#include "consistency/consistency_schedule.h"
#include "ductile/status.h"
#include "ductile/table.h"
#include "proto/codec.h"
#include "transport/message.h"

namespace ductile {

class ConsistencyController {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // A pull waiting for the server clock to reach `required`. The whole
  // request is kept and read again when it is released.
  struct ParkedPull {
    InMessage message;
    // The worker it is from (the client that parks it).
    int32_t worker_id = -1;
    TableId table = 0;
    int64_t required = 0;
    int64_t clock = 0;
    // A push-pull: its values are applied here (now or by an earlier copy),
    // so if it is answered "moved" the client only pulls from the new
    // owner, which has them in its copy of the slot.
    bool duplicate = false;
    TimePoint parked_at;
    TimePoint deadline;
  };
  // At most `max_parked_per_worker` pulls of one worker, and
  // `max_parked` in all, wait on a staleness bound at once (both >= 1;
  // ServerOptions::max_parked_pulls_per_worker, max_parked_pulls).
  explicit ConsistencyController(size_t max_parked_per_worker = SIZE_MAX,
                                 size_t max_parked = SIZE_MAX)
      : max_parked_per_worker_(max_parked_per_worker),
        max_parked_(max_parked) {}

  // One BSP clock's pushes to one table, combined per key.
  struct CombinedClock {
    TableId table = 0;
    int64_t clock = 0;
    BspCombine combine = BspCombine::kMean;  // the model in force then
    BspBuffer::Clock keys;
  };

  // ---- Tables.
  // Adds `table` with its initial model (no-op if known).
  void AddTable(TableId table, const Consistency& initial);
  bool HasTable(TableId table) const { return tables_.count(table) > 0; }
  // The model of the newest change (what new clocks use).
  const Consistency& latest(TableId table) const;
  // The clock that model applies from (0: the table's first model).
  int64_t latest_from(TableId table) const;
  // The model in force at `clock` (as far as this server knows the
  // table's changes).
  const Consistency& At(TableId table, int64_t clock) const;

  // ---- Workers and the server clock.
  int64_t server_clock() const {
    return live_.empty() ? floor_ : clocks_.min_clock();
  }
  const std::set<int32_t>& live_workers() const { return live_; }
  // The largest clock of any worker request or CLOCK seen so far.
  int64_t max_clock_seen() const { return max_clock_seen_; }
  void NoteClock(int64_t clock);
  // `worker` reached `clock`; true if the server clock moved.
  bool Advance(int32_t worker, int64_t clock);
  // The live workers are now `live`; true if the server clock moved. A
  // worker new to the set starts at the highest server clock so far (or
  // its own clock, if higher), so adding one never moves the server clock
  // back.
  bool SetWorkers(const std::set<int32_t>& live);
  // The highest server clock so far (kept while no worker is live).
  int64_t floor() const { return floor_; }
  // "1 (at clock 4), 3 (at clock 2)": the live workers below `required`.
  std::string Laggards(int64_t required) const;
  // A rollback: every worker in `live` is at `clock`; nothing is parked,
  // buffered or held (TakeAllWaiting first).
  void Reset(const std::set<int32_t>& live, int64_t clock);

  // ---- BSP.
  // True when a worker's push of timestamp `clock` is held back and
  // combined (the table is BSP at that clock, and the clock is not over
  // yet: a late push, below the server clock, is applied at once).
  bool Buffers(TableId table, int64_t clock) const;
  // Checks every key's width against the clock's earlier pushes.
  Status CheckBuffered(TableId table, int64_t clock,
                       const DataFrames& request) const;
  // Adds a push standing for `batches` worker batches (summed per key, or
  // replacing for assign tables), with its learning-rate factor.
  void Buffer(TableId table, int64_t clock, const DataFrames& request,
              int32_t batches, bool replace, float rate_factor = 1.0f);
  // The buffered clocks below the server clock, oldest first, taken out.
  std::vector<CombinedClock> TakeCombined();
  // Live migration: the buffered pushes of the keys `pred(table, key)`
  // holds for, taken out (their slots move to another server).
  template <typename Pred>
  std::vector<std::pair<TableId, BspBuffer::Entry>> TakeBufferedKeys(
      Pred&& pred) {
    std::vector<std::pair<TableId, BspBuffer::Entry>> out;
    for (auto& [id, state] : tables_) {
      const TableId table = id;
      for (auto& e :
           state.bsp.TakeKeys([&](Key k) { return pred(table, k); })) {
        out.emplace_back(table, std::move(e));
      }
    }
    return out;
  }
  // Calls f(table, clock, key) for every key's buffered pushes.
  template <typename F>
  void ForEachBuffered(F&& f) const {
    for (const auto& [id, state] : tables_) {
      const TableId table = id;
      state.bsp.ForEach([&](int64_t clock, Key key) { f(table, clock, key); });
    }
  }
  // `key`'s pushes of `clock` to `table` combined so far; null if none.
  const BspBuffer::Combined* FindBuffered(TableId table, int64_t clock,
                                          Key key) const {
    auto it = tables_.find(table);
    return it == tables_.end() ? nullptr : it->second.bsp.Find(clock, key);
  }
  // Puts moved-in buffered pushes back: false when the clock is over here
  // already (every push of it is in the entry: the caller applies it).
  bool PutBuffered(TableId table, BspBuffer::Entry entry);

  // ---- The staleness gate.
  // The server clock a worker's pull at `clock` needs
  // (ConsistencySchedule::kNoWait: none).
  int64_t RequiredServerClock(TableId table, int64_t clock) const;
  // Parks `pull`. Refused, and not moved from (the caller answers it):
  // with kUnavailable when it names a worker that is not live while some
  // are (a worker about to join retries; a made-up one parks nothing);
  // with kResourceExhausted, naming the limit, when its worker has
  // `max_parked_per_worker` pulls parked already, or the server
  // `max_parked` in all (the constructor's).
  Status Park(ParkedPull&& pull);
  size_t parked() const { return parked_.size(); }
  size_t parked_of(int32_t worker_id) const {
    auto it = parked_per_worker_.find(worker_id);
    return it == parked_per_worker_.end() ? 0 : it->second;
  }
  // Pulls the server clock now allows, in arrival order, taken out.
  std::vector<ParkedPull> TakeReleasable();
  // Pulls past their deadline at `now`, taken out.
  std::vector<ParkedPull> TakeExpired(TimePoint now);
  // Pulls naming a worker that is not live (it left, was declared dead, or
  // never joined), taken out: nothing would ever answer them but their
  // deadline.
  std::vector<ParkedPull> TakeOfGoneWorkers();
  std::optional<TimePoint> NextDeadline() const;

  // ---- Runtime changes of a table's model.
  // Starts holding the table's worker requests beyond the largest clock
  // seen; returns that clock. kNotFound for an unknown table.
  Result<int64_t> Prepare(TableId table);
  // True when a worker request of `clock` to `table` must wait for the
  // change being agreed.
  bool HoldsForChange(TableId table, int64_t clock) const;
  void HoldForChange(TableId table, InMessage message);
  // From `from_clock` on the table follows `c` (valid: checked by the
  // caller); the holds end. Returns the held requests, in arrival order, to
  // handle again. Parked pulls of the table are re-evaluated.
  std::vector<InMessage> Commit(TableId table, int64_t from_clock,
                                const Consistency& c);

  // Every parked pull and held request, taken out (a rollback abandons
  // them); buffered BSP pushes are dropped.
  std::vector<InMessage> TakeAllWaiting();

 private:
  struct TableState {
    ConsistencySchedule schedule{Consistency{}};
    BspBuffer bsp;
    std::optional<int64_t> hold_above;
    std::vector<InMessage> held;  // arrival order
  };

  ClockVector clocks_;                // live workers only
  std::map<int32_t, int64_t> known_;  // every worker heard from
  std::set<int32_t> live_;
  int64_t floor_ = 0;  // the highest server clock so far
  int64_t max_clock_seen_ = 0;
  // The parked pulls for which `take` holds, taken out in arrival order.
  template <typename Pred>
  std::vector<ParkedPull> TakeParkedIf(Pred&& take);

  std::map<TableId, TableState> tables_;
  std::vector<ParkedPull> parked_;  // arrival order
  std::map<int32_t, size_t> parked_per_worker_;
  size_t max_parked_per_worker_;
  size_t max_parked_;
};

}  // namespace ductile

#endif  // DUCTILE_CONSISTENCY_CONSISTENCY_CONTROLLER_H_
