// Workers joining and leaving a running job (docs/elasticity.md), in one
// process: a coordinator, two servers and worker clients on threads. The
// oracle is exact: every worker adds 1 to every key at every clock it
// takes part in, so under BSP a read at clock c is exactly the number of
// pushes of clocks before c, the same for every worker.
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "ductile/admin.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace ductile {
namespace {

using testing::TestCluster;
using testing::TestClusterOptions;

constexpr int kKeys = 16;  // spread over both servers

TableOptions CountTable(ConsistencyMode mode, int staleness = 0) {
  TableOptions t;
  t.name = "count";
  t.value_width = 1;
  t.rule = UpdateRule::kAdd;
  t.consistency.mode = mode;
  t.consistency.staleness = staleness;
  t.consistency.combine = BspCombine::kSum;
  return t;
}

std::vector<Key> AllKeys() {
  std::vector<Key> keys;
  for (Key k = 0; k < kKeys; ++k) keys.push_back(k * 7919);
  return keys;
}

// The state a worker's pulls returned, by clock: every key must hold the
// same value (every push adds 1 to every key).
struct Reads {
  std::map<int64_t, float> at;  // clock -> value of every key
  bool uniform = true;
};

// One worker's steps from its clock up to `end`: push 1 to every key,
// Clock(), pull. Records what each pull returned. `before_step(clock)`, if
// set, runs before each step.
Status RunSteps(Client& client, TableId table, int64_t end, Reads* reads,
                const std::function<void(int64_t)>& before_step = {}) {
  const std::vector<Key> keys = AllKeys();
  const std::vector<float> ones(keys.size(), 1.0f);
  std::vector<float> out(keys.size());
  while (client.clock() < end) {
    if (before_step) before_step(client.clock());
    DUCTILE_RETURN_IF_ERROR(client.Push(table, keys, ones));
    client.Clock();
    DUCTILE_RETURN_IF_ERROR(client.Pull(table, keys, out));
    for (float v : out) reads->uniform = reads->uniform && v == out[0];
    reads->at[client.clock()] = out[0];
  }
  return Status::Ok();
}

std::unique_ptr<Client> ConnectWorker(const TestCluster& cluster,
                                      int64_t heartbeat_ms = 100) {
  ClientOptions o;
  o.coordinator_address = cluster.address();
  o.request_timeout_ms = 30000;
  o.connect_timeout_ms = 30000;
  o.heartbeat_interval_ms = heartbeat_ms;
  auto client = Client::Connect(o);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

std::string StateOf(const std::string& address, int32_t id,
                    const std::string& role = "worker") {
  auto status = QueryClusterStatus(address, 5000);
  if (!status.ok()) return status.status().ToString();
  for (const MemberStatus& m : status->members) {
    if (m.role == role && m.id == id) return m.state;
  }
  return "absent";
}

// A late joiner used to start at clock 0, which dragged the server clock
// back to 0 and stalled everyone on the staleness bound.
TEST(Elastic, AWorkerJoiningUnderSspStartsAtTheServerClock) {
  TestCluster cluster({.num_servers = 2, .num_workers = 2});
  auto a = ConnectWorker(cluster);
  auto b = ConnectWorker(cluster);
  ASSERT_TRUE(a && b);
  auto table = a->CreateTable(CountTable(ConsistencyMode::kSsp, 0));
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_TRUE(b->CreateTable(CountTable(ConsistencyMode::kSsp, 0)).ok());
  Reads ra, rb;
  Status sa, sb;
  std::thread ta([&] { sa = RunSteps(*a, *table, 5, &ra); });
  std::thread tb([&] { sb = RunSteps(*b, *table, 5, &rb); });
  ta.join();
  tb.join();
  ASSERT_TRUE(sa.ok() && sb.ok()) << sa << " / " << sb;

  auto c = ConnectWorker(cluster);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->clock(), 5);
  for (int i = 0; i < cluster.num_servers(); ++i) {
    EXPECT_EQ(cluster.server(i).counters().min_clock, 5) << "server " << i;
  }
  // The joiner knows the table and reads the job's state at once.
  auto info = c->GetTable("count");
  ASSERT_TRUE(info.ok()) << info.status();
  std::vector<float> out(kKeys);
  ASSERT_TRUE(c->Pull(*table, AllKeys(), out).ok());
  EXPECT_EQ(out[0], 10.0f);
  // Everyone goes on to clock 8, the joiner included (SSP(0): every step
  // waits for all three).
  Reads rc;
  Status sc;
  std::thread t1([&] { sa = RunSteps(*a, *table, 8, &ra); });
  std::thread t2([&] { sb = RunSteps(*b, *table, 8, &rb); });
  std::thread t3([&] { sc = RunSteps(*c, *table, 8, &rc); });
  t1.join();
  t2.join();
  t3.join();
  ASSERT_TRUE(sa.ok() && sb.ok() && sc.ok()) << sa << sb << sc;
  // Every push was acknowledged, and SSP applies them as they come.
  ASSERT_TRUE(c->Pull(*table, AllKeys(), out).ok());
  EXPECT_EQ(out[0], 10.0f + 3 * 3.0f);  // 2 x 5 clocks, then 3 x 3
}

// Under BSP a joiner enters at the first clock not yet combined; every
// worker's read at clock c is exactly the pushes of the clocks before c,
// with the joiner's counted from the clock it entered at.
TEST(Elastic, AWorkerJoiningUnderBspIsCountedFromItsFirstClockExactly) {
  TestCluster cluster({.num_servers = 2, .num_workers = 2});
  auto a = ConnectWorker(cluster);
  auto b = ConnectWorker(cluster);
  ASSERT_TRUE(a && b);
  auto table = a->CreateTable(CountTable(ConsistencyMode::kBsp));
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_TRUE(b->CreateTable(CountTable(ConsistencyMode::kBsp)).ok());
  constexpr int64_t kEnd = 30, kHold = 20;
  Reads ra, rb, rc;
  Status sa, sb, sc;
  // The others run; from clock 5 on the join may happen at any step, and
  // they hold at clock kHold until it has.
  std::atomic<bool> joined_flag{false};
  auto hold = [&](int64_t clock) {
    while (clock == kHold && !joined_flag.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  std::thread ta([&] { sa = RunSteps(*a, *table, kEnd, &ra, hold); });
  std::thread tb([&] { sb = RunSteps(*b, *table, kEnd, &rb, hold); });
  // A worker's own clock runs ahead of what the servers have combined
  // (the other worker may be a clock behind): wait for the servers.
  auto combined = [&] {
    int64_t lowest = cluster.server(0).counters().min_clock;
    for (int i = 1; i < cluster.num_servers(); ++i) {
      lowest = std::min(lowest, cluster.server(i).counters().min_clock);
    }
    return lowest;
  };
  while (combined() < 5)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto c = ConnectWorker(cluster);
  joined_flag.store(true);
  ASSERT_TRUE(c);
  const int64_t joined = c->clock();
  std::thread tc([&] { sc = RunSteps(*c, *table, kEnd, &rc); });
  ta.join();
  tb.join();
  tc.join();
  ASSERT_TRUE(sa.ok() && sb.ok() && sc.ok()) << sa << sb << sc;
  EXPECT_GE(joined, 5);
  EXPECT_LE(joined, kHold);
  auto expected = [&](int64_t clock) {
    return static_cast<float>(2 * clock + std::max<int64_t>(0, clock - joined));
  };
  for (const Reads* r : {&ra, &rb, &rc}) {
    EXPECT_TRUE(r->uniform);
    for (const auto& [clock, value] : r->at) {
      EXPECT_EQ(value, expected(clock))
          << "read at clock " << clock << ", joiner entered at " << joined;
    }
  }
  EXPECT_EQ(rc.at.size(), static_cast<size_t>(kEnd - joined));
}

// A worker that leaves at clock 3 is counted up to there; the others go on
// without waiting for it, and their reads stay exact.
TEST(Elastic, AWorkerThatLeavesIsNoLongerWaitedForAndItsPushesStay) {
  TestCluster cluster({.num_servers = 2, .num_workers = 3});
  auto a = ConnectWorker(cluster);
  auto b = ConnectWorker(cluster);
  auto c = ConnectWorker(cluster);
  ASSERT_TRUE(a && b && c);
  auto table = a->CreateTable(CountTable(ConsistencyMode::kBsp));
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_TRUE(b->CreateTable(CountTable(ConsistencyMode::kBsp)).ok());
  ASSERT_TRUE(c->CreateTable(CountTable(ConsistencyMode::kBsp)).ok());
  constexpr int64_t kEnd = 12, kLeave = 3;
  Reads ra, rb, rc;
  Status sa, sb, sc;
  std::thread ta([&] { sa = RunSteps(*a, *table, kEnd, &ra); });
  std::thread tb([&] { sb = RunSteps(*b, *table, kEnd, &rb); });
  std::thread tc([&] {
    sc = RunSteps(*c, *table, kLeave, &rc);
    if (sc.ok()) sc = c->Leave();
  });
  ta.join();
  tb.join();
  tc.join();
  ASSERT_TRUE(sa.ok() && sb.ok() && sc.ok()) << sa << sb << sc;
  EXPECT_EQ(StateOf(cluster.address(), c->worker_id()), "left");
  for (const Reads* r : {&ra, &rb, &rc}) {
    EXPECT_TRUE(r->uniform);
    for (const auto& [clock, value] : r->at) {
      const int64_t with_c = std::min(clock, kLeave);
      EXPECT_EQ(value, static_cast<float>(2 * clock + with_c))
          << "read at clock " << clock;
    }
  }
  // The barrier counts the two left.
  std::thread tbar([&] { sb = b->Barrier(); });
  sa = a->Barrier();
  tbar.join();
  EXPECT_TRUE(sa.ok() && sb.ok()) << sa << " / " << sb;
}

// With linear batch scaling the rate of a BSP (mean) clock follows the
// workers that pushed in it: SGD at rate 1 made for 3 workers, every push
// 1, moves each key by 1 a clock while 3 push and by 2/3 once one has left.
TEST(Elastic, ABatchScaledRateFollowsTheWorkersThatLeave) {
  TestCluster cluster({.num_servers = 2, .num_workers = 3});
  std::unique_ptr<Client> workers[3] = {
      ConnectWorker(cluster), ConnectWorker(cluster), ConnectWorker(cluster)};
  ASSERT_TRUE(workers[0] && workers[1] && workers[2]);
  TableOptions t;
  t.name = "scaled";
  t.rule = UpdateRule::kSgd;
  t.learning_rate = 1.0f;
  t.consistency.mode = ConsistencyMode::kBsp;
  t.batch_scaling.rule = BatchScaling::Rule::kLinear;
  t.batch_scaling.base_pushes = 3;
  Result<TableId> table = workers[0]->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  for (auto& w : workers) ASSERT_TRUE(w->CreateTable(t).ok());
  std::vector<Key> keys(16);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 977;  // both servers
  const std::vector<float> ones(keys.size(), 1.0f);
  constexpr int64_t kEnd = 12, kLeave = 3;
  Status status[3];
  auto run = [&](int i, int64_t clocks) {
    for (int64_t c = 0; c < clocks && status[i].ok(); ++c) {
      status[i] = workers[i]->Push(*table, keys, ones);
      workers[i]->Clock();
    }
  };
  std::thread ta([&] { run(0, kEnd); });
  std::thread tb([&] { run(1, kEnd); });
  std::thread tc([&] {
    run(2, kLeave);
    if (status[2].ok()) status[2] = workers[2]->Leave();
  });
  ta.join();
  tb.join();
  tc.join();
  for (const Status& s : status) ASSERT_TRUE(s.ok()) << s;
  std::vector<float> out(keys.size());
  ASSERT_TRUE(workers[0]->Pull(*table, keys, out).ok());  // waits for kEnd
  const float expected = -(kLeave * 1.0f + (kEnd - kLeave) * 2.0f / 3.0f);
  for (float v : out) EXPECT_NEAR(v, expected, 1e-4f);  // not -12
}

TEST(Elastic, RegistrationsBeyondMaxWorkersAreRefusedUntilOneLeaves) {
  TestCluster cluster({.num_servers = 1, .num_workers = 1, .max_workers = 2});
  auto a = ConnectWorker(cluster);
  auto b = ConnectWorker(cluster);
  ASSERT_TRUE(a && b);
  ClientOptions o;
  o.coordinator_address = cluster.address();
  o.connect_timeout_ms = 5000;
  auto refused = Client::Connect(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted)
      << refused.status();
  EXPECT_NE(refused.status().message().find("maximum of 2 workers"),
            std::string::npos)
      << refused.status();
  ASSERT_TRUE(b->Leave().ok());
  auto admitted = Client::Connect(o);
  EXPECT_TRUE(admitted.ok()) << admitted.status();
}

TEST(Elastic, ADrainedWorkerIsAskedToLeaveAndThenLeaves) {
  TestCluster cluster({.num_servers = 1, .num_workers = 2});
  auto a = ConnectWorker(cluster);
  auto b = ConnectWorker(cluster);
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(b->leave_requested());
  ASSERT_TRUE(RequestDrainWorker(cluster.address(), b->worker_id(), 5000).ok());
  EXPECT_EQ(StateOf(cluster.address(), b->worker_id()), "draining");
  for (int i = 0; i < 500 && !b->leave_requested(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(b->leave_requested());
  EXPECT_FALSE(a->leave_requested());
  ASSERT_TRUE(b->Leave().ok());
  EXPECT_EQ(StateOf(cluster.address(), b->worker_id()), "left");
  EXPECT_EQ(StateOf(cluster.address(), a->worker_id()), "active");
  // Nobody to drain: clear errors.
  Status missing = RequestDrainWorker(cluster.address(), 77, 5000);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing;
  Status gone = RequestDrainWorker(cluster.address(), b->worker_id(), 5000);
  EXPECT_EQ(gone.code(), StatusCode::kFailedPrecondition) << gone;
  // The job ends when the one left finishes.
  ASSERT_TRUE(a->Finish().ok());
  EXPECT_TRUE(cluster.server(0).Wait().ok());
}

// ---------------------------------------------------------------- servers

// The slots each server owns, from `ductile status`; -1 when the status
// cannot be had.
std::map<int32_t, int32_t> SlotsByServer(const std::string& address,
                                         int32_t* moving = nullptr) {
  std::map<int32_t, int32_t> slots;
  auto status = QueryClusterStatus(address, 5000);
  if (!status.ok()) return {{-1, -1}};
  for (const MemberStatus& m : status->members) {
    if (m.role == "server") slots[m.id] = m.slots;
  }
  if (moving != nullptr) *moving = status->slots_moving;
  return slots;
}

// Waits (bounded) until `server` owns slots and nothing is moving.
bool WaitForSlots(const std::string& address, int32_t server) {
  for (int i = 0; i < 3000; ++i) {
    int32_t moving = -1;
    const auto slots = SlotsByServer(address, &moving);
    auto it = slots.find(server);
    if (it != slots.end() && it->second > 0 && moving == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Two workers training the count table to kEnd while `change` runs: they
// hold at kHold until it has returned, so that it happens while they run.
// Then checks every read (BSP: exactly the pushes of the clocks before,
// the same on every key; SSP(1): within its bound) and, after a barrier,
// that the final state has every push once.
// ---------------------------------------------------------- data plan

// The oracle of the data-plan tests: batch b of epoch e adds 1 to key
// e * batches + b, so the final table says how many times each batch was
// trained on (exactly once, for every batch).
struct PlanWorker {
  Client* client;
  TableId table;
  int64_t batches, epochs;
  int trained = 0;

  // Trains until the plan is done, or `stop_after` batches (then leaves,
  // holding the next one, which someone else must take).
  Status Run(int stop_after = -1) {
    Client::Batch batch;
    DUCTILE_ASSIGN_OR_RETURN(batch,
                             client->NextBatch(batches, epochs, nullptr, true));
    while (batch.kind != Client::Batch::kEnd) {
      if (batch.kind == Client::Batch::kWait) {
        client->Clock();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        DUCTILE_ASSIGN_OR_RETURN(
            batch, client->NextBatch(batches, epochs, nullptr, true));
        continue;
      }
      if (trained == stop_after) return client->Leave();
      const Key key = static_cast<Key>(batch.epoch * batches + batch.index);
      const float one = 1.0f;
      DUCTILE_RETURN_IF_ERROR(client->Push(table, {&key, 1}, {&one, 1}));
      ++trained;
      DUCTILE_ASSIGN_OR_RETURN(
          batch, client->NextBatch(batches, epochs, &batch, true));
      client->Clock();
    }
    return Status::Ok();
  }
};

// Exactly once across a leave (with a batch in hand) and a join mid-epoch;
// the epochs are counted done job-wide.
TEST(Elastic, EveryBatchIsTrainedOnceAcrossAJoinAndALeave) {
  TestCluster cluster({.num_servers = 2, .num_workers = 2});
  auto a = ConnectWorker(cluster);
  auto b = ConnectWorker(cluster);
  ASSERT_TRUE(a && b);
  auto table = a->CreateTable(CountTable(ConsistencyMode::kAsync));
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_TRUE(b->CreateTable(CountTable(ConsistencyMode::kAsync)).ok());
  constexpr int64_t kBatches = 40, kEpochs = 2;
  PlanWorker wa{a.get(), *table, kBatches, kEpochs};
  PlanWorker wb{b.get(), *table, kBatches, kEpochs};
  Status sa, sb, sc;
  std::thread ta([&] { sa = wa.Run(); });
  // b leaves mid-epoch, holding a batch it never trains.
  sb = wb.Run(/*stop_after=*/10);
  if (!sb.ok()) ta.join();
  ASSERT_TRUE(sb.ok()) << sb;
  EXPECT_EQ(StateOf(cluster.address(), b->worker_id()), "left");
  // c joins while a is (most likely) still in the first epoch.
  auto c = ConnectWorker(cluster);
  if (!c) ta.join();
  ASSERT_TRUE(c);
  PlanWorker wc{c.get(), *table, kBatches, kEpochs};
  std::thread tc([&] { sc = wc.Run(); });
  ta.join();
  tc.join();
  ASSERT_TRUE(sa.ok() && sc.ok()) << sa << " / " << sc;
  EXPECT_EQ(wa.trained + wb.trained + wc.trained, kBatches * kEpochs);

  std::vector<Key> keys;
  for (Key k = 0; k < kBatches * kEpochs; ++k) keys.push_back(k);
  std::vector<float> out(keys.size());
  ASSERT_TRUE(a->Pull(*table, keys, out).ok());
  for (size_t k = 0; k < keys.size(); ++k) {
    EXPECT_EQ(out[k], 1.0f)
        << "epoch " << k / kBatches << " batch " << k % kBatches;
  }
  auto end = a->NextBatch(kBatches, kEpochs, nullptr, true);
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->kind, Client::Batch::kEnd);
  EXPECT_EQ(end->epochs_done, kEpochs);
  // Every worker of the job must agree on the plan.
  auto other = c->NextBatch(kBatches + 1, kEpochs, nullptr, true);
  EXPECT_EQ(other.status().code(), StatusCode::kInvalidArgument);
}

class ServerMoves : public ::testing::TestWithParam<ConsistencyMode> {
 protected:
  static constexpr int64_t kEnd = 60, kHold = 45;

  void TrainDuring(TestCluster& cluster, const std::function<void()>& change) {
    auto a = ConnectWorker(cluster);
    auto b = ConnectWorker(cluster);
    ASSERT_TRUE(a && b);
    const TableOptions t = CountTable(GetParam(), 1);
    auto table = a->CreateTable(t);
    ASSERT_TRUE(table.ok()) << table.status();
    ASSERT_TRUE(b->CreateTable(t).ok());
    Reads ra, rb;
    Status sa, sb;
    std::atomic<bool> changed{false};
    auto hold = [&](int64_t clock) {
      while (clock == kHold && !changed.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    };
    std::thread ta([&] { sa = RunSteps(*a, *table, kEnd, &ra, hold); });
    std::thread tb([&] { sb = RunSteps(*b, *table, kEnd, &rb, hold); });
    while (a->clock() < 10) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    change();
    changed.store(true);
    ta.join();
    tb.join();
    ASSERT_TRUE(sa.ok() && sb.ok()) << sa << " / " << sb;
    for (const Reads* r : {&ra, &rb}) {
      // (Under SSP and async one pull's servers may be at different points.)
      if (GetParam() == ConsistencyMode::kBsp) {
        EXPECT_TRUE(r->uniform);
      }
      for (const auto& [clock, value] : r->at) {
        if (GetParam() == ConsistencyMode::kBsp) {
          EXPECT_EQ(value, 2.0f * clock) << "read at clock " << clock
                                         << " by worker " << (r == &ra ? 0 : 1);
        } else if (GetParam() == ConsistencyMode::kSsp) {  // SSP(1)
          EXPECT_GE(value, 2.0f * (clock - 1)) << "read at clock " << clock;
        }
        EXPECT_LE(value, 2.0f * kEnd) << "read at clock " << clock;
      }
    }
    // Every push once: the keys that moved kept their counts.
    std::thread bar([&] { sb = b->Barrier(); });
    sa = a->Barrier();
    bar.join();
    ASSERT_TRUE(sa.ok() && sb.ok());
    std::vector<float> out(kKeys);
    ASSERT_TRUE(a->Pull(*table, AllKeys(), out).ok());
    for (float v : out) EXPECT_EQ(v, 2.0f * kEnd);
  }
};

// A server started against a running job takes its share of the slots,
// with their keys, while the workers go on.
TEST_P(ServerMoves, AServerJoiningTakesItsShareWhileTrainingGoesOn) {
  TestCluster cluster({.num_servers = 2, .num_workers = 2, .num_slots = 48});
  int joined = -1;
  bool balanced = false;
  TrainDuring(cluster, [&] {
    joined = cluster.AddServer();
    balanced = WaitForSlots(cluster.address(), joined);
  });
  ASSERT_TRUE(balanced);
  EXPECT_EQ(SlotsByServer(cluster.address()),
            (std::map<int32_t, int32_t>{{0, 16}, {1, 16}, {2, 16}}));
  EXPECT_GT(cluster.server(joined).counters().keys_stored, 0u);
}

// `ductile drain server:N`: its slots move, with their keys, to the
// others while the workers go on, then it stops.
TEST_P(ServerMoves, ADrainedServerHandsItsSlotsOverAndStops) {
  TestCluster cluster({.num_servers = 3, .num_workers = 2, .num_slots = 48});
  Status drain;
  TrainDuring(cluster,
              [&] { drain = RequestDrainServer(cluster.address(), 1, 60000); });
  ASSERT_TRUE(drain.ok()) << drain;
  EXPECT_TRUE(cluster.server(1).Wait().ok());  // it stopped
  const auto slots = SlotsByServer(cluster.address());
  EXPECT_EQ(slots.at(1), 0);
  EXPECT_EQ(slots.at(0) + slots.at(2), 48);
  EXPECT_EQ(StateOf(cluster.address(), 1, "server"), "drained");
  // Draining what is not there, or what is gone already, is refused.
  EXPECT_EQ(RequestDrainServer(cluster.address(), 9, 5000).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(RequestDrainServer(cluster.address(), 1, 5000).code(),
            StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Modes, ServerMoves,
                         ::testing::Values(ConsistencyMode::kBsp,
                                           ConsistencyMode::kSsp,
                                           ConsistencyMode::kAsync),
                         [](const auto& info) {
                           return std::string(
                               info.param == ConsistencyMode::kBsp   ? "bsp"
                               : info.param == ConsistencyMode::kSsp ? "ssp"
                                                                     : "async");
                         });

}  // namespace
}  // namespace ductile
