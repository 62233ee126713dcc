// The primary's side of replication (--replicas=2): what this server's
// requests change in slots that have a backup is sent to the backup before
// the request is answered.
//
// The request thread notes what each request did (NoteApplied: the
// request's place in its client's exactly-once window; NoteBuffered: BSP
// pushes held for a clock; NoteCombinedBelow: clocks combined into the
// rows); the tables list the rows that pushes, combined clocks and
// evictions changed (ParameterTable::TakeReplicaChanges). Ticket(), called
// for each reply about to go, returns the flush the reply must wait for:
// the next one, if anything changed, which Flush() (at the end of the
// request thread's step) sends as one REPLICATE message per backup; the
// reply goes once Passed(ticket), when every backup has acknowledged every
// record of that flush and the flushes before it (ReplySender keeps the
// replies in order).
//
// Invariants: records go to each backup in order on one connection,
// numbered 1, 2, ... per backup within a stream (an id per connection that
// grows with the time it was made, so a backup takes a new connection's
// records and ignores an older one's); a record is kept until
// acknowledged, and those not acknowledged are sent again, in order, when
// the backup reports a gap (a connection lost messages) or after
// kResendAfter without an answer; `flushes_` lists the flushes not wholly
// acknowledged, oldest first; a backup that leaves the routing's servers,
// or is listed at another process's address (it died), counts as having
// acknowledged all (its slots have no copy left to wait for). A backup
// that refuses records (its routing names another primary for the slots:
// this server was taken for dead and its slots were taken over) fences
// this server: fenced() is set, and the replies waiting are never sent.
// A backup new to a slot (a pair of a later epoch than the first
// assignment's) gets the slot whole (TakeNewPairs: its buffered pushes and
// windows in the next flush, its rows queued by QueueCopy), and the server
// reports the epoch its backups are whole at (synced_epoch) with its
// heartbeats: the coordinator promotes no backup before. The queued rows
// go in pieces of about copy_chunk_bytes, one per flush and at most
// kCopyChunksInFlight unacknowledged, each row as it is when its piece
// goes (a row changed meanwhile is also sent as a change): a copy of any
// size pauses the request thread for one piece at a time, and the replies
// of a step wait for no more than the pieces in flight.
//
// To a backup on the same host (reached over ipc://), a record goes in a
// region of this server's shared memory (transport/shm_value_area.h), its
// message naming the region (Header.push_shm): the backup reads it from
// there before it answers, so the record's bytes are neither encrypted
// (CURVE) nor copied through the socket. A record sent again goes in a
// frame, and its region waits for its time to be up; a backup that cannot
// use the region (Header.shm_refused) gets this server's records in frames
// from then on.
//
// Not thread-safe: owned by a server's request thread.
#ifndef DUCTILE_SERVER_REPLICATOR_H_
#define DUCTILE_SERVER_REPLICATOR_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "consistency/consistency_controller.h"
#include "ductile/status.h"
#include "env/env.h"
#include "routing/routing_table.h"
#include "server/reply_sender.h"
#include "server/request_dedup.h"
#include "server/table_set.h"
#include "transport/shm_value_area.h"
#include "transport/socket.h"

namespace ductile {

class Replicator : public ReplyGate {
 public:
  // All must outlive the replicator.
  Replicator(Env* env, Transport* transport, const RoutingTable* routing,
             TableSet* tables, const ConsistencyController* consistency)
      : env_(env),
        transport_(transport),
        routing_(routing),
        tables_(tables),
        consistency_(consistency) {}

