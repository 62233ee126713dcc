// The consistency contract (docs/consistency.md), checked with
// real concurrency: P workers, each a thread with its own Client, on a
// cluster of two servers, sleeping random (seeded) amounts between steps,
// some with a straggler that pauses at a known clock.
//
// The workload is a "counter table" keyed by worker id. At each clock t a
// worker pushes, to its own key w:
//   counter: +1 (and +1 to the shared key P, which every worker adds to),
//   bits:    +2^t, so the value is 2^m - 1 exactly when pushes 0..m-1 each
//            applied once (a lost, doubled or out-of-prefix push breaks
//            the form; floats hold these exactly up to 2^24),
//   last:    t + 1 with kAssign, so the value is the last push applied,
// then calls Clock() and reads all three tables. The properties checked
// (numbered as in the design) are:
//   1. a read at clock c sees counter[w] >= c - s for every worker w;
//   2. a worker sees its own counter exactly;
//   3. after a global barrier every counter equals the number of clocks;
//   4. the server clock equals the minimum worker clock;
//   5. with a straggler paused at clock k, a fast worker completes exactly
//      k + s + 1 clocks, its next pull blocks, and its largest observed
//      staleness is s;
//   6. BSP: all workers' i-th reads are identical;
//   7. async: no bound, and a staleness histogram is reported;
//   8. each worker's pushes are applied exactly once and in order.
// Some cases run with the worker-side cache (ClientOptions::enable_cache).
// Waits are bounded; the only fixed pause is the 300 ms in which a
// pull that must block is observed not to finish (a liveness observation).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "sim/counter_oracle.h"
#include "tests/test_cluster.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;
using testing::TestCluster;
using testing::TestClusterOptions;

constexpr int64_t kRequestTimeoutMs = 20000;
constexpr int64_t kWaitMs = 20000;  // bound of every wait of the test
// How long a pull that must block is watched not to finish.
constexpr milliseconds kBlockedObservation{300};

Consistency Ssp(int32_t s) {
  return {ConsistencyMode::kSsp, s, BspCombine::kMean};
}
Consistency Bsp(BspCombine combine) {
  return {ConsistencyMode::kBsp, 0, combine};
}
Consistency Async() { return {ConsistencyMode::kAsync, 0, BspCombine::kMean}; }

// The staleness bound s of a model; -1 for async (no bound).
int64_t Bound(const Consistency& c) {
  switch (c.mode) {
    case ConsistencyMode::kSsp:
      return c.staleness;
    case ConsistencyMode::kBsp:
      return 0;
    case ConsistencyMode::kAsync:
      break;
  }
  return -1;
}

