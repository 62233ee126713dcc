// The routing table's owner on the coordinator: the first assignment of
// slots once the expected servers have registered (with replicas, each
// slot's backup too), publication of every change to the servers (clients
// learn lazily: a server answers "moved" with its table, and every reply
// carries the server's epoch), and waits for every server to have
// installed the current epoch. Slots change owners through
// MigrationManager (their keys move with them), a rollback
// (RecoveryManager), or a takeover by their backups (TakeOver).
//
// Not thread-safe: owned by the coordinator's loop.
#ifndef DUCTILE_COORDINATOR_ROUTING_MANAGER_H_
#define DUCTILE_COORDINATOR_ROUTING_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "coordinator/ack_round.h"
#include "coordinator/coordinator_context.h"

namespace ductile {

class RoutingManager {
 public:
  explicit RoutingManager(CoordinatorContext* ctx) : ctx_(*ctx) {}

  // Assigns the slots once the expected servers have registered (true the
  // first time); with a table already, publishes it (a server joined).
  bool MaybeAssign();
  // Sends the current table, with the live servers' endpoints, to every
  // server.
  void Publish();
  // The servers of `dead` are gone: their slots go to their backups
  // (RoutingTable::Promote; the caller has checked that each has a live
  // one), the slots they backed up get new ones where another server is
  // there to hold them (FillBackups), the epoch waits stop waiting for
  // them, and the new table is published. Returns the slots promoted.
  int32_t TakeOver(const std::set<int32_t>& dead);
  // With --replicas=2 and no rollback under way: gives a backup to each
  // slot without one (after a takeover, a rollback, a drain, or when a
  // server joins), and publishes the table if that changed it. Their
  // owners send the new backups whole copies while training goes on.
  // True if some slot got one.
  bool MaybeFillBackups();
  // GET_ROUTING: the table (none before the first assignment).
  void HandleGet(const std::string& identity, const wire::Header& h);
  // ROUTING_ACK: a server installed an epoch.
  void HandleAck(const wire::Header& h);

  // `done` runs once every live server has installed the current epoch.
  void WhenInstalled(std::function<void(const Status&)> done);
  // Ends every wait with `status` (the coordinator stops).
  void CancelWaits(const Status& status);

 private:
  struct EpochWait {
    uint64_t epoch = 0;
    AckRound round;
    std::function<void(const Status&)> done;
  };

  // FillBackups on the table; how many slots got a backup.
  int32_t FillBackups();

  CoordinatorContext& ctx_;
  std::map<int32_t, uint64_t> acked_;  // the newest epoch each server acked
  std::vector<EpochWait> waits_;
};

}  // namespace ductile

#endif  // DUCTILE_COORDINATOR_ROUTING_MANAGER_H_
