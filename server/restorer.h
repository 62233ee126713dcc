// Rolls a server's tables back to a checkpoint (a RECOVER from the
// coordinator): every slot the server owns under the new routing is read
// from the store of the server that owned it at the checkpoint (its own
// store, or a dead peer's frozen version), and the server's own store is
// set up so that its next incremental checkpoint builds on what it now
// holds.
//
// Not thread-safe: used by the request thread.
#ifndef DUCTILE_SERVER_RESTORER_H_
#define DUCTILE_SERVER_RESTORER_H_

#include <cstdint>

#include "ductile/status.h"
#include "env/env.h"
#include "proto/ductile.pb.h"
#include "routing/routing_table.h"
#include "server/checkpointer.h"
#include "server/table_set.h"

namespace ductile {

class Restorer {
 public:
  explicit Restorer(Env* env) : env_(env) {}

  // Replaces the contents of `tables` with the checkpoint at
  // recover.clock() (nothing for clock 0: the start), for the slots
  // `server_id` owns in `routing` (the caller creates the tables first).
  // On success the checkpointer is reset to that clock.
  // Returns the number of keys restored. On failure, `*unreadable` says
  // whether the checkpoint itself could not be read (missing, corrupt, kept
  // nowhere) rather than this server failing to take it (its own store
  // could not be rolled back or written): only the first is a reason to
  // give the checkpoint up.
  Result<uint64_t> Restore(const wire::Header& recover,
                           const RoutingTable& routing, int32_t server_id,
                           TableSet& tables, Checkpointer& checkpointer,
                           bool* unreadable);

 private:
  Env* const env_;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_RESTORER_H_
