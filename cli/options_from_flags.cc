#include "cli/options_from_flags.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cli/flags.h"
#include "glog/logging.h"
#include "launch/launch_env.h"

namespace ductile::cli {
namespace {

bool FlagIsDefault(const char* name) {
  return gflags::GetCommandLineFlagInfoOrDie(name).is_default;
}

// Parses "784,256,10".
bool ParseSizes(const std::string& text, std::vector<size_t>* out) {
  out->clear();
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    if (item.empty() || item.size() > 9 ||
        item.find_first_not_of("0123456789") != std::string::npos) {
      return false;
    }
    out->push_back(std::stoul(item));
    start = comma + 1;
  }
  return !out->empty();
}

// A library's InvalidArgument error about an Options field, said of the
// flag that set it: "max_key_floats must be ..." becomes "--max_key_floats
// must be ...", and a field whose flag has another name takes that name
// ("num_slots ..." becomes "--slots ..."). Other errors pass as they are.
Status AsFlagError(const Status& s,
                   const std::map<std::string, std::string>& renamed = {}) {
  if (s.ok() || s.code() != StatusCode::kInvalidArgument) return s;
  const std::string& message = s.message();
  const std::string field = message.substr(0, message.find(' '));
  if (field.empty() || field.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") !=
                           std::string::npos) {
    return s;
  }
  const auto it = renamed.find(field);
  const std::string flag = it == renamed.end() ? field : it->second;
  gflags::CommandLineFlagInfo info;
  if (!gflags::GetCommandLineFlagInfo(flag.c_str(), &info)) return s;
  return InvalidArgumentError("--" + flag + message.substr(field.size()));
}

}  // namespace

int Fail(const Status& status) {
  std::fprintf(stderr, "ductile: %s\n", status.ToString().c_str());
  return 1;
}

namespace {

// The connection limits of every role, keys or not.
void SetConnectionLimits(Security* security) {
  security->handshake_timeout_ms = FLAGS_handshake_timeout_ms;
  security->reserved_descriptors = FLAGS_reserved_descriptors;
  security->max_connections_per_source = FLAGS_max_connections_per_source;
}

}  // namespace

Result<Security> SecurityFromFlags(bool as_admin, const std::string& member) {
  const bool require_set = !FlagIsDefault("require_member_keys");
  if (FLAGS_keys.empty()) {
    if (!FLAGS_member_key.empty() ||
        (require_set && FLAGS_require_member_keys)) {
      return InvalidArgumentError(std::string(FLAGS_member_key.empty()
                                                  ? "--require_member_keys"
                                                  : "--member_key") +
                                  " goes with the cluster's keys (--keys=DIR)");
    }
    Security plain;
    plain.allow_plain_network = FLAGS_insecure;
    SetConnectionLimits(&plain);
    return plain;
  }
  if (FLAGS_insecure) {
    return InvalidArgumentError(
        "--insecure is for plain mode: it cannot go with --keys");
  }
  Result<Security> security = LoadClusterKeys(FLAGS_keys, as_admin);
  if (!security.ok()) return security;
  security->require_member_keys = FLAGS_require_member_keys;
  SetConnectionLimits(&*security);
  std::string key_file = FLAGS_member_key;
  if (key_file.empty() && !member.empty() && !security->admin()) {
    const std::string own = FLAGS_keys + "/members/" + member + ".key";
    if (access(own.c_str(), F_OK) == 0) {
      key_file = own;
    } else if (FLAGS_require_member_keys) {
      return FailedPreconditionError(
          "with --keys, each server and worker proves a key of its own, and " +
          own + " is not there: make it with `ductile keygen --out=" +
          FLAGS_keys + " --member=" + member +
          "` (or --servers=N --workers=M for all), or give --member_key=FILE "
          "(--norequire_member_keys lets members share cluster.key, and "
          "then any of them can act for another)");
    }
  }
  if (key_file.empty()) return security;
  DUCTILE_RETURN_IF_ERROR(LoadMemberKey(key_file, &*security));
  return security;
}

