// `ductile local`, `ductile k8s` and `ductile k8s-controller`: a whole
// job launched from one command line, whose flags are forwarded to the
// members it starts.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/options_from_flags.h"
#include "ductile/ductile.h"
#include "launch/k8s_controller.h"
#include "launch/k8s_manifests.h"
#include "launch/local_launcher.h"
#include "models/fmnist_data.h"
#include "train/trainer.h"

namespace ductile::cli {
namespace {

std::string SelfPath() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : std::string("ductile");
}

// The job's expected length in clocks (steps per worker), where random
// kills are spread; 0 when it cannot be told. An estimate: a worker killed
// on the way leaves more steps to the others.
int64_t EstimateJobClocks() {
  if (FLAGS_workers < 1 || FLAGS_batch_size < 1 || FLAGS_epochs < 1) return 0;
  // Training samples per epoch, all workers together: Fashion-MNIST's
  // training set, or the observed entries of the mf matrix less the tenth
  // that MakeLowRankData sets aside for testing.
  const double samples = FLAGS_app == "mf"
                             ? static_cast<double>(FLAGS_mf_rows) *
                                   static_cast<double>(FLAGS_mf_cols) *
                                   FLAGS_mf_observed * 0.9
                             : 60000.0;
  const double share = std::ceil(samples / FLAGS_workers);
  double steps = FLAGS_epochs * std::ceil(share / FLAGS_batch_size);
  if (FLAGS_max_samples > 0) {
    steps = std::min(steps, std::ceil(static_cast<double>(FLAGS_max_samples) /
                                      FLAGS_batch_size));
  }
  return std::isfinite(steps) && steps < 1e15 ? static_cast<int64_t>(steps) : 0;
}

// Forwards the flag `name` as "--name=value".
std::string Forward(const char* name) {
  std::string value;
  gflags::GetCommandLineOption(name, &value);
  return std::string("--") + name + "=" + value;
}

// The flags a job's coordinator, servers and workers get from the command
// that launches them (`ductile local`, `ductile k8s`). A launched job keeps
// checkpoints unless told otherwise: a crashed server then costs at most
// kLaunchedCheckpointEvery clocks.
std::vector<std::string> LaunchedCoordinatorFlags() {
  const bool by_default =
      gflags::GetCommandLineFlagInfoOrDie("checkpoint_every").is_default &&
      gflags::GetCommandLineFlagInfoOrDie("checkpoint_interval_s").is_default;
  std::vector<std::string> flags;
  for (const char* name : CoordinatorTuningFlags()) {
    flags.push_back(std::strcmp(name, "checkpoint_every") == 0 && by_default
                        ? "--checkpoint_every=" +
                              std::to_string(kLaunchedCheckpointEvery)
                        : Forward(name));
  }
  return flags;
}

std::vector<std::string> LaunchedServerFlags() {
  std::vector<std::string> flags = {Forward("timeout_ms")};
  for (const char* name : ServerTuningFlags()) flags.push_back(Forward(name));
  return flags;
}

std::vector<std::string> LaunchedWorkerFlags() {
  std::vector<std::string> flags;
  for (const char* name : TrainingFlags()) flags.push_back(Forward(name));
  flags.push_back(Forward("timeout_ms"));
  flags.push_back(Forward("io_threads"));
  flags.push_back(Forward("shm_values"));
  flags.push_back(Forward("keep_freed_memory"));
  flags.push_back(Forward("handshake_timeout_ms"));
  return flags;
}

// Builds the Options of every role a launched job runs from the flags,
// as its members will, so that a bad flag is reported before anything
// starts. `data_here`: the workers read their data on this machine, so
// a missing data file is reported too.
Status CheckLaunchedJob(bool data_here) {
  DUCTILE_RETURN_IF_ERROR(
      CoordinatorOptionsFromFlags(/*launched=*/true).status());
  DUCTILE_RETURN_IF_ERROR(ServerOptionsFromFlags(-1).status());
  DUCTILE_RETURN_IF_ERROR(WorkerClientOptionsFromFlags().status());
  Result<train::TrainerOptions> t = TrainerOptionsFromFlags();
  DUCTILE_RETURN_IF_ERROR(t.status());
  if (FLAGS_insecure && !FLAGS_keys.empty()) {
    return InvalidArgumentError(
        "--insecure is for plain mode: it cannot go with --keys");
  }
  if (t->lr_scaling == "adascale" && FLAGS_noise_scale_sample == 0) {
    return InvalidArgumentError(
        "--lr_scaling=adascale needs the gradient noise scale the servers "
        "estimate: --noise_scale_sample=0 turns it off");
  }
  if (data_here && t->app != "mf") {
    DUCTILE_RETURN_IF_ERROR(models::CheckFashionMnistFiles(t->data_dir));
  }
  return Status::Ok();
}

// A worker command trains nothing of ductile's: a training flag set with
// one would be silently ignored, so it is refused. --cache is the one that
// reaches the command (DUCTILE_CACHE).
Status CheckNoTrainingFlags() {
  for (const char* name : TrainingFlags()) {
    if (std::strcmp(name, "cache") == 0) continue;
    if (!gflags::GetCommandLineFlagInfoOrDie(name).is_default) {
      return InvalidArgumentError(
          std::string("--") + name +
          " is a training flag of the built-in worker: it cannot go with "
          "-- COMMAND, which runs in the worker's place");
    }
  }
  return Status::Ok();
}

}  // namespace

