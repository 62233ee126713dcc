// The `ductile` command: one binary, one subcommand per role.
//
//   ductile local        a whole cluster on this machine, running an app
//   ductile coordinator  the membership manager
//   ductile server       a parameter server
//   ductile worker       a worker running a built-in app
//   ductile status       members, epoch, slots and counters of a cluster
//   ductile shutdown     stops a running cluster
//   ductile checkpoint   takes a checkpoint of a running cluster now
//
// Flags are read here only, and copied into each component's Options.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "apps/k8s_controller.h"
#include "apps/k8s_manifests.h"
#include "apps/launch_env.h"
#include "apps/local_launcher.h"
#include "apps/metrics_http.h"
#include "apps/trainer.h"
#include "ductile/ductile.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "util/malloc_policy.h"

// Cluster.
DEFINE_string(coordinator, "tcp://127.0.0.1:7000",
              "coordinator address (server, worker, status, shutdown, "
              "checkpoint)");
DEFINE_string(listen, "tcp://127.0.0.1:7000",
              "coordinator: address to listen on (port 0 picks one)");
DEFINE_string(address_file, "",
              "coordinator: write the address it listens on to this file");
DEFINE_int32(servers, 2,
             "number of servers (coordinator, local; resize: the target)");
DEFINE_int32(workers, 2,
             "number of workers (coordinator, local; resize: the target)");
DEFINE_int32(max_workers, 0,
             "coordinator: most workers at once; more are refused "
             "(0: no bound). k8s: member keys are made for this many "
             "workers; k8s-controller: the worker Job's largest size");
DEFINE_int32(max_servers, 0,
             "k8s: member keys are made for this many servers (0: "
             "--servers); k8s-controller: the server Job's largest size "
             "(0: no bound)");
DEFINE_int32(slots, 4096, "coordinator: number of slots keys hash into");
DEFINE_int64(no_worker_timeout_ms, 600000,
             "coordinator, local: the job fails when no worker has been "
             "live for this long and none has finished (0: wait for new "
             "workers forever)");
DEFINE_int64(heartbeat_timeout_ms, 5000,
             "coordinator: a member silent this long is dead (a dead worker "
             "is no longer waited for)");
DEFINE_string(host, "127.0.0.1",
              "server: interface to listen on and advertise");
DEFINE_int32(port, 0, "server: tcp port (0 picks one)");
DEFINE_string(ipc_dir, "/tmp",
              "server: directory of its ipc:// socket, which clients on the "
              "same host use (a server killed by a signal leaves the file)");
DEFINE_int32(server_id, -1,
             "server: ask for this id (-1: the launcher's rank, "
             "DUCTILE_RANK, SLURM_PROCID or JOB_COMPLETION_INDEX, if set; "
             "else any)");
DEFINE_int32(worker_id, -1,
             "worker: ask for this id (-1: the launcher's rank as for "
             "--server_id, else any; ids are 0 to --workers - 1)");
DEFINE_int64(timeout_ms, 60000,
             "request and connect timeout in milliseconds; checkpoint: how "
             "long to wait for the checkpoint to complete");
DEFINE_bool(verbose, false, "local: show the cluster processes' INFO logs");

// Fault tolerance.
DEFINE_string(state_dir, "",
              "durable state. coordinator: its RocksDB directory (a "
              "coordinator started on a previous run's state resumes it); "
              "server: base directory of the checkpoint stores, shared by "
              "all servers; local: base directory of the whole cluster's "
              "state (default: a temporary directory removed at exit)");
DEFINE_int64(checkpoint_every, 0,
             "coordinator, local: take a checkpoint every this many clocks "
             "(0: not by clock; local without this flag or "
             "--checkpoint_interval_s: 100)");
DEFINE_double(checkpoint_interval_s, 0,
              "coordinator, local: take a checkpoint when this many seconds "
              "have passed since the last one (0: not by time)");
DEFINE_int64(checkpoint_timeout_ms, 120000,
             "coordinator, local: how long servers may take to write or "
             "restore a checkpoint before the attempt is abandoned");
DEFINE_int64(move_timeout_ms, 30000,
             "server, local: a slot move fails (and is aborted) when its "
             "target acknowledges nothing for this long");
DEFINE_int32(keep_checkpoints, 3,
             "server, local: checkpoint versions each server keeps");
DEFINE_int64(coordinator_timeout_ms, 600000,
             "server, local: a server stops when it has heard nothing from "
             "the coordinator for this long; k8s-controller: it ends so "
             "(0: never)");
DEFINE_int64(disk_reserve_mb, 64,
             "server, local: space each server's checkpoint store leaves "
             "free on its disk; a checkpoint that would leave less fails "
             "with a clear error (0: no check)");
DEFINE_uint64(max_key_floats, 1 << 24,
              "server, local: widest value one key of a variable-width "
              "table may have, in floats "
              "(1 to 268435456); wider pushes and pulls are refused");
DEFINE_uint64(max_stored_mb, 0,
              "server, local: memory each server's tables may hold, in MB; "
              "a push of new keys beyond it is refused (0: three quarters "
              "of physical memory)");
DEFINE_int64(max_queued_replies, 10000,
             "server, local: replies a server queues for one client that "
             "does not read them (1 to 10000000); more are dropped");
DEFINE_uint64(max_window_per_client, uint64_t{1} << 22,
              "server, local: sequence numbers a server's exactly-once "
              "window keeps per client above its done-below mark (1 to "
              "2^30); a client's push beyond is refused");
DEFINE_int64(client_idle_expiry_s, 600,
             "server, local: a client not heard from for 1-2 times this "
             "long is forgotten by the exactly-once window (60 to 2592000)");
DEFINE_int32(noise_scale_sample, 8,
             "server, local: one key in this many feeds the gradient noise "
             "scale `ductile status` shows (1: all, 0: off)");
DEFINE_int32(apply_threads, 0,
             "server, local: threads that apply one large push (32K floats "
             "or more) together; 0: the machine's cores, at most 8 (1 to "
             "256)");
DEFINE_int32(io_threads, 0,
             "server, worker, local: threads that move a member's bytes "
             "(ZeroMQ's I/O threads, each serving whole connections), 1 to "
             "64; 0: with keys a quarter of the cores, 1 to 4 (the "
             "encryption runs on them), in plain mode 1");
DEFINE_bool(shm_values, true,
            "server, worker, local: values between a worker and a server "
            "on its host (over ipc://) go through the worker's shared "
            "memory rather than the socket (docs/wire.md); false on either "
            "side: through the socket");
DEFINE_bool(keep_freed_memory, true,
            "server, worker, local: keep freed memory for reuse (glibc: no "
            "mapping of its own for a large block, no trimming), so that "
            "values of many MB reuse pages already mapped instead of taking "
            "a page fault every 4 KB; the process's memory stays at its "
            "peak");
DEFINE_string(keys, "",
              "directory of the cluster's keys (`ductile keygen`): CURVE "
              "on every connection; admin commands need admin.key. "
              "Empty: plain mode, loopback only");
DEFINE_bool(insecure, false,
            "plain mode beyond loopback: anyone who reaches it can act as "
            "any member (local: no keys, on loopback)");
DEFINE_string(member_key, "",
              "server, worker: a key pair of its own (`ductile keygen "
              "--member=NAME`); its member id is bound to it");
DEFINE_int32(watch, 0,
             "status: show the status again every this many seconds, as a "
             "live table (1 to 3600; 0: once); stops after 5 failed reads "
             "in a row");
DEFINE_int32(metrics_port, -1,
             "coordinator, local: serve the cluster's status in Prometheus' "
             "text format on http://HOST:PORT/metrics (0: a free port; -1: "
             "off); plain HTTP, with no keys");
DEFINE_string(metrics_host, "127.0.0.1",
              "coordinator, local: the address /metrics listens on");
DEFINE_string(policy, "",
              "coordinator, local: built-in policies that change the job as "
              "it trains, comma-separated: autoscale, stragglers, "
              "staleness, gns-batch, each with optional :KEY=VALUE "
              "parameters "
              "(docs/adaptation.md)");