// Polls `done` every few milliseconds for at most `limit_ms`.
bool WaitFor(const std::function<bool()>& done, int64_t limit_ms = kWaitMs) {
  const auto deadline =
      std::chrono::steady_clock::now() + milliseconds(limit_ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return true;
}

// A one-shot signal between threads; waits are bounded.
class Event {
 public:
  void Notify() {
    std::lock_guard<std::mutex> lock(mu_);
    set_ = true;
    cv_.notify_all();
  }
  bool WaitFor(int64_t limit_ms = kWaitMs) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, milliseconds(limit_ms), [&] { return set_; });
  }
  bool is_set() {
    std::lock_guard<std::mutex> lock(mu_);
    return set_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

// What one read returned: the three tables over keys 0..P (P: shared).
struct Snapshot {
  int64_t clock = 0;
  std::vector<float> counter, bits, last;
  bool operator==(const Snapshot& o) const {
    return clock == o.clock && counter == o.counter && bits == o.bits &&
           last == o.last;
  }
};

std::string ToString(const Snapshot& s) {
  std::ostringstream out;
  out << "clock " << s.clock << " counter [";
  for (float v : s.counter) out << " " << v;
  out << " ] bits [";
  for (float v : s.bits) out << " " << v;
  out << " ] last [";
  for (float v : s.last) out << " " << v;
  out << " ]";
  return out.str();
}

struct TableIds {
  TableId counter = 0, bits = 0, last = 0;
};

TableOptions CounterTableOptions(const std::string& name, UpdateRule rule,
                                 const Consistency& consistency) {
  TableOptions t;
  t.name = name;
  t.value_width = 1;
  t.rule = rule;
  t.consistency = consistency;
  return t;
}

struct JobOptions {
  int num_workers = 3;
  Consistency consistency;
  // ClientOptions::enable_cache of every worker.
  bool cache = false;
  // Worker w's request_timeout_ms (kRequestTimeoutMs when not given).
  std::vector<int64_t> request_timeouts_ms;
  // ServerOptions::heartbeat_interval_ms of every server.
  int64_t server_heartbeat_interval_ms = ServerOptions().heartbeat_interval_ms;
};

JobOptions Workers(int num_workers, const Consistency& consistency,
                   bool cache = false) {
  JobOptions options;
  options.num_workers = num_workers;
  options.consistency = consistency;
  options.cache = cache;
  return options;
}

TestClusterOptions ClusterOptions(const JobOptions& job) {
  TestClusterOptions options;
  options.num_servers = 2;
  options.num_workers = job.num_workers;
  options.server.heartbeat_interval_ms = job.server_heartbeat_interval_ms;
  return options;
}

// A cluster of two servers and P worker clients (client i is worker i),
// with the three tables created once every worker has registered (so the
// servers know the whole live set before any clock moves).
class Job {
 public:
  Job(int num_workers, const Consistency& consistency)
      : Job(Workers(num_workers, consistency)) {}
  explicit Job(const JobOptions& options)
      : num_workers_(options.num_workers), cluster_(ClusterOptions(options)) {
    for (int w = 0; w < num_workers_; ++w) {
      ClientOptions o;
      o.coordinator_address = cluster_.address();
      o.connect_timeout_ms = kWaitMs;
      o.request_timeout_ms =
          w < static_cast<int>(options.request_timeouts_ms.size())
              ? options.request_timeouts_ms[w]
              : kRequestTimeoutMs;
      o.enable_cache = options.cache;
      auto client = Client::Connect(o);
      if (!client.ok()) {
        ADD_FAILURE() << "Connect: " << client.status();
        return;
      }
      clients_.push_back(std::move(*client));
      EXPECT_EQ(clients_.back()->worker_id(), w);
    }
    const Consistency& consistency = options.consistency;
    for (int w = 0; w < num_workers_; ++w) {
      auto counter = clients_[w]->CreateTable(
          CounterTableOptions("counter", UpdateRule::kAdd, consistency));
      auto bits = clients_[w]->CreateTable(
          CounterTableOptions("bits", UpdateRule::kAdd, consistency));
      auto last = clients_[w]->CreateTable(
          CounterTableOptions("last", UpdateRule::kAssign, consistency));
      if (!counter.ok() || !bits.ok() || !last.ok()) {
        ADD_FAILURE() << "CreateTable: " << counter.status() << " "
                      << bits.status() << " " << last.status();
        return;
      }
      tables_ = {*counter, *bits, *last};
    }
    for (int k = 0; k <= num_workers_; ++k) keys_.push_back(k);
    ready_ = true;
  }

  bool ready() const { return ready_; }
  int num_workers() const { return num_workers_; }
  TestCluster& cluster() { return cluster_; }
  Client& client(int w) { return *clients_[w]; }
  const TableIds& tables() const { return tables_; }
  const std::vector<Key>& keys() const { return keys_; }

  // The tables' state as the servers hold it now, read by a client that is
  // not a worker (never held back, never cached).
  Result<Snapshot> ObserverRead() {
    if (observer_ == nullptr) {
      ClientOptions o;
      o.coordinator_address = cluster_.address();
      o.register_as_worker = false;
      o.connect_timeout_ms = kWaitMs;
      o.request_timeout_ms = kRequestTimeoutMs;
      auto client = Client::Connect(o);
      if (!client.ok()) return client.status();
      observer_ = std::move(*client);
    }
    Snapshot s;
    s.counter.assign(keys_.size(), -1.0f);
    s.bits.assign(keys_.size(), -1.0f);
    s.last.assign(keys_.size(), -1.0f);
    Status st = observer_->Pull(tables_.counter, keys_, s.counter);
    if (st.ok()) st = observer_->Pull(tables_.bits, keys_, s.bits);
    if (st.ok()) st = observer_->Pull(tables_.last, keys_, s.last);
    if (!st.ok()) return st;
    return s;
  }

  // The server clock as every server reports it; -1 when they disagree.
  int64_t ServerClock() {
    const int64_t first = cluster_.server(0).counters().min_clock;
    for (int i = 1; i < cluster_.num_servers(); ++i) {
      if (cluster_.server(i).counters().min_clock != first) return -1;
    }
    return first;
  }
  uint64_t ParkedPulls() {
    uint64_t n = 0;
    for (int i = 0; i < cluster_.num_servers(); ++i) {
      n += cluster_.server(i).counters().parked_pulls;
    }
    return n;
  }

 private:
  int num_workers_;
  TestCluster cluster_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::unique_ptr<Client> observer_;
  TableIds tables_;
  std::vector<Key> keys_;
  bool ready_ = false;
};

// Every worker of `job` calls Barrier() (each on its own thread).
void BarrierAll(Job& job) {
  std::vector<std::thread> threads;
  for (int w = 0; w < job.num_workers(); ++w) {
    threads.emplace_back(
        [&job, w] { EXPECT_TRUE(job.client(w).Barrier(kWaitMs).ok()); });
  }
  for (auto& t : threads) t.join();
}

// One worker's side of the workload. Used by one thread at a time.
class Worker {
 public:
  Worker(Job* job, int id, uint32_t seed, int max_sleep_us)
      : job_(job),
        id_(id),
        client_(&job->client(id)),
        rng_(seed),
        sleep_us_(0, max_sleep_us) {
    bit_values_.reserve(64);
    last_values_.reserve(64);
  }

  int id() const { return id_; }
  Client& client() { return *client_; }
  int64_t clock() const { return client_->clock(); }

  void Sleep() {
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_(rng_)));
  }

  // Pushes this clock's updates, calls Clock() and sleeps. The bits and last
  // pushes are left in flight (their order is the transport's and server's
  // to keep).
  Status Step() {
    const int64_t t = client_->clock();
    if (t >= 24) return InvalidArgumentError("bits table holds 24 clocks");
    const Key own[] = {static_cast<Key>(id_),
                       static_cast<Key>(job_->num_workers())};
    const float ones[] = {1.0f, 1.0f};
    Status s = client_->Push(job_->tables().counter, own, ones);
    if (!s.ok()) return s;
    // reserve() above keeps these addresses stable while in flight.
    bit_values_.push_back(static_cast<float>(uint64_t{1} << t));
    last_values_.push_back(static_cast<float>(t + 1));
    own_key_ = static_cast<Key>(id_);
    in_flight_.push_back(client_->PushAsync(
        job_->tables().bits, std::span<const Key>(&own_key_, 1),
        std::span<const float>(&bit_values_.back(), 1)));
    in_flight_.push_back(client_->PushAsync(
        job_->tables().last, std::span<const Key>(&own_key_, 1),
        std::span<const float>(&last_values_.back(), 1)));
    Sleep();
    client_->Clock();
    // Others may push the new clock's updates before this worker reads:
    // BSP must hide them, SSP may show them.
    Sleep();
    return Status::Ok();
  }

  // Reads the three tables at the current clock.
  Result<Snapshot> Read() {
    Snapshot s;
    s.clock = client_->clock();
    const size_t n = job_->keys().size();
    s.counter.assign(n, -1.0f);
    s.bits.assign(n, -1.0f);
    s.last.assign(n, -1.0f);
    Status st = client_->Pull(job_->tables().counter, job_->keys(), s.counter);
    if (st.ok()) st = client_->Pull(job_->tables().bits, job_->keys(), s.bits);
    if (st.ok()) st = client_->Pull(job_->tables().last, job_->keys(), s.last);
    if (!st.ok()) return st;
    return s;
  }

  // Reads the counter table only (keys 0..P) at the current clock.
  Result<std::vector<float>> ReadCounter() {
    std::vector<float> out(job_->keys().size(), -1.0f);
    Status s = client_->Pull(job_->tables().counter, job_->keys(), out);
    if (!s.ok()) return s;
    return out;
  }

  // Waits for the pushes still in flight.
  Status Drain() {
    for (Handle& h : in_flight_) {
      Status s = h.Wait();
      if (!s.ok()) return s;
    }
    in_flight_.clear();
    return Status::Ok();
  }

 private:
  Job* job_;
  int id_;
  Client* client_;
  std::mt19937 rng_;
  std::uniform_int_distribution<int> sleep_us_;
  Key own_key_ = 0;
  std::vector<float> bit_values_, last_values_;
  std::vector<Handle> in_flight_;
};

