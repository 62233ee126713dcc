// The `ductile` command's flags, defined once in cli/flags.cc and read only
// by the functions in cli/ that build each role's Options from them
// (cli/options_from_flags.h) and by the commands.
#ifndef DUCTILE_CLI_FLAGS_H_
#define DUCTILE_CLI_FLAGS_H_

#include "gflags/gflags.h"

DECLARE_string(coordinator);
DECLARE_string(listen);
DECLARE_string(address_file);
DECLARE_int32(servers);
DECLARE_int32(workers);
DECLARE_int32(max_workers);
DECLARE_int32(max_servers);
DECLARE_int32(slots);
DECLARE_int64(no_worker_timeout_ms);
DECLARE_int64(heartbeat_timeout_ms);
DECLARE_string(host);
DECLARE_int32(port);
DECLARE_string(ipc_dir);
DECLARE_int32(server_id);
DECLARE_int32(worker_id);
DECLARE_int64(timeout_ms);
DECLARE_bool(verbose);
DECLARE_string(state_dir);
DECLARE_int64(checkpoint_every);
DECLARE_double(checkpoint_interval_s);
DECLARE_int64(checkpoint_timeout_ms);
DECLARE_int64(move_timeout_ms);
DECLARE_int32(keep_checkpoints);
DECLARE_int64(coordinator_timeout_ms);
DECLARE_int64(disk_reserve_mb);
DECLARE_uint64(max_key_floats);
DECLARE_uint64(max_stored_mb);
DECLARE_int64(max_queued_replies);
DECLARE_uint64(max_window_per_client);
DECLARE_int64(client_idle_expiry_s);
DECLARE_int32(noise_scale_sample);
DECLARE_int32(apply_threads);
DECLARE_int32(io_threads);
DECLARE_bool(shm_values);
DECLARE_bool(keep_freed_memory);
DECLARE_string(keys);
DECLARE_bool(insecure);
DECLARE_string(member_key);
DECLARE_int32(watch);
DECLARE_int32(pid);
DECLARE_uint64(incarnation);
DECLARE_int32(metrics_port);
DECLARE_string(metrics_host);
DECLARE_string(policy);
DECLARE_string(worker_policy);
DECLARE_int32(policy_interval_ms);
DECLARE_bool(require_member_keys);
DECLARE_string(out);
DECLARE_string(member);
DECLARE_string(kill_schedule);
DECLARE_string(provider);
DECLARE_string(srun_flags);
DECLARE_string(image);
DECLARE_string(job_name);
DECLARE_bool(controller);
DECLARE_string(namespace);
DECLARE_string(kubectl);
DECLARE_string(state_claim);
DECLARE_string(keys_secret);
DECLARE_string(slurm_bin_dir);
DECLARE_string(resize_schedule);
DECLARE_string(app);
DECLARE_string(device);
DECLARE_string(csv_log);
DECLARE_bool(prefetch);
DECLARE_bool(overlap_push);
DECLARE_bool(layered_pulls);
DECLARE_string(layers);
DECLARE_uint64(mf_rows);
DECLARE_uint64(mf_cols);
DECLARE_uint64(mf_rank);
DECLARE_double(mf_observed);
DECLARE_double(mf_noise);
DECLARE_double(max_rmse);
DECLARE_string(data_dir);
DECLARE_int32(epochs);
DECLARE_int32(batch_size);
DECLARE_string(optimizer);
DECLARE_double(learning_rate);
DECLARE_int32(lr_for_batch);
DECLARE_double(lr_warmup_epochs);
DECLARE_string(lr_decay);
DECLARE_double(lr_step_epochs);
DECLARE_double(lr_gamma);
DECLARE_double(lr_min_factor);
DECLARE_string(lr_scaling);
DECLARE_int64(lr_scaling_ramp);
DECLARE_double(l2);
DECLARE_string(consistency);
DECLARE_int32(staleness);
DECLARE_bool(cache);
DECLARE_string(bsp_combine);
DECLARE_uint64(seed);
DECLARE_int32(log_every);
DECLARE_int64(max_samples);
DECLARE_double(min_accuracy);

#endif  // DUCTILE_CLI_FLAGS_H_
