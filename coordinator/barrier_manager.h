// Barriers: a round is released once every live worker has arrived at it
// (and every worker the job expects has registered). Rounds are numbered:
// a worker asking again for a round already released (it gave up waiting,
// or a coordinator restart lost the answer) passes at once; a worker that
// joins later starts at the round now open.
//
// Not thread-safe: owned by the coordinator's loop.
#ifndef DUCTILE_COORDINATOR_BARRIER_MANAGER_H_
#define DUCTILE_COORDINATOR_BARRIER_MANAGER_H_

#include <cstdint>
#include <map>
#include <string>

#include "coordinator/coordinator_context.h"

namespace ductile {

class BarrierManager {
 public:
  explicit BarrierManager(CoordinatorContext* ctx) : ctx_(*ctx) {}

  void HandleBarrier(const std::string& identity, const wire::Header& h);
  // Releases the open round if every live worker is in it (call when the
  // live workers change).
  void MaybeRelease();
  // Answers every waiting worker with `status` (a rollback, a shutdown);
  // the round stays open.
  void AbortAll(const Status& status);

 private:
  CoordinatorContext& ctx_;
  std::map<int32_t, Waiter> waiting_;  // by worker id, at the open round
};

}  // namespace ductile

#endif  // DUCTILE_COORDINATOR_BARRIER_MANAGER_H_
