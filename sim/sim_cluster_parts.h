// The simulated cluster's parts (sim/sim_cluster.h runs them): a worker
// running the counter workload as a state machine, and the cluster that
// runs the coordinator, the servers and the workers on one thread over a
// SimNetwork, with their crashes, joins and faults. Internal to sim/.
#ifndef DUCTILE_SIM_SIM_CLUSTER_PARTS_H_
#define DUCTILE_SIM_SIM_CLUSTER_PARTS_H_

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "client/client_impl.h"
#include "coordinator/coordinator_node.h"
#include "proto/codec.h"
#include "proto/ductile.pb.h"
#include "server/server_node.h"
#include "sim/counter_oracle.h"
#include "sim/mem_stores.h"
#include "sim/sim_cluster.h"
#include "sim/sim_env.h"

namespace ductile::sim::internal {

using std::chrono::milliseconds;
using TimePoint = SimNetwork::TimePoint;

inline constexpr char kCoordinatorAddress[] = "tcp://coordinator:1";
inline constexpr char kServerStateDir[] = "/sim/servers";
inline constexpr char kCoordinatorStateDir[] = "/sim/coordinator";

class Cluster;

// One worker running the counter workload as a state machine: it never
// blocks, and Advance() takes it as far as it can go now.
class Worker {
 public:
  Worker(Cluster* cluster, int index);
  void Advance();
  // Done, or killed: it takes no further part.
  bool done() const { return phase_ == Phase::kDone || killed_; }
  // Reached the clock it is killed at (SimOptions::worker_kills) and
  // sends nothing more; killed once its process is gone.
  bool stopped() const { return stop_at_ >= 0 && clock_ >= stop_at_; }
  bool killed() const { return killed_; }
  void Kill() {
    killed_ = true;
    client_.reset();
  }
  int32_t pid() const { return pid_; }
  int index() const { return index_; }
  // A joiner not admitted yet (it has no clock in the job).
  bool registering() const { return joiner_ && phase_ == Phase::kRegister; }
  bool idle() const { return phase_ == Phase::kIdle; }
  int64_t clock() const { return clock_; }
  ClientImpl& client() { return *client_; }
  std::string Where() const;

 private:
  enum class Phase {
    kRegister,
    kCreateTable,
    kStartBarrier,
    kStep,
    kBarrier,
    kFinalRead,
    kIdle,  // SimOptions::idle_after_ms
    kFinish,
    kRecover,
    kLeave,
    kDone
  };
  // Handles a failed call: a rollback is taken, anything else fails the run.
  void Failed(const Status& s, const char* what);
  void CheckRead();
  void CheckFinal();

  Cluster& cluster_;
  const int index_;
  std::unique_ptr<SimEnv> env_;
  std::unique_ptr<ClientImpl> client_;
  Phase phase_ = Phase::kRegister;
  bool issued_ = false;
  // Past the start (its table created and, unless it joined, the start
  // barrier passed): a rollback before takes it back to the start.
  bool started_ = false;
  // SimOptions::pause_ms: when this worker's pause ends, once begun.
  std::optional<std::chrono::steady_clock::time_point> pause_until_;
  bool paused_ = false;  // the pause is over
  std::shared_ptr<ControlOperation> control_;
  Handle push_, pull_;
  TableId table_ = 0;
  int64_t clock_ = 0;
  uint64_t generation_ = 0;  // the job's, as this worker resumed in it
  const bool joiner_;        // joins the running job
  int64_t end_;              // the clock it stops at (leaves, or the end)
  int64_t stop_at_ = -1;     // the clock it is killed at (-1: none)
  bool killed_ = false;
  int32_t pid_ = 0;
  bool leaves_ = false;
  std::vector<Key> own_key_, all_keys_;
  std::vector<float> one_{1.0f};
  std::vector<float> out_;
  std::vector<float> own_out_{0.0f};  // a push-pull's read of own_key_
};

class Cluster {
 public:
  explicit Cluster(const SimOptions& options)
      : options_(options), net_(options.seed, options.faults) {}

  SimResult Run();

