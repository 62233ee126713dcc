#include "routing/slot_map.h"

namespace ductile {

std::vector<int32_t> AssignSlotsEvenly(int32_t num_slots,
                                       const std::vector<int32_t>& server_ids) {
  std::vector<int32_t> owner(num_slots, -1);
  const int32_t n = static_cast<int32_t>(server_ids.size());
  if (n == 0) return owner;
  int32_t slot = 0;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t count = num_slots / n + (i < num_slots % n ? 1 : 0);
    for (int32_t j = 0; j < count; ++j) owner[slot++] = server_ids[i];
  }
  return owner;
}

}  // namespace ductile