DEFINE_string(worker_policy, "",
              "worker, local: built-in worker policies run between each "
              "worker's steps, comma-separated: comm-batch, with optional "
              ":KEY=VALUE parameters (docs/adaptation.md)");
DEFINE_int32(policy_interval_ms, 1000,
             "coordinator, local: how often the policies read the job's "
             "status (100 to 3600000)");
DEFINE_bool(require_member_keys, true,
            "coordinator, server, worker, with --keys: admit only members "
            "with keys of their own (DIR/members/server-N.key, worker-N.key "
            "or --member_key) and the admin; --norequire_member_keys also "
            "admits cluster.key, shared by members who can then act for "
            "one another");
DEFINE_string(out, "", "keygen: directory to write the new keys into");
DEFINE_string(member, "",
              "keygen: make member NAME's own key pair (in an existing DIR; "
              "server-N and worker-N bind it to that member)");
DEFINE_string(kill_schedule, "",
              "local: SIGKILL cluster processes as the job runs, for fault "
              "tolerance tests. Comma-separated items: server:ID@clock=N, "
              "worker:ID@clock=N, coordinator@clock=N, random:K (K kills at "
              "random clocks from 10 to the job's estimated length, drawn "
              "with --seed) or random:K@clock=A-B. Killed servers and "
              "coordinators are restarted, killed workers are not");
DEFINE_string(provider, "local",
              "local: how servers and workers are started: local (child "
              "processes) or slurm (each a Slurm job of its own, through "
              "srun; this node only, see docs/adaptation.md)");
DEFINE_string(srun_flags, "",
              "local --provider=slurm: extra srun arguments, separated by "
              "spaces (e.g. \"--partition=gpu --time=60\")");
DEFINE_string(image, "",
              "k8s: the container image of every member (with `ductile` on "
              "its PATH)");
DEFINE_string(job_name, "ductile",
              "k8s, k8s-controller: the job's Service name and its Jobs' "
              "prefix (a DNS label of at most 40 characters)");
DEFINE_bool(controller, false,
            "k8s: also a Job running `ductile k8s-controller`, which "
            "carries `ductile resize` and the policies' targets and "
            "replacements out by patching the Jobs (its image needs "
            "kubectl; with keys, the Secret also holds admin.key)");
DEFINE_string(namespace, "",
              "k8s-controller: the Kubernetes namespace of the job's Jobs "
              "(empty: kubectl's current one)");
DEFINE_string(kubectl, "kubectl",
              "k8s-controller: the kubectl program (found on PATH without "
              "a '/')");
DEFINE_string(state_claim, "",
              "k8s: a ReadWriteMany PersistentVolumeClaim shared by the "
              "coordinator and servers as their state directory (empty: an "
              "emptyDir per pod, and a server that stays down loses its "
              "checkpoints)");
DEFINE_string(keys_secret, "",
              "k8s: the Secret holding the cluster's keys (empty: "
              "JOB_NAME-keys)");
DEFINE_string(slurm_bin_dir, "",
              "local --provider=slurm: the directory of srun, squeue and "
              "scancel (empty: found on PATH)");
DEFINE_string(resize_schedule, "",
              "local: resize the job as it runs. Comma-separated items "
              "workers=N@clock=C and servers=M@clock=C: new workers and "
              "servers join the running job (slots move to new servers with "
              "their keys); the newest are drained when there are too many");

// App.
DEFINE_string(app, "fmnist-logreg",
              "built-in app the workers run: fmnist-logreg, fmnist-mlp, mf");
DEFINE_string(device, "auto",
              "compute device of the fmnist-mlp workers: cpu (OpenBLAS), "
              "cuda (cuBLAS) or auto (cuda when a GPU is present)");
DEFINE_string(csv_log, "", "worker 0 writes progress and test metrics here");
DEFINE_bool(prefetch, false,
            "fmnist apps: pull the next step's parameters during this "
            "step's compute (async, or ssp with --staleness >= 1)");
DEFINE_bool(overlap_push, false,
            "fmnist-mlp: push each layer's gradient as soon as the backward "
            "pass has it, while the layers before it are computed");
DEFINE_bool(layered_pulls, false,
            "fmnist apps: start the forward pass on each layer as soon as "
            "its parameters have arrived, rather than once the whole "
            "model has");
DEFINE_string(layers, "784,256,128,10", "fmnist-mlp: layer sizes");
DEFINE_uint64(mf_rows, 2000, "mf: rows of the synthetic matrix");
DEFINE_uint64(mf_cols, 2000, "mf: columns of the synthetic matrix");
DEFINE_uint64(mf_rank, 10, "mf: rank of the synthetic matrix and the model");
DEFINE_double(mf_observed, 0.05, "mf: fraction of entries observed");
DEFINE_double(mf_noise, 0.1, "mf: standard deviation of the entries' noise");
DEFINE_double(max_rmse, 0.0, "mf: fail when the final test RMSE is above this");
DEFINE_string(data_dir, "/usr/share/datasets/fashion-mnist",
              "directory with the Fashion-MNIST IDX gzip files");
DEFINE_int32(epochs, 10, "training epochs");
DEFINE_int32(batch_size, 64, "samples per worker per step");
DEFINE_string(optimizer, "adam",
              "server-side update rule: sgd, momentum, adagrad or adam");
DEFINE_double(learning_rate, 0.001,
              "learning rate of --optimizer (mf: 0.03 unless given)");
DEFINE_int32(lr_for_batch, 0,
             "the --learning_rate is meant for batches of this many samples "
             "per worker: the tables get it scaled to --batch_size, by the "
             "ratio (sgd, momentum) or its square root (adam, adagrad); 0: "
             "as given");
DEFINE_double(lr_warmup_epochs, 0,
              "learning rate: linear warm-up over this many epochs");
DEFINE_string(lr_decay, "none",
              "learning rate after the warm-up: none, step (times "
              "--lr_gamma every --lr_step_epochs) or cosine (down to "
              "--lr_min_factor of it at the last epoch)");
DEFINE_double(lr_step_epochs, 0, "--lr_decay=step: epochs between steps");
DEFINE_double(lr_gamma, 0.1, "--lr_decay=step: factor of each step");
DEFINE_double(lr_min_factor, 0.0,
              "--lr_decay=cosine: the final fraction of the learning rate");
DEFINE_string(lr_scaling, "none",
              "with --consistency=bsp (mean): the learning rate follows the "
              "global batch when workers join or leave: none, linear (times "
              "workers / the workers when the tables were made), sqrt or "
              "adascale (the gain from the gradient noise scale the servers "
              "estimate: between 1 and linear)");
DEFINE_int64(lr_scaling_ramp, 50,
             "--lr_scaling: steps over which a new factor is reached");
DEFINE_double(l2, 0.0, "L2 weight decay");
DEFINE_string(consistency, "async",
              "consistency model of the job's tables: bsp, ssp or async");
DEFINE_int32(staleness, 3, "SSP staleness bound s (with --consistency=ssp)");
DEFINE_bool(cache, false,
            "workers answer SSP pulls from a local copy when fresh enough");
DEFINE_string(bsp_combine, "mean",
              "BSP: combine a clock's pushes by their mean or sum");
DEFINE_uint64(seed, 1, "data shuffling seed");
DEFINE_int32(log_every, 100, "clocks between progress lines");
DEFINE_int64(max_samples, 0,
             "stop after this many samples per worker (0: all)");
DEFINE_double(min_accuracy, 0.0,
              "fail when the final test accuracy is below this");

namespace {

// Flags `worker` reads to train its app; `local` forwards them to its
// workers. One list, so that a new training flag is both documented and
// forwarded.
constexpr const char* kTrainingFlags[] = {"app",
                                          "data_dir",
                                          "device",
                                          "epochs",
                                          "batch_size",
                                          "optimizer",
                                          "learning_rate",
                                          "lr_for_batch",
                                          "lr_warmup_epochs",
                                          "lr_decay",
                                          "lr_step_epochs",
                                          "lr_gamma",
                                          "lr_min_factor",
                                          "l2",
                                          "consistency",
                                          "staleness",
                                          "bsp_combine",
                                          "cache",
                                          "prefetch",
                                          "overlap_push",
                                          "layered_pulls",
                                          "seed",
                                          "log_every",
                                          "max_samples",
                                          "min_accuracy",
                                          "max_rmse",
                                          "csv_log",
                                          "layers",
                                          "mf_rows",
                                          "mf_cols",
                                          "mf_rank",
                                          "mf_observed",
                                          "mf_noise",
                                          "lr_scaling",
                                          "lr_scaling_ramp",
                                          "worker_policy"};

int Fail(const ductile::Status& s) {
  std::fprintf(stderr, "ductile: %s\n", s.ToString().c_str());
  return 1;
}

std::string SelfPath() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : std::string("ductile");
}

