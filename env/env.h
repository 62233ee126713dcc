// What a node (a server, the coordinator, a client's I/O side) needs from
// the world, behind one interface: time, transport, durable storage and
// background threads. The model is leveldb's Env.
//
// SystemEnv() is the real one: the steady clock, ZeroMQ, RocksDB, threads.
// The simulation (sim/sim_env.h) supplies a fake clock it advances itself, a
// network that delays, reorders, duplicates and drops messages, stores in
// memory and no background thread, so that a whole cluster runs in one
// thread, deterministically for a given seed.
//
// Thread-safe: SystemEnv may be used from any thread; a simulated Env
// belongs to the simulation's one thread.
#ifndef DUCTILE_ENV_ENV_H_
#define DUCTILE_ENV_ENV_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ductile/security.h"
#include "ductile/status.h"
#include "storage/checkpoint_store.h"
#include "storage/coordinator_store.h"
#include "transport/socket.h"

namespace ductile {

// A thread that runs tasks one at a time, in the order they were
// scheduled, beside the thread that schedules them: work that blocks (a
// checkpoint's write, a slot move's encoding) without holding that thread
// up. Destroying it waits for the tasks scheduled (they all run) and joins
// the thread.
class BackgroundThread {
 public:
  // kLower: below the process's other threads (SystemEnv's: nice + 10),
  // for work that may take its time (a checkpoint's write); kSame: as the
  // others, for work someone waits for (a slot move's chunks).
  enum class Priority { kLower, kSame };
  virtual ~BackgroundThread() = default;
  // Any thread. `task` runs on the background thread.
  virtual void Schedule(std::function<void()> task) = 0;
};

class Env {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  virtual ~Env() = default;

  // Monotonic time.
  virtual TimePoint Now() = 0;
  // Wall-clock time in milliseconds since the epoch (for records people
  // read, never for deciding).
  virtual int64_t UnixMs() = 0;
  // A random number for ids that must differ between processes (client
  // ids): truly random here, seeded in a simulation.
  virtual uint64_t RandomU64() = 0;
  // The process's id on its host (getpid()): a member registers with it,
  // so that whoever started the process can name it in a report of its
  // exit (ReportMemberExit). A simulation gives each node a number of its
  // own, a new one for a node started again.
  virtual int32_t ProcessId() = 0;

  // A transport of the node's own: its sockets belong to it. `node` names
  // the node (the simulation uses it to tell nodes apart); `security` says
  // how its connections are secured, and `io_threads` how many threads
  // move its bytes (ZeroMQ's I/O threads; a simulation ignores both).
  virtual std::unique_ptr<Transport> NewTransport(const std::string& node,
                                                  const Security& security,
                                                  int io_threads) = 0;

  // Durable storage (storage/checkpoint_store.h, storage/coordinator_store.h).
  virtual Result<std::unique_ptr<CheckpointStore>> OpenCheckpointStore(
      const CheckpointStoreOptions& options) = 0;
  // Reads a frozen version of another server's store.
  virtual Result<LoadedCheckpoint> LoadCheckpointFrom(const std::string& dir,
                                                      int64_t clock) = 0;
  virtual Result<std::unique_ptr<CoordinatorStore>> OpenCoordinatorStore(
      const CoordinatorStoreOptions& options) = 0;

  // A background thread of the caller's own, named `name` (for debuggers),
  // or null where there is none: the caller then does the work itself, in
  // line. The simulation has none, so that the work takes no simulated time
  // and lands at the same point of every run with a seed.
  virtual std::unique_ptr<BackgroundThread> NewBackgroundThread(
      const std::string& /*name*/, BackgroundThread::Priority /*priority*/) {
    return nullptr;
  }
};

// The process's real environment; never destroyed.
Env* SystemEnv();

}  // namespace ductile

#endif  // DUCTILE_ENV_ENV_H_
