// The Env of a simulated cluster: the network's fake clock and sockets,
// in-memory stores, and random numbers from the run's seed.
#ifndef DUCTILE_SIM_SIM_ENV_H_
#define DUCTILE_SIM_SIM_ENV_H_

#include <memory>
#include <string>
#include <utility>

#include "env/env.h"
#include "sim/mem_stores.h"
#include "sim/sim_network.h"

namespace ductile::sim {

// One per simulated node: its sockets are named after `node`, so that
// SimNetwork::Crash(node) takes exactly them.
class SimEnv final : public Env {
 public:
  SimEnv(SimNetwork* network, MemDisk* disk, std::string node)
      : network_(network),
        disk_(disk),
        node_(std::move(node)),
        pid_(network->NewProcessId()) {}

  TimePoint Now() override { return network_->now(); }
  int64_t UnixMs() override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               network_->now().time_since_epoch())
        .count();
  }
  uint64_t RandomU64() override { return network_->rng()(); }
  int32_t ProcessId() override { return pid_; }
  std::unique_ptr<Transport> NewTransport(const std::string&, const Security&,
                                          int) override {
    return network_->NewTransport(node_);
  }
  Result<std::unique_ptr<CheckpointStore>> OpenCheckpointStore(
      const CheckpointStoreOptions& options) override {
    return disk_->OpenCheckpointStore(options);
  }
  Result<LoadedCheckpoint> LoadCheckpointFrom(const std::string& dir,
                                              int64_t clock) override {
    return disk_->LoadCheckpointFrom(dir, clock);
  }
  Result<std::unique_ptr<CoordinatorStore>> OpenCoordinatorStore(
      const CoordinatorStoreOptions& options) override {
    return disk_->OpenCoordinatorStore(options.dir);
  }

 private:
  SimNetwork* const network_;
  MemDisk* const disk_;
  const std::string node_;
  const int32_t pid_;
};

}  // namespace ductile::sim

#endif  // DUCTILE_SIM_SIM_ENV_H_