// The security --keys and --insecure ask for; `as_admin` for commands that
// need the admin key. `member` names the server or worker this process is
// ("server-0", "worker-3"; "" for others): with --keys and no
// --member_key, its own key is DIR/members/MEMBER.key.
ductile::Result<ductile::Security> SecurityFromFlags(
    bool as_admin, const std::string& member = "") {
  const bool require_set =
      !gflags::GetCommandLineFlagInfoOrDie("require_member_keys").is_default;
  if (FLAGS_keys.empty()) {
    if (!FLAGS_member_key.empty() ||
        (require_set && FLAGS_require_member_keys)) {
      return ductile::InvalidArgumentError(
          std::string(FLAGS_member_key.empty() ? "--require_member_keys"
                                               : "--member_key") +
          " goes with the cluster's keys (--keys=DIR)");
    }
    ductile::Security plain;
    plain.allow_plain_network = FLAGS_insecure;
    return plain;
  }
  if (FLAGS_insecure) {
    return ductile::InvalidArgumentError(
        "--insecure is for plain mode: it cannot go with --keys");
  }
  ductile::Result<ductile::Security> security =
      ductile::LoadClusterKeys(FLAGS_keys, as_admin);
  if (!security.ok()) return security;
  security->require_member_keys = FLAGS_require_member_keys;
  std::string key_file = FLAGS_member_key;
  if (key_file.empty() && !member.empty() && !security->admin()) {
    const std::string own = FLAGS_keys + "/members/" + member + ".key";
    if (access(own.c_str(), F_OK) == 0) {
      key_file = own;
    } else if (FLAGS_require_member_keys) {
      return ductile::FailedPreconditionError(
          "with --keys, each server and worker proves a key of its own, and " +
          own + " is not there: make it with `ductile keygen --out=" +
          FLAGS_keys + " --member=" + member +
          "` (or --servers=N --workers=M for all), or give --member_key=FILE "
          "(--norequire_member_keys lets members share cluster.key, and "
          "then any of them can act for another)");
    }
  }
  if (key_file.empty()) return security;
  DUCTILE_RETURN_IF_ERROR(ductile::LoadMemberKey(key_file, &*security));
  return security;
}

// The id a server or worker asks for: its flag, else the rank its launcher
// gave it (apps/launch_env.h), else -1 (any).
ductile::Result<int32_t> IdOrRank(int32_t flag, const char* role) {
  if (flag >= 0) return flag;
  std::string source;
  ductile::Result<int32_t> rank = ductile::apps::RankFromEnvironment(&source);
  if (rank.ok() && *rank >= 0) {
    LOG(INFO) << role << " id " << *rank << " from " << source;
  }
  return rank;
}

// Checks the fault-tolerance flags `command` uses.
ductile::Status ValidateCheckpointFlags(const std::string& command) {
  if (command == "coordinator" || command == "local") {
    if (FLAGS_checkpoint_every < 0) {
      return ductile::InvalidArgumentError(
          "--checkpoint_every must be >= 0 (0: not by clock)");
    }
    if (!std::isfinite(FLAGS_checkpoint_interval_s) ||
        FLAGS_checkpoint_interval_s < 0) {
      return ductile::InvalidArgumentError(
          "--checkpoint_interval_s must be a number of seconds >= 0 (0: not "
          "by time)");
    }
    if (FLAGS_checkpoint_timeout_ms < 1000) {
      return ductile::InvalidArgumentError(
          "--checkpoint_timeout_ms must be >= 1000");
    }
  }
  if (command == "coordinator" && FLAGS_state_dir.empty() &&
      (FLAGS_checkpoint_every > 0 || FLAGS_checkpoint_interval_s > 0)) {
    return ductile::InvalidArgumentError(
        "--checkpoint_every and --checkpoint_interval_s need --state_dir "
        "(where the coordinator keeps the checkpoint catalog)");
  }
  if ((command == "server" || command == "local") &&
      FLAGS_keep_checkpoints < 1) {
    return ductile::InvalidArgumentError("--keep_checkpoints must be >= 1");
  }
  // Timeouts that may be off (0), else 1 s - 7 days.
  const auto off_or_in_range = [](const char* name, int64_t ms) {
    return ms == 0 || (ms >= 1000 && ms <= 604800000)
               ? ductile::Status::Ok()
               : ductile::InvalidArgumentError(
                     std::string("--") + name +
                     " must be 0 or in [1000, 604800000]");
  };
  if (command == "server" || command == "local") {
    DUCTILE_RETURN_IF_ERROR(off_or_in_range("coordinator_timeout_ms",
                                            FLAGS_coordinator_timeout_ms));
  }
  if (command == "coordinator" || command == "local") {
    DUCTILE_RETURN_IF_ERROR(
        off_or_in_range("no_worker_timeout_ms", FLAGS_no_worker_timeout_ms));
  }
  if ((command == "server" || command == "local") &&
      (FLAGS_max_key_floats < 1 || FLAGS_max_key_floats > (1u << 28))) {
    return ductile::InvalidArgumentError(
        "--max_key_floats must be in [1, 268435456]");
  }
  if ((command == "server" || command == "local") &&
      (FLAGS_max_queued_replies < 1 || FLAGS_max_queued_replies > 10000000)) {
    return ductile::InvalidArgumentError(
        "--max_queued_replies must be in [1, 10000000]");
  }
  if ((command == "server" || command == "local") &&
      (FLAGS_max_window_per_client < 1 ||
       FLAGS_max_window_per_client > (uint64_t{1} << 30))) {
    return ductile::InvalidArgumentError(
        "--max_window_per_client must be in [1, 1073741824]");
  }
  if ((command == "server" || command == "local") &&
      (FLAGS_client_idle_expiry_s < 60 ||
       FLAGS_client_idle_expiry_s > 2592000)) {
    return ductile::InvalidArgumentError(
        "--client_idle_expiry_s must be in [60, 2592000]");
  }
  if ((command == "server" || command == "local") &&
      (FLAGS_noise_scale_sample < 0 || FLAGS_noise_scale_sample > (1 << 20))) {
    return ductile::InvalidArgumentError(
        "--noise_scale_sample must be in [0, 1048576]");
  }
  if ((command == "server" || command == "local") &&
      (FLAGS_apply_threads < 0 || FLAGS_apply_threads > 256)) {
    return ductile::InvalidArgumentError("--apply_threads must be in [0, 256]");
  }
  if ((command == "server" || command == "local") &&
      (FLAGS_io_threads < 0 || FLAGS_io_threads > 64)) {
    return ductile::InvalidArgumentError("--io_threads must be in [0, 64]");
  }
  if (command == "local" && FLAGS_lr_scaling == "adascale" &&
      FLAGS_noise_scale_sample == 0) {
    return ductile::InvalidArgumentError(
        "--lr_scaling=adascale needs the gradient noise scale the servers "
        "estimate: --noise_scale_sample=0 turns it off");
  }
  if ((command == "server" || command == "local") &&
      FLAGS_max_stored_mb > (uint64_t{1} << 30)) {
    return ductile::InvalidArgumentError(
        "--max_stored_mb must be in [0, 1073741824]");
  }
  if ((command == "server" || command == "local") &&
      (FLAGS_disk_reserve_mb < 0 || FLAGS_disk_reserve_mb > (1 << 20))) {
    return ductile::InvalidArgumentError(
        "--disk_reserve_mb must be in [0, 1048576]");
  }
  return ductile::Status::Ok();
}