Result<int32_t> IdOrRank(int32_t flag, const char* role) {
  if (flag >= 0) return flag;
  std::string source;
  Result<int32_t> rank = launch::RankFromEnvironment(&source);
  if (rank.ok() && *rank >= 0) {
    LOG(INFO) << role << " id " << *rank << " from " << source;
  }
  return rank;
}

Result<CoordinatorOptions> CoordinatorOptionsFromFlags(bool launched) {
  CoordinatorOptions o;
  o.bind_address = FLAGS_listen;
  o.num_servers = FLAGS_servers;
  o.num_workers = FLAGS_workers;
  o.max_workers = FLAGS_max_workers;
  o.num_slots = FLAGS_slots;
  o.heartbeat_timeout_ms = FLAGS_heartbeat_timeout_ms;
  o.no_worker_timeout_ms = FLAGS_no_worker_timeout_ms;
  o.max_queued_replies = FLAGS_max_queued_replies;
  o.max_queued_reply_mb = FLAGS_max_queued_reply_mb;
  o.max_queued_requests = FLAGS_max_queued_requests;
  o.state_dir = FLAGS_state_dir;
  o.disk_reserve_mb = FLAGS_disk_reserve_mb;
  o.checkpoint_every_clocks = FLAGS_checkpoint_every;
  o.checkpoint_interval_s = FLAGS_checkpoint_interval_s;
  o.checkpoint_timeout_ms = FLAGS_checkpoint_timeout_ms;
  o.replicas = FLAGS_replicas;
  auto policies = MakeBuiltinPolicies(FLAGS_policy);
  if (!policies.ok()) return policies.status();
  o.policies = std::move(*policies);
  o.policy_interval_ms = FLAGS_policy_interval_ms;
  if (launched) {
    // The launcher's own directory (a temporary one, or a volume's).
    if (o.state_dir.empty()) o.state_dir = "/nonexistent/launched";
    if (FlagIsDefault("checkpoint_every") &&
        FlagIsDefault("checkpoint_interval_s")) {
      o.checkpoint_every_clocks = kLaunchedCheckpointEvery;
    }
  }
  DUCTILE_RETURN_IF_ERROR(
      AsFlagError(Validate(o), {{"num_servers", "servers"},
                                {"num_workers", "workers"},
                                {"num_slots", "slots"},
                                {"checkpoint_every_clocks", "checkpoint_every"},
                                {"bind_address", "listen"}}));
  return o;
}

Result<ServerOptions> ServerOptionsFromFlags(int32_t requested_id) {
  if (FLAGS_noise_scale_sample < 0) {
    return InvalidArgumentError("--noise_scale_sample must be in [0, 1048576]");
  }
  ServerOptions o;
  o.coordinator_address = FLAGS_coordinator;
  o.host = FLAGS_host;
  o.port = FLAGS_port;
  o.ipc_dir = FLAGS_ipc_dir;
  o.requested_id = requested_id;
  o.connect_timeout_ms = FLAGS_timeout_ms;
  o.state_dir = FLAGS_state_dir;
  o.keep_checkpoints = FLAGS_keep_checkpoints;
  o.disk_reserve_mb = FLAGS_disk_reserve_mb;
  o.max_key_floats = FLAGS_max_key_floats;
  o.max_stored_mb = FLAGS_max_stored_mb;
  o.max_queued_replies = FLAGS_max_queued_replies;
  o.max_queued_reply_mb = FLAGS_max_queued_reply_mb;
  o.max_queued_requests = FLAGS_max_queued_requests;
  o.max_window_per_client = FLAGS_max_window_per_client;
  o.client_idle_expiry_s = FLAGS_client_idle_expiry_s;
  o.max_parked_pulls_per_worker = FLAGS_max_parked_pulls_per_worker;
  o.max_parked_pulls = FLAGS_max_parked_pulls;
  o.noise_scale_sample = static_cast<uint32_t>(FLAGS_noise_scale_sample);
  o.apply_threads = FLAGS_apply_threads;
  o.io_threads = FLAGS_io_threads;
  o.shm_values = FLAGS_shm_values;
  o.coordinator_timeout_ms = FLAGS_coordinator_timeout_ms;
  o.move_timeout_ms = FLAGS_move_timeout_ms;
  DUCTILE_RETURN_IF_ERROR(AsFlagError(
      Validate(o),
      {{"connect_timeout_ms", "timeout_ms"}, {"requested_id", "server_id"}}));
  return o;
}