// Checks one read made by worker `self` against `consistency` (properties
// 1, 2 and 8; for BSP also the exact snapshot; sim/counter_oracle.h).
// Returns the violations.
std::vector<std::string> CheckRead(const Snapshot& s, int self, int num_workers,
                                   const Consistency& consistency) {
  const counter_oracle::Read read{s.clock, s.counter, s.bits, s.last};
  std::vector<std::string> bad =
      counter_oracle::CheckRead(read, self, num_workers, consistency);
  std::string shared =
      counter_oracle::CheckSharedCounter(read, num_workers, consistency);
  if (!shared.empty()) bad.push_back(std::move(shared));
  for (std::string& what : bad) {
    what =
        "worker " + std::to_string(self) + ": " + what + " in " + ToString(s);
  }
  return bad;
}

// True when `s` is the state after every worker's `clocks` clocks: each
// counter `clocks`, each push applied once (bits 2^clocks - 1), the last
// one last (last == clocks), the shared counter the sum (or BSP's mean).
bool IsFinalState(const Snapshot& s, int num_workers, int64_t clocks,
                  const Consistency& consistency) {
  if (s.counter.size() != static_cast<size_t>(num_workers + 1)) return false;
  const counter_oracle::FinalState want =
      counter_oracle::Final(num_workers, clocks, consistency);
  for (int w = 0; w < num_workers; ++w) {
    if (s.counter[w] != want.counter || s.bits[w] != want.bits ||
        s.last[w] != want.last) {
      return false;
    }
  }
  return s.counter[num_workers] == want.shared;
}

// ------------------------------------------------------------------
// Properties 1, 2, 3, 4, 6 and 8 under every model: P workers run the
// workload concurrently with random sleeps (worker P-1 sleeps longest).

struct ModeCase {
  const char* name;
  Consistency consistency;
  bool cache = false;  // workers answer SSP pulls from their cache
};

void PrintTo(const ModeCase& c, std::ostream* os) { *os << c.name; }

class CounterWorkload : public ::testing::TestWithParam<ModeCase> {};