  void set_server_id(int32_t id) { self_ = id; }
  // The routing changed: connects to the backups of this server's slots;
  // forgets a backup gone from the routing's servers, or listed with
  // another process's address (it died: what it did not acknowledge has no
  // copy to wait for), and one that backs nothing here any more once it
  // has answered everything.
  void OnRouting();
  // Some slot this server owns has a backup.
  bool active() const { return active_; }
  // The slots this server owns whose backup has had no whole copy from it
  // yet (a pair new since the last call: RoutingTable::backup_from). The
  // caller notes their rows, buffered pushes and windows at once; the
  // flush that carries them makes those backups whole at this epoch.
  std::set<int32_t> TakeNewPairs();
  // Queues `key` of `table` (of a slot TakeNewPairs just returned) for the
  // copy that call began.
  void QueueCopy(TableId table, Key key);
  void set_copy_chunk_bytes(size_t bytes) { copy_chunk_bytes_ = bytes; }
  // Records to backups on this host go in shared memory (--shm_values).
  void set_shm(bool enabled) { shm_enabled_ = enabled; }
  // The size of the shared memory area (its pages are used as records
  // need them), and how long a backup may take to read a record from it.
  static constexpr uint64_t kShmAreaBytes = uint64_t{512} << 20;
  static constexpr int64_t kShmTimeoutMs = 10000;
  static constexpr size_t kCopyChunksInFlight = 2;
  // The newest routing epoch at which the backup of every slot this server
  // owned held a whole copy of it (the current one once every copy sent
  // is acknowledged).
  uint64_t synced_epoch();
  // Whether some whole copy was acknowledged since the last call (its
  // epoch is worth telling the coordinator at once).
  bool TakeCopiesDone() { return std::exchange(copies_done_, false); }
  bool fenced() const { return fenced_; }
  // Fenced, and no newer routing since: this server serves nothing.
  bool awaiting_routing() const {
    return fenced_epoch_ > 0 && routing_->epoch() <= fenced_epoch_;
  }

  // A request of `client` (`seq`, `done_below`) was applied to `keys` of
  // `table`.
  void NoteApplied(int64_t client, uint64_t seq, uint64_t done_below,
                   TableId table, std::span<const Key> keys);
  // Pushes to `keys` of `table` were buffered for BSP clock `clock`.
  void NoteBuffered(TableId table, int64_t clock, std::span<const Key> keys);
  // The clocks below `clock` are combined into the rows.
  void NoteCombinedBelow(int64_t clock) { combined_below_ = clock; }
  // `backup` is to hold these exactly-once windows (a slot moved here).
  void NoteWindows(int32_t backup,
                   const std::vector<RequestDedup::Window>& windows);

  // ReplyGate. A reply made while something changed waits for the next
  // flush (Flush(), at the end of the request thread's step: one message
  // per backup for all the step's requests) and every flush before it.
  uint64_t Ticket() override;
  bool Passed(uint64_t ticket) const override {
    return ticket < next_flush_ &&
           (flushes_.empty() || flushes_.front().id > ticket);
  }
  // Sends what changed since the last flush.
  void Flush();

  // Reads the backups' answers, and sends again what waited too long.
  // A backup's refusal because its routing names another primary for the
  // slots sets fenced().
  void ReadAcks();
  // When ReadAcks has something to send again, if ever.
  std::optional<Env::TimePoint> NextDeadline() const;
  // Records not acknowledged are sent again after this; a backup behind
  // this server's routing is asked again after kRetryAfter.
  static constexpr std::chrono::milliseconds kResendAfter{1000};
  static constexpr std::chrono::milliseconds kRetryAfter{20};
  // Records sent and not acknowledged yet.
  bool idle() const { return flushes_.empty(); }
  // Forgets everything under way and its connections (a rollback, a
  // rejoin, or fenced: nothing of it is answered); clears fenced().
  void Reset();
  std::vector<Socket*> sockets() const;