int RunCoordinator() {
  ductile::Status valid = ValidateCheckpointFlags("coordinator");
  if (!valid.ok()) return Fail(valid);
  ductile::CoordinatorOptions o;
  o.bind_address = FLAGS_listen;
  o.num_servers = FLAGS_servers;
  o.num_workers = FLAGS_workers;
  o.max_workers = FLAGS_max_workers;
  o.num_slots = FLAGS_slots;
  o.heartbeat_timeout_ms = FLAGS_heartbeat_timeout_ms;
  o.no_worker_timeout_ms = FLAGS_no_worker_timeout_ms;
  o.state_dir = FLAGS_state_dir;
  o.checkpoint_every_clocks = FLAGS_checkpoint_every;
  o.checkpoint_interval_s = FLAGS_checkpoint_interval_s;
  o.checkpoint_timeout_ms = FLAGS_checkpoint_timeout_ms;
  auto policies = ductile::MakeBuiltinPolicies(FLAGS_policy);
  if (!policies.ok()) return Fail(policies.status());
  o.policies = std::move(*policies);
  o.policy_interval_ms = FLAGS_policy_interval_ms;
  auto security = SecurityFromFlags(false);
  if (!security.ok()) return Fail(security.status());
  o.security = *security;
  auto coordinator = ductile::Coordinator::Start(o);
  if (!coordinator.ok()) return Fail(coordinator.status());
  if (!FLAGS_address_file.empty()) {
    const std::string tmp = FLAGS_address_file + ".tmp";
    std::ofstream(tmp) << (*coordinator)->address() << "\n";
    if (std::rename(tmp.c_str(), FLAGS_address_file.c_str()) != 0) {
      return Fail(
          ductile::UnavailableError("cannot write " + FLAGS_address_file));
    }
  }
  std::fprintf(stderr, "coordinator listening on %s\n",
               (*coordinator)->address().c_str());
  // Destroyed before the coordinator it asks.
  std::unique_ptr<ductile::apps::MetricsHttpServer> metrics;
  if (FLAGS_metrics_port >= 0) {
    ductile::Coordinator* c = coordinator->get();
    auto started = ductile::apps::MetricsHttpServer::Start(
        FLAGS_metrics_host, FLAGS_metrics_port,
        [c]() -> ductile::Result<std::string> {
          auto status = c->QueryStatus(5000);
          if (!status.ok()) return status.status();
          return ductile::FormatPrometheus(*status);
        });
    if (!started.ok()) return Fail(started.status());
    metrics = std::move(*started);
    const std::string& host = FLAGS_metrics_host;
    if (host.rfind("127.", 0) != 0 && host != "localhost" && host != "::1") {
      LOG(WARNING) << "/metrics on " << FLAGS_metrics_host
                   << " is plain HTTP: anyone who reaches it reads the "
                      "cluster's status";
    }
    std::fprintf(stderr, "coordinator metrics on http://%s:%d/metrics\n",
                 FLAGS_metrics_host.c_str(), metrics->port());
  }
  ductile::Status s = (*coordinator)->Wait();
  return s.ok() ? 0 : Fail(s);
}

int RunServer() {
  ductile::Status valid = ValidateCheckpointFlags("server");
  if (!valid.ok()) return Fail(valid);
  ductile::ServerOptions o;
  o.coordinator_address = FLAGS_coordinator;
  o.host = FLAGS_host;
  o.port = FLAGS_port;
  o.ipc_dir = FLAGS_ipc_dir;
  auto id = IdOrRank(FLAGS_server_id, "server");
  if (!id.ok()) return Fail(id.status());
  o.requested_id = *id;
  o.connect_timeout_ms = FLAGS_timeout_ms;
  o.state_dir = FLAGS_state_dir;
  o.keep_checkpoints = FLAGS_keep_checkpoints;
  o.disk_reserve_mb = FLAGS_disk_reserve_mb;
  o.max_key_floats = FLAGS_max_key_floats;
  o.max_stored_mb = FLAGS_max_stored_mb;
  o.max_queued_replies = FLAGS_max_queued_replies;
  o.max_window_per_client = FLAGS_max_window_per_client;
  o.client_idle_expiry_s = FLAGS_client_idle_expiry_s;
  o.noise_scale_sample = static_cast<uint32_t>(FLAGS_noise_scale_sample);
  o.apply_threads = FLAGS_apply_threads;
  o.io_threads = FLAGS_io_threads;
  o.shm_values = FLAGS_shm_values;
  o.coordinator_timeout_ms = FLAGS_coordinator_timeout_ms;
  o.move_timeout_ms = FLAGS_move_timeout_ms;
  auto security = SecurityFromFlags(
      false,
      o.requested_id >= 0 ? "server-" + std::to_string(o.requested_id) : "");
  if (!security.ok()) return Fail(security.status());
  o.security = *security;
  auto server = ductile::Server::Start(o);
  if (!server.ok()) return Fail(server.status());
  ductile::Status s = (*server)->Wait();
  return s.ok() ? 0 : Fail(s);
}

// Parses "784,256,10".
bool ParseSizes(const std::string& text, std::vector<size_t>* out) {
  out->clear();
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    if (item.empty() ||
        item.find_first_not_of("0123456789") != std::string::npos) {
      return false;
    }
    out->push_back(std::stoul(item));
    start = comma + 1;
  }
  return !out->empty();
}