TEST_P(CounterWorkload, KeepsTheContractOnEveryReadAndEndsExact) {
  constexpr int kWorkers = 4;
  constexpr int64_t kClocks = 20;
  const Consistency consistency = GetParam().consistency;
  const int64_t bound = Bound(consistency);
  Job job(Workers(kWorkers, consistency, GetParam().cache));
  ASSERT_TRUE(job.ready());

  std::vector<std::vector<Snapshot>> reads(kWorkers);
  std::vector<std::vector<std::string>> violations(kWorkers);
  std::vector<ClientStats> stats(kWorkers);
  std::vector<Snapshot> finals(kWorkers);
  std::atomic<bool> running{true};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      Worker worker(&job, w, /*seed=*/1000 + w,
                    /*max_sleep_us=*/w == kWorkers - 1 ? 4000 : 1500);
      auto fail = [&](const std::string& what, const Status& s) {
        violations[w].push_back("worker " + std::to_string(w) + ": " + what +
                                ": " + s.ToString());
      };
      Status s = worker.client().Barrier(kWaitMs);
      if (!s.ok()) return fail("first barrier", s);
      for (int64_t c = 1; c <= kClocks; ++c) {
        s = worker.Step();
        if (!s.ok()) return fail("step", s);
        auto read = worker.Read();
        if (!read.ok()) {
          return fail("read at clock " + std::to_string(c), read.status());
        }
        if (read->clock != c) {
          return fail("clock", InternalError(std::to_string(read->clock)));
        }
        for (std::string& v : CheckRead(*read, w, kWorkers, consistency)) {
          violations[w].push_back(std::move(v));
        }
        reads[w].push_back(std::move(*read));
        worker.Sleep();
      }
      s = worker.Drain();
      if (!s.ok()) return fail("in-flight pushes", s);
      s = worker.client().Barrier(kWaitMs);
      if (!s.ok()) return fail("final barrier", s);
      auto final_read = worker.Read();
      if (!final_read.ok()) return fail("final read", final_read.status());
      finals[w] = std::move(*final_read);
      stats[w] = worker.client().stats();
    });
  }
  // (4), concurrently: the server clock never exceeds the slowest worker's
  // clock. A server learns a clock after the worker moved to it, so a
  // sample taken before reading the workers' clocks can only be lower.
  std::vector<std::string> sampler_violations;
  std::thread sampler([&] {
    while (running.load()) {
      for (int i = 0; i < job.cluster().num_servers(); ++i) {
        const int64_t server_clock =
            job.cluster().server(i).counters().min_clock;
        int64_t slowest = kClocks;
        for (int w = 0; w < kWorkers; ++w) {
          slowest = std::min(slowest, job.client(w).clock());
        }
        if (server_clock > slowest) {
          sampler_violations.push_back(
              "(4) server " + std::to_string(i) + " clock " +
              std::to_string(server_clock) + " > slowest worker's " +
              std::to_string(slowest));
        }
      }
      std::this_thread::sleep_for(milliseconds(1));
    }
  });
  for (auto& t : threads) t.join();
  running = false;
  sampler.join();
  EXPECT_TRUE(sampler_violations.empty()) << sampler_violations.front();

  for (int w = 0; w < kWorkers; ++w) {
    SCOPED_TRACE("worker " + std::to_string(w));
    EXPECT_TRUE(violations[w].empty())
        << violations[w].size()
        << " violations; first: " << violations[w].front();
    ASSERT_EQ(reads[w].size(), static_cast<size_t>(kClocks));
    // (3) + (8): after the barrier every counter is the number of clocks,
    // each push applied once, the last one last. (With the worker cache a
    // read after the barrier may be a hit on an older copy: see
    // WorkerCache.AReadAfterAGlobalBarrierSeesEveryUpdate; the servers'
    // state is checked below for every model.)
    if (!GetParam().cache) {
      EXPECT_TRUE(IsFinalState(finals[w], kWorkers, kClocks, consistency))
          << "(3) worker " << w << " read after the barrier "
          << ToString(finals[w]);
    }
    // Observed staleness never exceeds the bound; the histogram adds up.
    uint64_t histogram_total = 0;
    for (uint64_t n : stats[w].staleness) histogram_total += n;
    EXPECT_EQ(histogram_total, stats[w].pulls);
    EXPECT_GE(stats[w].max_staleness(), 0) << "no staleness reported";
    if (bound >= 0) {
      EXPECT_LE(stats[w].max_staleness(), bound);
    }
  }
  // (3) + (8) as the servers hold it.
  auto state = job.ObserverRead();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_TRUE(IsFinalState(*state, kWorkers, kClocks, consistency))
      << "(3) the servers hold " << ToString(*state);
  // (6) BSP: every worker's i-th read is the same state.
  if (consistency.mode == ConsistencyMode::kBsp) {
    for (int w = 1; w < kWorkers; ++w) {
      for (int64_t i = 0; i < kClocks; ++i) {
        EXPECT_EQ(reads[w][i], reads[0][i])
            << "(6) read " << i << ": worker 0 saw " << ToString(reads[0][i])
            << ", worker " << w << " saw " << ToString(reads[w][i]);
      }
    }
  }
  // (4) with every worker at its final clock, the server clock is exactly it.
  EXPECT_TRUE(WaitFor([&] { return job.ServerClock() == kClocks; }))
      << "(4) server clocks " << job.cluster().server(0).counters().min_clock
      << ", " << job.cluster().server(1).counters().min_clock << ", want "
      << kClocks;
}

INSTANTIATE_TEST_SUITE_P(
    EveryModel, CounterWorkload,
    ::testing::Values(ModeCase{"Ssp0", Ssp(0)}, ModeCase{"Ssp1", Ssp(1)},
                      ModeCase{"Ssp3", Ssp(3)},
                      ModeCase{"BspSum", Bsp(BspCombine::kSum)},
                      ModeCase{"BspMean", Bsp(BspCombine::kMean)},
                      ModeCase{"Async", Async()},
                      ModeCase{"Ssp1Cache", Ssp(1), /*cache=*/true},
                      ModeCase{"Ssp3Cache", Ssp(3), /*cache=*/true}),
    [](const ::testing::TestParamInfo<ModeCase>& info) {
      return std::string(info.param.name);
    });

// ------------------------------------------------------------------
// Property 4 with uneven clocks, driven step by step.

TEST(ServerClock, EqualsTheMinimumClockOverLiveWorkers) {
  Job job(3, Async());
  ASSERT_TRUE(job.ready());
  BarrierAll(job);
  ASSERT_EQ(job.ServerClock(), 0);
  auto advance_to = [&](int w, int64_t clock) {
    while (job.client(w).clock() < clock) job.client(w).Clock();
  };
  // Polls until every server reports `want` (they learn clocks
  // asynchronously); a server clock other than the minimum never gets there.
  auto server_clock_is = [&](int64_t want) -> ::testing::AssertionResult {
    if (WaitFor([&] { return job.ServerClock() == want; })) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "server clocks " << job.cluster().server(0).counters().min_clock
           << ", " << job.cluster().server(1).counters().min_clock << ", want "
           << want;
  };
  advance_to(0, 3);
  advance_to(1, 6);
  advance_to(2, 9);
  ASSERT_TRUE(server_clock_is(3));
  advance_to(0, 8);  // worker 1 (6) is now the slowest
  ASSERT_TRUE(server_clock_is(6));
  advance_to(1, 12);  // worker 0 (8)
  ASSERT_TRUE(server_clock_is(8));
  advance_to(2, 10);  // still worker 0
  advance_to(0, 11);  // worker 2 (10)
  ASSERT_TRUE(server_clock_is(10));
  advance_to(2, 20);  // worker 0 (11)
  ASSERT_TRUE(server_clock_is(11));
}

// ------------------------------------------------------------------
// Property 5: exact blocking. Worker P-1 is a straggler that completes k
// clocks and pauses; the others loop {push; Clock(); pull}.

class StragglerBound : public ::testing::TestWithParam<ModeCase> {};