 private:
  struct Record {
    // Shared with the transport while a send of it is under way.
    std::shared_ptr<const std::string> payload;
    uint64_t epoch = 0;  // the routing's when it was made
    bool sent = false;
    uint64_t shm_ticket = 0;  // its region of shm_ (0: none)
  };
  struct Link {
    std::unique_ptr<Socket> socket;
    std::string address;       // the backup process's (its endpoint's)
    uint64_t incarnation = 0;  // and its registration's
    uint64_t stream = 0;
    uint64_t sent = 0;
    uint64_t acked = 0;
    std::map<uint64_t, Record> unacked;  // by seq
    // The backup cannot read records in shared memory (Header.shm_refused).
    bool shm_refused = false;
    // Sends again (or connects again) at this time.
    Env::TimePoint retry_at;
    Status failure;
  };
  struct Batch {
    uint64_t id = 0;
    std::vector<std::pair<int32_t, uint64_t>> records;  // (backup, seq)
  };
  struct Pending {
    std::string payload;
    std::map<int64_t, RequestDedup::Window> windows;
  };

  // The backup of `key`'s slot if this server owns it and it has one; -1
  // otherwise.
  int32_t BackupOf(TableId table, Key key) const;
  // Whether anything changed that a backup has not been sent.
  bool Dirty();
  void Connect(int32_t backup);
  // Sends record `seq` (held in link.unacked) to `backup`.
  void Transmit(int32_t backup, Link& link, uint64_t seq);
  // Sends again every record not acknowledged.
  void Resend(int32_t backup, Link& link);
  // The backup holds every record up to `seq`.
  void Acknowledge(int32_t backup, Link& link, uint64_t seq);
  // Puts `record`'s payload in a region of shm_ for `backup`, named in
  // `ref`; false if it does not fit (or there is no shared memory).
  bool LendShm(int32_t backup, const Link& link, Record& record,
               wire::ShmRef* ref);
  // The link's records' regions are freed only when their time is up (the
  // backup may still read them).
  void KeepShm(Link& link);
  // Drops the acknowledged flushes from the front.
  void Settle();

  Env* const env_;
  Transport* const transport_;
  const RoutingTable* const routing_;
  TableSet* const tables_;
  const ConsistencyController* const consistency_;
  int32_t self_ = -1;
  bool active_ = false;
  bool fenced_ = false;
  uint64_t fenced_epoch_ = 0;  // Reset() while fenced: the routing's epoch

  std::set<int32_t> backups_;  // of this server's slots, as routed now
  // Per slot: the pair (RoutingTable::backup_from) its whole copy went to.
  std::vector<uint64_t> copied_from_;
  // Whole copies under way, oldest first: the routing epoch they make the
  // backups whole at, the count of queued rows their last row makes, and
  // the flush that sent it (0: not sent yet). synced_ is the epoch of the
  // last one acknowledged.
  struct Copy {
    uint64_t epoch = 0;
    uint64_t rows_end = 0;
    uint64_t flush = 0;
  };
  std::deque<Copy> copies_;
  // Rows of the copies not sent yet, oldest first; rows ever queued and
  // ever taken from the queue.
  std::deque<std::pair<TableId, Key>> copy_rows_;
  uint64_t copy_queued_ = 0;
  uint64_t copy_taken_ = 0;
  size_t copy_chunk_bytes_ = 4 << 20;
  // The flushes that carried copy rows, not acknowledged yet.
  std::deque<uint64_t> chunk_flushes_;
  // Appends the next piece of the copies to pending_.
  void TakeCopyChunk();
  uint64_t synced_ = 0;
  bool copies_done_ = false;
  std::map<int32_t, Link> links_;
  bool shm_enabled_ = false;
  std::unique_ptr<ShmValueArea> shm_;
  bool shm_failed_ = false;  // no area could be made
  uint64_t next_shm_ticket_ = 1;
  std::deque<Batch> flushes_;
  uint64_t next_flush_ = 1;
  bool ticket_given_ = false;  // a reply waits for flush next_flush_
  // Since the last flush.
  std::map<int32_t, Pending> pending_;
  // Each backup's last payload size: the next one's first reservation.
  std::map<int32_t, size_t> payload_hint_;
  std::set<std::tuple<TableId, int64_t, Key>> buffered_;
  std::optional<int64_t> combined_below_;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_REPLICATOR_H_
