#include "server/server_impl.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "glog/logging.h"
#include "proto/codec.h"
#include "transport/queued_bytes.h"

namespace ductile {

Status Validate(const ServerOptions& options) {
  DUCTILE_RETURN_IF_ERROR(ValidateConnectionLimits(options.security));
  if (options.heartbeat_interval_ms < 10 ||
      options.heartbeat_interval_ms > 60000) {
    return InvalidArgumentError("heartbeat_interval_ms must be in [10, 60000]");
  }
  if (options.move_timeout_ms < 100 || options.move_timeout_ms > 86400000) {
    return InvalidArgumentError("move_timeout_ms must be in [100, 86400000]");
  }
  if (options.replica_copy_chunk_bytes < 1 ||
      options.replica_copy_chunk_bytes > (uint64_t{1} << 30)) {
    return InvalidArgumentError(
        "replica_copy_chunk_bytes must be in [1, 1073741824]");
  }
  if (options.coordinator_timeout_ms != 0 &&
      (options.coordinator_timeout_ms < 1000 ||
       options.coordinator_timeout_ms > 604800000)) {
    return InvalidArgumentError(
        "coordinator_timeout_ms must be 0 or in [1000, 604800000]");
  }
  if (options.keep_checkpoints < 1) {
    return InvalidArgumentError("keep_checkpoints must be >= 1");
  }
  if (options.disk_reserve_mb < 0 || options.disk_reserve_mb > (1 << 20)) {
    return InvalidArgumentError("disk_reserve_mb must be in [0, 1048576]");
  }
  if (options.max_key_floats < 1 || options.max_key_floats > kMaxValueFloats) {
    return InvalidArgumentError("max_key_floats must be in [1, " +
                                std::to_string(kMaxValueFloats) + "]");
  }
  DUCTILE_RETURN_IF_ERROR(ValidatePeerQueueLimits(options.max_queued_replies,
                                                  options.max_queued_reply_mb,
                                                  options.max_queued_requests));
  if (options.max_window_per_client < 1 ||
      options.max_window_per_client > (uint64_t{1} << 30)) {
    return InvalidArgumentError(
        "max_window_per_client must be in [1, 1073741824], not " +
        std::to_string(options.max_window_per_client));
  }
  if (options.max_parked_pulls_per_worker < 1 ||
      options.max_parked_pulls_per_worker > (uint64_t{1} << 20)) {
    return InvalidArgumentError(
        "max_parked_pulls_per_worker must be in [1, 1048576], not " +
        std::to_string(options.max_parked_pulls_per_worker));
  }
  if (options.max_parked_pulls < 1 ||
      options.max_parked_pulls > (uint64_t{1} << 24)) {
    return InvalidArgumentError(
        "max_parked_pulls must be in [1, 16777216], not " +
        std::to_string(options.max_parked_pulls));
  }
  if (options.apply_threads < 0 || options.apply_threads > 256) {
    return InvalidArgumentError("apply_threads must be in [0, 256], not " +
                                std::to_string(options.apply_threads));
  }
  if (options.io_threads < 0 || options.io_threads > 64) {
    return InvalidArgumentError("io_threads must be in [0, 64], not " +
                                std::to_string(options.io_threads));
  }
  if (options.client_idle_expiry_s < 60 ||
      options.client_idle_expiry_s > 30 * 86400) {
    return InvalidArgumentError(
        "client_idle_expiry_s must be in [60, 2592000], not " +
        std::to_string(options.client_idle_expiry_s));
  }
  if (options.noise_scale_sample > (1u << 20)) {
    return InvalidArgumentError(
        "noise_scale_sample must be in [0, 1048576], not " +
        std::to_string(options.noise_scale_sample));
  }
  if (options.max_stored_mb > (uint64_t{1} << 30)) {
    return InvalidArgumentError("max_stored_mb must be in [0, 1073741824]");
  }
  if (options.port < 0 || options.port > 65535) {
    return InvalidArgumentError("port must be in [0, 65535]");
  }
  return Status::Ok();
}

Result<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  DUCTILE_RETURN_IF_ERROR(Validate(options));
  auto server = std::make_unique<ServerImpl>(options);
  DUCTILE_RETURN_IF_ERROR(server->Init());
  return std::unique_ptr<Server>(std::move(server));
}

ServerImpl::ServerImpl(const ServerOptions& options)
    : options_(options), env_(SystemEnv()), node_(options_, env_) {
  node_.set_wakeup([this] { wakeup_.Signal(); });
}

ServerImpl::~ServerImpl() {
  Stop();
  Wait().IgnoreError();
}

Status ServerImpl::Init() {
  DUCTILE_RETURN_IF_ERROR(node_.Start());
  const auto deadline =
      env_->Now() + std::chrono::milliseconds(options_.connect_timeout_ms);
  const std::vector<Socket*> sockets = node_.sockets();
  while (!node_.registered()) {
    DUCTILE_RETURN_IF_ERROR(node_.failure());
    if (env_->Now() >= deadline) {
      return DeadlineExceededError(
          "no answer from coordinator at " + options_.coordinator_address +
          " within " + std::to_string(options_.connect_timeout_ms) + " ms");
    }
    DUCTILE_RETURN_IF_ERROR(node_.transport()->Wait(
        {sockets.data() + 1, 1}, -1, std::min(deadline, node_.NextWakeup())));
    node_.Step();
  }
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

Status ServerImpl::Wait() {
  MutexLock lock(&wait_mu_);
  if (thread_.joinable()) thread_.join();
  return exit_status_;
}

void ServerImpl::Stop() {
  stop_.store(true);
  wakeup_.Signal();
}

void ServerImpl::Run() {
  while (!stop_.load() && !node_.shut_down()) {
    // The list changes while slots move away.
    const std::vector<Socket*> sockets = node_.sockets();
    Status s =
        node_.transport()->Wait(sockets, wakeup_.fd(), node_.NextWakeup());
    if (!s.ok()) {
      exit_status_ = s;
      break;
    }
    wakeup_.Drain();
    node_.Step();
  }
  if (exit_status_.ok()) exit_status_ = node_.failure();
  LOG(INFO) << "server " << node_.id() << " stopped";
}

}  // namespace ductile
