#include <unistd.h>

#include <chrono>
#include <random>

#include "env/env.h"
#include "transport/zmq_transport.h"

namespace ductile {
namespace {

class RealEnv final : public Env {
 public:
  TimePoint Now() override { return std::chrono::steady_clock::now(); }

  int64_t UnixMs() override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  uint64_t RandomU64() override {
    std::random_device rd;
    return (uint64_t{rd()} << 32) | rd();
  }

  int32_t ProcessId() override { return static_cast<int32_t>(getpid()); }

  std::unique_ptr<Transport> NewTransport(const std::string&,
                                          const Security& security,
                                          int io_threads) override {
    return NewZmqTransport(security, io_threads);
  }

  Result<std::unique_ptr<CheckpointStore>> OpenCheckpointStore(
      const CheckpointStoreOptions& options) override {
    return CheckpointStore::Open(options);
  }

  Result<LoadedCheckpoint> LoadCheckpointFrom(const std::string& dir,
                                              int64_t clock) override {
    return ::ductile::LoadCheckpointFrom(dir, clock);
  }

  Result<std::unique_ptr<CoordinatorStore>> OpenCoordinatorStore(
      const CoordinatorStoreOptions& options) override {
    return CoordinatorStore::Open(options);
  }
};

}  // namespace

Env* SystemEnv() {
  static Env* env = new RealEnv;
  return env;
}

}  // namespace ductile
