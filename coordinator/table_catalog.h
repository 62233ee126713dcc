// The job's tables on the coordinator: creation on every server, lookups by
// name, and runtime changes of a table's consistency model.
//
// A table exists once every server has acknowledged it; until then more
// creations of the same name and options wait for the same answer. A
// server that registers (restarted under its id, or joining) or is heard
// from again after it was declared dead while a table is being created is
// sent the creation and awaited too, whether or not the process before it
// had acknowledged: a table never exists without it on a live server. A
// server declared dead is no longer awaited (it gets the table when it
// registers again), so a crash at the job's start costs a rollback and a
// restart, not the creation. A
// consistency change is agreed in two phases: every server (and every live
// worker's cache) holds the table's requests beyond the largest clock it
// has seen and reports that clock; the commit then sets the new model from
// one past the largest report, the same boundary everywhere.
//
// Not thread-safe: owned by the coordinator's loop.
#ifndef DUCTILE_COORDINATOR_TABLE_CATALOG_H_
#define DUCTILE_COORDINATOR_TABLE_CATALOG_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "coordinator/ack_round.h"
#include "coordinator/coordinator_context.h"

namespace ductile {

class TableCatalog {
 public:
  explicit TableCatalog(CoordinatorContext* ctx) : ctx_(*ctx) {}

  void HandleCreate(const std::string& identity, const wire::Header& h);
  // TABLE_CREATE_ACK, matched to its creation by sequence number.
  void HandleCreateAck(const wire::Header& h);
  // `server` registered (a new process under its id, or a server joining)
  // or was heard from again after it was declared dead: every creation
  // under way is sent to it and awaits its acknowledgement.
  void OnServerUp(const Member& server);
  void HandleGet(const std::string& identity, const wire::Header& h);
  void HandleSetConsistency(const std::string& identity, const wire::Header& h);
  // The same change asked for from inside the coordinator (a policy): OK
  // once it has started; its end is logged. kNotFound for an unknown
  // table, kInvalidArgument for a bad model, kUnavailable while another
  // change of the table is under way.
  Status ChangeConsistency(const std::string& table,
                           const wire::ConsistencyConfig& consistency);
  void HandleConsistencyAck(const wire::Header& h);
  // Stops waiting for servers declared dead or gone (a creation that
  // waited only for them completes), then ends the creations and changes
  // past their deadline.
  void CheckDeadlines();
  // The coordinator did not run for `pause`: every round's deadline moves
  // that much later.
  void Postpone(std::chrono::steady_clock::duration pause);

 private:
  struct PendingTable {
    wire::TableConfig config;
    AckRound round;  // servers
    std::vector<Waiter> waiters;
  };
  struct PendingChange {
    std::string table;  // name
    wire::ConsistencyConfig consistency;
    AckRound servers;
    AckRound workers;  // their caches
    int64_t max_clock = 0;
    Waiter waiter;  // no identity: asked for by a policy, answered nobody
  };

  // Sends the creation of `p` to `server` and awaits its answer.
  void SendCreation(PendingTable& p, const Member& server);
  // The round of `it` is complete: the table exists, and its waiters are
  // told so.
  void Created(std::map<uint64_t, PendingTable>::iterator it);
  // No creation waits for a server declared dead or gone.
  void ForgetGoneServers();

  Status StartChange(const wire::TableConfig& table,
                     const wire::ConsistencyConfig& consistency,
                     const Waiter& waiter);
  // Answers the change's waiter with `s` (or, for a policy's change, logs
  // a failure).
  void Answer(const PendingChange& change, const Status& s);

  void Commit(const PendingChange& change, const wire::ConsistencyConfig& c);

  CoordinatorContext& ctx_;
  std::map<uint64_t, PendingTable> pending_tables_;  // by round id (seq)
  std::map<uint64_t, PendingChange> changes_;        // by round id
  uint64_t next_round_ = 1;
};

}  // namespace ductile

#endif  // DUCTILE_COORDINATOR_TABLE_CATALOG_H_
