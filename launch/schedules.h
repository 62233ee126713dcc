// The schedules `ductile local` runs a job by: kills (--kill_schedule), for
// fault-tolerance tests, and resizes (--resize_schedule), both by the
// job's clock. Parsing only: launch/local_launcher.cc carries them out.
#ifndef DUCTILE_LAUNCH_SCHEDULES_H_
#define DUCTILE_LAUNCH_SCHEDULES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ductile/status.h"

namespace ductile::launch {

// One scheduled SIGKILL.
struct KillEvent {
  enum class Role { kCoordinator, kServer, kWorker };
  Role role = Role::kServer;
  // Server id or worker index, 0 .. number of that role - 1; 0 for the
  // coordinator. Workers are numbered in the order the launcher starts
  // them, which is not necessarily the worker id the coordinator assigns.
  int id = 0;
  // The child is killed once the job's clock is at least this. >= 1.
  int64_t clock = 0;

  bool operator==(const KillEvent&) const = default;
};

// What ParseKillSchedule checks a schedule against and needs to place
// random kills.
struct KillScheduleContext {
  int num_servers = 2;
  int num_workers = 2;
  // Seeds the choice of random kills' clocks and targets.
  uint64_t seed = 1;
  // The job's expected length in clocks; random kills without a range fall
  // in [10, estimated_clocks]. 0 = unknown (such kills are then refused).
  int64_t estimated_clocks = 0;
};

// Parses a kill schedule: comma-separated items, each one of
//
//   server:ID@clock=N      kill server ID once the job reaches clock N
//   worker:ID@clock=N      kill worker ID (it is not restarted)
//   coordinator@clock=N    kill the coordinator
//   random:K               K kills at clocks drawn uniformly from
//                          [10, context.estimated_clocks]
//   random:K@clock=A-B     K kills at clocks drawn uniformly from [A, B]
//
// e.g. "server:1@clock=50,worker:2@clock=80,random:2@clock=20-200".
// A random kill's target is drawn uniformly among the servers, the
// coordinator and the workers, workers being candidates only while at
// least 2 would remain after the kill (counting every worker the schedule
// kills). The same seed gives the same schedule.
//
// Returns the events ordered by clock (an empty spec gives none), or
// InvalidArgument naming the bad item: unknown role, id out of range,
// missing or bad clock, a worker killed twice or every worker killed, or
// random kills with neither a range nor a known job length.
Result<std::vector<KillEvent>> ParseKillSchedule(
    const std::string& spec, const KillScheduleContext& context);

// "server 1", "worker 0", "coordinator".
std::string KillTargetName(const KillEvent& event);

// One step of a resize schedule: the job's workers or servers become
// `count` once the job reaches `clock` (docs/elasticity.md). More workers:
// new `ductile worker` processes join; fewer: the newest are drained
// (`ductile drain worker:N`) and leave at their next step. More servers:
// new `ductile server` processes join and slots move to them; fewer: the
// newest are drained (their slots move away) and stop.
struct ResizeEvent {
  bool servers = false;  // servers, or workers
  int count = 0;         // >= 1
  int64_t clock = 0;     // >= 1
  bool operator==(const ResizeEvent&) const = default;
};

// Parses "workers=4@clock=300,servers=3@clock=600,workers=1@clock=900":
// returns the events ordered by clock, or InvalidArgument naming the bad
// item (unknown role, a count or clock that is not a positive number).
Result<std::vector<ResizeEvent>> ParseResizeSchedule(const std::string& spec);

}  // namespace ductile::launch

#endif  // DUCTILE_LAUNCH_SCHEDULES_H_
