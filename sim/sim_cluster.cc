#include "sim/sim_cluster.h"

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
#include "sim/mem_stores.h"
#include "sim/sim_env.h"

namespace ductile::sim {
namespace {

using std::chrono::milliseconds;
using TimePoint = SimNetwork::TimePoint;

constexpr char kCoordinatorAddress[] = "tcp://coordinator:1";
constexpr char kServerStateDir[] = "/sim/servers";
constexpr char kCoordinatorStateDir[] = "/sim/coordinator";

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
    auto it = starts_.find(generation);
    const int64_t start = it == starts_.end() ? -1 : it->second[w];
    if (start < 0) return 0;
    return std::max<int64_t>(0, std::min(clock, end_[w]) - start);
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

Worker::Worker(Cluster* cluster, int index)
    : cluster_(*cluster),
      index_(index),
      joiner_(index >= cluster->options().workers),
      end_(cluster->end_of(index)) {
  const SimOptions& o = cluster_.options();
  env_ = std::make_unique<SimEnv>(&cluster_.net(), &cluster_.disk(),
                                  "worker-" + std::to_string(index));
  pid_ = env_->ProcessId();
  for (const SimOptions::WorkerKill& k : o.worker_kills) {
    if (k.worker == index) stop_at_ = k.at_clock;
  }
  ClientOptions c;
  c.coordinator_address = kCoordinatorAddress;
  c.prefer_ipc = false;
  c.enable_cache = o.cache;
  c.connect_timeout_ms = o.time_limit_ms;
  c.request_timeout_ms = 60000;
  c.requested_worker_id = index;
  client_ = std::make_unique<ClientImpl>(c, env_.get(), /*own_thread=*/false);
  Status s = client_->Start();
  if (!s.ok())
    cluster_.Fail("worker " + std::to_string(index) + ": " + s.ToString());
  own_key_ = {static_cast<Key>(index)};
  all_keys_.resize(cluster_.total_workers());
  std::iota(all_keys_.begin(), all_keys_.end(), Key{0});
  out_.assign(all_keys_.size(), -1.0f);
  leaves_ = end_ < o.clocks && stop_at_ < 0;
}

std::string Worker::Where() const {
  static const char* kNames[] = {
      "register",   "create table", "start barrier", "step",  "barrier",
      "final read", "finish",       "recover",       "leave", "done"};
  return "worker " + std::to_string(index_) + " at clock " +
         std::to_string(clock_) + " (" + kNames[static_cast<int>(phase_)] + ")";
}

void Worker::Failed(const Status& s, const char* what) {
  if (s.code() == StatusCode::kAborted) {
    // A rollback: take it once announced.
    phase_ = Phase::kRecover;
    issued_ = false;
    return;
  }
  cluster_.Fail(Where() + ": " + what + ": " + s.ToString());
}

void Worker::CheckRead() {
  const SimOptions& o = cluster_.options();
  const Consistency& c = o.consistency;
  const int64_t bsp = c.mode == ConsistencyMode::kBsp;
  ++cluster_.result().reads_checked;
  for (int w = 0; w < cluster_.total_workers(); ++w) {
    const int64_t value = static_cast<int64_t>(out_[w]);
    std::ostringstream what;
    what << Where() << " read counter[" << w << "] = " << out_[w];
    if (static_cast<float>(value) != out_[w]) {
      return cluster_.Fail(what.str() + ", not a count");
    }
    // A read is served in its request's generation (a server still in an
    // older one serves that one's state).
    const int64_t sent = cluster_.sent(generation_)[w];
    if (value > sent) {
      return cluster_.Fail(what.str() + ", above the " + std::to_string(sent) +
                           " pushes worker " + std::to_string(w) +
                           " sent: a push applied twice");
    }
    const int64_t own = cluster_.CountBefore(w, clock_ + 1 - bsp, generation_);
    if (w == index_ && value != own) {
      return cluster_.Fail(what.str() + ": its own counter must be exactly " +
                           std::to_string(own));
    }
    const int64_t all = cluster_.CountBefore(w, clock_, generation_);
    if (c.mode == ConsistencyMode::kBsp && value != all) {
      return cluster_.Fail(what.str() + ": BSP reads at clock " +
                           std::to_string(clock_) + " see exactly " +
                           std::to_string(all));
    }
    const int64_t least =
        cluster_.CountBefore(w, clock_ - c.staleness, generation_);
    if (c.mode == ConsistencyMode::kSsp && value < least) {
      return cluster_.Fail(what.str() + ": SSP(" + std::to_string(c.staleness) +
                           ") needs at least " + std::to_string(least));
    }
  }
}

void Worker::CheckFinal() {
  const SimOptions& o = cluster_.options();
  for (int w = 0; w < cluster_.total_workers(); ++w) {
    const int64_t want = cluster_.CountBefore(w, o.clocks, generation_);
    if (out_[w] != static_cast<float>(want)) {
      std::ostringstream what;
      what << Where() << ": after the final barrier counter[" << w
           << "] = " << out_[w] << ", not " << want
           << " (a push lost or applied twice)";
      return cluster_.Fail(what.str());
    }
  }
}

void Worker::Advance() {
  const SimOptions& o = cluster_.options();
  while (!cluster_.failed()) {
    switch (phase_) {
      case Phase::kRegister: {
        if (!issued_) {
          control_ = client_->StartRegister();
          issued_ = true;
        }
        if (!control_->done()) return;
        if (Status s = control_->Wait(); !s.ok()) {
          return cluster_.Fail(Where() + ": registration: " + s.ToString());
        }
        issued_ = false;
        // A joiner starts at the job's clock, in its generation.
        clock_ = client_->clock();
        generation_ = client_->generation();
        if (joiner_) ++cluster_.result().joined;
        if (!joiner_ && clock_ != 0) {
          return cluster_.Fail(Where() + ": a worker of the job's start " +
                               "registered at clock " + std::to_string(clock_));
        }
        int64_t resumed_at = 0;
        if (generation_ > 0 &&
            !cluster_.ResumeClockOf(generation_, &resumed_at)) {
          return cluster_.Fail(Where() + ": admitted in generation " +
                               std::to_string(generation_) +
                               ", which the coordinator does not know");
        }
        cluster_.start_of(index_) = clock_;
        cluster_.starts(generation_, resumed_at)[index_] = clock_;
        cluster_.sent(generation_, resumed_at)[index_] = clock_;
        phase_ = Phase::kCreateTable;
        break;
      }
      case Phase::kCreateTable:
        if (!issued_) {
          TableOptions t;
          t.name = "counters";
          t.value_width = 1;
          t.rule = UpdateRule::kAdd;
          t.consistency = o.consistency;
          control_ = client_->StartCreateTable(t);
          issued_ = true;
        }
        if (!control_->done()) return;
        issued_ = false;
        // A rollback meanwhile (a server died while the workers started):
        // the start begins again once it is taken.
        if (Status s = control_->Wait(); !s.ok()) {
          return Failed(s, "create table");
        }
        table_ = control_->reply.table().id();
        // A joiner comes after the start barrier.
        started_ = joiner_;
        phase_ = joiner_ ? Phase::kStep : Phase::kStartBarrier;
        break;
      case Phase::kStartBarrier:
        // Every worker is in the job before anyone steps.
        if (!issued_) {
          control_ = client_->StartBarrier(o.time_limit_ms);
          issued_ = true;
        }
        if (!control_->done()) return;
        issued_ = false;
        if (Status s = control_->Wait(); !s.ok()) {
          return Failed(s, "start barrier");
        }
        started_ = true;
        phase_ = Phase::kStep;
        break;
      case Phase::kStep: {
        if (stopped()) return;  // until it is killed
        if (clock_ >= end_) {
          phase_ = leaves_ ? Phase::kLeave : Phase::kBarrier;
          break;
        }
        if (!issued_ && o.pause_ms > 0 && clock_ == o.pause_at_clock &&
            !paused_) {
          if (!pause_until_) {
            pause_until_ = cluster_.now() + milliseconds(o.pause_ms);
          }
          if (cluster_.now() < *pause_until_) return;
          paused_ = true;
        }
        if (!issued_) {
          // Push, then read everything, on one connection per server:
          // the read sees the push.
          push_ = o.push_pull ? client_->PushPullAsync(table_, own_key_, one_,
                                                       own_out_, {})
                              : client_->PushAsync(table_, own_key_, one_, {});
          ++cluster_.sent(generation_)[index_];
          pull_ = client_->PullAsync(table_, all_keys_, out_, {});
          issued_ = true;
        }
        if (!push_.done() || !pull_.done()) return;
        issued_ = false;
        if (Status s = push_.Wait(); !s.ok()) return Failed(s, "push");
        if (Status s = pull_.Wait(); !s.ok()) return Failed(s, "pull");
        CheckRead();
        client_->Clock();
        ++clock_;
        break;
      }
      case Phase::kBarrier:
        // Everyone to join is in before the end: a joiner admitted after
        // the final barrier would push under the final reads.
        if (!cluster_.all_joined()) return;
        if (!issued_) {
          control_ = client_->StartBarrier(o.time_limit_ms);
          issued_ = true;
        }
        if (!control_->done()) return;
        issued_ = false;
        if (Status s = control_->Wait(); !s.ok()) return Failed(s, "barrier");
        phase_ = Phase::kFinalRead;
        break;
      case Phase::kFinalRead:
        if (!issued_) {
          pull_ = client_->PullAsync(table_, all_keys_, out_, {});
          issued_ = true;
        }
        if (!pull_.done()) return;
        issued_ = false;
        if (Status s = pull_.Wait(); !s.ok()) return Failed(s, "final pull");
        CheckFinal();
        phase_ = o.idle_after_ms > 0 ? Phase::kIdle : Phase::kFinish;
        break;
      case Phase::kIdle:
        if (!cluster_.idle_over()) return;
        phase_ = Phase::kFinish;
        break;
      case Phase::kFinish:
        if (!issued_) {
          control_ = client_->StartFinish();
          issued_ = true;
        }
        if (!control_->done()) return;
        issued_ = false;
        if (Status s = control_->Wait(); !s.ok()) return Failed(s, "finish");
        phase_ = Phase::kDone;
        break;
      case Phase::kRecover: {
        Result<Client::Recovery> r = client_->AwaitRecovery(0);
        if (!r.ok()) return;  // not announced yet
        ++cluster_.result().rollbacks;
        cluster_.result().resume_clocks.push_back(r->clock);
        // A worker that joined after the checkpoint redoes the clocks
        // from it.
        const int64_t start = cluster_.starts(generation_, r->clock)[index_];
        clock_ = r->clock;
        generation_ = r->generation;
        int64_t& now = cluster_.starts(generation_, r->clock)[index_];
        now = start < 0 ? r->clock : std::min(start, r->clock);
        // The checkpoint holds exactly the pushes of the clocks before it.
        cluster_.sent(generation_, r->clock);
        // As StartUp in train/trainer.cc: a worker not past its start
        // starts again (its table, then the start barrier).
        phase_ = started_ ? Phase::kStep : Phase::kCreateTable;
        break;
        break;
      }
      case Phase::kLeave:
        if (!issued_) {
          control_ = client_->StartLeave();
          issued_ = true;
        }
        if (!control_->done()) return;
        issued_ = false;
        if (Status s = control_->Wait(); !s.ok()) return Failed(s, "leave");
        ++cluster_.result().left;
        phase_ = Phase::kDone;
        break;
      case Phase::kDone:
        return;
    }
  }
}

void Cluster::StartServer(int i) {
  ServerOptions s;
  s.coordinator_address = kCoordinatorAddress;
  s.host = "server-" + std::to_string(i);
  s.enable_ipc = false;
  s.requested_id = i;
  s.heartbeat_interval_ms = 500;
  s.client_idle_expiry_s = options_.client_idle_expiry_s;
  if (options_.checkpoint_every > 0) s.state_dir = kServerStateDir;
  server_envs_[i] =
      std::make_unique<SimEnv>(&net_, &disk_, "server-" + std::to_string(i));
  servers_[i] = std::make_unique<ServerNode>(s, server_envs_[i].get());
  Status st = servers_[i]->Start();
  if (!st.ok()) Fail("server " + std::to_string(i) + ": " + st.ToString());
}

void Cluster::NoteProgress() {
  progress_.resize(workers_.size(), {-1, net_.now()});
  for (size_t i = 0; i < workers_.size(); ++i) {
    const Worker& w = *workers_[i];
    auto& [clock, since] = progress_[i];
    result_.longest_stall_ms = std::max<int64_t>(
        result_.longest_stall_ms,
        std::chrono::duration_cast<milliseconds>(net_.now() - since).count());
    if (w.clock() != clock || w.done()) {
      clock = w.clock();
      since = net_.now();
    }
  }
}

void Cluster::HandleCrashes() {
  for (size_t k = 0; k < options_.crashes.size(); ++k) {
    const SimOptions::Crash& crash = options_.crashes[k];
    if (crashed_[k]) {
      if (restart_at_[k] && net_.now() >= *restart_at_[k]) {
        restart_at_[k].reset();
        if (crash.pause) {
          paused_[crash.server] = false;
        } else {
          StartServer(crash.server);
        }
      }
      continue;
    }
    if (crash.trigger != SimOptions::Trigger::kAtClock) continue;
    bool passed = true;
    for (const auto& w : workers_) {
      passed = passed && (w->registering() || w->clock() > crash.at_clock);
    }
    if (passed) Crash(k);
  }
}

void Cluster::Crash(size_t k) {
  const SimOptions::Crash& crash = options_.crashes[k];
  crashed_[k] = true;
  if (crash.pause) {
    paused_[crash.server] = true;
  } else {
    net_.Crash("server-" + std::to_string(crash.server));
    servers_[crash.server].reset();
  }
  restart_at_[k] = net_.now() + milliseconds(crash.down_ms);
}

void Cluster::HandleTriggeredCrashes() {
  for (size_t k = 0; k < options_.crashes.size(); ++k) {
    const SimOptions::Crash& crash = options_.crashes[k];
    if (crashed_[k]) continue;
    const bool due =
        (crash.trigger == SimOptions::Trigger::kTableCreateArrives &&
         table_create_arrived_.count(crash.server) > 0) ||
        (crash.trigger == SimOptions::Trigger::kTableAckArrives &&
         table_ack_arrived_.count(crash.server) > 0);
    if (due) Crash(k);
  }
}

void Cluster::Observe(const std::string& node,
                      const std::vector<std::string>& frames, bool router) {
  const size_t header = router ? 1 : 0;
  if (frames.size() <= header) return;
  wire::Header h;
  if (!h.ParseFromString(frames[header])) return;
  if (h.type() == wire::TABLE_CREATE && node.starts_with("server-")) {
    table_create_arrived_.insert(std::stoi(node.substr(7)));
  } else if (h.type() == wire::TABLE_CREATE_ACK && node == "coordinator") {
    table_ack_arrived_.insert(h.member_id());
  }
}

void Cluster::HandleDiskFaults() {
  for (size_t k = 0; k < options_.disk_faults.size(); ++k) {
    const SimOptions::DiskFault& f = options_.disk_faults[k];
    const std::string dir = f.server < 0
                                ? std::string(kCoordinatorStateDir)
                                : std::string(kServerStateDir) + "/server-" +
                                      std::to_string(f.server);
    if (disk_fault_started_[k]) {
      if (disk_fault_end_[k] && net_.now() >= *disk_fault_end_[k]) {
        disk_fault_end_[k].reset();
        disk_.SetFault(dir, DiskFault::kNone);
      }
      continue;
    }
    bool passed = true;
    for (const auto& w : workers_) {
      passed = passed && (w->registering() || w->clock() > f.at_clock);
    }
    if (!passed) continue;
    disk_fault_started_[k] = true;
    disk_.SetFault(dir, f.full ? DiskFault::kFull : DiskFault::kReadOnly);
    disk_fault_end_[k] = net_.now() + milliseconds(f.for_ms);
  }
}

void Cluster::StartCoordinator() {
  CoordinatorOptions c;
  c.bind_address = kCoordinatorAddress;
  c.num_servers = options_.servers;
  c.num_workers = options_.workers;
  c.num_slots = 64;
  c.heartbeat_timeout_ms = 5000;
  c.drain_linger_ms = options_.drain_linger_ms;
  if (options_.checkpoint_every > 0) {
    c.state_dir = kCoordinatorStateDir;
    c.checkpoint_every_clocks = options_.checkpoint_every;
  }
  coordinator_env_ = std::make_unique<SimEnv>(&net_, &disk_, "coordinator");
  coordinator_ = std::make_unique<CoordinatorNode>(c, coordinator_env_.get());
  if (Status s = coordinator_->Start(); !s.ok()) {
    Fail("coordinator: " + s.ToString());
  }
}

void Cluster::HandleCoordinatorCrashes() {
  for (size_t k = 0; k < options_.coordinator_crashes.size(); ++k) {
    const SimOptions::CoordinatorCrash& crash = options_.coordinator_crashes[k];
    if (coordinator_crash_done_[k]) continue;
    if (coordinator_up_at_[k]) {
      if (net_.now() >= *coordinator_up_at_[k]) {
        coordinator_up_at_[k].reset();
        coordinator_crash_done_[k] = true;
        StartCoordinator();
      }
      continue;
    }
    if (coordinator_down_at_[k]) {
      if (net_.now() >= *coordinator_down_at_[k] && coordinator_) {
        net_.Crash("coordinator");
        coordinator_.reset();
        coordinator_env_.reset();
        coordinator_up_at_[k] = net_.now() + milliseconds(crash.down_ms);
      }
      continue;
    }
    bool passed = true;
    for (const auto& w : workers_) {
      passed = passed && (w->registering() || w->clock() > crash.at_clock);
    }
    if (passed) {
      coordinator_down_at_[k] = net_.now() + milliseconds(crash.delay_ms);
    }
  }
}

void Cluster::CheckServerClocks() {
  server_clock_.resize(servers_.size(), 0);
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (!servers_[i]) continue;
    const int64_t now = servers_[i]->counters().min_clock;
    if (now < server_clock_[i]) {
      return Fail("server " + std::to_string(i) + "'s clock moved back from " +
                  std::to_string(server_clock_[i]) + " to " +
                  std::to_string(now) + " with no rollback");
    }
    server_clock_[i] = now;
  }
}

bool AllPassed(const std::vector<std::unique_ptr<Worker>>& workers,
               int64_t clock) {
  for (const auto& w : workers) {
    if (!w->done() && w->clock() <= clock) return false;
  }
  return true;
}

void Cluster::HandleServerChanges() {
  const size_t joined = servers_.size() - options_.servers;
  if (joined < options_.server_joins.size() &&
      AllPassed(workers_, options_.server_joins[joined].after_clock)) {
    server_envs_.emplace_back();
    servers_.emplace_back();
    paused_.push_back(false);
    StartServer(static_cast<int>(servers_.size()) - 1);
    ++result_.servers_joined;
  }
  if (drains_started_ < options_.server_drains.size() &&
      net_.now() >= drain_retry_at_ &&
      AllPassed(workers_,
                options_.server_drains[drains_started_].after_clock)) {
    const int server = options_.server_drains[drains_started_].server;
    ++drains_started_;
    if (coordinator_->finishing()) {
      ++drains_ended_;  // the job ended first: nothing left to drain
      return;
    }
    draining_call_ = true;
    drain_refused_ = false;
    coordinator_->DrainServer(server, [this, server](const Status& s) {
      if (draining_call_ && s.code() == StatusCode::kUnavailable &&
          !coordinator_->finishing()) {
        // Refused at once while other slots move (a server's join): asked
        // again a little later, as an operator would.
        drain_refused_ = true;
        return;
      }
      ++drains_ended_;
      // The job may end first (every worker finished): the drain then
      // ends unfinished, which is no failure of the protocol.
      if (s.code() == StatusCode::kUnavailable && coordinator_->finishing()) {
        return;
      }
      if (!s.ok()) {
        return Fail("drain of server " + std::to_string(server) + ": " +
                    s.ToString());
      }
      ++result_.servers_drained;
    });
    draining_call_ = false;
    if (drain_refused_) {
      --drains_started_;
      drain_retry_at_ = net_.now() + milliseconds(50);
    }
  }
}

void Cluster::HandleIdle() {
  if (options_.idle_after_ms <= 0 || idle_over_) return;
  if (!idle_until_) {
    if (workers_.size() < static_cast<size_t>(total_workers())) return;
    for (const auto& w : workers_) {
      if (!w->idle() && !w->done()) return;
    }
    idle_until_ = net_.now() + milliseconds(options_.idle_after_ms);
  }
  if (net_.now() < *idle_until_) return;
  for (const auto& server : servers_) {
    const ServerCounters c = server ? server->counters() : ServerCounters();
    result_.window_clients.push_back(c.window_clients);
    result_.window_expired.push_back(c.window_expired);
    result_.queued_requests.push_back(c.queued_requests);
  }
  idle_over_ = true;
}

void Cluster::HandleWorkerKills() {
  if (launcher_) {
    while (true) {
      InMessage message;
      bool got = false;
      if (!launcher_->Receive(&message, &got).ok() || !got) break;
      wire::Header reply;
      if (ParseHeader(message.frame(0), &reply).ok() &&
          reply.type() == wire::CONTROL_REPLY) {
        result_.exit_reports.push_back(reply.status_code());
      }
    }
  }
  for (size_t k = 0; k < options_.worker_kills.size(); ++k) {
    const SimOptions::WorkerKill& kill = options_.worker_kills[k];
    if (kill_done_[k] || kill.worker < 0 ||
        kill.worker >= static_cast<int>(workers_.size())) {
      continue;
    }
    Worker& w = *workers_[kill.worker];
    if (!w.stopped()) continue;
    if (!kill_at_[k]) kill_at_[k] = net_.now() + milliseconds(kill.after_ms);
    if (net_.now() < *kill_at_[k]) continue;
    kill_done_[k] = true;
    net_.Crash("worker-" + std::to_string(w.index()));
    w.Kill();
    ++result_.killed;
    if (!kill.reported || !coordinator_) continue;
    if (!launcher_) {
      launcher_transport_ = net_.NewTransport("launcher");
      launcher_ = *launcher_transport_->NewDealer("", kControlMessageBytes);
      if (!launcher_->Connect(kCoordinatorAddress).ok()) {
        return Fail("the launcher cannot connect to the coordinator");
      }
    }
    wire::Header exit;
    exit.set_type(wire::MEMBER_EXIT);
    exit.set_seq(k + 1);
    exit.set_role(wire::ROLE_WORKER);
    exit.set_member_id(w.index());
    exit.set_pid(w.pid());
    OutMessage out;
    out.AddString(exit.SerializeAsString());
    if (!launcher_->Send(std::move(out)).ok()) {
      return Fail("the launcher cannot send its report");
    }
  }
}

void Cluster::HandleJoins() {
  const size_t joined = workers_.size() - options_.workers;
  if (joined >= options_.joins.size()) return;
  const int64_t after = options_.joins[joined].after_clock;
  for (const auto& w : workers_) {
    if (!w->done() && w->clock() <= after) return;
  }
  workers_.push_back(
      std::make_unique<Worker>(this, static_cast<int>(workers_.size())));
}

TimePoint Cluster::NextEvent() {
  TimePoint next = coordinator_ ? coordinator_->NextWakeup()
                                : net_.now() + milliseconds(100);
  for (size_t k = 0; k < coordinator_down_at_.size(); ++k) {
    if (coordinator_crash_done_[k]) continue;
    if (coordinator_up_at_[k]) next = std::min(next, *coordinator_up_at_[k]);
    if (coordinator_down_at_[k] && coordinator_) {
      next = std::min(next, *coordinator_down_at_[k]);
    }
  }
  if (auto d = net_.NextDelivery()) next = std::min(next, *d);
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (servers_[i] && !paused_[i]) {
      next = std::min(next, servers_[i]->NextWakeup());
    }
  }
  for (const auto& w : workers_) {
    if (!w->killed()) next = std::min(next, w->client().NextWakeup());
  }
  for (size_t k = 0; k < kill_at_.size(); ++k) {
    if (kill_at_[k] && !kill_done_[k]) next = std::min(next, *kill_at_[k]);
  }
  for (const auto& r : restart_at_) {
    if (r) next = std::min(next, *r);
  }
  for (const auto& e : disk_fault_end_) {
    if (e) next = std::min(next, *e);
  }
  if (drains_started_ < options_.server_drains.size() &&
      drain_retry_at_ > net_.now()) {
    next = std::min(next, drain_retry_at_);
  }
  return next;
}