TEST_P(StragglerBound, FastWorkersCompleteExactlyKPlusSPlusOneClocks) {
  constexpr int kWorkers = 3;
  constexpr int kStraggler = kWorkers - 1;
  constexpr int64_t kPauseAt = 4;  // k
  constexpr int64_t kClocks = 12;
  const Consistency consistency = GetParam().consistency;
  const int64_t s = Bound(consistency);
  const int64_t kLastFree = kPauseAt + s;  // last clock whose pull completes
  ASSERT_LT(kLastFree + 1, kClocks);
  Job job(Workers(kWorkers, consistency, GetParam().cache));
  ASSERT_TRUE(job.ready());

  Event straggler_paused, release;
  std::vector<Event> blocked_pull_sent(kWorkers - 1);
  std::vector<Handle> blocked_pulls(kWorkers - 1);
  std::vector<std::vector<float>> blocked_out(
      kWorkers - 1, std::vector<float>(kWorkers + 1, -1.0f));
  std::vector<std::vector<std::string>> violations(kWorkers);
  std::vector<ClientStats> stats(kWorkers);
  std::vector<std::vector<float>> finals(kWorkers);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      const bool straggler = w == kStraggler;
      Worker worker(&job, w, /*seed=*/2000 + w, /*max_sleep_us=*/1000);
      auto fail = [&](const std::string& what) {
        violations[w].push_back("worker " + std::to_string(w) + ": " + what);
      };
      if (!worker.client().Barrier(kWaitMs).ok()) return fail("barrier");
      for (int64_t c = 1; c <= kClocks; ++c) {
        if (straggler && c == kPauseAt + 1) {
          straggler_paused.Notify();
          if (!release.WaitFor()) return fail("never released");
        }
        if (!worker.Step().ok()) return fail("step");
        if (!straggler && c == kLastFree + 1) {
          // The pull that must block until the straggler moves on.
          Handle& h = blocked_pulls[w];
          h = worker.client().PullAsync(job.tables().counter, job.keys(),
                                        blocked_out[w]);
          blocked_pull_sent[w].Notify();
          if (!release.WaitFor()) return fail("never released");
          Status st = h.Wait();
          if (!st.ok()) return fail("released pull: " + st.ToString());
          // Released by the straggler's clock k + 1, no later state of it.
          if (blocked_out[w][kStraggler] < kPauseAt + 1) {
            fail("released pull misses the straggler's clock k");
          }
          continue;
        }
        auto read = worker.Read();
        if (!read.ok()) {
          return fail("pull at clock " + std::to_string(c) + ": " +
                      read.status().ToString());
        }
        for (std::string& v : CheckRead(*read, w, kWorkers, consistency)) {
          violations[w].push_back(std::move(v));
        }
        if (!straggler && c == kLastFree &&
            read->counter[kStraggler] != kPauseAt) {
          fail(
              "(5) the pull at clock k + s sees the paused straggler's "
              "counter as " +
              std::to_string(read->counter[kStraggler]));
        }
      }
      if (!worker.Drain().ok()) return fail("in-flight pushes");
      if (!worker.client().Barrier(kWaitMs).ok()) return fail("final barrier");
      finals[w].assign(kWorkers + 1, -1.0f);
      if (!worker.client()
               .Pull(job.tables().counter, job.keys(), finals[w])
               .ok()) {
        return fail("final pull");
      }
      stats[w] = worker.client().stats();
    });
  }

  EXPECT_TRUE(straggler_paused.WaitFor()) << "the straggler never paused";
  for (int w = 0; w < kWorkers - 1; ++w) {
    EXPECT_TRUE(blocked_pull_sent[w].WaitFor())
        << "worker " << w << " never reached clock k + s + 1";
  }
  // (5) each fast worker is at clock k + s + 1 and its pull is parked.
  for (int w = 0; w < kWorkers - 1; ++w) {
    EXPECT_EQ(job.client(w).clock(), kLastFree + 1) << "worker " << w;
  }
  EXPECT_EQ(job.client(kStraggler).clock(), kPauseAt);
  EXPECT_TRUE(WaitFor([&] { return job.ParkedPulls() >= kWorkers - 1; }))
      << "parked pulls: " << job.ParkedPulls();
  std::this_thread::sleep_for(kBlockedObservation);
  for (int w = 0; w < kWorkers - 1; ++w) {
    EXPECT_FALSE(blocked_pulls[w].done())
        << "(5) worker " << w << "'s pull at clock k + s + 1 did not block";
  }
  EXPECT_TRUE(WaitFor([&] { return job.ServerClock() == kPauseAt; }))
      << "(4) server clocks " << job.cluster().server(0).counters().min_clock
      << ", " << job.cluster().server(1).counters().min_clock;
  release.Notify();
  for (auto& t : threads) t.join();

  for (int w = 0; w < kWorkers; ++w) {
    SCOPED_TRACE("worker " + std::to_string(w));
    EXPECT_TRUE(violations[w].empty())
        << violations[w].size()
        << " violations; first: " << violations[w].front();
    ASSERT_EQ(finals[w].size(), static_cast<size_t>(kWorkers + 1));
    // (3) (with the cache, see WorkerCache.AReadAfterAGlobalBarrier...)
    for (int v = 0; v < kWorkers && !GetParam().cache; ++v) {
      EXPECT_EQ(finals[w][v], kClocks) << "(3) counter of worker " << v;
    }
    // (5) the largest gap a fast worker saw is s, not less; nobody saw more.
    // (Staleness is measured on server replies; with the cache a read at
    // clock k + s may be a hit on a copy of server clock k, not measured.)
    if (w != kStraggler && !GetParam().cache) {
      EXPECT_EQ(stats[w].max_staleness(), s);
      EXPECT_GT(stats[w].blocked_us, 0u) << "the parked pull waited";
    } else if (w != kStraggler) {
      EXPECT_LE(stats[w].max_staleness(), s);
      EXPECT_GT(stats[w].blocked_us, 0u) << "the parked pull waited";
    } else {
      EXPECT_LE(stats[w].max_staleness(), s);
    }
  }
  // (3) + (8) as the servers hold it.
  auto state = job.ObserverRead();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_TRUE(IsFinalState(*state, kWorkers, kClocks, consistency))
      << "(3) the servers hold " << ToString(*state);
}

