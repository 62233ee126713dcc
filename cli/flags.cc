// Every flag of the `ductile` command, with its meaning and default. Which
// command reads which is in cli/commands.cc (the help's table); the Options
// they become, and every range check, are in the library
// (Validate(ServerOptions), Validate(CoordinatorOptions),
// train::Validate(TrainerOptions)).
#include "cli/flags.h"

#include <cstdint>

#include "ductile/limits.h"

// Cluster.
DEFINE_string(coordinator, "tcp://127.0.0.1:7000",
              "coordinator address (server, worker, status, shutdown, "
              "checkpoint)");
DEFINE_string(listen, "tcp://127.0.0.1:7000",
              "coordinator: address to listen on (port 0 picks one)");
DEFINE_string(address_file, "",
              "coordinator: write the address it listens on to this file");
DEFINE_int32(servers, 2, "number of servers (resize: the new target)");
DEFINE_int32(workers, 2, "number of workers (resize: the new target)");
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
             "is no longer waited for); k8s-controller: the coordinator's, "
             "a member listed dead 5 times this long while its pod runs "
             "has the pod deleted");
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
DEFINE_int64(timeout_ms, ductile::kDefaultTimeoutMs,
             "request and connect timeout in milliseconds; checkpoint: how "
             "long to wait for the checkpoint to complete");
DEFINE_bool(verbose, false, "local: show the cluster processes' INFO logs");

// Fault tolerance.
DEFINE_string(state_dir, "",
              "durable state: the coordinator's RocksDB (a coordinator "
              "started on it resumes its job), the servers' checkpoint "
              "stores, shared by all; local: the whole cluster's (default: "
              "a temporary directory, removed at exit)");
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
DEFINE_int32(replicas, 1,
             "coordinator, local: copies of each slot: 1 (a server's death "
             "rolls the job back to the last checkpoint) or 2 (each slot "
             "also on a backup server, which takes it over when its server "
             "dies, with no rollback)");
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
             "server, coordinator, local: space each server's checkpoint "
             "store, and the coordinator's state store, leave free on "
             "their disk, in MB (0 to 1048576); a checkpoint that would "
             "leave less fails with a clear error, and a coordinator that "
             "cannot save its state does not start, or admits no worker "
             "until it can (0: no check)");
DEFINE_uint64(max_key_floats, 1 << 24,
              "server, local: widest value one key of a variable-width "
              "table may have, in floats "
              "(1 to 268435456); wider pushes and pulls are refused");
DEFINE_uint64(max_stored_mb, 0,
              "server, local: memory each server's tables may hold, in MB; "
              "a push of new keys beyond it is refused (0: three quarters "
              "of physical memory)");
DEFINE_int64(max_queued_replies, 10000,
             "server, coordinator, local: replies a process queues for one "
             "peer that does not read them (1 to 10000000); more are "
             "dropped");
DEFINE_int64(max_queued_reply_mb, 256,
             "server, coordinator, local: MiB of replies a process queues "
             "for one peer that does not read them (1 to 1048576); a larger "
             "reply beyond is refused with ResourceExhausted");
DEFINE_int64(max_queued_requests, 1000,
             "server, coordinator, local: requests of one peer that wait to "
             "be read (1 to 10000000); past it the process reads no more "
             "from that peer until it has taken some");
DEFINE_uint64(max_window_per_client, uint64_t{1} << 22,
              "server, local: sequence numbers a server's exactly-once "
              "window keeps per client above its done-below mark (1 to "
              "2^30); a client's push beyond is refused");
DEFINE_uint64(max_parked_pulls_per_worker, 1024,
              "server, local: pulls of one worker that wait at a server "
              "for the staleness bound at once (1 to 1048576); more are "
              "refused");
DEFINE_uint64(max_parked_pulls, 65536,
              "server, local: pulls that wait at a server for the "
              "staleness bound at once, all workers' (1 to 16777216); more "
              "are refused");
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
DEFINE_int64(handshake_timeout_ms, 10000,
             "close a connection whose handshake (and, with --keys, its "
             "key's proof) is not done within this many ms "
             "[100, 600000]");
DEFINE_int64(reserved_descriptors, 128,
             "file descriptors kept for this process's own files and "
             "sockets: a tcp:// connection that would leave fewer free is "
             "closed at once [16, 65536]");
DEFINE_int64(max_connections_per_source, 256,
             "the most tcp:// connections a port keeps from one address; "
             "more are closed at once; 0: no cap [0, 1048576]");
DEFINE_string(member_key, "",
              "server, worker: a key pair of its own (`ductile keygen "
              "--member=NAME`); its member id is bound to it");
DEFINE_int32(watch, 0,
             "status: show the status again every this many seconds, as a "
             "live table (1 to 3600; 0: once); stops after 5 failed reads "
             "in a row");
DEFINE_int32(pid, 0,
             "exited: the process that exited, by the pid it registered "
             "with (`ductile status`; 0: named by --incarnation only)");
DEFINE_uint64(incarnation, 0,
              "exited: the process that exited, by its registration's "
              "number (`ductile status`; 0: named by --pid only)");
DEFINE_int32(metrics_port, -1,
             "coordinator, local: Prometheus metrics at "
             "http://HOST:PORT/metrics (0: a free port; -1: off; plain HTTP, "
             "no keys)");
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
              "local: resize the job as it runs, e.g. "
              "workers=4@clock=300,servers=3@clock=600: new members join "
              "the running job, the newest leave first (docs/elasticity.md)");

// App.
DEFINE_string(app, "fmnist-logreg",
              "built-in app the workers run: fmnist-logreg, fmnist-mlp, mf");
DEFINE_string(device, "auto",
              "fmnist-mlp's device: cpu (OpenBLAS), cuda (cuBLAS) or auto "
              "(cuda if there is a GPU)");
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
DEFINE_uint64(admit_after_pushes, 0,
              "mf: store a factor row only at the N-th push of its id, its "
              "earlier gradients dropped (0 and 1: at the first); 0 - 65535");
DEFINE_uint64(admission_counters, 0,
              "mf: counters of the admission filter (0: 2^20; else 1024 - "
              "2^24)");
DEFINE_int64(evict_idle_clocks, 0,
             "mf: remove factor rows not updated for this many clocks (0: "
             "never)");
DEFINE_uint64(max_rows, 0,
              "mf: keep at most this many rows of each factor table on each "
              "server (0: unbounded), removing the rows --eviction picks");
DEFINE_string(eviction, "least_recent",
              "mf: the rows --max_rows removes: least_recent (updated) or "
              "least_used (pushed the fewest times)");
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
