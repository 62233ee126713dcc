#include "cli/commands.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>

namespace ductile::cli {
namespace {

constexpr const char* kTrainingFlags[] = {
    // Common: kCommonTrainingFlags of them.
    "app", "epochs", "batch_size", "optimizer", "learning_rate", "consistency",
    "staleness", "device",
    // Advanced.
    "data_dir", "lr_for_batch", "lr_warmup_epochs", "lr_decay",
    "lr_step_epochs", "lr_gamma", "lr_min_factor", "l2", "bsp_combine", "cache",
    "prefetch", "overlap_push", "layered_pulls", "seed", "log_every",
    "max_samples", "min_accuracy", "max_rmse", "csv_log", "layers", "mf_rows",
    "mf_cols", "mf_rank", "mf_observed", "mf_noise", "admit_after_pushes",
    "admission_counters", "evict_idle_clocks", "max_rows", "eviction",
    "lr_scaling", "lr_scaling_ramp", "worker_policy"};

// The server flags a launcher forwards to each server it starts
// (LaunchedServerFlags), which `server` reads too: one list, so that a new
// server flag is both documented under every command that takes it and
// forwarded.
constexpr const char* kServerTuningFlags[] = {"keep_checkpoints",
                                              "disk_reserve_mb",
                                              "max_key_floats",
                                              "max_stored_mb",
                                              "max_queued_replies",
                                              "max_queued_reply_mb",
                                              "max_queued_requests",
                                              "max_window_per_client",
                                              "client_idle_expiry_s",
                                              "max_parked_pulls_per_worker",
                                              "max_parked_pulls",
                                              "noise_scale_sample",
                                              "apply_threads",
                                              "io_threads",
                                              "shm_values",
                                              "keep_freed_memory",
                                              "coordinator_timeout_ms",
                                              "move_timeout_ms",
                                              "handshake_timeout_ms",
                                              "reserved_descriptors",
                                              "max_connections_per_source"};

// The same for the coordinator's flags (LaunchedCoordinatorFlags, which
// also sets --slots and --checkpoint_every).
constexpr const char* kCoordinatorTuningFlags[] = {
    "slots",
    "heartbeat_timeout_ms",
    "no_worker_timeout_ms",
    "checkpoint_every",
    "checkpoint_interval_s",
    "checkpoint_timeout_ms",
    "replicas",
    "disk_reserve_mb",
    "policy",
    "policy_interval_ms",
    "max_queued_replies",
    "max_queued_reply_mb",
    "max_queued_requests",
    "handshake_timeout_ms",
    "reserved_descriptors",
    "max_connections_per_source"};

// `lists` in order, each flag once, leaving out those in `common`.
std::vector<const char*> Advanced(
    const std::vector<const char*>& common,
    std::initializer_list<std::span<const char* const>> lists) {
  std::vector<const char*> out;
  const auto listed = [](const std::vector<const char*>& in, const char* f) {
    return std::any_of(in.begin(), in.end(),
                       [f](const char* g) { return std::strcmp(f, g) == 0; });
  };
  for (std::span<const char* const> list : lists) {
    for (const char* flag : list) {
      if (!listed(common, flag) && !listed(out, flag)) out.push_back(flag);
    }
  }
  return out;
}

}  // namespace

std::span<const char* const> TrainingFlags() { return kTrainingFlags; }
std::span<const char* const> ServerTuningFlags() { return kServerTuningFlags; }
std::span<const char* const> CoordinatorTuningFlags() {
  return kCoordinatorTuningFlags;
}

const std::vector<Command>& Commands() {
  // Each command's common flags, and the advanced ones of its own; the
  // server's and coordinator's tuning flags join the advanced ones of every
  // command that takes them.
  static const std::vector<const char*> kLocal = {
      "servers",          "workers", "state_dir",
      "checkpoint_every", "policy",  "resize_schedule",
      "metrics_port",     "keys",    "verbose"};
  static constexpr const char* kLocalAdvanced[] = {
      "kill_schedule", "timeout_ms",   "provider", "srun_flags",
      "slurm_bin_dir", "metrics_host", "insecure"};
  static const std::vector<const char*> kCoordinator = {
      "listen",           "servers", "workers",      "state_dir",
      "checkpoint_every", "keys",    "metrics_port", "policy"};
  static constexpr const char* kCoordinatorAdvanced[] = {
      "address_file", "max_workers", "require_member_keys", "insecure",
      "metrics_host"};
  static const std::vector<const char*> kServer = {
      "coordinator",      "host", "port",       "server_id", "state_dir",
      "keep_checkpoints", "keys", "member_key", "timeout_ms"};
  static constexpr const char* kServerAdvanced[] = {
      "ipc_dir", "require_member_keys", "insecure"};
  static const std::vector<const char*> kK8s = {
      "image",      "job_name",    "servers",     "workers",
      "controller", "keys_secret", "state_claim", "policy"};
  static constexpr const char* kK8sAdvanced[] = {"max_workers", "max_servers",
                                                 "insecure", "timeout_ms"};
  static const auto* const kCommands = new std::vector<Command>{
      {"local", "train an app on a whole cluster on this machine",
       "Starts a coordinator, servers and workers that train --app or run "
       "-- COMMAND, and stops them all at the end.",
       kLocal,
       Advanced(kLocal,
                {kLocalAdvanced, kServerTuningFlags, kCoordinatorTuningFlags}),
       true, RunLocal, nullptr, "COMMAND [ARGS...]"},
      {"coordinator", "run the coordinator of a cluster",
       "Registers --servers servers and --workers workers, assigns key slots "
       "to servers, publishes the routing table, and takes checkpoints. It "
       "runs until the job ends or `ductile shutdown`.",
       kCoordinator,
       Advanced(kCoordinator, {kCoordinatorAdvanced, kCoordinatorTuningFlags}),
       false, RunCoordinator},
      {"server", "run a parameter server",
       "Registers with the coordinator at --coordinator, holds the keys of "
       "the slots it is given, applies pushes with each table's update rule, "
       "and writes its checkpoints under --state_dir.",
       kServer, Advanced(kServer, {kServerAdvanced, kServerTuningFlags}), false,
       RunServer},
      {"worker",
       "run a worker of a built-in app",
       "Joins the job at --coordinator and trains --app on its share of each "
       "epoch, until the job's epochs are done or it is drained.",
       {"coordinator", "worker_id", "keys", "member_key", "timeout_ms"},
       {"require_member_keys", "io_threads", "shm_values", "keep_freed_memory",
        "handshake_timeout_ms"},
       true,
       RunWorker},
      {"status",
       "print a running cluster's members and counters",
       "Asks the coordinator at --coordinator for the job's members, epoch, "
       "slots and counters; --watch=S shows them as a live table.",
       {"coordinator", "watch", "keys", "timeout_ms"},
       {"member_key"},
       false,
       RunStatus},
      {"shutdown",
       "stop a running cluster",
       "Asks the coordinator at --coordinator to stop every member.",
       {"coordinator", "keys", "timeout_ms"},
       {},
       false,
       RunShutdown},
      {"checkpoint",
       "take a checkpoint of a running cluster now",
       "Asks the coordinator at --coordinator for a checkpoint and prints "
       "its clock once it is complete.",
       {"coordinator", "keys", "timeout_ms"},
       {},
       false,
       RunCheckpoint},
      {"drain",
       "take a worker or a server out of a running job",
       "A worker leaves at its next step; a server's slots move, with their "
       "keys, to the other servers, then it stops.",
       {"coordinator", "keys", "timeout_ms"},
       {},
       false,
       RunDrain,
       "worker:N|server:N"},
      {"resize",
       "set a running job's target size",
       "Sets the job's target size (--workers and/or --servers): `ductile "
       "local` starts or drains members to match; `ductile status` shows it "
       "for other launchers.",
       {"coordinator", "workers", "servers", "keys", "timeout_ms"},
       {},
       false,
       RunResize},
      {"exited",
       "tell the coordinator a member's process exited",
       "For launchers: the member is declared dead at once instead of at "
       "its heartbeat timeout (a worker leaves the clock vectors, a "
       "server's death rolls the job back). Name the process by --pid "
       "and/or --incarnation, as `ductile status` shows them: a report "
       "about a process a restarted member replaced changes nothing.",
       {"coordinator", "pid", "incarnation", "keys", "timeout_ms"},
       {},
       false,
       RunExited,
       "worker:N|server:N"},
      {"keygen",
       "make a cluster's keys (docs/security.md)",
       "Writes cluster.key for the coordinator and servers, admin.key for "
       "administrators and the .pub files for all into --out; with --servers "
       "and --workers, also members/server-N.key and worker-N.key, each "
       "member's own.",
       {"out", "servers", "workers", "member"},
       {},
       false,
       RunKeygen},
      {"k8s", "print Kubernetes manifests for a job",
       "Prints a headless Service and Indexed Jobs for the coordinator, "
       "--servers servers and --workers workers running --app "
       "(docs/adaptation.md).",
       kK8s,
       Advanced(kK8s,
                {kK8sAdvanced, kCoordinatorTuningFlags, kServerTuningFlags}),
       true, RunK8s},
      {"k8s-controller",
       "resize a Kubernetes job's Jobs to its target size",
       "Carries a Kubernetes job's target size (`ductile resize`, the "
       "autoscale policy) and worker replacements out with kubectl: patches "
       "the Jobs of `ductile k8s` and drains what goes (docs/adaptation.md).",
       {"coordinator", "job_name", "namespace", "keys"},
       {"kubectl", "insecure", "max_workers", "max_servers", "timeout_ms",
        "coordinator_timeout_ms", "heartbeat_timeout_ms"},
       false,
       RunK8sController},
  };
  return *kCommands;
}

std::vector<std::string>& CommandAfterDashes() {
  static std::vector<std::string>* const kWords = new std::vector<std::string>;
  return *kWords;
}

const Command* FindCommand(const std::string& name) {
  for (const Command& c : Commands()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

}  // namespace ductile::cli