INSTANTIATE_TEST_SUITE_P(
    BoundedModels, StragglerBound,
    ::testing::Values(ModeCase{"Ssp0", Ssp(0)}, ModeCase{"Ssp1", Ssp(1)},
                      ModeCase{"Ssp3", Ssp(3)},
                      ModeCase{"BspSum", Bsp(BspCombine::kSum)},
                      ModeCase{"Ssp3Cache", Ssp(3), /*cache=*/true}),
    [](const ::testing::TestParamInfo<ModeCase>& info) {
      return std::string(info.param.name);
    });

// ------------------------------------------------------------------
// Property 7: async has no bound, and staleness is reported.

TEST(AsyncConsistency, FastWorkerRunsFarAheadOfAPausedStraggler) {
  constexpr int64_t kPauseAt = 2;
  constexpr int64_t kAhead = 20;
  constexpr int64_t kClocks = kPauseAt + kAhead;
  Job job(2, Async());
  ASSERT_TRUE(job.ready());
  Event straggler_paused, release;
  std::vector<std::string> violations;
  std::thread straggler([&] {
    Worker worker(&job, 1, /*seed=*/3001, /*max_sleep_us=*/1000);
    if (!worker.client().Barrier(kWaitMs).ok()) {
      violations.push_back("straggler barrier");
      return;
    }
    for (int64_t c = 1; c <= kClocks; ++c) {
      if (c == kPauseAt + 1) {
        straggler_paused.Notify();
        if (!release.WaitFor()) return;
      }
      if (!worker.Step().ok() || !worker.Read().ok()) {
        violations.push_back("straggler step or read failed");
        return;
      }
    }
    if (!worker.Drain().ok()) violations.push_back("straggler drain");
    if (!worker.client().Barrier(kWaitMs).ok()) {
      violations.push_back("straggler final barrier");
    }
  });

  Worker fast(&job, 0, /*seed=*/3000, /*max_sleep_us=*/1000);
  ASSERT_TRUE(fast.client().Barrier(kWaitMs).ok());
  ASSERT_TRUE(straggler_paused.WaitFor());
  for (int64_t c = 1; c <= kClocks; ++c) {
    ASSERT_TRUE(fast.Step().ok());
    auto read = fast.Read();
    ASSERT_TRUE(read.ok()) << "(7) pull at clock " << c << ": "
                           << read.status();
    EXPECT_EQ(read->counter[0], c) << "(2) own counter";
    EXPECT_EQ(read->counter[1], kPauseAt) << "the paused straggler's counter";
  }
  // No pull ever waited at a server.
  EXPECT_EQ(job.ParkedPulls(), 0u);
  ClientStats stats = fast.client().stats();
  EXPECT_EQ(stats.blocked_us, 0u) << "(7) an async pull waited";
  // (7) the histogram is reported; the last pull was kAhead clocks ahead.
  uint64_t total = 0;
  for (uint64_t n : stats.staleness) total += n;
  EXPECT_EQ(total, stats.pulls);
  EXPECT_GT(stats.pulls, 0u);
  EXPECT_EQ(stats.max_staleness(), kAhead);
  ASSERT_GT(stats.staleness.size(), static_cast<size_t>(kAhead));
  EXPECT_GT(stats.staleness[kAhead], 0u);

  release.Notify();
  ASSERT_TRUE(fast.Drain().ok());
  ASSERT_TRUE(fast.client().Barrier(kWaitMs).ok());
  straggler.join();
  EXPECT_TRUE(violations.empty()) << violations.front();
  auto final_read = fast.Read();
  ASSERT_TRUE(final_read.ok());
  EXPECT_EQ(final_read->counter[0], kClocks);
  EXPECT_EQ(final_read->counter[1], kClocks);
  EXPECT_EQ(final_read->bits[1], static_cast<float>((1u << kClocks) - 1));
  EXPECT_EQ(final_read->last[1], kClocks);
}

// ------------------------------------------------------------------
// The worker-side cache (ClientOptions::enable_cache) keeps property 3.

// A read after a global barrier sees every update made before it, even
// with the worker cache on (Barrier() empties the cache; a copy up to s
// clocks old would otherwise answer).
TEST(WorkerCache, AReadAfterAGlobalBarrierSeesEveryUpdate) {
  constexpr int64_t kClocks = 6;
  Job job(Workers(2, Ssp(2), /*cache=*/true));
  ASSERT_TRUE(job.ready());
  Worker w0(&job, 0, 8000, 200), w1(&job, 1, 8001, 200);
  BarrierAll(job);
  for (int64_t c = 1; c <= kClocks; ++c) {
    ASSERT_TRUE(w0.Step().ok());
    ASSERT_TRUE(w1.Step().ok());
    auto r0 = w0.Read();
    auto r1 = w1.Read();
    ASSERT_TRUE(r0.ok() && r1.ok());
    EXPECT_TRUE(CheckRead(*r0, 0, 2, Ssp(2)).empty()) << ToString(*r0);
    EXPECT_TRUE(CheckRead(*r1, 1, 2, Ssp(2)).empty()) << ToString(*r1);
  }
  ASSERT_TRUE(w0.Drain().ok());
  ASSERT_TRUE(w1.Drain().ok());
  EXPECT_GT(w0.client().stats().cache_hits, 0u) << "the cache was not used";
  BarrierAll(job);
  for (Worker* w : {&w0, &w1}) {
    auto read = w->Read();
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_TRUE(IsFinalState(*read, 2, kClocks, Ssp(2)))
        << "(3) worker " << w->id() << " read after the barrier "
        << ToString(*read);
  }
}

