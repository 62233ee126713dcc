// elastic_bench: what members joining and leaving a running job cost.
//
// One process: a coordinator, two servers and workers (Clients on threads)
// on loopback, the model a table of S MB (1 MB = 1e6 bytes) of keys of
// --width floats with the SGD rule, spread over the servers' slots. One
// worker trains: each step pushes a gradient of the whole model, calls
// Clock() and pulls it back (SSP(1)). For each size, --repeats times
// (medians shown):
//
//   server join   a third server starts; the coordinator moves it a third of
//                 the slots with their keys while the worker trains. Timed
//                 from Server::Start until every slot is in place (the
//                 coordinator's status: nothing moving, the new server
//                 owning slots); MB/s = the bytes of keys the new server
//                 holds / that time;
//   server drain  the third server is drained (RequestDrainServer): its
//                 slots move back to the other two; timed until the call
//                 returns (the server is out, after its 2 s linger), and
//                 until its slots were in place (status, as above);
//   training      the median step time during each move against the
//                 median before it (steps that overlap the move);
//   worker join   a second worker connects while the first trains: time
//                 from Connect() until its first push of the whole model
//                 has been answered, and until its first step (push,
//                 Clock, pull) is done.
//   restart       the peers' way, as the reference (--restart): the same
//                 server join done by stopping the whole job and starting
//                 it again from ductile's own checkpoint. A second job
//                 (with state directories) trains; at the decision a
//                 checkpoint is taken, the worker leaves, the servers and
//                 the coordinator stop; a coordinator is started on the
//                 same state, the two servers with their ids and stores
//                 and a third, new server; the servers restore the
//                 checkpoint and the third gets its share; a new worker
//                 joins. Timed from the decision to the end of the first
//                 step with the third server owning slots.
//
// --train=false leaves the training out: the worker pushes the model once
// and the moves run alone (their speed against the transport's).
//
// --replicas=2 keeps every slot on a backup server as well: a slot moved
// to the new server is then sent whole to its backup by the new server
// (and the pairs the join changes get whole copies). The join is then
// also timed until every slot's backup is whole again (copies_ms, from
// Server::Start; the coordinator's slots_without_copy back to 0), with
// the longest step overlapping that time (max_step). With --train=false a
// second worker meanwhile pulls 64 keys of a small async table over and
// over: the longest of those pulls during the join and the copies, against
// their median before, is what a copy's pause of the servers' request
// threads costs a reader.
//
//   elastic_bench                        # 100 MB, 3 repeats
//   elastic_bench --sizes_mb=10,100,1000 --repeats=3
//
// Every wait is bounded by --timeout_ms.
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ductile/admin.h"
#include "ductile/client.h"
#include "ductile/coordinator.h"
#include "ductile/server.h"
#include "gflags/gflags.h"
#include "util/malloc_policy.h"

DEFINE_string(sizes_mb, "100", "model sizes in MB (1e6 bytes), by commas");
DEFINE_int32(repeats, 3, "runs per size (medians shown)");
DEFINE_int32(width, 1024, "floats per key");
DEFINE_int32(slots, 96, "slots");
DEFINE_int64(timeout_ms, 600000, "bound of every wait");
DEFINE_bool(drain, true, "also drain the joined server");
DEFINE_int32(replicas, 1, "copies of each slot (2: a backup too)");
DEFINE_bool(keep_freed_memory, true,
            "keep freed memory for reuse, as the ductile programs do");
DEFINE_bool(train, true,
            "a worker trains during the moves (false: the moves alone, "
            "the worker having pushed the model once)");
DEFINE_bool(restart, true,
            "also time the reference: checkpoint, stop and restart of the "
            "whole job with a third server");