int RunLocal(const std::string&) {
  const std::vector<std::string>& command = CommandAfterDashes();
  // Every flag checked here, before any process starts.
  if (!command.empty()) {
    if (Status s = CheckNoTrainingFlags(); !s.ok()) return Fail(s);
  }
  Status valid = CheckLaunchedJob(/*data_here=*/command.empty());
  if (!valid.ok()) return Fail(valid);
  launch::LocalClusterOptions o;
  o.worker_command = command;
  o.worker_connection.timeout_ms = FLAGS_timeout_ms;
  o.worker_connection.io_threads = FLAGS_io_threads;
  o.worker_connection.shm_values = FLAGS_shm_values;
  o.worker_connection.cache = FLAGS_cache;
  auto provider = launch::ParseProvider(FLAGS_provider);
  if (!provider.ok()) return Fail(provider.status());
  o.provider = *provider;
  {
    std::istringstream words(FLAGS_srun_flags);
    for (std::string w; words >> w;) o.srun_flags.push_back(w);
  }
  if ((!o.srun_flags.empty() || !FLAGS_slurm_bin_dir.empty()) &&
      o.provider != launch::LocalClusterOptions::Provider::kSlurm) {
    return Fail(InvalidArgumentError(
        "--srun_flags and --slurm_bin_dir go with --provider=slurm"));
  }
  o.slurm_bin_dir = FLAGS_slurm_bin_dir;
  o.program = SelfPath();
  o.keys_dir = FLAGS_keys;
  o.plain = FLAGS_insecure;
  o.num_servers = FLAGS_servers;
  o.num_workers = FLAGS_workers;
  o.heartbeat_timeout_ms = FLAGS_heartbeat_timeout_ms;
  o.state_dir = FLAGS_state_dir;
  if (FLAGS_servers >= 1 && FLAGS_workers >= 1) {
    launch::KillScheduleContext context;
    context.num_servers = FLAGS_servers;
    context.num_workers = FLAGS_workers;
    context.seed = FLAGS_seed;
    // A worker command's length is its own.
    context.estimated_clocks = command.empty() ? EstimateJobClocks() : 0;
    auto schedule = launch::ParseKillSchedule(FLAGS_kill_schedule, context);
    if (!schedule.ok()) return Fail(schedule.status());
    o.kill_schedule = std::move(*schedule);
  }
  auto resizes = launch::ParseResizeSchedule(FLAGS_resize_schedule);
  if (!resizes.ok()) return Fail(resizes.status());
  o.resize_schedule = std::move(*resizes);
  const std::string log = FLAGS_verbose ? "--minloglevel=0" : "--minloglevel=1";
  const auto with = [&log](std::vector<std::string> flags,
                           std::vector<std::string> extra) {
    flags.insert(flags.begin(), log);
    flags.insert(flags.end(), extra.begin(), extra.end());
    return flags;
  };
  o.coordinator_flags =
      with(LaunchedCoordinatorFlags(),
           {Forward("metrics_port"), Forward("metrics_host")});
  o.server_flags = with(LaunchedServerFlags(), {"--host=127.0.0.1"});
  o.worker_flags = with(LaunchedWorkerFlags(), {});
  Status s = launch::RunLocalCluster(o);
  if (!s.ok()) return Fail(s);
  std::fprintf(stderr, "ductile local: done\n");
  return 0;
}