// A caching worker follows a consistency change at the boundary B like
// every other: its pull at clock B = 2 under the new BSP model waits for
// worker 0 and shows its clock-1 push (the change suspends caches from
// prepare to commit, and they serve only clocks >= B afterwards).
TEST(WorkerCache, AChangeToBspReachesACachingWorkerAtB) {
  Job job(Workers(2, Ssp(3), /*cache=*/true));
  ASSERT_TRUE(job.ready());
  Worker w0(&job, 0, 8100, 200), w1(&job, 1, 8101, 200);
  BarrierAll(job);
  ASSERT_TRUE(w0.Step().ok());
  ASSERT_TRUE(w1.Step().ok());
  ASSERT_TRUE(w1.ReadCounter().ok());  // fills worker 1's cache
  auto boundary =
      w0.client().SetConsistency(job.tables().counter, Bsp(BspCombine::kSum));
  ASSERT_TRUE(boundary.ok()) << boundary.status();
  ASSERT_EQ(*boundary, 2) << "both workers are at clock 1";
  ASSERT_TRUE(w1.Step().ok());  // clock 2 = B: BSP
  std::vector<float> out(job.keys().size(), -1.0f);
  Handle pull = w1.client().PullAsync(job.tables().counter, job.keys(), out);
  std::this_thread::sleep_for(kBlockedObservation);
  EXPECT_FALSE(pull.done())
      << "a BSP pull at clock 2 returned before worker 0 finished clock 1: "
      << "counter [" << out[0] << " " << out[1] << "]";
  ASSERT_TRUE(w0.Step().ok());
  ASSERT_TRUE(pull.Wait().ok());
  EXPECT_EQ(out[0], 2) << "BSP read at clock 2 misses worker 0's clock 1";
  EXPECT_EQ(out[1], 2);
  ASSERT_TRUE(w0.Drain().ok());
  ASSERT_TRUE(w1.Drain().ok());
}

// ------------------------------------------------------------------
// The deadline path: a pull the bound holds past the request timeout fails
// with kDeadlineExceeded naming the workers it waited for.

// Worker 0 (request timeout 5000 ms) runs under SSP(0) until worker 1
// stops at clock 2, then pulls at clock 3; returns what that pull got, and
// checks that the job goes on once worker 1 moves. The server answers at
// 4500 ms, leaving the reply 500 ms to come back before the client's own
// timeout (a sanitizer build on a loaded machine needs more than 150).
Status PullPastTheBound(int64_t server_heartbeat_interval_ms) {
  constexpr int64_t kPauseAt = 2;
  JobOptions options = Workers(2, Ssp(0));
  options.request_timeouts_ms = {5000, kRequestTimeoutMs};
  options.server_heartbeat_interval_ms = server_heartbeat_interval_ms;
  Job job(options);
  if (!job.ready()) return InternalError("job not started");
  Worker fast(&job, 0, 4000, 500);
  Worker straggler(&job, 1, 4001, 500);
  BarrierAll(job);
  for (int64_t c = 1; c <= kPauseAt; ++c) {
    EXPECT_TRUE(straggler.Step().ok());
    EXPECT_TRUE(fast.Step().ok());
    EXPECT_TRUE(fast.Read().ok());
  }
  EXPECT_TRUE(fast.Step().ok());  // clock k + 1: needs the straggler at k + 1
  std::vector<float> out(job.keys().size());
  Status s = fast.client().Pull(job.tables().counter, job.keys(), out);
  // The straggler moves on: the next pull goes through.
  EXPECT_TRUE(straggler.Step().ok());
  EXPECT_TRUE(fast.client().Pull(job.tables().counter, job.keys(), out).ok());
  EXPECT_EQ(out[1], kPauseAt + 1);
  EXPECT_TRUE(fast.Drain().ok());
  EXPECT_TRUE(straggler.Drain().ok());
  return s;
}

TEST(StalenessGate, APullPastItsDeadlineNamesTheWorkersItWaitedFor) {
  // Servers that wake often (see the next test for why that matters).
  Status s = PullPastTheBound(/*server_heartbeat_interval_ms=*/20);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("waiting for workers 1 (at clock 2)"),
            std::string::npos)
      << s;
}

// A parked pull is answered at its deadline (timeout - min(timeout / 10,
// 1 s) after it arrived), whatever the server's heartbeat interval: the
// server's loop wakes for the earliest deadline, so the client gets the
// server's "waiting for workers ..." answer, not its own timeout.
TEST(StalenessGate, TheDeadlineAnswerDoesNotWaitForTheServersHeartbeat) {
  Status s = PullPastTheBound(/*server_heartbeat_interval_ms=*/5000);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("waiting for workers 1 (at clock 2)"),
            std::string::npos)
      << s;
}

// ------------------------------------------------------------------
// Runtime changes of the model take effect at the returned boundary B.