  void Fail(const std::string& why) {
    if (result_.failure.empty()) result_.failure = why;
  }
  bool failed() const { return !result_.failure.empty(); }
  const SimOptions& options() const { return options_; }
  SimNetwork& net() { return net_; }
  MemDisk& disk() { return disk_; }
  // The pushes each worker has sent in the timeline of `generation`: the
  // clock the job rolled back to in it, plus the pushes made since.
  std::vector<int64_t>& sent(uint64_t generation, int64_t resumed_at = 0) {
    auto [it, inserted] = sent_.try_emplace(generation);
    if (inserted) it->second.assign(total_workers(), resumed_at);
    return it->second;
  }
  SimResult& result() { return result_; }
  bool idle_over() const { return idle_over_; }
  std::chrono::steady_clock::time_point now() const { return net_.now(); }
  bool all_joined() const {
    if (workers_.size() < static_cast<size_t>(total_workers())) return false;
    for (int64_t s : start_) {
      if (s < 0) return false;
    }
    return true;
  }
  int total_workers() const {
    return options_.workers + static_cast<int>(options_.joins.size());
  }
  // Worker w's clocks in the job: [start, end); start -1 until admitted.
  int64_t& start_of(int w) { return start_[w]; }
  int64_t end_of(int w) const { return end_[w]; }
  // Each worker's start in the timeline of `generation`, one that rolled
  // back to `resumed_at`: a worker that joined after that clock redoes the
  // clocks from it.
  std::vector<int64_t>& starts(uint64_t generation, int64_t resumed_at) {
    auto it = starts_.find(generation);
    if (it != starts_.end()) return it->second;
    std::vector<int64_t> before(total_workers(), -1);
    if (!starts_.empty()) before = std::prev(starts_.end())->second;
    for (int64_t& s : before) {
      if (s > resumed_at) s = resumed_at;
    }
    return starts_[generation] = std::move(before);
  }
  // The clock the job rolled back to in `generation`, as the coordinator
  // had it once the rollback was over (false if not seen).
  bool ResumeClockOf(uint64_t generation, int64_t* clock) const {
    auto it = resume_clocks_.find(generation);
    if (it == resume_clocks_.end()) return false;
    *clock = it->second;
    return true;
  }
  // The pushes worker w's counter holds once the clocks before `clock`
  // are all applied, in the timeline of `generation`.
  int64_t CountBefore(int w, int64_t clock, uint64_t generation) const {
    return counter_oracle::CountBefore(Span(w, generation), clock);
  }
  // The clocks worker w pushed at in the timeline of `generation`.
  counter_oracle::PushSpan Span(int w, uint64_t generation) const {
    auto it = starts_.find(generation);
    return {it == starts_.end() ? -1 : it->second[w], end_[w]};
  }

 private:
  void StartServer(int i);
  void HandleCrashes();
  // Crash k happens now: the server is killed (or paused) until its
  // restart.
  void Crash(size_t k);
  // The crashes set off by a message of the table's creation
  // (SimOptions::Crash::trigger), once the messages due are delivered and
  // before any node reads them.
  void HandleTriggeredCrashes();
  // Notes the messages of a table's creation as they arrive.
  void Observe(const std::string& node, const std::vector<std::string>& frames,
               bool router);
  void HandleDiskFaults();
  void StartCoordinator();
  void HandleCoordinatorCrashes();
  // Updates the longest stall of any worker (SimResult::longest_stall_ms).
  void NoteProgress();
  void HandleJoins();
  // Kills the workers of SimOptions::worker_kills once stopped, and
  // reports them as their launcher would; collects the answers.
  void HandleWorkerKills();
  // Starts the idle run once every worker is idle, and ends it, taking
  // the servers' exactly-once window counters, when its time has passed.
  void HandleIdle();
  void HandleServerChanges();
  // With no rollback, a server clock never moves backwards (a joiner
  // starts at it, a leaver's removal only raises it).
  void CheckServerClocks();
  TimePoint NextEvent();

  const SimOptions options_;
  SimNetwork net_;
  MemDisk disk_;
  std::unique_ptr<SimEnv> coordinator_env_;
  std::unique_ptr<CoordinatorNode> coordinator_;
  std::vector<std::unique_ptr<SimEnv>> server_envs_;
  std::vector<std::unique_ptr<ServerNode>> servers_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::map<uint64_t, std::vector<int64_t>> sent_;    // by generation
  std::vector<int64_t> start_, end_;                 // by worker
  std::map<uint64_t, std::vector<int64_t>> starts_;  // by generation
  std::map<uint64_t, int64_t> resume_clocks_;        // by generation
  std::vector<int64_t> server_clock_;                // by server, seen last
  size_t drains_started_ = 0, drains_ended_ = 0;
  TimePoint drain_retry_at_{};
  bool draining_call_ = false;  // inside DrainServer()
  bool drain_refused_ = false;  // and refused there, to be asked again
  // Per worker: the clock last seen, and since when.
  std::vector<std::pair<int64_t, TimePoint>> progress_;
  // Crashes: done, and when the server comes back.
  std::vector<bool> crashed_;
  std::vector<std::optional<TimePoint>> restart_at_;
  std::vector<bool> paused_;  // by server
  // Servers that a TABLE_CREATE has reached, and whose TABLE_CREATE_ACK
  // has reached the coordinator.
  std::set<int> table_create_arrived_, table_ack_arrived_;
  // When the idle run after the workload ends (SimOptions::idle_after_ms),
  // and whether it has.
  std::optional<TimePoint> idle_until_;
  bool idle_over_ = false;
  // Disk faults: started, and when they end.
  std::vector<bool> disk_fault_started_;
  std::vector<std::optional<TimePoint>> disk_fault_end_;
  // Coordinator crashes: when it goes down (once its clock is passed) and
  // comes back; both reset once done.
  std::vector<std::optional<TimePoint>> coordinator_down_at_,
      coordinator_up_at_;
  std::vector<bool> coordinator_crash_done_;
  // Worker kills: when each worker's process ends (once it has stopped),
  // and whether it has.
  std::vector<std::optional<TimePoint>> kill_at_;
  std::vector<bool> kill_done_;
  // The launcher's connection, for reports of a member's exit.
  std::unique_ptr<Transport> launcher_transport_;
  std::unique_ptr<Socket> launcher_;
  SimResult result_;
};

}  // namespace ductile::sim::internal

#endif  // DUCTILE_SIM_SIM_CLUSTER_PARTS_H_