int RunK8s(const std::string&) {
  launch::KubernetesJob job;
  job.name = FLAGS_job_name;
  job.image = FLAGS_image;
  job.servers = FLAGS_servers;
  job.workers = FLAGS_workers;
  job.max_workers = FLAGS_max_workers;
  job.max_servers = FLAGS_max_servers;
  job.keys_secret = FLAGS_keys_secret;
  job.state_claim = FLAGS_state_claim;
  job.plain = FLAGS_insecure;
  job.controller = FLAGS_controller;
  job.coordinator_flags = LaunchedCoordinatorFlags();
  job.server_flags = LaunchedServerFlags();
  job.worker_flags = LaunchedWorkerFlags();
  // The job's own checks first (its sizes, names, image), then every
  // role's flags; the data is in the members' image, not here.
  Result<std::string> yaml = launch::KubernetesManifests(job);
  if (!yaml.ok()) return Fail(yaml.status());
  Status valid = CheckLaunchedJob(/*data_here=*/false);
  if (!valid.ok()) return Fail(valid);
  std::fputs(yaml->c_str(), stdout);
  return 0;
}

int RunK8sController(const std::string&) {
  // The name `ductile k8s` was given, and so by the same rule.
  if (Status s = launch::CheckJobName(FLAGS_job_name); !s.ok()) {
    return Fail(s);
  }
  if (FLAGS_kubectl.empty()) {
    return Fail(InvalidArgumentError("--kubectl must name a program"));
  }
  if (FLAGS_max_workers < 0 || FLAGS_max_servers < 0) {
    return Fail(InvalidArgumentError(
        "--max_workers and --max_servers must be at least 0"));
  }
  {
    // The coordinator's timeout, checked by the coordinator's rule.
    CoordinatorOptions coordinator;
    coordinator.heartbeat_timeout_ms = FLAGS_heartbeat_timeout_ms;
    if (Status s = Validate(coordinator); !s.ok()) {
      return Fail(InvalidArgumentError("--" + s.message()));
    }
  }
  auto security = SecurityFromFlags(true);
  if (!security.ok()) return Fail(security.status());
  launch::K8sControllerOptions o;
  o.coordinator = FLAGS_coordinator;
  o.security = *security;
  o.job_name = FLAGS_job_name;
  o.kube_namespace = FLAGS_namespace;
  o.kubectl = FLAGS_kubectl;
  o.drain_timeout_ms = FLAGS_timeout_ms;
  o.max_workers = FLAGS_max_workers;
  o.max_servers = FLAGS_max_servers;
  o.give_up_ms = std::max<int64_t>(FLAGS_coordinator_timeout_ms, 0);
  o.lost_after_ms = launch::kLostAfterTimeouts * FLAGS_heartbeat_timeout_ms;
  std::printf(
      "k8s-controller: carrying out the target size and replacements "
      "of the job at %s on the Jobs %s-worker and %s-server\n",
      FLAGS_coordinator.c_str(), FLAGS_job_name.c_str(),
      FLAGS_job_name.c_str());
  std::fflush(stdout);
  const std::atomic<bool> stop{false};  // SIGTERM ends the process
  Status s = launch::RunK8sController(o, stop);
  if (!s.ok()) return Fail(s);
  std::printf("k8s-controller: the job has ended\n");
  return 0;
}

}  // namespace ductile::cli
