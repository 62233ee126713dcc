// Slots leaving and arriving on one server: live key migration
// (docs/elasticity.md, "Servers").
//
// Source side. A move (MIGRATE_OUT from the coordinator) names slots and a
// target. The source takes the slots' keys at once (references to their
// rows, values and optimizer state, as the table keeps them; a copy of the
// admission filters' counts of the slots; and, under BSP, the pushes of
// clocks not combined yet, which it hands over rather than applies) and
// streams them to the target in chunks, a bounded number in flight, each
// encoded straight from the rows on a background thread a few chunks ahead
// of the sending (MoveStream). From the copy on, every request for
// the slots is answered "moved" (but a resent push it applied before,
// which it acknowledges as a duplicate): the client asks again until the
// routing names the new owner, so nothing is applied on both sides. Once
// the target has acknowledged every chunk the source tells the
// coordinator, which gives the slots to the target (routing epoch + 1);
// when the source installs that routing it drops the keys and counts. The
// rows stay as they were at the copy until then: their requests bounce and
// evictions are held (ServerNode), and an abort stops the encoding before
// anything may change them.
//
// Why no push is late at the target: a worker tells a server its clock
// only once its pushes of the clocks before are answered, and a push sent
// back "moved" is answered only by the target. So the target's server
// clock passes t only once every push of clock t for the slots is in the
// copy or at the target, and a BSP clock is combined there with all of its
// pushes.
//
// Target side. A chunk's keys and counts are put into the target's tables
// (counted as changed, so its next checkpoint writes them), its BSP pushes
// into the
// target's buffer (or applied, combined, if the target's clock is past
// theirs), and acknowledged. The target serves the slots once the routing
// names it.
//
// Not thread-safe: owned by a server's request thread.
#ifndef DUCTILE_SERVER_SLOT_MOVER_H_
#define DUCTILE_SERVER_SLOT_MOVER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "consistency/bsp_buffer.h"
#include "consistency/consistency_controller.h"
#include "ductile/status.h"
#include "env/env.h"
#include "proto/ductile.pb.h"
#include "routing/routing_table.h"
#include "server/parameter_table.h"
#include "server/record_codec.h"
#include "server/request_dedup.h"
#include "server/table_set.h"
#include "transport/message.h"
#include "transport/socket.h"

namespace ductile {

class MoveStream;

class SlotMover {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // Bytes of keys per chunk, chunks unacknowledged at once, and chunks
  // encoded ahead of the sending.
  static constexpr size_t kChunkBytes = 4 << 20;
  static constexpr size_t kWindow = 4;
  static constexpr size_t kAhead = 2;
  // `ack_timeout`: a target silent this long fails the move. `wakeup`
  // (thread-safe; may be empty in the simulation, which encodes in line):
  // a chunk is ready to send, Step() should run.
  SlotMover(Env* env, Transport* transport,
            std::chrono::milliseconds ack_timeout,
            std::function<void()> wakeup = {});
  ~SlotMover();

  // A BSP push buffered for a key (its clock not combined yet).
  using Buffered = RecordCodec::Buffered;

  // ---- Source.
  // MIGRATE_OUT: takes the slots' keys from `tables` (references to their
  // rows, which must stay as they are until the move ends), with `buffered`
  // (the slots' BSP pushes, taken out of the consistency controller by the
  // caller) and `windows` (the server's exactly-once window, taken at the
  // copy: every request applied here before it, and none after it, as the
  // slots' requests bounce from then on), and starts sending them.
  void Start(const wire::Header& out, const RoutingTable& routing,
             TableSet& tables, std::vector<Buffered> buffered,
             const std::vector<RequestDedup::Window>& windows);
  // The slots of a move named in a MIGRATE_OUT, for the caller to take
  // their buffered pushes.
  static bool InSlots(const wire::Header& out, int32_t slot);
  // True when a request for `keys` of `table` must be answered "moved":
  // a slot of theirs is moving (or has moved) away.
  bool Bounces(const RoutingTable& routing, TableId table,
               std::span<const Key> keys) const;
  // Reads the targets' acknowledgements; sends more chunks; fails moves
  // whose target is silent. Returns MIGRATE_DONE messages for the
  // coordinator.
  std::vector<wire::Header> Step();
  // The routing changed: keys of finished moves whose slots this server
  // no longer serves are dropped. Returns the number of keys dropped; their
  // rows go to `erased`, to be freed (and the memory given back to the
  // system, ReleaseFreedMemory) where the caller likes.
  uint64_t OnRouting(const RoutingTable& routing, int32_t self,
                     TableSet& tables,
                     std::vector<ParameterTable::Erased>* erased);
  // MIGRATE_ABORT (id 0: all) or a rollback: the slots are served here
  // again. The BSP pushes that went with their copy come back: into
  // `consistency`'s buffer, or applied to `tables`, combined, if their
  // clock is over here (no push for the slots was taken meanwhile: every
  // one was answered "moved").
  void Abort(uint64_t id, TableSet& tables, ConsistencyController& consistency);
  bool moving() const { return !moves_.empty(); }
  // Slots being moved away now.
  size_t slots_moving() const;
  // Bytes of the moves under way their targets have not acknowledged.
  uint64_t bytes_left() const;
  // The sockets to the targets, to wait on.
  std::vector<Socket*> sockets() const;
  std::optional<TimePoint> NextDeadline() const;

