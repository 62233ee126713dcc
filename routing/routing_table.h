// The routing table: which server owns each slot, in what state, and which
// server keeps a backup copy of it, at one epoch.
//
// A key of table t lives in slot SlotOf(t, key, num_slots) (slot_map.h).
// The table maps every slot to a server and a state:
//   kOwned     the server holds the slot's data and serves it;
//   kLeaving   the server still holds the data but is handing the slot to
//              another server: it queues the slot's requests until the
//              hand-over ends (live migration);
//   kArriving  the server is receiving the slot's data and does not serve
//              it until the slot becomes kOwned.
// Nothing produces kLeaving or kArriving yet: slots move whole, by
// ownership (Move) or by a rollback (Reassign).
//
// A slot may also name a backup server (-1: none; with --replicas=2 the
// coordinator assigns them at the start, AssignBackups, and to slots left
// without one later, FillBackups): it holds a copy of the slot that the
// owner (the primary) keeps current, and takes the slot over when the
// owner dies (Promote) with nothing lost. A backup serves nothing:
// Serves() is the owner's alone. backup_from(s) is the epoch from which
// slot s's owner and backup are the pair they are: the owner sends the
// backup a whole copy of the slot when it sees a new one, and reports the
// epoch at which its copies are all whole (SlotsWithoutLiveBackup's
// `synced`); 0 for the pairs of the first assignment, whose slots were
// empty.
//
// Invariants: the epoch never decreases, and every change (an owner, a
// state, a backup, the servers' endpoints) increases it by one; epoch 0
// is "no table yet" and has no slots. A slot's backup is never its owner.
// A server serves a request only if it owns every key's slot in state
// kOwned, and answers "moved" with its own table otherwise; a reply
// carries the server's epoch, and a peer that sees a newer epoch than its
// own takes the newer table.
//
// A value type. Not thread-safe.
#ifndef DUCTILE_ROUTING_ROUTING_TABLE_H_
#define DUCTILE_ROUTING_ROUTING_TABLE_H_

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "ductile/status.h"
#include "ductile/table.h"
#include "proto/ductile.pb.h"
#include "routing/slot_map.h"

namespace ductile {

class RoutingTable {
 public:
  // Part of the wire format (RoutingTable.slot_state): never renumber.
  enum class SlotState : int32_t { kOwned = 0, kLeaving = 1, kArriving = 2 };
  struct Slot {
    int32_t owner = -1;
    SlotState state = SlotState::kOwned;
    int32_t backup = -1;       // -1: none
    uint64_t backup_from = 0;  // the epoch of the pair (owner, backup)
  };

  // Largest number of slots a table may have.
  static constexpr int32_t kMaxSlots = 1 << 20;

  // Epoch 0: no table yet.
  RoutingTable() = default;
  // Epoch 1: `num_slots` slots spread evenly over `servers`, each one
  // contiguous range, in ascending id order (AssignSlotsEvenly).
  static RoutingTable Initial(int32_t num_slots,
                              std::vector<wire::ServerEndpoint> servers);
  // Checks a peer's table: slot counts in range and agreeing, states known,
  // backups -1 or server ids and never their slot's owner.
  static Result<RoutingTable> FromWire(const wire::RoutingTable& wire);
  void ToWire(wire::RoutingTable* wire) const;