namespace {

using Clock = std::chrono::steady_clock;
using ductile::Status;

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Check(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "elastic_bench: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

// Steps of one worker, timed, until `stop`.
class Trainer {
 public:
  Trainer(ductile::Client& client, ductile::TableId table,
          const std::vector<ductile::Key>& keys, size_t floats)
      : client_(client),
        table_(table),
        keys_(keys),
        grad_(floats, 1e-6f),
        model_(floats) {}

  void Start() {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        const Clock::time_point t0 = Clock::now();
        Status s = client_.Push(table_, keys_, grad_);
        if (s.ok()) {
          client_.Clock();
          s = client_.Pull(table_, keys_, model_);
        }
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu_);
          failure_ = s;
          return;
        }
        std::lock_guard<std::mutex> lock(mu_);
        steps_.push_back({t0, Clock::now()});
      }
    });
  }
  bool running() const { return thread_.joinable(); }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    Check(failure_, "training step");
  }
  size_t steps() {
    std::lock_guard<std::mutex> lock(mu_);
    return steps_.size();
  }
  // Median step time of the steps that ended in [from, to).
  double MedianStepMs(Clock::time_point from, Clock::time_point to) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<double> ms;
    for (const auto& [a, b] : steps_) {
      if (b >= from && b < to) ms.push_back(Ms(b - a));
    }
    return Median(ms);
  }
  // The longest step that overlaps [from, to).
  double MaxOverlappingMs(Clock::time_point from, Clock::time_point to) {
    std::lock_guard<std::mutex> lock(mu_);
    double longest = 0;
    for (const auto& [a, b] : steps_) {
      if (b >= from && a < to) longest = std::max(longest, Ms(b - a));
    }
    return longest;
  }
  // Median step time of the steps that overlap [from, to).
  double MedianOverlappingMs(Clock::time_point from, Clock::time_point to) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<double> ms;
    for (const auto& [a, b] : steps_) {
      if (b >= from && a < to) ms.push_back(Ms(b - a));
    }
    return Median(ms);
  }

 private:
  ductile::Client& client_;
  const ductile::TableId table_;
  const std::vector<ductile::Key>& keys_;
  std::vector<float> grad_, model_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> steps_;
  Status failure_;
};

// Pulls of a few keys, spread over every server, timed, until stopped.
class Probe {
 public:
  explicit Probe(const ductile::ClientOptions& options) {
    auto client = ductile::Client::Connect(options);
    Check(client.status(), "probe");
    client_ = std::move(*client);
    ductile::TableOptions t;
    t.name = "probe";
    t.value_width = 16;
    t.consistency = {ductile::ConsistencyMode::kAsync, 0};
    auto table = client_->CreateTable(t);
    Check(table.status(), "probe table");
    table_ = *table;
    for (ductile::Key k = 0; k < 64; ++k) keys_.push_back(k * 7919);
    values_.resize(keys_.size() * 16, 1.0f);
    Check(client_->Push(table_, keys_, values_), "probe push");
    thread_ = std::thread([this] {
      std::vector<float> out(values_.size());
      while (!stop_.load()) {
        const Clock::time_point t0 = Clock::now();
        Status s = client_->Pull(table_, keys_, out);
        std::lock_guard<std::mutex> lock(mu_);
        if (!s.ok()) {
          failure_ = s;
          return;
        }
        pulls_.push_back({t0, Clock::now()});
      }
    });
  }
  ~Probe() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    Check(failure_, "probe pull");
    client_->Leave().IgnoreError();
  }
  // The median and the longest pull that ended in [from, to).
  std::pair<double, double> Latency(Clock::time_point from,
                                    Clock::time_point to) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<double> ms;
    for (const auto& [a, b] : pulls_) {
      if (b >= from && b < to) ms.push_back(Ms(b - a));
    }
    const double longest =
        ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end());
    return {Median(ms), longest};
  }

 private:
  std::unique_ptr<ductile::Client> client_;
  ductile::TableId table_{};
  std::vector<ductile::Key> keys_;
  std::vector<float> values_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> pulls_;
  Status failure_;
};