// The messages whose loss the protocol repairs without breaking the
// contract: a push's reply (the push is resent under its sequence number
// and acknowledged as a duplicate; but not a "moved" answer), heartbeats,
// and registrations, barriers and finishes (sent again while unanswered). A
// lost request is not among them: the contract relies on each connection's
// order (a worker's push before its next pull and its CLOCK), which only a
// broken connection breaks.
bool Droppable(const std::vector<std::string>& frames, bool to_router) {
  const size_t header = to_router ? 1 : 0;
  if (frames.size() <= header) return false;
  wire::Header h;
  if (!h.ParseFromString(frames[header])) return false;
  switch (h.type()) {
    case wire::REGISTER:
    case wire::HEARTBEAT:
    case wire::BARRIER:
    case wire::FINISH:
      return true;
    case wire::DATA_REPLY:
      // No values: a push's reply. Not a "moved" answer: a pull's is not
      // sent again (a pull is not resent on silence).
      return frames.size() == header + 1 && !h.moved();
    default:
      return false;
  }
}

SimResult Cluster::Run() {
  net_.set_droppable(&Droppable);
  net_.set_observer([this](const std::string& node,
                           const std::vector<std::string>& frames,
                           bool router) { Observe(node, frames, router); });
  const TimePoint start = net_.now();
  const TimePoint limit = start + milliseconds(options_.time_limit_ms) +
                          milliseconds(options_.idle_after_ms);
  StartCoordinator();
  if (!options_.coordinator_crashes.empty() &&
      !options_.server_drains.empty()) {
    Fail("coordinator crashes together with server drains are not simulated");
  }
  server_envs_.resize(options_.servers);
  servers_.resize(options_.servers);
  paused_.assign(options_.servers, false);
  for (int i = 0; i < options_.servers; ++i) StartServer(i);
  if (!options_.crashes.empty() &&
      (!options_.leaves.empty() || !options_.server_joins.empty() ||
       !options_.server_drains.empty())) {
    // The oracle's rollback (every counter back to the checkpoint's clock)
    // assumes every worker took part to the end.
    Fail(
        "server crashes together with leaves or server changes are not "
        "simulated");
  }
  start_.assign(total_workers(), -1);
  starts(0, 0);
  end_.assign(total_workers(), options_.clocks);
  for (const SimOptions::Leave& l : options_.leaves) {
    if (l.worker >= 0 && l.worker < total_workers()) {
      end_[l.worker] = std::min<int64_t>(end_[l.worker], l.at_clock);
    }
  }
  if (!options_.worker_kills.empty() && !options_.crashes.empty()) {
    // The oracle's rollback assumes every worker took part to the end.
    Fail("worker kills together with server crashes are not simulated");
  }
  for (const SimOptions::WorkerKill& k : options_.worker_kills) {
    if (k.worker >= 0 && k.worker < total_workers()) {
      end_[k.worker] = std::min<int64_t>(end_[k.worker], k.at_clock);
    }
  }
  kill_at_.assign(options_.worker_kills.size(), std::nullopt);
  kill_done_.assign(options_.worker_kills.size(), false);
  sent(0);
  for (int i = 0; i < options_.workers; ++i) {
    workers_.push_back(std::make_unique<Worker>(this, i));
  }
  crashed_.assign(options_.crashes.size(), false);
  restart_at_.assign(options_.crashes.size(), std::nullopt);
  disk_fault_started_.assign(options_.disk_faults.size(), false);
  disk_fault_end_.assign(options_.disk_faults.size(), std::nullopt);
  coordinator_down_at_.assign(options_.coordinator_crashes.size(),
                              std::nullopt);
  coordinator_up_at_.assign(options_.coordinator_crashes.size(), std::nullopt);
  coordinator_crash_done_.assign(options_.coordinator_crashes.size(), false);

  std::vector<int> order;
  while (!failed()) {
    order.resize(1 + servers_.size() + workers_.size());
    std::iota(order.begin(), order.end(), 0);
    net_.DeliverDue();
    HandleTriggeredCrashes();
    // Nodes take turns in an order drawn from the seed.
    std::shuffle(order.begin(), order.end(), net_.rng());
    for (int n : order) {
      if (n == 0) {
        if (coordinator_) coordinator_->Step();
      } else if (n <= static_cast<int>(servers_.size())) {
        if (servers_[n - 1] && !paused_[n - 1]) servers_[n - 1]->Step();
      } else {
        Worker& w = *workers_[n - 1 - servers_.size()];
        if (w.killed()) continue;
        w.client().Step();
        w.Advance();
        w.client().Step();
      }
    }
    // A server told to stop (a drained one) exits, as its process would:
    // what was on its way to it is lost.
    for (size_t i = 0; i < servers_.size(); ++i) {
      if (servers_[i] && servers_[i]->shut_down()) {
        net_.Crash("server-" + std::to_string(i));
        servers_[i].reset();
      }
    }
    NoteProgress();
    for (const auto& server : servers_) {
      if (server) {
        result_.busy_run_peak =
            std::max(result_.busy_run_peak, server->counters().busy_run_peak);
      }
    }
    if (coordinator_ && !coordinator_->state().recovering) {
      resume_clocks_[coordinator_->state().generation] =
          coordinator_->state().resume_clock;
    }
    HandleCrashes();
    HandleDiskFaults();
    HandleCoordinatorCrashes();
    if (options_.crashes.empty()) CheckServerClocks();
    HandleJoins();
    HandleWorkerKills();
    HandleServerChanges();
    // Done when every worker is, and every drain has ended.
    bool all_done = workers_.size() == static_cast<size_t>(total_workers()) &&
                    drains_ended_ == options_.server_drains.size();
    for (const auto& w : workers_) all_done = all_done && w->done();
    if (all_done) break;
    HandleIdle();
    // Time always moves on: a node that wants to run again at once would
    // spin in a real process too.
    net_.AdvanceTo(
        std::max(NextEvent(), net_.now() + std::chrono::microseconds(1)));
    if (net_.now() > limit) {
      std::string where;
      for (const auto& w : workers_) where += "; " + w->Where();
      Fail("no progress within " + std::to_string(options_.time_limit_ms) +
           " ms of simulated time" + where);
    }
  }
  result_.ok = !failed();
  result_.trace = net_.trace();
  result_.simulated_ms =
      std::chrono::duration_cast<milliseconds>(net_.now() - start).count();
  result_.messages = net_.sent();
  result_.dropped = net_.dropped();
  result_.duplicated = net_.duplicated();
  if (coordinator_) {
    const RoutingTable& routing = coordinator_->state().routing;
    for (size_t i = 0; i < servers_.size(); ++i) {
      result_.slots_at_end.push_back(
          routing.empty()
              ? 0
              : static_cast<int>(
                    routing.SlotsOf(static_cast<int32_t>(i)).size()));
    }
  }
  // Nodes go before the network they use.
  launcher_.reset();
  launcher_transport_.reset();
  workers_.clear();
  servers_.clear();
  coordinator_.reset();
  return result_;
}

}  // namespace

