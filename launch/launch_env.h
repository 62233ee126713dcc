// A process's rank from the engine that launched it, so that a plain
// `srun ductile worker ...` or a Kubernetes Indexed Job or StatefulSet
// gives each copy its own member id without a flag per copy.
#ifndef DUCTILE_LAUNCH_LAUNCH_ENV_H_
#define DUCTILE_LAUNCH_LAUNCH_ENV_H_

#include <cstdint>
#include <functional>
#include <string>

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

}  // namespace ductile::launch

#endif  // DUCTILE_LAUNCH_LAUNCH_ENV_H_
