// Running other programs from a process with threads: an exec image made
// before fork() (the child may only call async-signal-safe functions, so
// it allocates nothing), and a tool run to its end with a time limit
// (Slurm's squeue and scancel, kubectl).
#ifndef DUCTILE_LAUNCH_CHILD_PROCESS_H_
#define DUCTILE_LAUNCH_CHILD_PROCESS_H_

#include <signal.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ductile::launch {

// A command line and the current environment, ready for execvpe.
struct ExecImage {
  std::vector<std::string> strings;  // owns what the pointers point at
  std::vector<char*> argv;
  std::vector<char*> envp;
};

// `own_slurm_job`: the child runs srun, which must queue a job of its own
// rather than a step of an allocation the launcher may run in, with none
// of the allocation's settings: every SLURM_* variable but SLURM_CONF is
// left out. `env` ("NAME=VALUE") is added to the environment, each entry
// in place of the variable of the same name.
ExecImage MakeExecImage(const std::vector<std::string>& args,
                        bool own_slurm_job,
                        const std::vector<std::string>& env = {});

// In a child after fork(): exec `image` (argv[0] found on PATH when it has
// no '/'), or say so and exit 127. Async-signal-safe calls only.
[[noreturn]] void ExecOrDie(const ExecImage& image);

// Runs `args` to its end with the signals in `blocked` unblocked, its
// standard output into `output`; its exit status, or -1 if it could not
// run, was killed, or took longer than `timeout_ms` (it is then killed).
int RunToEnd(const std::vector<std::string>& args, const sigset_t& blocked,
             std::string* output, int64_t timeout_ms);
// How long a Slurm tool's command (srun --version, squeue, scancel) may
// take before it is killed: a slurmctld that does not answer must not stop
// the launcher or its supervision.
constexpr int64_t kToolTimeoutMs = 10000;

}  // namespace ductile::launch

#endif  // DUCTILE_LAUNCH_CHILD_PROCESS_H_
