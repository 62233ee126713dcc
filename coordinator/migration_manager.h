// Live slot moves on the coordinator (docs/elasticity.md, "Servers").
//
// A plan maps slots to new owners: a server that joins a running job gets
// the fewest slots that even the load (Rebalance); a drained server gives
// all of its slots to the others, fewest-loaded first (Drain); MoveSlot
// moves one. The moves of a plan are grouped by source and target and all
// start at once (MIGRATE_OUT): each source streams its keys with a bounded
// window, training goes on for every slot not moving. When a source
// reports its keys at the target (MIGRATE_DONE), the coordinator gives the
// slots to the target in the routing table (epoch + 1) and publishes it;
// the source then drops the keys. A plan is done when every group is.
//
// One plan at a time, and never beside a checkpoint round (a checkpoint
// requested meanwhile is refused with kUnavailable, and one due by clock
// or time waits): a checkpoint's catalog records each slot's owner, which
// a move would change under it. A failed group (its target unreachable)
// is aborted: its slots stay where they were. A rollback, or a coordinator
// restart, aborts every move (MIGRATE_ABORT): the routing of the
// checkpoint, or the last one published, says who owns what.
//
// Not thread-safe: owned by the coordinator's loop.
#ifndef DUCTILE_COORDINATOR_MIGRATION_MANAGER_H_
#define DUCTILE_COORDINATOR_MIGRATION_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator/coordinator_context.h"
#include "coordinator/routing_manager.h"

namespace ductile {

class MigrationManager {
 public:
  using Done = std::function<void(const Status&)>;

  // `checkpoint_busy` says whether a checkpoint round is under way.
  MigrationManager(CoordinatorContext* ctx, RoutingManager* routing,
                   std::function<bool()> checkpoint_busy)
      : ctx_(*ctx),
        routing_(*routing),
        checkpoint_busy_(std::move(checkpoint_busy)) {}

  // A server joined: moves the fewest slots that even the load (now, or
  // once the plan under way is done).
  void Rebalance();
  // Moves every slot of `server` to the others, then tells it to stop
  // (`ductile drain server:N`). `done` runs when it is out of the job.
  void Drain(int32_t server, Done done);
  // Moves `slot` to `server` (Coordinator::MoveSlot), with its keys.
  void MoveSlot(int32_t slot, int32_t server, Done done);
  // MIGRATE_DONE from a source.
  void HandleDone(const wire::Header& h);
  // Timers: starts a plan that waited for a checkpoint round; stops the
  // drained servers whose linger is over; rebalances when a live server
  // owns no slot (its rebalance was abandoned by a rollback or a
  // coordinator restart) and every live server can be reached.
  void CheckTimers();
  // A rollback or a restart: every move is abandoned (the servers are
  // told), every waiter gets `status`.
  void AbortAll(const Status& status);
  bool in_progress() const { return plan_.has_value(); }
  // Whether the plan under way moves slots from or to one of `servers`,
  // or drains one of them.
  bool Involves(const std::set<int32_t>& servers) const;
  // Slots moving now.
  int32_t slots_moving() const;
  // Every move this coordinator process plans has an id at least this
  // (one planned by an earlier process, before a restart, has less).
  uint64_t IdFloor();

 private:
  struct Group {
    int32_t source = -1;
    int32_t target = -1;
    std::vector<int32_t> slots;
    bool started = false;
    bool done = false;
    uint64_t bytes = 0;
  };
  using TimePoint = CoordinatorContext::TimePoint;
  struct Plan {
    std::string why;
    std::map<uint64_t, Group> groups;  // by move id
    std::optional<int32_t> drained;    // a drain's server
    std::vector<Done> done;
    Status failure;
    TimePoint started_at{};
  };

  // Starts `moves` (slot -> new owner) as a plan, or queues it.
  void Begin(std::map<int32_t, int32_t> moves, std::string why,
             std::optional<int32_t> drained, Done done);
  void Launch();
  void MaybeFinish();
  // `stop_all`: every drained server stops now, its drain answered.
  void CheckTimers(bool stop_all);
  // The slots each live server (not being drained) owns.
  std::map<int32_t, int32_t> Load() const;
  void RebalanceStranded();

  CoordinatorContext& ctx_;
  RoutingManager& routing_;
  const std::function<bool()> checkpoint_busy_;
  std::optional<Plan> plan_;
  bool launched_ = false;
  // Drained servers told to stop once their linger is over: they answer
  // "moved" meanwhile, to clients that have not heard of the new routing.
  struct Stop {
    int32_t server = -1;
    TimePoint at{};
    std::vector<Done> done;
  };
  std::vector<Stop> stops_;
  bool rebalance_pending_ = false;
  // Move ids grow with the time the coordinator process first planned one,
  // so a restarted coordinator's are above every earlier process's.
  uint64_t next_id_ = 0;
  // A stranded server's rebalance is tried at most this often.
  TimePoint next_stranded_check_{};
};

}  // namespace ductile

#endif  // DUCTILE_COORDINATOR_MIGRATION_MANAGER_H_
