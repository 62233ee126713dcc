// The primary's side of replication (--replicas=2): what this server's
// requests change in slots that have a backup is sent to the backup before
// the request is answered.
//
// The request thread notes what each request did (NoteApplied: the
// request's place in its client's exactly-once window; NoteBuffered: BSP
// pushes held for a clock; NoteCombinedBelow: clocks combined into the
// rows); the tables list the rows that pushes, combined clocks and
// evictions changed (ParameterTable::TakeReplicaChanges). Ticket(), called
// for each reply about to go, sends all of it as one REPLICATE message per
// backup (a flush) and returns the flush the reply must wait for; the reply
// goes once Passed(ticket), when every backup has acknowledged every
// record of that flush and the flushes before it (ReplySender keeps the
// replies in order).
//
// Invariants: records go to each backup in order on one connection,
// numbered 1, 2, ... per backup within a stream (a random id per
// connection, so a backup tells a restarted primary's records from the
// old one's); a record is kept until acknowledged, and those not
// acknowledged are sent again, in order, when the backup reports a gap (a
// connection lost messages) or after kResendAfter without an answer; `flushes_`
// lists the flushes not wholly acknowledged, oldest first; a backup that leaves
// the routing's servers (dead) counts as having acknowledged all (its slots
// have no copy left to wait for). A backup that refuses records (its routing
// names another primary for the slots: this server was taken for dead and its
// slots were taken over) fences this server: fenced() is set, and the replies
// waiting are never sent.
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
#include <random>
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
#include "server/table_set.h"
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
  // The routing changed: connects to the backups of this server's slots,
  // and forgets those no longer among the routing's servers.
  void OnRouting();
  // Some slot this server owns has a backup.
  bool active() const { return active_; }
  bool fenced() const { return fenced_; }

  // A request of `client` (`seq`, `done_below`) was applied to `keys` of
  // `table`.
  void NoteApplied(int64_t client, uint64_t seq, uint64_t done_below,
                   TableId table, std::span<const Key> keys);
  // Pushes to `keys` of `table` were buffered for BSP clock `clock`.
  void NoteBuffered(TableId table, int64_t clock, std::span<const Key> keys);
  // The clocks below `clock` are combined into the rows.
  void NoteCombinedBelow(int64_t clock) { combined_below_ = clock; }

  // ReplyGate.
  uint64_t Ticket() override;
  bool Passed(uint64_t ticket) const override {
    return flushes_.empty() || flushes_.front().id > ticket;
  }

  // Reads the backups' answers, and sends again what waited too long.
  void ReadAcks();
  static constexpr std::chrono::milliseconds kResendAfter{1000};
  // Records sent and not acknowledged yet.
  bool idle() const { return flushes_.empty(); }
  // Forgets everything under way (a rollback: nothing of it is answered).
  void Reset();
  std::vector<Socket*> sockets() const;

 private:
  struct Link {
    std::unique_ptr<Socket> socket;
    uint64_t stream = 0;
    uint64_t sent = 0;
    uint64_t acked = 0;
    std::map<uint64_t, std::string> unacked;  // payloads by seq
    Env::TimePoint last_progress;
    Status failure;
  };
  struct Flush {
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
  // Sends what changed since the last flush; false if nothing did.
  bool Send();
  void Connect(int32_t backup);
  // Sends record `seq` (held in link.unacked) to `backup`.
  void Transmit(int32_t backup, Link& link, uint64_t seq);
  // Sends again every record not acknowledged.
  void Resend(int32_t backup, Link& link);
  // The backup holds every record up to `seq`.
  void Acknowledge(Link& link, uint64_t seq);
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

  std::mt19937_64 random_{std::random_device{}()};
  std::map<int32_t, Link> links_;
  std::deque<Flush> flushes_;
  uint64_t next_flush_ = 1;
  // Since the last flush.
  std::map<int32_t, Pending> pending_;
  std::set<std::tuple<TableId, int64_t, Key>> buffered_;
  std::optional<int64_t> combined_below_;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_REPLICATOR_H_
