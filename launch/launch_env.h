// A process's rank from the engine that launched it, so that a plain
// `srun ductile worker ...` or a Kubernetes Indexed Job or StatefulSet
// gives each copy its own member id without a flag per copy; and the
// environment a launched worker command (`ductile local -- COMMAND`) is
// given to connect, which python/ductile/_env.py's connect_from_env()
// reads.
#ifndef DUCTILE_LAUNCH_LAUNCH_ENV_H_
#define DUCTILE_LAUNCH_LAUNCH_ENV_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ductile/status.h"

namespace ductile::launch {

// Variables read, first set wins: DUCTILE_RANK (set it yourself, e.g. from
// a StatefulSet pod's index with the downward API), SLURM_PROCID (srun's
// task rank), JOB_COMPLETION_INDEX (a Kubernetes Indexed Job's pod).
inline constexpr const char* kRankVariables[] = {"DUCTILE_RANK", "SLURM_PROCID",
                                                 "JOB_COMPLETION_INDEX"};

// The rank in [0, 1048575] from the first of kRankVariables that is set
// (`*source` names it), or -1 when none is. A value that is not such a
// number is an error naming the variable. `get` reads a variable (null:
// unset); std::getenv by default.
Result<int32_t> RankFromEnvironment(
    std::string* source,
    const std::function<const char*(const char*)>& get = nullptr);

// The variables of a worker command's environment, each standing for the
// `ductile worker` flag named beside it. python/ductile/_env.py reads the
// same names: keep the two in step.
inline constexpr const char kCoordinatorVariable[] =
    "DUCTILE_COORDINATOR";                                     // --coordinator
inline constexpr const char kKeysVariable[] = "DUCTILE_KEYS";  // --keys
inline constexpr const char kMemberKeyVariable[] =
    "DUCTILE_MEMBER_KEY";  // --member_key
inline constexpr const char kRequireMemberKeysVariable[] =
    "DUCTILE_REQUIRE_MEMBER_KEYS";  // --require_member_keys
inline constexpr const char kTimeoutVariable[] =
    "DUCTILE_TIMEOUT_MS";  // --timeout_ms
inline constexpr const char kIoThreadsVariable[] =
    "DUCTILE_IO_THREADS";  // --io_threads
inline constexpr const char kShmValuesVariable[] =
    "DUCTILE_SHM_VALUES";                                        // --shm_values
inline constexpr const char kCacheVariable[] = "DUCTILE_CACHE";  // --cache
// The worker id (--worker_id): kRankVariables[0].
inline constexpr const char kRankVariable[] = "DUCTILE_RANK";
// The job's initial number of workers (no flag of `ductile worker`).
inline constexpr const char kWorkersVariable[] = "DUCTILE_WORKERS";

// What a launched worker command connects with.
struct WorkerConnection {
  std::string coordinator;  // the coordinator's address
  int32_t rank = -1;        // the worker id; -1: the coordinator chooses
  std::string keys_dir;     // "": plain mode (no keys)
  std::string member_key;   // the worker's own key file; "": none
  bool require_member_keys = false;
  int64_t timeout_ms = 0;  // connect and request timeout
  int32_t io_threads = 0;
  bool shm_values = true;
  bool cache = false;
  int32_t workers = 0;  // the job's initial number of workers
};

// `connection` as "NAME=VALUE" entries, one per variable above (booleans
// as 1 or 0; DUCTILE_KEYS and DUCTILE_MEMBER_KEY empty when unset).
std::vector<std::string> WorkerEnvironment(const WorkerConnection& connection);

}  // namespace ductile::launch

#endif  // DUCTILE_LAUNCH_LAUNCH_ENV_H_