// Waits until nothing moves and `server` owns slots (or owns none when
// `owns` is false).
Clock::time_point WaitPlaced(const std::string& address, int32_t server,
                             bool owns) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(FLAGS_timeout_ms);
  while (Clock::now() < deadline) {
    auto status = ductile::QueryClusterStatus(address, 5000);
    if (status.ok() && status->slots_moving == 0) {
      for (const auto& m : status->members) {
        if (m.role == "server" && m.id == server && (m.slots > 0) == owns) {
          return Clock::now();
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::fprintf(stderr, "elastic_bench: slots not in place in time\n");
  std::exit(1);
}

// Waits until nothing moves and every slot's backup holds a whole copy.
Clock::time_point WaitCopies(const std::string& address) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(FLAGS_timeout_ms);
  while (Clock::now() < deadline) {
    auto status = ductile::QueryClusterStatus(address, 5000);
    if (status.ok() && status->slots_moving == 0 &&
        status->slots_without_copy == 0) {
      return Clock::now();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::fprintf(stderr, "elastic_bench: backups not whole in time\n");
  std::exit(1);
}

void WaitSteps(Trainer& t, size_t n) {
  if (!t.running()) return;
  const size_t target = t.steps() + n;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(FLAGS_timeout_ms);
  while (t.steps() < target && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

struct Run {
  double restart_ms = 0;  // the reference (--restart)
  double join_ms = 0, join_mbps = 0, moved_mb = 0;
  double drain_ms = 0, drain_placed_ms = 0;
  double steady_step_ms = 0, join_step_ms = 0, drain_step_ms = 0;
  double worker_first_push_ms = 0, worker_first_step_ms = 0;
  double copies_ms = 0, copies_max_step_ms = 0;  // --replicas=2
  // And --train=false: the probe's pulls before, and the longest from the
  // join's start and from the slots' being in place until backups whole.
  double probe_before_ms = 0, probe_max_ms = 0, probe_copy_max_ms = 0;
};

// The job both runs start: a coordinator for two servers and one worker.
ductile::CoordinatorOptions JobCoordinator() {
  ductile::CoordinatorOptions c;
  c.bind_address = "tcp://127.0.0.1:0";
  c.num_servers = 2;
  c.num_workers = 1;
  c.num_slots = FLAGS_slots;
  c.heartbeat_timeout_ms = 600000;
  c.replicas = FLAGS_replicas;
  return c;
}

ductile::ClientOptions WorkerOptions(const std::string& address) {
  ductile::ClientOptions co;
  co.coordinator_address = address;
  co.request_timeout_ms = FLAGS_timeout_ms;
  co.connect_timeout_ms = FLAGS_timeout_ms;
  return co;
}

// The model: a table of keys of --width floats, SGD, SSP(1).
ductile::TableOptions ModelTable() {
  ductile::TableOptions t;
  t.name = "model";
  t.value_width = static_cast<uint32_t>(FLAGS_width);
  t.rule = ductile::UpdateRule::kSgd;
  t.learning_rate = 0.1f;
  t.consistency = {ductile::ConsistencyMode::kSsp, 1};
  return t;
}

// The keys of a model of `size_mb` MB (1 MB = 1e6 bytes).
std::vector<ductile::Key> ModelKeys(int size_mb) {
  const size_t n = std::max<size_t>(
      1, static_cast<size_t>(size_mb) * 1000000 / (FLAGS_width * 4));
  std::vector<ductile::Key> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = i;
  return keys;
}

Run OneRun(int size_mb) {
  Run run;
  auto coordinator = ductile::Coordinator::Start(JobCoordinator());
  Check(coordinator.status(), "coordinator");
  const std::string address = (*coordinator)->address();
  std::vector<std::unique_ptr<ductile::Server>> servers;
  ductile::ServerOptions so;
  so.coordinator_address = address;
  for (int i = 0; i < 2; ++i) {
    auto s = ductile::Server::Start(so);
    Check(s.status(), "server");
    servers.push_back(std::move(*s));
  }
  const ductile::ClientOptions co = WorkerOptions(address);
  auto client = ductile::Client::Connect(co);
  Check(client.status(), "worker");
  const ductile::TableOptions t = ModelTable();
  auto table = (*client)->CreateTable(t);
  Check(table.status(), "table");
  const std::vector<ductile::Key> keys = ModelKeys(size_mb);
  const size_t floats = keys.size() * FLAGS_width;

  Trainer trainer(**client, *table, keys, floats);
  if (FLAGS_train) {
    trainer.Start();
    WaitSteps(trainer, 5);
  } else {
    const std::vector<float> grad(floats, 1e-6f);
    Check((*client)->Push(*table, keys, grad), "the model's push");
  }

  std::unique_ptr<Probe> probe;
  if (FLAGS_replicas > 1 && !FLAGS_train) {
    probe = std::make_unique<Probe>(co);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  // A server joins.
  const Clock::time_point join_start = Clock::now();
  auto joined = ductile::Server::Start(so);
  Check(joined.status(), "joining server");
  const int32_t joined_id = (*joined)->id();
  const Clock::time_point join_end = WaitPlaced(address, joined_id, true);
  run.join_ms = Ms(join_end - join_start);
  run.moved_mb = static_cast<double>((*joined)->counters().keys_stored) *
                 FLAGS_width * 4 / 1e6;
  run.join_mbps = run.moved_mb / (run.join_ms / 1000);
  run.steady_step_ms = trainer.MedianStepMs(Clock::time_point(), join_start);
  if (FLAGS_replicas > 1) {
    const Clock::time_point whole = WaitCopies(address);
    run.copies_ms = Ms(whole - join_start);
    WaitSteps(trainer, 3);
    run.copies_max_step_ms = trainer.MaxOverlappingMs(join_start, whole);
    if (probe) {
      run.probe_before_ms =
          probe->Latency(Clock::time_point(), join_start).first;
      run.probe_max_ms = probe->Latency(join_start, whole).second;
      run.probe_copy_max_ms = probe->Latency(join_end, whole).second;
      probe.reset();
    }
  }
  WaitSteps(trainer, 3);  // (the step under way during the move ends)
  run.join_step_ms = trainer.MedianOverlappingMs(join_start, join_end);

  // A worker joins: its first push of the whole model, then its first step.
  {
    std::vector<float> grad(floats, 1e-6f), model(floats);
    const Clock::time_point t0 = Clock::now();
    auto second = ductile::Client::Connect(co);
    Check(second.status(), "joining worker");
    auto id = (*second)->CreateTable(t);
    Check(id.status(), "joining worker's table");
    Check((*second)->Push(*id, keys, grad), "joining worker's push");
    run.worker_first_push_ms = Ms(Clock::now() - t0);
    (*second)->Clock();
    Check((*second)->Pull(*id, keys, model), "joining worker's pull");
    run.worker_first_step_ms = Ms(Clock::now() - t0);
    Check((*second)->Leave(), "leave");
  }
  WaitSteps(trainer, 3);

  // The joined server is drained.
  if (FLAGS_drain) {
    const Clock::time_point drain_start = Clock::now();
    Status drain;
    std::thread drainer([&] {
      drain = ductile::RequestDrainServer(address, joined_id, FLAGS_timeout_ms);
    });
    const Clock::time_point placed = WaitPlaced(address, joined_id, false);
    drainer.join();
    Check(drain, "drain");
    run.drain_placed_ms = Ms(placed - drain_start);
    run.drain_ms = Ms(Clock::now() - drain_start);
    run.drain_step_ms = trainer.MedianOverlappingMs(drain_start, placed);
  }
  trainer.Stop();
  if (!FLAGS_drain) (*joined)->Stop();
  (*joined)->Wait().IgnoreError();
  (*client)->Finish().IgnoreError();
  return run;
}

// The reference: a job of two servers stopped at a checkpoint and started
// again from it with a third. Returns the time from the decision to the end
// of the first step with the third server owning slots.
double RestartRun(int size_mb) {
  char pattern[] = "/tmp/elastic-bench-XXXXXX";
  const char* made = mkdtemp(pattern);
  if (made == nullptr) Check(ductile::InternalError("mkdtemp"), "temp dir");
  const std::string dir = made;
  ductile::CoordinatorOptions c = JobCoordinator();
  c.state_dir = dir + "/coordinator";
  ductile::ServerOptions so;
  so.state_dir = dir + "/servers";
  ductile::ClientOptions co = WorkerOptions("");
  const ductile::TableOptions t = ModelTable();
  const std::vector<ductile::Key> keys = ModelKeys(size_mb);
  const size_t floats = keys.size() * FLAGS_width;

  Clock::time_point decision;
  {
    auto coordinator = ductile::Coordinator::Start(c);
    Check(coordinator.status(), "coordinator");
    so.coordinator_address = co.coordinator_address = (*coordinator)->address();
    std::vector<std::unique_ptr<ductile::Server>> servers;
    for (int i = 0; i < 2; ++i) {
      so.requested_id = i;
      auto s = ductile::Server::Start(so);
      Check(s.status(), "server");
      servers.push_back(std::move(*s));
    }
    auto client = ductile::Client::Connect(co);
    Check(client.status(), "worker");
    auto table = (*client)->CreateTable(t);
    Check(table.status(), "table");
    Trainer trainer(**client, *table, keys, floats);
    trainer.Start();
    WaitSteps(trainer, 5);
    // The decision: checkpoint, then stop everything.
    decision = Clock::now();
    Check(ductile::RequestCheckpoint(co.coordinator_address, FLAGS_timeout_ms)
              .status(),
          "checkpoint");
    trainer.Stop();
    Check((*client)->Leave(), "leave");
    client->reset();
    servers.clear();
    (*coordinator)->Stop();
  }
  // Everything again, from the checkpoint, with a third server.
  auto coordinator = ductile::Coordinator::Start(c);
  Check(coordinator.status(), "restarted coordinator");
  const std::string address = (*coordinator)->address();
  so.coordinator_address = co.coordinator_address = address;
  std::vector<std::unique_ptr<ductile::Server>> servers;
  for (int i = 0; i < 3; ++i) {
    so.requested_id = i;
    auto s = ductile::Server::Start(so);
    Check(s.status(), "restarted server");
    servers.push_back(std::move(*s));
  }
  WaitPlaced(address, 2, true);
  auto client = ductile::Client::Connect(co);
  Check(client.status(), "new worker");
  auto table = (*client)->GetTable("model");
  Check(table.status(), "table after the restart");
  std::vector<float> grad(floats, 1e-6f), model(floats);
  Check((*client)->Push(table->id, keys, grad), "first push");
  (*client)->Clock();
  Check((*client)->Pull(table->id, keys, model), "first pull");
  const double ms = Ms(Clock::now() - decision);
  Check((*client)->Finish(), "finish");
  for (auto& s : servers) s->Wait().IgnoreError();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("elastic_bench [--sizes_mb=100] [--repeats=3]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_keep_freed_memory) ductile::KeepFreedMemory();
  std::vector<int> sizes;
  std::stringstream in(FLAGS_sizes_mb);
  for (std::string s; std::getline(in, s, ',');) sizes.push_back(std::stoi(s));
  std::printf("%8s %10s %10s %9s %11s %11s %10s %10s %10s %12s %12s %11s\n",
              "size_MB", "moved_MB", "join_ms", "join_MB/s", "drain_ms",
              "placed_ms", "step_ms", "join_step", "drain_step", "worker_push",
              "worker_step", "restart_ms");
  for (int size : sizes) {
    std::vector<Run> runs;
    for (int r = 0; r < FLAGS_repeats; ++r) {
      runs.push_back(OneRun(size));
      if (FLAGS_restart) runs.back().restart_ms = RestartRun(size);
      std::fprintf(stderr,
                   "size %d MB run %d: join %.0f ms (%.1f MB/s), restart "
                   "%.0f ms, backups whole %.0f ms (longest step %.0f ms, "
                   "probe pull %.2f ms before, longest %.1f ms, %.1f ms "
                   "once placed)\n",
                   size, r + 1, runs.back().join_ms, runs.back().join_mbps,
                   runs.back().restart_ms, runs.back().copies_ms,
                   runs.back().copies_max_step_ms, runs.back().probe_before_ms,
                   runs.back().probe_max_ms, runs.back().probe_copy_max_ms);
    }
    auto med = [&](double Run::*field) {
      std::vector<double> v;
      for (const Run& r : runs) v.push_back(r.*field);
      return Median(v);
    };
    std::printf(
        "%8d %10.1f %10.1f %9.1f %11.1f %11.1f %10.1f %10.1f %10.1f %12.1f "
        "%12.1f %11.1f\n",
        size, med(&Run::moved_mb), med(&Run::join_ms), med(&Run::join_mbps),
        med(&Run::drain_ms), med(&Run::drain_placed_ms),
        med(&Run::steady_step_ms), med(&Run::join_step_ms),
        med(&Run::drain_step_ms), med(&Run::worker_first_push_ms),
        med(&Run::worker_first_step_ms), med(&Run::restart_ms));
    if (FLAGS_replicas > 1) {
      std::printf(
          "%8d replicas 2: backups whole %.1f ms after the join's "
          "start, longest step meanwhile %.1f ms; probe pulls: "
          "median %.2f ms before, longest %.1f ms meanwhile, %.1f ms "
          "once the slots were in place\n",
          size, med(&Run::copies_ms), med(&Run::copies_max_step_ms),
          med(&Run::probe_before_ms), med(&Run::probe_max_ms),
          med(&Run::probe_copy_max_ms));
    }
    std::fflush(stdout);
  }
  return 0;
}
