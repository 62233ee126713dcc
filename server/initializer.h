// Initial values of keys never written.
#ifndef DUCTILE_SERVER_INITIALIZER_H_
#define DUCTILE_SERVER_INITIALIZER_H_

#include <span>

#include "ductile/table.h"

namespace ductile {

// Fills `value` (key `key` of table `table`). Deterministic in (init.seed,
// table, key, element index), so every server, and a restarted one, agrees.
void InitializeValue(const Initializer& init, TableId table, Key key,
                     std::span<float> value);

}  // namespace ductile

#endif  // DUCTILE_SERVER_INITIALIZER_H_
