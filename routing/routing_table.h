// The routing table: which server owns each slot, and in what state, at one
// epoch.
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
// Invariants: the epoch never decreases, and every change (an owner, a
// state, the servers' endpoints) increases it by one; epoch 0 is "no table
// yet" and has no slots. A server serves a request only if it owns every
// key's slot in state kOwned, and answers "moved" with its own table
// otherwise; a reply carries the server's epoch, and a peer that sees a
// newer epoch than its own takes the newer table.
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
  };

  // Largest number of slots a table may have.
  static constexpr int32_t kMaxSlots = 1 << 20;

  // Epoch 0: no table yet.
  RoutingTable() = default;
  // Epoch 1: `num_slots` slots spread evenly over `servers`, each one
  // contiguous range, in ascending id order (AssignSlotsEvenly).
  static RoutingTable Initial(int32_t num_slots,
                              std::vector<wire::ServerEndpoint> servers);
  // Checks a peer's table: slot counts in range and agreeing, states known.
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
  // Gives slot `s` to `server` (state kOwned).
  void Move(int32_t s, int32_t server);
  // Gives every slot whose owner is not in `live` to the least-loaded
  // server of `live` (ties: the lowest id); returns how many moved.
  // Nothing moves (and the epoch stays) when `live` is empty.
  int32_t Reassign(const std::set<int32_t>& live);
  // Replaces the endpoints; the epoch grows only if they differ.
  void SetServers(std::vector<wire::ServerEndpoint> servers);

 private:
  uint64_t epoch_ = 0;
  std::vector<Slot> slots_;
  std::vector<wire::ServerEndpoint> servers_;
};

}  // namespace ductile

#endif  // DUCTILE_ROUTING_ROUTING_TABLE_H_