TEST(RuntimeChange, ALargerBoundLetsTheFastWorkerRunFurtherFromB) {
  constexpr int32_t kNewBound = 5;
  Job job(2, Ssp(0));
  ASSERT_TRUE(job.ready());
  Worker fast(&job, 0, 5000, 500);
  Worker straggler(&job, 1, 5001, 500);
  BarrierAll(job);

  // SSP(0): the fast worker at clock 2 waits for the straggler at 1.
  ASSERT_TRUE(straggler.Step().ok());
  ASSERT_TRUE(fast.Step().ok());
  ASSERT_TRUE(fast.Read().ok());
  ASSERT_TRUE(fast.Step().ok());
  std::vector<float> parked_out(job.keys().size(), -1.0f);
  Handle parked =
      fast.client().PullAsync(job.tables().counter, job.keys(), parked_out);
  ASSERT_TRUE(WaitFor([&] { return job.ParkedPulls() > 0; }));
  std::this_thread::sleep_for(kBlockedObservation);
  EXPECT_FALSE(parked.done()) << "SSP(0) let a pull one clock ahead through";

  auto boundary =
      fast.client().SetConsistency(job.tables().counter, Ssp(kNewBound));
  ASSERT_TRUE(boundary.ok()) << boundary.status();
  const int64_t b = *boundary;
  // Requests of clocks already used stay under the old model.
  EXPECT_GT(b, fast.clock()) << "the change reached back to a used clock";
  std::this_thread::sleep_for(kBlockedObservation);
  EXPECT_FALSE(parked.done()) << "the pull at clock 2 < B left SSP(0)";

  // The straggler reaches B - 1 (still under SSP(0) for its own pulls, which
  // the fast worker is ahead of), releasing the parked pull.
  while (straggler.clock() < b - 1) ASSERT_TRUE(straggler.Step().ok());
  ASSERT_TRUE(parked.Wait().ok());
  ASSERT_TRUE(straggler.Drain().ok());
  const int64_t k = straggler.clock();
  // From B on, pulls at clock c need the server clock at c - 5 only.
  while (fast.clock() < b - 1) {
    ASSERT_TRUE(fast.Step().ok());
    ASSERT_TRUE(fast.Read().ok());
  }
  // (Only the counter table changed; the fast worker reads only it now.)
  for (int64_t c = fast.clock() + 1; c <= k + kNewBound; ++c) {
    ASSERT_TRUE(fast.Step().ok());
    ASSERT_GE(fast.clock(), b);
    auto read = fast.ReadCounter();
    ASSERT_TRUE(read.ok()) << "SSP(5) pull at clock " << c
                           << " with the straggler at " << k << ": "
                           << read.status();
    EXPECT_EQ((*read)[1], k);
    EXPECT_EQ((*read)[0], c);
  }
  // ... and the one at k + 6 blocks.
  ASSERT_TRUE(fast.Step().ok());
  std::vector<float> out(job.keys().size(), -1.0f);
  Handle blocked =
      fast.client().PullAsync(job.tables().counter, job.keys(), out);
  std::this_thread::sleep_for(kBlockedObservation);
  EXPECT_FALSE(blocked.done()) << "SSP(5) let a pull 6 clocks ahead through";
  ASSERT_TRUE(straggler.Step().ok());
  ASSERT_TRUE(blocked.Wait().ok());
  EXPECT_EQ(out[1], k + 1);
  EXPECT_EQ(fast.client().stats().max_staleness(), kNewBound);
  ASSERT_TRUE(fast.Drain().ok());
  ASSERT_TRUE(straggler.Drain().ok());
}

// Workers 0..2 run SSP(2); worker 0 switches all three tables to BSP at its
// clock 5; reads from the boundary on must be BSP's snapshots.
void SwitchToBspTakesEffectAtB(bool cache) {
  constexpr int kWorkers = 3;
  constexpr int64_t kClocks = 20;
  constexpr int64_t kChangeAt = 5;  // worker 0's clock when it asks
  const Consistency before = Ssp(2);
  const Consistency after = Bsp(BspCombine::kSum);
  Job job(Workers(kWorkers, before, cache));
  ASSERT_TRUE(job.ready());
  // Each table gets its own boundary; reads at clocks >= the last are BSP
  // in every table, reads below the first SSP(2) in every table, and reads
  // in between are checked against SSP(2), which BSP also keeps.
  std::atomic<int64_t> first_boundary{-1}, last_boundary{-1};
  std::vector<std::vector<Snapshot>> reads(kWorkers);
  std::vector<std::vector<std::string>> violations(kWorkers);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      Worker worker(&job, w, 6000 + w, w == kWorkers - 1 ? 3000 : 1000);
      auto fail = [&](const std::string& what) {
        violations[w].push_back("worker " + std::to_string(w) + ": " + what);
      };
      if (!worker.client().Barrier(kWaitMs).ok()) return fail("barrier");
      for (int64_t c = 1; c <= kClocks; ++c) {
        if (!worker.Step().ok()) return fail("step");
        auto read = worker.Read();
        if (!read.ok()) return fail("read: " + read.status().ToString());
        reads[w].push_back(*read);
        if (w == 0 && c == kChangeAt) {
          for (TableId t :
               {job.tables().counter, job.tables().bits, job.tables().last}) {
            auto b = worker.client().SetConsistency(t, after);
            if (!b.ok())
              return fail("SetConsistency: " + b.status().ToString());
            if (first_boundary.load() < 0) first_boundary = *b;
            last_boundary = std::max<int64_t>(last_boundary.load(), *b);
          }
        }
        worker.Sleep();
      }
      if (!worker.Drain().ok()) return fail("drain");
      if (!worker.client().Barrier(kWaitMs).ok()) fail("final barrier");
    });
  }
  for (auto& t : threads) t.join();
  const int64_t b = last_boundary.load();
  ASSERT_GT(first_boundary.load(), kChangeAt)
      << "the change reached back to a used clock";
  ASSERT_LT(b, kClocks - 3) << "too few clocks after B to check anything";
  for (int w = 0; w < kWorkers; ++w) {
    SCOPED_TRACE("worker " + std::to_string(w));
    EXPECT_TRUE(violations[w].empty()) << violations[w].front();
    ASSERT_EQ(reads[w].size(), static_cast<size_t>(kClocks));
    for (const Snapshot& s : reads[w]) {
      const auto bad = CheckRead(s, w, kWorkers, s.clock >= b ? after : before);
      EXPECT_TRUE(bad.empty())
          << (s.clock >= b ? "BSP" : "SSP(2)") << " read at clock " << s.clock
          << " (B = " << b << "): " << bad.front();
    }
  }
  // (6) from B on, every worker's read at a clock is the same state.
  for (int w = 1; w < kWorkers; ++w) {
    for (int64_t c = b; c <= kClocks; ++c) {
      EXPECT_EQ(reads[w][c - 1], reads[0][c - 1])
          << "clock " << c << ": " << ToString(reads[0][c - 1]) << " vs "
          << ToString(reads[w][c - 1]);
    }
  }
}

TEST(RuntimeChange, SwitchingToBspTakesEffectAtBForEveryWorker) {
  SwitchToBspTakesEffectAtB(/*cache=*/false);
}

TEST(RuntimeChange, SwitchingToBspTakesEffectAtBForEveryCachingWorker) {
  SwitchToBspTakesEffectAtB(/*cache=*/true);
}

}  // namespace
}  // namespace ductile