int RunWorker() {
  if (FLAGS_io_threads < 0 || FLAGS_io_threads > 64) {
    return Fail(
        ductile::InvalidArgumentError("--io_threads must be in [0, 64]"));
  }
  if (FLAGS_app != "fmnist-logreg" && FLAGS_app != "fmnist-mlp" &&
      FLAGS_app != "mf") {
    return Fail(ductile::InvalidArgumentError(
        "unknown --app '" + FLAGS_app +
        "' (apps: fmnist-logreg, fmnist-mlp, mf)"));
  }
  ductile::apps::TrainerOptions t;
  t.app = FLAGS_app;
  t.device = FLAGS_device;
  t.data_dir = FLAGS_data_dir;
  t.epochs = FLAGS_epochs;
  t.batch_size = FLAGS_batch_size;
  const std::map<std::string, ductile::UpdateRule> optimizers = {
      {"sgd", ductile::UpdateRule::kSgd},
      {"momentum", ductile::UpdateRule::kMomentum},
      {"adagrad", ductile::UpdateRule::kAdaGrad},
      {"adam", ductile::UpdateRule::kAdam}};
  auto optimizer = optimizers.find(FLAGS_optimizer);
  if (optimizer == optimizers.end()) {
    return Fail(ductile::InvalidArgumentError(
        "unknown --optimizer '" + FLAGS_optimizer +
        "' (sgd, momentum, adagrad, adam)"));
  }
  t.optimizer = optimizer->second;
  if (FLAGS_consistency == "bsp") {
    t.consistency.mode = ductile::ConsistencyMode::kBsp;
  } else if (FLAGS_consistency == "ssp") {
    t.consistency.mode = ductile::ConsistencyMode::kSsp;
  } else if (FLAGS_consistency != "async") {
    return Fail(ductile::InvalidArgumentError(
        "unknown --consistency '" + FLAGS_consistency + "' (bsp, ssp, async)"));
  }
  if (FLAGS_staleness < 0) {
    return Fail(ductile::InvalidArgumentError("--staleness must be >= 0"));
  }
  t.consistency.staleness = FLAGS_staleness;
  if (FLAGS_bsp_combine == "sum") {
    t.consistency.combine = ductile::BspCombine::kSum;
  } else if (FLAGS_bsp_combine != "mean") {
    return Fail(ductile::InvalidArgumentError(
        "unknown --bsp_combine '" + FLAGS_bsp_combine + "' (mean, sum)"));
  }
  t.learning_rate = static_cast<float>(FLAGS_learning_rate);
  t.lr_for_batch = FLAGS_lr_for_batch;
  t.lr_warmup_epochs = FLAGS_lr_warmup_epochs;
  t.lr_decay = FLAGS_lr_decay;
  t.lr_step_epochs = FLAGS_lr_step_epochs;
  t.lr_gamma = static_cast<float>(FLAGS_lr_gamma);
  t.lr_min_factor = static_cast<float>(FLAGS_lr_min_factor);
  t.lr_scaling = FLAGS_lr_scaling;
  t.lr_scaling_ramp = FLAGS_lr_scaling_ramp;
  t.l2 = static_cast<float>(FLAGS_l2);
  t.seed = FLAGS_seed;
  auto worker_policies =
      ductile::MakeBuiltinWorkerPolicies(FLAGS_worker_policy);
  if (!worker_policies.ok()) return Fail(worker_policies.status());
  t.worker_policies = std::move(*worker_policies);
  t.log_every = FLAGS_log_every;
  t.max_samples = FLAGS_max_samples;
  t.min_accuracy = FLAGS_min_accuracy;
  t.max_rmse = FLAGS_max_rmse;
  t.csv_log = FLAGS_csv_log;
  t.prefetch = FLAGS_prefetch;
  t.overlap_push = FLAGS_overlap_push;
  t.layered_pulls = FLAGS_layered_pulls;
  if (!ParseSizes(FLAGS_layers, &t.layers)) {
    return Fail(ductile::InvalidArgumentError(
        "--layers must be sizes separated by commas, e.g. 784,256,128,10"));
  }
  t.mf_rows = FLAGS_mf_rows;
  t.mf_cols = FLAGS_mf_cols;
  t.mf_rank = FLAGS_mf_rank;
  t.mf_observed = FLAGS_mf_observed;
  t.mf_noise = FLAGS_mf_noise;

  ductile::ClientOptions o;
  o.coordinator_address = FLAGS_coordinator;
  o.connect_timeout_ms = FLAGS_timeout_ms;
  o.request_timeout_ms = FLAGS_timeout_ms;
  o.enable_cache = FLAGS_cache;
  o.io_threads = FLAGS_io_threads;
  if (!FLAGS_shm_values) o.shm_reply_bytes = 0;
  auto id = IdOrRank(FLAGS_worker_id, "worker");
  if (!id.ok()) return Fail(id.status());
  o.requested_worker_id = *id;
  auto security =
      SecurityFromFlags(false, *id >= 0 ? "worker-" + std::to_string(*id) : "");
  if (!security.ok()) return Fail(security.status());
  o.security = *security;
  auto client = ductile::Client::Connect(o);
  if (!client.ok() &&
      client.status().code() == ductile::StatusCode::kUnavailable &&
      client.status().message() == "cluster is shutting down") {
    // Started as the job ended (a resize or a replacement late in it):
    // there is nothing left to train, which is no failure.
    std::fprintf(stderr,
                 "worker: the job ended before this worker joined; nothing "
                 "to do\n");
    return 0;
  }
  if (!client.ok()) return Fail(client.status());
  ductile::Status s = ductile::apps::RunTrainingWorker(**client, t);
  // Tell the coordinator either way, so the cluster can shut down.
  ductile::Status finish = (*client)->Finish();
  if (!s.ok()) return Fail(s);
  return finish.ok() ? 0 : Fail(finish);
}

int RunStatus() {
  if (FLAGS_watch < 0 || FLAGS_watch > 3600) {
    return Fail(ductile::InvalidArgumentError("--watch must be in [0, 3600]"));
  }
  // The admin key where it is at hand: a cluster that requires member keys
  // of their own admits no one with the shared key.
  auto security =
      SecurityFromFlags(!FLAGS_keys.empty() &&
                        access((FLAGS_keys + "/admin.key").c_str(), R_OK) == 0);
  if (!security.ok()) return Fail(security.status());
  const int64_t timeout_ms = std::min<int64_t>(FLAGS_timeout_ms, 5000);
  if (FLAGS_watch == 0) {
    auto status =
        ductile::QueryClusterStatus(FLAGS_coordinator, timeout_ms, *security);
    if (!status.ok()) return Fail(status.status());
    std::printf("%s", ductile::FormatClusterStatus(*status).c_str());
    return 0;
  }
  // A live table: the screen redrawn in a terminal, tables one after the
  // other into a file or pipe.
  const bool terminal = isatty(STDOUT_FILENO) != 0;
  int failed_in_a_row = 0;
  ductile::Status last_error;
  while (failed_in_a_row < 5) {
    auto status =
        ductile::QueryClusterStatus(FLAGS_coordinator, timeout_ms, *security);
    const std::time_t now = std::time(nullptr);
    char when[32];
    std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S",
                  std::localtime(&now));
    std::printf("%s%s, every %d s (Ctrl-C stops)\n",
                terminal ? "\033[H\033[2J" : "\n", when, FLAGS_watch);
    if (status.ok()) {
      failed_in_a_row = 0;
      std::printf("%s", ductile::FormatClusterStatus(*status).c_str());
    } else {
      ++failed_in_a_row;
      last_error = status.status();
      std::printf("no status from %s: %s\n", FLAGS_coordinator.c_str(),
                  last_error.ToString().c_str());
    }
    std::fflush(stdout);
    if (failed_in_a_row >= 5) break;
    std::this_thread::sleep_for(std::chrono::seconds(FLAGS_watch));
  }
  return Fail(ductile::UnavailableError(
      "the coordinator did not answer 5 times in a row; last: " +
      last_error.ToString()));
}

int RunShutdown() {
  auto security = SecurityFromFlags(true);
  if (!security.ok()) return Fail(security.status());
  ductile::Status s = ductile::RequestShutdown(
      FLAGS_coordinator, std::min<int64_t>(FLAGS_timeout_ms, 5000), *security);
  return s.ok() ? 0 : Fail(s);
}

// The operand of a command that takes one (`ductile drain worker:N`).
std::string g_operand;

int RunDrain() {
  // worker:N or server:N
  int32_t id = -1;
  std::string role;
  for (const char* prefix : {"worker:", "server:"}) {
    if (g_operand.rfind(prefix, 0) != 0) continue;
    const std::string digits = g_operand.substr(std::strlen(prefix));
    if (!digits.empty() && digits.size() <= 7 &&
        digits.find_first_not_of("0123456789") == std::string::npos) {
      id = std::stoi(digits);
      role = std::string(prefix, std::strlen(prefix) - 1);
    }
  }
  if (id < 0) {
    return Fail(ductile::InvalidArgumentError(
        "drain takes the member to drain as worker:N or server:N (e.g. "
        "`ductile drain --coordinator=ADDR worker:3`), not '" +
        g_operand + "'"));
  }
  auto security = SecurityFromFlags(true);
  if (!security.ok()) return Fail(security.status());
  if (role == "server") {
    std::printf("server %d: moving its slots to the other servers...\n", id);
    std::fflush(stdout);
    ductile::Status s = ductile::RequestDrainServer(
        FLAGS_coordinator, id, FLAGS_timeout_ms, *security);
    if (!s.ok()) return Fail(s);
    std::printf(
        "server %d drained: its slots are on the other servers and "
        "it has stopped\n",
        id);
    return 0;
  }
  ductile::Status s = ductile::RequestDrainWorker(FLAGS_coordinator, id,
                                                  FLAGS_timeout_ms, *security);
  if (!s.ok()) return Fail(s);
  std::printf("worker %d asked to leave; it leaves at its next step\n", id);
  return 0;
}

int RunResize() {
  // Only the flags given count: the other size stays as it is.
  const bool workers =
      !gflags::GetCommandLineFlagInfoOrDie("workers").is_default;
  const bool servers =
      !gflags::GetCommandLineFlagInfoOrDie("servers").is_default;
  if (!workers && !servers) {
    return Fail(ductile::InvalidArgumentError(
        "resize needs --workers=N and/or --servers=M (the job's new size)"));
  }
  if ((workers && FLAGS_workers < 1) || (servers && FLAGS_servers < 1)) {
    return Fail(ductile::InvalidArgumentError(
        "resize: --workers and --servers must be at least 1"));
  }
  auto security = SecurityFromFlags(true);
  if (!security.ok()) return Fail(security.status());
  ductile::Status s = ductile::RequestResize(
      FLAGS_coordinator, workers ? FLAGS_workers : 0,
      servers ? FLAGS_servers : 0, FLAGS_timeout_ms, *security);
  if (!s.ok()) return Fail(s);
  std::printf(
      "target size set:%s%s; `ductile local` (or the job's launcher) "
      "starts or drains members to match\n",
      workers ? (" " + std::to_string(FLAGS_workers) + " worker(s)").c_str()
              : "",
      servers ? (" " + std::to_string(FLAGS_servers) + " server(s)").c_str()
              : "");
  return 0;
}