  // ---- Target.
  // A MIGRATE_DATA chunk (`header`, `message` as the router got it): its
  // keys and admission counts go into `tables` (counted as changed, for
  // the next checkpoint),
  // its BSP pushes into `consistency`'s buffer, or, when their clock is
  // over here, are applied combined, and the source's exactly-once window
  // into `dedup` (a request applied there is a duplicate here). Nothing is
  // applied if the chunk is unreadable or names an unknown table; a chunk that
  // arrives again is applied once (again, it would undo what was applied
  // since). A move's first chunk drops what an earlier, abandoned move of its
  // slots left here (`routing` tells a key's slot).
  Status Install(const wire::Header& header, const InMessage& message,
                 const RoutingTable& routing, TableSet& tables,
                 ConsistencyController& consistency, RequestDedup& dedup);
  // `buffered` into `consistency`'s buffer, or applied to `tables`,
  // combined, when their clock is over there.
  static void PutBuffered(std::vector<Buffered> buffered, TableSet& tables,
                          ConsistencyController& consistency);
  // Reads a MIGRATE_DATA chunk (frame 2 of the message as the router got
  // it): its keys, buffered pushes, exactly-once windows and admission
  // counts (`filters` may be null: a chunk holding counts is refused).
  static Status ParseChunk(const InMessage& message,
                           std::vector<EntryRecord>* entries,
                           std::vector<Buffered>* buffered,
                           std::vector<RequestDedup::Window>* windows,
                           std::vector<FilterRecord>* filters = nullptr);

 private:
  struct Move {
    Move() = default;
    Move(const Move&) = delete;
    Move& operator=(const Move&) = delete;
    ~Move();  // stops the encoding first
    uint64_t id = 0;
    std::set<int32_t> slots;
    int32_t target = -1;
    std::string address;
    bool reported = false;  // MIGRATE_DONE sent
    // The chunks, encoded as they are sent; with the slots' BSP pushes,
    // taken out of the consistency controller for the copy: they are put
    // back if the move is aborted.
    std::shared_ptr<MoveStream> stream;
    uint64_t next_chunk = 0;
    // Chunks acknowledged, each counted once (an acknowledgement that
    // arrives again, or names a chunk not sent, counts for nothing).
    uint64_t acked = 0;
    uint64_t acked_bytes = 0;
    std::map<uint64_t, size_t> unacked;  // seq -> bytes, sent, not acked
    Status failure;
    TimePoint last_progress{};
    std::unique_ptr<Socket> socket;
  };
  void Connect(Move& move);
  void Pump(Move& move);
  // True the first time chunk `seq` of move `id` arrives.
  bool FirstArrival(uint64_t id, uint64_t seq);

  Env* const env_;
  Transport* const transport_;
  const std::chrono::milliseconds ack_timeout_;
  const std::function<void()> wakeup_;
  // Encodes the moves' chunks (made at the first move; null where the Env
  // has none: in line). Before moves_: a move stops its encoding when it
  // goes.
  std::unique_ptr<BackgroundThread> encoder_;
  std::map<uint64_t, Move> moves_;
  // Moves started here (a MIGRATE_OUT that arrives again is not a new
  // move), and the chunks put in here by move; the newest kRemembered.
  static constexpr size_t kRemembered = 1024;
  std::deque<uint64_t> started_order_;
  std::set<uint64_t> started_;
  std::deque<uint64_t> arrived_order_;
  std::map<uint64_t, std::set<uint64_t>> arrived_;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_SLOT_MOVER_H_