Result<ClientOptions> WorkerClientOptionsFromFlags() {
  ClientOptions o;
  o.coordinator_address = FLAGS_coordinator;
  o.connect_timeout_ms = FLAGS_timeout_ms;
  o.request_timeout_ms = FLAGS_timeout_ms;
  o.enable_cache = FLAGS_cache;
  o.io_threads = FLAGS_io_threads;
  if (!FLAGS_shm_values) o.shm_reply_bytes = 0;
  DUCTILE_RETURN_IF_ERROR(
      AsFlagError(Validate(o), {{"timeouts", "timeout_ms"}}));
  return o;
}

Result<train::TrainerOptions> TrainerOptionsFromFlags() {
  train::TrainerOptions t;
  t.app = FLAGS_app;
  t.device = FLAGS_device;
  t.data_dir = FLAGS_data_dir;
  t.epochs = FLAGS_epochs;
  t.batch_size = FLAGS_batch_size;
  const std::map<std::string, UpdateRule> optimizers = {
      {"sgd", UpdateRule::kSgd},
      {"momentum", UpdateRule::kMomentum},
      {"adagrad", UpdateRule::kAdaGrad},
      {"adam", UpdateRule::kAdam}};
  auto optimizer = optimizers.find(FLAGS_optimizer);
  if (optimizer == optimizers.end()) {
    return InvalidArgumentError("unknown --optimizer '" + FLAGS_optimizer +
                                "' (sgd, momentum, adagrad, adam)");
  }
  t.optimizer = optimizer->second;
  if (FLAGS_consistency == "bsp") {
    t.consistency.mode = ConsistencyMode::kBsp;
  } else if (FLAGS_consistency == "ssp") {
    t.consistency.mode = ConsistencyMode::kSsp;
  } else if (FLAGS_consistency != "async") {
    return InvalidArgumentError("unknown --consistency '" + FLAGS_consistency +
                                "' (bsp, ssp, async)");
  }
  if (FLAGS_staleness < 0) {
    return InvalidArgumentError("--staleness must be >= 0");
  }
  t.consistency.staleness = FLAGS_staleness;
  if (FLAGS_bsp_combine == "sum") {
    t.consistency.combine = BspCombine::kSum;
  } else if (FLAGS_bsp_combine != "mean") {
    return InvalidArgumentError("unknown --bsp_combine '" + FLAGS_bsp_combine +
                                "' (mean, sum)");
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
  auto worker_policies = MakeBuiltinWorkerPolicies(FLAGS_worker_policy);
  if (!worker_policies.ok()) return worker_policies.status();
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
    return InvalidArgumentError(
        "--layers must be sizes separated by commas, e.g. 784,256,128,10");
  }
  t.mf_rows = FLAGS_mf_rows;
  t.mf_cols = FLAGS_mf_cols;
  t.mf_rank = FLAGS_mf_rank;
  t.mf_observed = FLAGS_mf_observed;
  t.mf_noise = FLAGS_mf_noise;
  // Saturated: Validate names the flag of a value out of range.
  t.rows.admit_after_pushes = static_cast<uint32_t>(
      std::min<uint64_t>(FLAGS_admit_after_pushes, UINT32_MAX));
  t.rows.admission_counters = FLAGS_admission_counters;
  t.rows.evict_idle_clocks = FLAGS_evict_idle_clocks;
  t.rows.max_rows = FLAGS_max_rows;
  if (FLAGS_eviction == "least_used") {
    t.rows.eviction = RowPolicy::Eviction::kLeastUsed;
  } else if (FLAGS_eviction != "least_recent") {
    return InvalidArgumentError(
        "--eviction must be least_recent or least_used, not '" +
        FLAGS_eviction + "'");
  }
  DUCTILE_RETURN_IF_ERROR(train::Validate(t));
  return t;
}

}  // namespace ductile::cli