int RunCheckpoint() {
  auto security = SecurityFromFlags(true);
  if (!security.ok()) return Fail(security.status());
  ductile::Result<int64_t> clock = ductile::RequestCheckpoint(
      FLAGS_coordinator, FLAGS_timeout_ms, *security);
  if (!clock.ok()) return Fail(clock.status());
  std::printf("checkpoint at clock %lld\n", static_cast<long long>(*clock));
  return 0;
}

int RunKeygen() {
  if (FLAGS_out.empty()) {
    return Fail(ductile::InvalidArgumentError(
        "keygen needs --out=DIR, the directory for the new keys"));
  }
  if (!FLAGS_member.empty()) {
    ductile::Status s = ductile::GenerateMemberKey(FLAGS_out, FLAGS_member);
    if (!s.ok()) return Fail(s);
    std::printf(
        "member key written to %s/members: %s.key is for that member only "
        "(--member_key=FILE); every coordinator and server reads %s.pub "
        "from DIR/members (--keys=DIR)\n",
        FLAGS_out.c_str(), FLAGS_member.c_str(), FLAGS_member.c_str());
    return 0;
  }
  // --servers and --workers: a key of its own for each (server-N.key,
  // worker-N.key), which binds it to that member.
  // Only the counts given: `--workers=4` alone adds worker keys.
  const int servers = gflags::GetCommandLineFlagInfoOrDie("servers").is_default
                          ? 0
                          : FLAGS_servers;
  const int workers = gflags::GetCommandLineFlagInfoOrDie("workers").is_default
                          ? 0
                          : FLAGS_workers;
  const bool members =
      !gflags::GetCommandLineFlagInfoOrDie("servers").is_default ||
      !gflags::GetCommandLineFlagInfoOrDie("workers").is_default;
  if (members &&
      (servers < 0 || workers < 0 || servers > 4096 || workers > 65536)) {
    return Fail(ductile::InvalidArgumentError(
        "keygen: --servers must be in [0, 4096] and --workers in [0, 65536]"));
  }
  const bool have_cluster_keys =
      access((FLAGS_out + "/cluster.key").c_str(), F_OK) == 0;
  if (!members || !have_cluster_keys) {
    ductile::Status s = ductile::GenerateClusterKeys(FLAGS_out);
    if (!s.ok()) return Fail(s);
    std::printf(
        "keys written to %s: the coordinator and servers need cluster.key, "
        "members cluster.pub and admin.pub (--keys=DIR); only "
        "administrators need admin.key\n",
        FLAGS_out.c_str());
  }
  if (!members) {
    std::printf(
        "each server and worker also needs a key of its own: `ductile "
        "keygen --out=%s --servers=N --workers=M`\n",
        FLAGS_out.c_str());
    return 0;
  }
  int made = 0;
  int kept = 0;
  for (int role = 0; role < 2; ++role) {
    const int count = role == 0 ? servers : workers;
    for (int i = 0; i < count; ++i) {
      const std::string name =
          (role == 0 ? "server-" : "worker-") + std::to_string(i);
      ductile::Status s = ductile::GenerateMemberKey(FLAGS_out, name);
      if (s.code() == ductile::StatusCode::kAlreadyExists) {
        ++kept;
      } else if (!s.ok()) {
        return Fail(s);
      } else {
        ++made;
      }
    }
  }
  std::printf(
      "member keys in %s/members: %d made, %d already there; server-N.key "
      "and worker-N.key are for that member only, each bound to it; the "
      "coordinator and servers read every NAME.pub there\n",
      FLAGS_out.c_str(), made, kept);
  return 0;
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
// `ductile local`'s checkpoint interval when none is given, in clocks.
constexpr int64_t kLocalCheckpointEvery = 100;

std::string Forward(const char* name) {
  std::string value;
  gflags::GetCommandLineOption(name, &value);
  return std::string("--") + name + "=" + value;
}

// The flags a job's coordinator, servers and workers get from the command
// that launches them (`ductile local`, `ductile k8s`). A launched job keeps
// checkpoints unless told otherwise: a crashed server then costs at most
// kLocalCheckpointEvery clocks.
std::vector<std::string> LaunchedCoordinatorFlags() {
  const bool by_default =
      gflags::GetCommandLineFlagInfoOrDie("checkpoint_every").is_default &&
      gflags::GetCommandLineFlagInfoOrDie("checkpoint_interval_s").is_default;
  return {"--slots=" + std::to_string(FLAGS_slots),
          Forward("heartbeat_timeout_ms"),
          Forward("no_worker_timeout_ms"),
          by_default
              ? "--checkpoint_every=" + std::to_string(kLocalCheckpointEvery)
              : Forward("checkpoint_every"),
          Forward("checkpoint_interval_s"),
          Forward("checkpoint_timeout_ms"),
          Forward("policy"),
          Forward("policy_interval_ms")};
}

std::vector<std::string> LaunchedServerFlags() {
  return {"--timeout_ms=" + std::to_string(FLAGS_timeout_ms),
          Forward("keep_checkpoints"),
          Forward("disk_reserve_mb"),
          Forward("max_key_floats"),
          Forward("max_stored_mb"),
          Forward("max_queued_replies"),
          Forward("max_window_per_client"),
          Forward("client_idle_expiry_s"),
          Forward("noise_scale_sample"),
          Forward("apply_threads"),
          Forward("io_threads"),
          Forward("shm_values"),
          Forward("keep_freed_memory"),
          Forward("coordinator_timeout_ms"),
          Forward("move_timeout_ms")};
}

std::vector<std::string> LaunchedWorkerFlags() {
  std::vector<std::string> flags;
  for (const char* name : kTrainingFlags) flags.push_back(Forward(name));
  flags.push_back(Forward("timeout_ms"));
  flags.push_back(Forward("io_threads"));
  flags.push_back(Forward("shm_values"));
  flags.push_back(Forward("keep_freed_memory"));
  return flags;
}

int RunLocal() {
  ductile::Status valid = ValidateCheckpointFlags("local");
  if (!valid.ok()) return Fail(valid);
  if (FLAGS_move_timeout_ms < 100 || FLAGS_move_timeout_ms > 86400000) {
    return Fail(ductile::InvalidArgumentError(
        "--move_timeout_ms must be in [100, 86400000]"));
  }
  if (FLAGS_insecure && !FLAGS_keys.empty()) {
    return Fail(ductile::InvalidArgumentError(
        "--insecure is for plain mode: it cannot go with --keys"));
  }
  // Checked here, before any process starts.
  if (auto policies = ductile::MakeBuiltinPolicies(FLAGS_policy);
      !policies.ok()) {
    return Fail(policies.status());
  }
  if (auto policies = ductile::MakeBuiltinWorkerPolicies(FLAGS_worker_policy);
      !policies.ok()) {
    return Fail(policies.status());
  }
  if (FLAGS_policy_interval_ms < 100 || FLAGS_policy_interval_ms > 3600000) {
    return Fail(ductile::InvalidArgumentError(
        "--policy_interval_ms must be in [100, 3600000]"));
  }
  ductile::apps::LocalClusterOptions o;
  auto provider = ductile::apps::ParseProvider(FLAGS_provider);
  if (!provider.ok()) return Fail(provider.status());
  o.provider = *provider;
  {
    std::istringstream words(FLAGS_srun_flags);
    for (std::string w; words >> w;) o.srun_flags.push_back(w);
  }
  if ((!o.srun_flags.empty() || !FLAGS_slurm_bin_dir.empty()) &&
      o.provider != ductile::apps::LocalClusterOptions::Provider::kSlurm) {
    return Fail(ductile::InvalidArgumentError(
        "--srun_flags and --slurm_bin_dir go with --provider=slurm"));
  }
  o.slurm_bin_dir = FLAGS_slurm_bin_dir;
  o.program = SelfPath();
  o.keys_dir = FLAGS_keys;
  o.plain = FLAGS_insecure;
  o.num_servers = FLAGS_servers;
  o.num_workers = FLAGS_workers;
  o.state_dir = FLAGS_state_dir;
  if (FLAGS_servers >= 1 && FLAGS_workers >= 1) {
    ductile::apps::KillScheduleContext context;
    context.num_servers = FLAGS_servers;
    context.num_workers = FLAGS_workers;
    context.seed = FLAGS_seed;
    context.estimated_clocks = EstimateJobClocks();
    auto schedule =
        ductile::apps::ParseKillSchedule(FLAGS_kill_schedule, context);
    if (!schedule.ok()) return Fail(schedule.status());
    o.kill_schedule = std::move(*schedule);
  }
  auto resizes = ductile::apps::ParseResizeSchedule(FLAGS_resize_schedule);
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
  ductile::Status s = ductile::apps::RunLocalCluster(o);
  if (!s.ok()) return Fail(s);
  std::fprintf(stderr, "ductile local: done\n");
  return 0;
}

int RunK8s() {
  ductile::apps::KubernetesJob job;
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
  if (auto policies = ductile::MakeBuiltinPolicies(FLAGS_policy);
      !policies.ok()) {
    return Fail(policies.status());
  }
  ductile::Result<std::string> yaml = ductile::apps::KubernetesManifests(job);
  if (!yaml.ok()) return Fail(yaml.status());
  std::fputs(yaml->c_str(), stdout);
  return 0;
}

int RunK8sController() {
  // The name `ductile k8s` was given, and so by the same rule.
  if (ductile::Status s = ductile::apps::CheckJobName(FLAGS_job_name);
      !s.ok()) {
    return Fail(s);
  }
  if (FLAGS_kubectl.empty()) {
    return Fail(ductile::InvalidArgumentError("--kubectl must name a program"));
  }
  if (FLAGS_max_workers < 0 || FLAGS_max_servers < 0) {
    return Fail(ductile::InvalidArgumentError(
        "--max_workers and --max_servers must be at least 0"));
  }
  auto security = SecurityFromFlags(true);
  if (!security.ok()) return Fail(security.status());
  ductile::apps::K8sControllerOptions o;
  o.coordinator = FLAGS_coordinator;
  o.security = *security;
  o.job_name = FLAGS_job_name;
  o.kube_namespace = FLAGS_namespace;
  o.kubectl = FLAGS_kubectl;
  o.drain_timeout_ms = FLAGS_timeout_ms;
  o.max_workers = FLAGS_max_workers;
  o.max_servers = FLAGS_max_servers;
  o.give_up_ms = std::max<int64_t>(FLAGS_coordinator_timeout_ms, 0);
  std::printf(
      "k8s-controller: carrying out the target size and replacements "
      "of the job at %s on the Jobs %s-worker and %s-server\n",
      FLAGS_coordinator.c_str(), FLAGS_job_name.c_str(),
      FLAGS_job_name.c_str());
  std::fflush(stdout);
  const std::atomic<bool> stop{false};  // SIGTERM ends the process
  ductile::Status s = ductile::apps::RunK8sController(o, stop);
  if (!s.ok()) return Fail(s);
  std::printf("k8s-controller: the job has ended\n");
  return 0;
}

// The commands, what each does and the flags it reads. `ductile help`
// prints from this table rather than from gflags, which would list every
// flag linked into the binary (glog's, RocksDB's tools').
struct Command {
  const char* name;
  const char* summary;
  std::vector<const char*> flags;
  // Whether the command also reads kTrainingFlags.
  bool trains;
  int (*run)();
  // The name of the one operand the command takes (nullptr: none).
  const char* operand = nullptr;
};

const std::vector<Command>& Commands() {
  static const auto* const kCommands = new std::vector<Command>{
      {"local",
       "run a cluster (coordinator, --servers, --workers) on this machine and "
       "train --app",
       {"servers",
        "workers",
        "slots",
        "heartbeat_timeout_ms",
        "timeout_ms",
        "verbose",
        "state_dir",
        "checkpoint_every",
        "checkpoint_interval_s",
        "checkpoint_timeout_ms",
        "keep_checkpoints",
        "disk_reserve_mb",
        "max_key_floats",
        "max_stored_mb",
        "max_queued_replies",
        "max_window_per_client",
        "client_idle_expiry_s",
        "noise_scale_sample",
        "apply_threads",
        "io_threads",
        "shm_values",
        "keep_freed_memory",
        "coordinator_timeout_ms",
        "no_worker_timeout_ms",
        "move_timeout_ms",
        "kill_schedule",
        "resize_schedule",
        "provider",
        "srun_flags",
        "slurm_bin_dir",
        "metrics_port",
        "metrics_host",
        "policy",
        "policy_interval_ms",
        "keys",
        "insecure"},
       true,
       RunLocal},
      {"coordinator",
       "run the coordinator (--listen, --servers, --workers)",
       {"listen", "address_file", "servers", "workers", "max_workers", "slots",
        "heartbeat_timeout_ms", "no_worker_timeout_ms", "state_dir",
        "checkpoint_every", "checkpoint_interval_s", "checkpoint_timeout_ms",
        "keys", "require_member_keys", "insecure", "metrics_port",
        "metrics_host", "policy", "policy_interval_ms"},
       false,
       RunCoordinator},
      {"server",
       "run a parameter server (--coordinator, --host, --port)",
       {"coordinator",
        "host",
        "port",
        "server_id",
        "timeout_ms",
        "state_dir",
        "keep_checkpoints",
        "disk_reserve_mb",
        "max_key_floats",
        "max_stored_mb",
        "max_queued_replies",
        "max_window_per_client",
        "client_idle_expiry_s",
        "noise_scale_sample",
        "apply_threads",
        "io_threads",
        "shm_values",
        "keep_freed_memory",
        "coordinator_timeout_ms",
        "ipc_dir",
        "move_timeout_ms",
        "keys",
        "member_key",
        "require_member_keys",
        "insecure"},
       false,
       RunServer},
      {"worker",
       "run a worker of --app (--coordinator)",
       {"coordinator", "worker_id", "timeout_ms", "keys", "member_key",
        "require_member_keys", "io_threads", "shm_values", "keep_freed_memory"},
       true,
       RunWorker},
      {"status",
       "print a running cluster's members and counters (--coordinator; "
       "--watch=S: a live table)",
       {"coordinator", "timeout_ms", "keys", "member_key", "watch"},
       false,
       RunStatus},
      {"shutdown",
       "stop a running cluster (--coordinator)",
       {"coordinator", "timeout_ms", "keys"},
       false,
       RunShutdown},
      {"checkpoint",
       "take a checkpoint of a running cluster now and print its clock "
       "(--coordinator, --timeout_ms)",
       {"coordinator", "timeout_ms", "keys"},
       false,
       RunCheckpoint},
      {"drain",
       "take a member out of a running job: a worker leaves at its next "
       "step; a server's slots move, with their keys, to the other servers, "
       "then it stops (--coordinator, worker:N or server:N)",
       {"coordinator", "timeout_ms", "keys"},
       false,
       RunDrain,
       "worker:N|server:N"},
      {"resize",
       "set a running job's target size (--coordinator, --workers and/or "
       "--servers): `ductile local` starts or drains members to match; "
       "`ductile status` shows it for other launchers",
       {"coordinator", "workers", "servers", "timeout_ms", "keys"},
       false,
       RunResize},
      {"keygen",
       "make a cluster's keys in --out: cluster.key for the coordinator "
       "and servers, admin.key for administrators, the .pub files for "
       "all; with --servers and --workers, members/server-N.key and "
       "worker-N.key, each member's own (docs/security.md)",
       {"out", "member", "servers", "workers"},
       false,
       RunKeygen},
      {"k8s",
       "print Kubernetes manifests for a job: a headless Service and "
       "Indexed Jobs for the coordinator, --servers servers and --workers "
       "workers running --app (docs/adaptation.md)",
       {"image",
        "job_name",
        "servers",
        "workers",
        "max_workers",
        "max_servers",
        "controller",
        "keys_secret",
        "state_claim",
        "insecure",
        "slots",
        "heartbeat_timeout_ms",
        "no_worker_timeout_ms",
        "checkpoint_every",
        "checkpoint_interval_s",
        "checkpoint_timeout_ms",
        "keep_checkpoints",
        "disk_reserve_mb",
        "max_key_floats",
        "max_stored_mb",
        "max_queued_replies",
        "max_window_per_client",
        "client_idle_expiry_s",
        "noise_scale_sample",
        "apply_threads",
        "io_threads",
        "keep_freed_memory",
        "coordinator_timeout_ms",
        "move_timeout_ms",
        "policy",
        "policy_interval_ms",
        "timeout_ms"},
       true,
       RunK8s},
      {"k8s-controller",
       "carry a Kubernetes job's target size (`ductile resize`, the "
       "autoscale policy) and worker replacements out with kubectl: patch "
       "the Jobs of `ductile k8s` and drain what goes (--coordinator, "
       "--job_name; docs/adaptation.md)",
       {"coordinator", "job_name", "namespace", "kubectl", "keys", "insecure",
        "max_workers", "max_servers", "timeout_ms", "coordinator_timeout_ms"},
       false,
       RunK8sController},
  };
  return *kCommands;
}

const Command* FindCommand(const std::string& name) {
  for (const Command& c : Commands()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

constexpr size_t kHelpWidth = 80;

// Appends `head`, then `text` word-wrapped to kHelpWidth columns from
// column `column` on, so that the texts of a list line up.
void AppendWrapped(const std::string& head, size_t column,
                   const std::string& text, std::string* out) {
  std::string line = head;
  if (line.size() >= column) {
    *out += line + "\n";
    line.clear();
  }
  line.resize(column, ' ');
  bool line_empty = true;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find(' ', start), text.size());
    const std::string word = text.substr(start, end - start);
    start = end + 1;
    if (word.empty()) continue;
    if (!line_empty && line.size() + 1 + word.size() > kHelpWidth) {
      *out += line + "\n";
      line.assign(column, ' ');
      line_empty = true;
    }
    if (!line_empty) line += ' ';
    line += word;
    line_empty = false;
  }
  *out += line + "\n";
}

// A flag's default as one would type it: gflags keeps a double's 17
// digits (0.050000000000000003).
std::string DefaultText(const gflags::CommandLineFlagInfo& info) {
  if (info.type == "string") return "\"" + info.default_value + "\"";
  if (info.type == "double") {
    char buf[32];
    const double value = std::strtod(info.default_value.c_str(), nullptr);
    return std::string(buf, std::to_chars(buf, buf + sizeof(buf), value).ptr);
  }
  return info.default_value;
}

// Lists `flags` with their descriptions, types and defaults as gflags has
// them, so that they are written once, at their DEFINE.
void AppendFlags(std::span<const char* const> flags, std::string* out) {
  size_t longest = 0;
  for (const char* name : flags) longest = std::max(longest, std::strlen(name));
  for (const char* name : flags) {
    const gflags::CommandLineFlagInfo info =
        gflags::GetCommandLineFlagInfoOrDie(name);
    AppendWrapped(std::string("  --") + name, longest + 6,
                  info.description + " (" + info.type +
                      ", default: " + DefaultText(info) + ")",
                  out);
  }
}

// Command summaries start past the longest command name.
constexpr size_t kSummaryColumn = 13;

std::string CommandHelp(const Command& command) {
  std::string out;
  AppendWrapped(command.name, kSummaryColumn, command.summary, &out);
  AppendFlags(command.flags, &out);
  if (command.trains) out += "  and the training flags below\n";
  return out;
}

std::string TrainingHelp() {
  std::string out =
      "training flags (worker; local passes them to its workers)\n";
  AppendFlags(kTrainingFlags, &out);
  return out;
}

constexpr char kUsageLines[] =
    "usage: ductile <command> [--flags]\n"
    "       ductile help [<command>]\n";

// What a wrong command line gets: the commands, without their flags.
std::string Usage() {
  std::string out = std::string(kUsageLines) + "commands:\n";
  for (const Command& c : Commands()) {
    AppendWrapped(std::string("  ") + c.name, kSummaryColumn + 2, c.summary,
                  &out);
  }
  out +=
      "apps: fmnist-logreg, fmnist-mlp, mf\n"
      "`ductile help [<command>]` lists the commands' flags.\n";
  return out;
}

std::string CommandNames() {
  std::string names;
  for (const Command& c : Commands()) {
    names += names.empty() ? "" : ", ";
    names += c.name;
  }
  return names;
}

// `ductile help [<command>]`: every command's flags, or those of `command`.
int PrintHelp(const std::string& command) {
  std::string out;
  if (command.empty()) {
    out = std::string(kUsageLines) + "\n";
    for (const Command& c : Commands()) out += CommandHelp(c) + "\n";
    out += TrainingHelp() + "\n";
  } else {
    const Command* c = FindCommand(command);
    if (c == nullptr) {
      std::fprintf(stderr, "ductile: unknown command '%s' (commands: %s)\n",
                   command.c_str(), CommandNames().c_str());
      return 2;
    }
    out = CommandHelp(*c);
    if (c->trains) out += "\n" + TrainingHelp();
    out += "\n";
  }
  out +=
      "`ductile --helpfull` lists every flag in the binary, those of the "
      "libraries too.\n";
  std::fputs(out.c_str(), stdout);
  return 0;
}

bool HelpRequested() {
  std::string help;
  return gflags::GetCommandLineOption("help", &help) && help == "true";
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage = Usage();
  gflags::SetUsageMessage(usage);
  gflags::SetVersionString("0.1.0");
  if (argc < 2) {
    std::fprintf(stderr, "%s", usage.c_str());
    return 2;
  }
  if (std::strcmp(argv[1], "help") == 0) {
    if (argc > 3) {
      std::fprintf(stderr, "usage: ductile help [<command>]\n");
      return 2;
    }
    return PrintHelp(argc == 3 ? argv[2] : "");
  }
  std::string command;
  if (argv[1][0] != '-') {
    command = argv[1];
    // Drop the subcommand so gflags sees only flags.
    for (int i = 1; i + 1 < argc; ++i) argv[i] = argv[i + 1];
    --argc;
  }
  // gflags knows no -h.
  static char help_flag[] = "--help";
  for (int i = 1; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    if (std::strcmp(argv[i], "-h") == 0) argv[i] = help_flag;
  }
  gflags::ParseCommandLineNonHelpFlags(&argc, &argv, true);
  if (HelpRequested()) {
    // `ductile --help server` as `ductile help server`.
    if (command.empty() && argc == 2) return PrintHelp(argv[1]);
    return PrintHelp(command);
  }
  // --helpfull, --version and the other gflags help flags; each exits.
  gflags::HandleCommandLineHelpFlags();
  if (command.empty()) {
    std::fprintf(stderr, "%s", usage.c_str());
    return 2;
  }
  const Command* c = FindCommand(command);
  if (c == nullptr) {
    std::fprintf(stderr, "ductile: unknown command '%s'\n%s", command.c_str(),
                 usage.c_str());
    return 2;
  }
  if (c->operand != nullptr) {
    if (argc != 2) {
      std::fprintf(stderr, "usage: ductile %s [flags] %s\n", c->name,
                   c->operand);
      return 2;
    }
    g_operand = argv[1];
    argc = 1;
  }
  if (argc > 1) {
    std::fprintf(stderr, "ductile: unexpected argument '%s'\n%s", argv[1],
                 usage.c_str());
    return 2;
  }
  // Per-app defaults for flags the user did not set.
  if (FLAGS_app == "mf" &&
      gflags::GetCommandLineFlagInfoOrDie("learning_rate").is_default) {
    FLAGS_learning_rate = 0.03;
  }
  FLAGS_logtostderr = true;
  google::InitGoogleLogging("ductile");
  if (FLAGS_keep_freed_memory) ductile::KeepFreedMemory();
  return c->run();
}
