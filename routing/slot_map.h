// Keys to slots, slots to servers.
//
// A key belongs to slot SlotOf(table, key, num_slots), a fixed function
// (part of the persistent format: changing it would misplace every stored
// key). The routing table maps each slot to a server; moving a slot is the
// unit of resharding.
#ifndef DUCTILE_ROUTING_SLOT_MAP_H_
#define DUCTILE_ROUTING_SLOT_MAP_H_

#include <cstdint>
#include <vector>

#include "ductile/table.h"
#include "util/split_mix.h"

namespace ductile {

inline int32_t SlotOf(TableId table, Key key, int32_t num_slots) {
  const uint64_t h = SplitMix64(key ^ SplitMix64(uint64_t{table} + 0x5107));
  return static_cast<int32_t>(h % static_cast<uint64_t>(num_slots));
}

// Owner per slot: `server_ids` (sorted by the caller or not) each get a
// contiguous range of num_slots / n slots, the first num_slots % n one more.
std::vector<int32_t> AssignSlotsEvenly(int32_t num_slots,
                                       const std::vector<int32_t>& server_ids);

}  // namespace ductile

#endif  // DUCTILE_ROUTING_SLOT_MAP_H_