  uint64_t epoch() const { return epoch_; }
  bool empty() const { return epoch_ == 0; }
  int32_t num_slots() const { return static_cast<int32_t>(slots_.size()); }
  const Slot& slot(int32_t s) const { return slots_[s]; }
  int32_t SlotOf(TableId table, Key key) const {
    return ductile::SlotOf(table, key, num_slots());
  }
  int32_t owner(int32_t s) const { return slots_[s].owner; }
  // True when `server` owns slot `s` in state kOwned.
  bool Serves(int32_t server, int32_t s) const {
    return slots_[s].owner == server && slots_[s].state == SlotState::kOwned;
  }
  // Slot `s`'s backup server, -1 when it has none.
  int32_t backup(int32_t s) const { return slots_[s].backup; }
  // True when some slot has a backup.
  bool HasBackups() const;
  // The epoch of slot `s`'s pair (owner, backup); 0 for the first's.
  uint64_t backup_from(int32_t s) const { return slots_[s].backup_from; }
  // How many slots owned by a server of `owners` have no backup in `live`
  // (none, or one that is in `owners` too), or one whose copy is not known
  // whole (`synced`: the epoch each owner last reported its backups'
  // copies whole at; absent: none): those that Promote(owners) would not
  // save.
  int32_t SlotsWithoutLiveBackup(
      const std::set<int32_t>& owners, const std::set<int32_t>& live,
      const std::map<int32_t, uint64_t>& synced) const;
  // How many slots have no backup in `live` with a copy known whole: those
  // whose owner's death alone would roll the job back. The sum of
  // SlotsWithoutLiveBackup({owner}, ...) over the owners, in one pass.
  int32_t SlotsWithoutCopy(const std::set<int32_t>& live,
                           const std::map<int32_t, uint64_t>& synced) const;
  bool OwnsAny(int32_t server) const;
  // Slots per owner (owners only).
  std::map<int32_t, int32_t> SlotsPerServer() const;
  // The slots `server` owns, ascending.
  std::vector<int32_t> SlotsOf(int32_t server) const;
  // Servers owning at least one slot.
  std::set<int32_t> Owners() const;

  // The servers' endpoints, ascending by id.
  const std::vector<wire::ServerEndpoint>& servers() const { return servers_; }
  const wire::ServerEndpoint* endpoint(int32_t server) const;

  // Changes; each increases the epoch by one.
  // Gives slot `s` to `server` (state kOwned); its backup stays, unless it
  // is `server` (then it has none), in a new pair.
  void Move(int32_t s, int32_t server);
  // Gives every slot whose owner is not in `live` to the least-loaded
  // server of `live` (ties: the lowest id), backups kept as by Move;
  // returns how many moved. Nothing moves (and the epoch stays) when
  // `live` is empty.
  int32_t Reassign(const std::set<int32_t>& live);
  // Makes `server` slot `s`'s backup (-1: none; the slot's owner is never
  // its backup, so naming it means none too).
  void SetBackup(int32_t s, int32_t server);
  // Gives every slot a backup: the next server of `live` after its owner
  // in ascending id order, wrapping around (slots spread over their owners
  // in id order thus back each other up evenly); -1 when `live` has no
  // server but the owner. One epoch for the whole change, none if nothing
  // changed.
  void AssignBackups(const std::set<int32_t>& live);
  // Gives each slot without a backup one of `candidates` other than its
  // owner: the one backing the fewest slots (ties: the next id after the
  // owner's, wrapping around). Their pairs are new (backup_from: the new
  // epoch). Returns how many slots got one; one epoch for the change, none
  // if no slot did.
  int32_t FillBackups(const std::set<int32_t>& candidates);
  // Every slot loses its backup (their copies are gone: a rollback). One
  // epoch, none if no slot had one.
  void ClearBackups();
  // The servers of `dead` are gone: every slot they own that has a backup
  // outside `dead` is now owned by it (kOwned) and has no backup; slots
  // backed up by one of them have no backup. Returns the slots promoted;
  // those of `dead` without such a backup keep their owner (the caller
  // checks SlotsWithoutLiveBackup first). One epoch for the whole change,
  // none if nothing changed.
  int32_t Promote(const std::set<int32_t>& dead);
  // Replaces the endpoints; the epoch grows only if they differ.
  void SetServers(std::vector<wire::ServerEndpoint> servers);

 private:
  uint64_t epoch_ = 0;
  std::vector<Slot> slots_;
  std::vector<wire::ServerEndpoint> servers_;
};

}  // namespace ductile

#endif  // DUCTILE_ROUTING_ROUTING_TABLE_H_