SimResult RunSimulation(const SimOptions& options) {
  Cluster cluster(options);
  return cluster.Run();
}

std::string Describe(const SimOptions& o) {
  std::ostringstream out;
  out << "seed=" << o.seed << " servers=" << o.servers
      << " workers=" << o.workers << " clocks=" << o.clocks << " "
      << ToString(o.consistency) << " cache=" << o.cache
      << " push_pull=" << o.push_pull
      << " latency_us=" << o.faults.min_latency_us << "-"
      << o.faults.max_latency_us << " delay=" << o.faults.delay
      << " duplicate=" << o.faults.duplicate << " drop=" << o.faults.drop
      << " checkpoint_every=" << o.checkpoint_every;
  for (const auto& c : o.crashes) {
    out << (c.pause ? " pause" : " crash") << "=server:" << c.server;
    switch (c.trigger) {
      case SimOptions::Trigger::kAtClock:
        out << "@clock=" << c.at_clock;
        break;
      case SimOptions::Trigger::kTableCreateArrives:
        out << "@table_create";
        break;
      case SimOptions::Trigger::kTableAckArrives:
        out << "@table_ack";
        break;
    }
    out << "+" << c.down_ms << "ms";
  }
  for (const auto& f : o.disk_faults) {
    out << " disk_" << (f.full ? "full" : "read_only") << "="
        << (f.server < 0 ? std::string("coordinator")
                         : "server:" + std::to_string(f.server))
        << "@clock>" << f.at_clock << "+" << f.for_ms << "ms";
  }
  for (const auto& c : o.coordinator_crashes) {
    out << " crash=coordinator@clock>" << c.at_clock << "+" << c.delay_ms
        << "ms+" << c.down_ms << "ms";
  }
  for (const auto& j : o.joins) out << " join@clock>" << j.after_clock;
  for (const auto& j : o.server_joins) {
    out << " server_join@clock>" << j.after_clock;
  }
  for (const auto& d : o.server_drains) {
    out << " drain=server:" << d.server << "@clock>" << d.after_clock;
  }
  if (!o.server_drains.empty()) {
    out << " linger=" << o.drain_linger_ms << "ms";
  }
  for (const auto& l : o.leaves) {
    out << " leave=worker:" << l.worker << "@clock=" << l.at_clock;
  }
  for (const auto& k : o.worker_kills) {
    out << " kill=worker:" << k.worker << "@clock=" << k.at_clock << "+"
        << k.after_ms << "ms" << (k.reported ? "+reported" : "");
  }
  return out.str();
}

}  // namespace ductile::sim
