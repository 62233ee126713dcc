// Multi-node behaviour in one process: many clients and threads pushing
// and pulling across several servers.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "ductile/admin.h"
#include "gtest/gtest.h"
#include "routing/slot_map.h"
#include "tests/test_cluster.h"

namespace ductile {
namespace {

using testing::TestCluster;
using testing::TestClusterOptions;

TableOptions AddTable(const std::string& name, uint32_t width) {
  TableOptions t;
  t.name = name;
  t.value_width = width;
  t.rule = UpdateRule::kAdd;
  return t;
}

TEST(Cluster, PushThenPullReturnsPushedValues) {
  TestCluster cluster;
  auto client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  auto table = client->CreateTable(AddTable("w", 3));
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<Key> keys = {1, 2, 5, 9, 100, 1000};
  std::vector<float> values(keys.size() * 3);
  std::iota(values.begin(), values.end(), 1.0f);
  ASSERT_TRUE(client->Push(*table, keys, values).ok());
  std::vector<float> out(values.size(), -1.0f);
  ASSERT_TRUE(client->Pull(*table, keys, out).ok());
  EXPECT_EQ(out, values);
}

// A table's learning-rate schedule is applied by the servers at each push's
// clock: SGD with rate 1, halved every 2 clocks, and a gradient of 1 at
// clocks 0-4 ends at -(1 + 1 + 0.5 + 0.5 + 0.25). Under BSP the combined
// push of a clock gets that clock's factor too.
TEST(Cluster, ServersApplyTheLearningRateScheduleAtEachPushsClock) {
  for (ConsistencyMode mode :
       {ConsistencyMode::kAsync, ConsistencyMode::kBsp}) {
    TestCluster cluster;
    auto client = cluster.Connect();
    ASSERT_NE(client, nullptr);
    TableOptions t;
    t.name = "scheduled";
    t.rule = UpdateRule::kSgd;
    t.learning_rate = 1.0f;
    t.lr_schedule.decay = LearningRateSchedule::Decay::kStep;
    t.lr_schedule.step_clocks = 2;
    t.lr_schedule.gamma = 0.5f;
    t.consistency.mode = mode;
    auto table = client->CreateTable(t);
    ASSERT_TRUE(table.ok()) << table.status();
    const std::vector<Key> keys = {3, 700};
    for (int clock = 0; clock < 5; ++clock) {
      ASSERT_TRUE(
          client->Push(*table, keys, std::vector<float>{1.0f, 2.0f}).ok());
      client->Clock();
    }
    std::vector<float> out(2);
    ASSERT_TRUE(client->Pull(*table, keys, out).ok());
    EXPECT_EQ(out, (std::vector<float>{-3.25f, -6.5f}))
        << ToString(t.consistency);
  }
}

// A worker's cache mirrors the server's SGD steps with the same factors.
TEST(Cluster, ACachedSgdTableFollowsTheScheduleLikeTheServers) {
  TestCluster cluster;
  ClientOptions o;
  o.coordinator_address = cluster.address();
  o.enable_cache = true;
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  TableOptions t;
  t.name = "cached";
  t.rule = UpdateRule::kSgd;
  t.learning_rate = 1.0f;
  t.lr_schedule.warmup_clocks = 4;
  // A bound wide enough for every pull after the first to read the cache.
  t.consistency = {ConsistencyMode::kSsp, 100};
  auto table = (*client)->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<Key> key = {9};
  std::vector<float> cached(1);
  for (int clock = 0; clock < 6; ++clock) {
    ASSERT_TRUE((*client)->Pull(*table, key, cached).ok());  // fills the cache
    ASSERT_TRUE((*client)->Push(*table, key, std::vector<float>{1.0f}).ok());
    (*client)->Clock();
  }
  // Factors 0.25, 0.5, 0.75, 1, 1, 1.
  ASSERT_TRUE((*client)->Pull(*table, key, cached).ok());
  EXPECT_EQ(cached[0], -4.5f);
  EXPECT_EQ((*client)->stats().cache_hits, 6u);
  // The servers' copy agrees.
  auto reader = cluster.Connect(/*as_worker=*/false);
  ASSERT_NE(reader, nullptr);
  std::vector<float> served(1);
  ASSERT_TRUE(reader->Pull(*table, key, served).ok());
  EXPECT_EQ(served[0], -4.5f);
}

TEST(Cluster, KeysNeverWrittenReadAsTheInitializer) {
  TestCluster cluster;
  auto client = cluster.Connect();
  TableOptions t = AddTable("c", 4);
  t.init.kind = InitKind::kConstant;
  t.init.value = 2.5f;
  auto table = client->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<Key> keys = {3, 4, 77};
  std::vector<float> out(12, 0.0f);
  ASSERT_TRUE(client->Pull(*table, keys, out).ok());
  for (float v : out) EXPECT_EQ(v, 2.5f);
}

TEST(Cluster, ConcurrentPushesFromManyThreadsAddUpExactly) {
  TestCluster cluster;
  constexpr int kClients = 3, kThreadsPerClient = 3, kRounds = 50;
  constexpr int kKeys = 40;
  std::vector<std::unique_ptr<Client>> clients;
  for (int c = 0; c < kClients; ++c) clients.push_back(cluster.Connect());
  auto table = clients[0]->CreateTable(AddTable("sum", 2));
  ASSERT_TRUE(table.ok());
  for (int c = 1; c < kClients; ++c) {
    ASSERT_TRUE(clients[c]->CreateTable(AddTable("sum", 2)).ok());
  }
  std::vector<Key> keys(kKeys);
  std::iota(keys.begin(), keys.end(), 10);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    for (int t = 0; t < kThreadsPerClient; ++t) {
      threads.emplace_back([&, c, t] {
        std::vector<float> values(kKeys * 2);
        for (int i = 0; i < kKeys; ++i) {
          values[2 * i] = 1.0f;
          values[2 * i + 1] = static_cast<float>(c * 10 + t);
        }
        std::vector<Handle> handles;
        for (int r = 0; r < kRounds; ++r) {
          handles.push_back(clients[c]->PushAsync(*table, keys, values));
          if (handles.size() == 8) {
            for (auto& h : handles) failures += h.Wait().ok() ? 0 : 1;
            handles.clear();
          }
        }
        for (auto& h : handles) failures += h.Wait().ok() ? 0 : 1;
      });
    }
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  std::vector<float> out(kKeys * 2);
  ASSERT_TRUE(clients[0]->Pull(*table, keys, out).ok());
  float expected_second = 0;
  for (int c = 0; c < kClients; ++c)
    for (int t = 0; t < kThreadsPerClient; ++t)
      expected_second += static_cast<float>(c * 10 + t) * kRounds;
  for (int i = 0; i < kKeys; ++i) {
    EXPECT_EQ(out[2 * i], kClients * kThreadsPerClient * kRounds) << i;
    EXPECT_EQ(out[2 * i + 1], expected_second) << i;
  }
}

TEST(Cluster, PushPullReturnsTheValueAfterThisPush) {
  TestCluster cluster;
  auto client = cluster.Connect();
  auto table = client->CreateTable(AddTable("pp", 1));
  ASSERT_TRUE(table.ok());
  std::vector<Key> keys = {7, 8};
  std::vector<float> one = {1.0f, 2.0f}, out(2);
  for (int i = 1; i <= 5; ++i) {
    ASSERT_TRUE(client->PushPull(*table, keys, one, out).ok());
    EXPECT_EQ(out[0], 1.0f * i);
    EXPECT_EQ(out[1], 2.0f * i);
  }
}

TEST(Cluster, DenseTensorRoundTripsAcrossServers) {
  TestCluster cluster({.num_servers = 3});
  auto client = cluster.Connect();
  TableOptions t = AddTable("tensor", 0);
  t.rule = UpdateRule::kAssign;
  auto tensor = client->RegisterTensor(t, 100003, 4096);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(tensor->keys.size(), 25u);
  std::vector<float> values(100003);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * i;
  ASSERT_TRUE(client->PushTensor(*tensor, values).ok());
  std::vector<float> out(values.size());
  ASSERT_TRUE(client->PullTensor(*tensor, out).ok());
  EXPECT_EQ(out, values);
  // The chunks really are spread over every server.
  int servers_with_keys = 0;
  for (int i = 0; i < cluster.num_servers(); ++i) {
    servers_with_keys += cluster.server(i).counters().keys_stored > 0;
  }
  EXPECT_EQ(servers_with_keys, 3);
}

// Servers and a client whose bytes move on several ZeroMQ I/O threads
// (their connections spread over them) carry large values exactly, and a
// count out of range is refused by name.
TEST(Cluster, MembersWithSeveralIoThreadsCarryLargeValuesExactly) {
  ServerOptions bad_server;
  bad_server.io_threads = 65;
  const auto refused = Server::Start(bad_server);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("io_threads"), std::string::npos);

  TestClusterOptions options;
  options.num_servers = 3;
  options.server.io_threads = 3;
  TestCluster cluster(options);
  ClientOptions o;
  o.coordinator_address = cluster.address();
  o.connect_timeout_ms = 20000;
  o.io_threads = -1;
  const auto bad_client = Client::Connect(o);
  ASSERT_FALSE(bad_client.ok());
  EXPECT_NE(bad_client.status().message().find("io_threads"),
            std::string::npos);
  o.io_threads = 3;
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  TableOptions t = AddTable("large", 0);
  t.rule = UpdateRule::kAdd;
  auto tensor = (*client)->RegisterTensor(t, 3000017, 262144);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  std::vector<float> values(3000017);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * (i % 4099);
  // Several requests in flight at once, to every server.
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE((*client)->PushTensor(*tensor, values).ok());
  }
  std::vector<float> out(values.size());
  ASSERT_TRUE((*client)->PullTensor(*tensor, out).ok());
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(out[i], 3 * values[i]) << "float " << i;
  }
  // libzmq names its I/O threads ZMQbg/IO/0, /1, ...: each of the three
  // servers and the client has a third one.
  int third_io_threads = 0;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    third_io_threads += name == "ZMQbg/IO/2";
  }
  EXPECT_EQ(third_io_threads, 4);
}

TEST(Cluster, ClientRefreshesRoutingAndResendsWhenASlotMoves) {
  TestCluster cluster({.num_servers = 2, .num_slots = 8});
  auto client = cluster.Connect();
  auto table = client->CreateTable(AddTable("moving", 1));
  ASSERT_TRUE(table.ok());
  // Find the server owning a key and move every slot to the other: the key
  // moves with its value, and the client's next push lands on the new
  // owner exactly once (told of the move by the coordinator, or answered
  // "routing changed" by the old owner).
  std::vector<Key> key = {0};
  std::vector<float> one = {1.0f}, out(1);
  ASSERT_TRUE(client->Push(*table, key, one).ok());
  const uint64_t before0 = cluster.server(0).counters().pushes;
  const int owner = before0 > 0 ? 0 : 1;
  const int other = 1 - owner;
  for (int slot = 0; slot < 8; ++slot) {
    ASSERT_TRUE(cluster.coordinator().MoveSlot(slot, other).ok());
  }
  ASSERT_TRUE(client->Push(*table, key, one).ok());
  ASSERT_TRUE(client->Pull(*table, key, out).ok());
  // Both pushes count: the first one's value moved with the slot.
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(cluster.server(other).counters().pushes, 1u);
  EXPECT_EQ(cluster.server(owner).counters().pushes, 1u);
  EXPECT_EQ(cluster.server(owner).counters().keys_stored, 0u);
}

TEST(Cluster, BarrierWaitsForEveryWorker) {
  TestCluster cluster({.num_servers = 1, .num_workers = 3});
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(cluster.Connect());
  std::atomic<int> passed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      EXPECT_TRUE(clients[i]->Barrier().ok());
      passed++;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(passed.load(), 0);  // the third worker has not arrived
  EXPECT_TRUE(clients[2]->Barrier().ok());
  for (auto& t : threads) t.join();
  EXPECT_EQ(passed.load(), 2);
}

TEST(Cluster, EmbeddedServersApplyAUserUpdateRule) {
  TestClusterOptions options;
  options.num_servers = 2;
  // w += clamp(g, -1, 1), counting updates in the state.
  options.server.custom_rules["clipped_add"] = {
      [](std::span<float> w, std::span<const float> g, std::span<float> st) {
        for (size_t i = 0; i < w.size(); ++i) {
          w[i] += std::clamp(g[i], -1.0f, 1.0f);
          st[i] += 1.0f;
        }
      },
      1};
  TestCluster cluster(options);
  auto client = cluster.Connect();
  TableOptions t = AddTable("clipped", 2);
  t.rule = UpdateRule::kCustom;
  t.custom_rule = "clipped_add";
  auto table = client->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<Key> keys = {1, 2, 3, 4, 5, 6};
  std::vector<float> g(12, 5.0f), out(12);
  g[1] = -0.25f;
  ASSERT_TRUE(client->Push(*table, keys, g).ok());
  ASSERT_TRUE(client->Push(*table, keys, g).ok());
  ASSERT_TRUE(client->Pull(*table, keys, out).ok());
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], -0.5f);
  EXPECT_EQ(out[11], 2.0f);
}

TEST(Cluster, ATableNamingAnUnregisteredRuleIsRefused) {
  TestCluster cluster;
  auto client = cluster.Connect();
  TableOptions t = AddTable("nope", 1);
  t.rule = UpdateRule::kCustom;
  t.custom_rule = "not_registered";
  auto table = client->CreateTable(t);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(table.status().message().find("not_registered"), std::string::npos)
      << table.status();
}

TEST(Cluster, ASilentServerMakesRequestsFailWithItsNameNotHang) {
  TestCluster cluster({.num_servers = 1});
  // (3 s: creating the table goes through the coordinator and the server
  // within the same timeout, which a loaded sanitizer build may need.)
  auto client = cluster.Connect(true, /*request_timeout_ms=*/3000);
  auto table = client->CreateTable(AddTable("silent", 1));
  ASSERT_TRUE(table.ok()) << table.status();
  cluster.server(0).Stop();  // stops answering; its socket stays open
  ASSERT_TRUE(cluster.server(0).Wait().ok());
  std::vector<Key> keys = {1};
  std::vector<float> v = {1.0f};
  Status s = client->Push(*table, keys, v);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("server 0"), std::string::npos) << s;
}

TEST(Cluster, BadArgumentsAreRefusedBeforeAnythingIsSent) {
  TestCluster cluster({.num_servers = 1});
  auto client = cluster.Connect();
  auto table = client->CreateTable(AddTable("args", 2));
  ASSERT_TRUE(table.ok());
  std::vector<Key> unsorted = {3, 1};
  std::vector<float> four(4), three(3);
  EXPECT_EQ(client->Push(*table, unsorted, four).code(),
            StatusCode::kInvalidArgument);
  std::vector<Key> sorted = {1, 3};
  EXPECT_EQ(client->Push(*table, sorted, three).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Pull(*table + 100, sorted, four).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(cluster.server(0).counters().requests, 0u);
}

TEST(Cluster, AWorkerThatFallsSilentIsNoLongerWaitedFor) {
  TestClusterOptions options;
  options.num_servers = 2;
  options.num_workers = 2;
  // Long enough that the live worker's heartbeats (every 50 ms) are never
  // late by as much on a loaded sanitizer build.
  options.heartbeat_timeout_ms = 2000;
  TestCluster cluster(options);
  ClientOptions o;
  o.coordinator_address = cluster.address();
  o.heartbeat_interval_ms = 50;
  auto fast = Client::Connect(o);
  auto doomed = Client::Connect(o);
  ASSERT_TRUE(fast.ok() && doomed.ok());
  TableOptions t = AddTable("ssp0", 1);
  t.consistency = {ConsistencyMode::kSsp, 0};
  auto table = (*fast)->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_TRUE((*doomed)->CreateTable(t).ok());
  std::thread doomed_barrier([&] { EXPECT_TRUE((*doomed)->Barrier().ok()); });
  ASSERT_TRUE((*fast)->Barrier().ok());
  doomed_barrier.join();
  // The doomed worker vanishes at clock 0 without saying goodbye.
  doomed->reset();
  std::vector<Key> keys = {1, 2, 3};
  std::vector<float> out(3);
  (*fast)->Clock();
  // Under SSP(0) this pull needs every live worker at clock 1: it completes
  // only once the coordinator has declared the silent worker dead.
  Status s = (*fast)->Pull(*table, keys, out);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(cluster.server(0).counters().min_clock, 1);
}

// A thread blocked in Wait() when the client is destroyed gets Cancelled
// and records its wait in statistics the operation keeps alive, not in the
// destroyed client (a use after free that the sanitizer builds catch).
TEST(Cluster, AThreadWaitingWhenItsClientIsDestroyedGetsCancelled) {
  TestClusterOptions options;
  options.num_workers = 2;
  TestCluster cluster(options);
  auto a = cluster.Connect();
  auto b = cluster.Connect();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  TableOptions t = AddTable("ssp0_destroyed", 1);
  t.consistency = {ConsistencyMode::kSsp, 0};
  auto table = a->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  a->Clock();
  // Under SSP(0) the pull needs B at clock 1: it waits until cancelled.
  std::vector<Key> keys = {1};
  std::vector<float> out(1);
  Handle pull = a->PullAsync(*table, keys, out);
  std::atomic<bool> waiting{false};
  Status status;
  std::thread waiter([&] {
    waiting.store(true);
    status = pull.Wait();
  });
  while (!waiting.load()) std::this_thread::yield();
  // Gives the waiter time to block (the test passes either way; the
  // sanitizers see the bug only if it did).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  a.reset();
  waiter.join();
  EXPECT_EQ(status.code(), StatusCode::kCancelled) << status;
}

TEST(Cluster, AWorkerDeclaredDeadButAliveIsStillServedAfterTheOthersFinish) {
  TestClusterOptions options;
  options.num_servers = 1;
  options.num_workers = 2;
  options.heartbeat_timeout_ms = 400;
  TestCluster cluster(options);
  ClientOptions chatty;
  chatty.coordinator_address = cluster.address();
  chatty.heartbeat_interval_ms = 50;
  ClientOptions quiet = chatty;
  quiet.heartbeat_interval_ms = 60000;  // alive, but never heartbeats
  quiet.request_timeout_ms = 5000;
  auto a = Client::Connect(chatty);
  auto b = Client::Connect(quiet);
  ASSERT_TRUE(a.ok() && b.ok());
  auto table = (*a)->CreateTable(AddTable("slow", 1));
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_TRUE((*b)->CreateTable(AddTable("slow", 1)).ok());
  // Wait (bounded) until the coordinator has declared the quiet worker
  // dead, then finish the other one: the job is not over while the quiet
  // one still works.
  bool declared_dead = false;
  for (int i = 0; i < 200 && !declared_dead; ++i) {
    auto status = QueryClusterStatus(cluster.address(), 5000);
    ASSERT_TRUE(status.ok()) << status.status();
    for (const MemberStatus& m : status->members) {
      if (m.role == "worker" && m.id == (*b)->worker_id() && !m.alive) {
        declared_dead = true;
      }
    }
    if (!declared_dead)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(declared_dead);
  ASSERT_TRUE((*a)->Finish().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<Key> keys = {5};
  std::vector<float> one = {1.0f}, out(1);
  ASSERT_TRUE((*b)->Push(*table, keys, one).ok());
  ASSERT_TRUE((*b)->Pull(*table, keys, out).ok());
  EXPECT_EQ(out[0], 1.0f);
  ASSERT_TRUE((*b)->Finish().ok());
  // Now every worker has finished: the servers shut down.
  EXPECT_TRUE(cluster.server(0).Wait().ok());
}

TEST(Cluster, WorkersGetTheIdsTheyAskForAndATakenIdIsRefused) {
  TestClusterOptions options;
  options.num_servers = 1;
  TestCluster cluster(options);
  ClientOptions o;
  o.coordinator_address = cluster.address();
  o.connect_timeout_ms = 5000;
  o.requested_worker_id = 1;
  auto one = Client::Connect(o);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)->worker_id(), 1);
  o.requested_worker_id = 0;
  auto zero = Client::Connect(o);
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ((*zero)->worker_id(), 0);
  o.requested_worker_id = 1;
  auto again = Client::Connect(o);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("worker id 1 is taken"),
            std::string::npos)
      << again.status();
  // An id beyond the coordinator's range is refused, not taken.
  o.requested_worker_id = 1 << 30;
  auto huge = Client::Connect(o);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("out of range"), std::string::npos)
      << huge.status();
  // One that asks for nothing gets a free id.
  o.requested_worker_id = -1;
  auto any = Client::Connect(o);
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_EQ((*any)->worker_id(), 2);
}

// Regression: the barrier counted the configured --workers, so a third
// worker admitted to a two-worker job was not waited for.
TEST(Cluster, BarrierWaitsForAWorkerAdmittedBeyondTheConfiguredCount) {
  TestCluster cluster({.num_servers = 1, .num_workers = 2});
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(cluster.Connect());
  std::vector<Status> first(2);
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
      threads.emplace_back([&, i] { first[i] = clients[i]->Barrier(1000); });
    }
    for (auto& t : threads) t.join();
  }
  for (const Status& s : first) {
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded)
        << "the barrier returned without the third live worker: " << s;
  }
  std::vector<Status> all(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] { all[i] = clients[i]->Barrier(20000); });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : all) EXPECT_TRUE(s.ok()) << s;
}

// Regression: with a worker dead and a replacement admitted, the barrier
// took "configured minus dead" arrivals and left the replacement behind.
TEST(Cluster, BarrierWaitsForTheReplacementOfADeadWorker) {
  TestCluster cluster(
      {.num_servers = 1, .num_workers = 2, .heartbeat_timeout_ms = 1500});
  ClientOptions o;
  o.coordinator_address = cluster.address();
  o.heartbeat_interval_ms = 50;
  auto survivor = Client::Connect(o);
  auto doomed = Client::Connect(o);
  ASSERT_TRUE(survivor.ok() && doomed.ok());
  doomed->reset();  // vanishes; declared dead after the timeout
  auto replacement = Client::Connect(o);
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  // Long enough for the dead worker to be declared dead meanwhile.
  Status alone = (*survivor)->Barrier(4000);
  EXPECT_EQ(alone.code(), StatusCode::kDeadlineExceeded)
      << "the barrier returned without the replacement: " << alone;
  Status other;
  std::thread t([&] { other = (*replacement)->Barrier(20000); });
  EXPECT_TRUE((*survivor)->Barrier(20000).ok());
  t.join();
  EXPECT_TRUE(other.ok()) << other;
}

// A table is created once every server that can answer has created it: a
// dead one (it gets the tables when it registers again) is not waited for.
// Before, every creation after a server's death failed after 10 s.
TEST(Cluster, ATableCreatedAfterAServerDiedIsCreated) {
  TestClusterOptions options;
  options.heartbeat_timeout_ms = 1000;
  TestCluster cluster(options);
  std::unique_ptr<Client> client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  cluster.server(1).Stop();
  cluster.server(1).Wait().IgnoreError();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool dead = false;
  while (!dead && std::chrono::steady_clock::now() < deadline) {
    Result<ClusterStatus> status = QueryClusterStatus(cluster.address(), 2000);
    if (status.ok()) {
      for (const MemberStatus& m : status->members) {
        dead = dead || (m.role == "server" && m.id == 1 && m.state == "dead");
      }
    }
    if (!dead) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(dead) << "server 1 was never declared dead";
  // Its death rolled the job back (to the start: no checkpoints here).
  auto recovered = client->AwaitRecovery(30000);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  TableOptions t;
  t.name = "after";
  t.value_width = 2;
  Result<TableId> table = client->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
}

// Regression: with two creations in flight, one valid and one naming an
// unregistered rule, servers' acknowledgements were credited to whichever
// pending table came first, so the valid one failed with the other's error
// and the invalid one was reported created.
TEST(Cluster, ConcurrentTableCreationsGetTheirOwnAnswers) {
  TestCluster cluster;
  auto a = cluster.Connect();
  auto b = cluster.Connect();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  for (int round = 0; round < 20; ++round) {
    TableOptions good = AddTable("good" + std::to_string(round), 1);
    TableOptions bad = AddTable("bad" + std::to_string(round), 1);
    bad.rule = UpdateRule::kCustom;
    bad.custom_rule = "not_registered";
    Result<TableId> good_id = InvalidArgumentError("not run");
    Result<TableId> bad_id = InvalidArgumentError("not run");
    std::thread t([&] { bad_id = b->CreateTable(bad); });
    good_id = a->CreateTable(good);
    t.join();
    ASSERT_TRUE(good_id.ok()) << "round " << round << ": " << good_id.status();
    ASSERT_FALSE(bad_id.ok()) << "round " << round;
    EXPECT_EQ(bad_id.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(bad_id.status().message().find("not_registered"),
              std::string::npos)
        << bad_id.status();
    const std::vector<Key> keys = {1, 2, 3, 4, 5, 6, 7, 8};
    std::vector<float> ones(keys.size(), 1.0f), out(keys.size());
    ASSERT_TRUE(a->Push(*good_id, keys, ones).ok()) << "round " << round;
    ASSERT_TRUE(a->Pull(*good_id, keys, out).ok());
    EXPECT_EQ(out, ones);
    EXPECT_FALSE(b->GetTable(bad.name).ok())
        << "a refused table was reported created";
  }
  // A failed creation followed at once by a valid one.
  TableOptions bad = AddTable("bad_then_good", 1);
  bad.rule = UpdateRule::kCustom;
  bad.custom_rule = "not_registered";
  std::thread t([&] { EXPECT_FALSE(b->CreateTable(bad).ok()); });
  auto good = a->CreateTable(AddTable("good_after_bad", 1));
  t.join();
  EXPECT_TRUE(good.ok()) << good.status();
}

// The servers owning `keys` of `table` in a fresh two-server cluster.
std::set<int32_t> OwnersOf(TableId table, const std::vector<Key>& keys) {
  std::set<int32_t> owners;
  for (Key k : keys) {
    // Slots are assigned in contiguous ranges, the first half to the first
    // server to register.
    const int32_t slot = SlotOf(table, k, 64);
    owners.insert(slot < 32 ? 0 : 1);
  }
  return owners;
}

// Regression: a push whose keys span two servers, refused for a NaN on one
// key, was applied on the other server.
TEST(Cluster, ARefusedPushSpanningServersChangesNothing) {
  TestCluster cluster;
  auto client = cluster.Connect();
  auto table = client->CreateTable(AddTable("atomic", 2));
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<Key> keys(64);
  std::iota(keys.begin(), keys.end(), 0);
  ASSERT_EQ(OwnersOf(*table, keys).size(), 2u);
  std::vector<float> values(keys.size() * 2, 1.0f), out(values.size(), -1.0f);
  values.back() = std::numeric_limits<float>::quiet_NaN();
  Status push = client->Push(*table, keys, values);
  EXPECT_EQ(push.code(), StatusCode::kInvalidArgument) << push;
  EXPECT_NE(push.message().find("unchanged"), std::string::npos) << push;
  values.front() = std::numeric_limits<float>::infinity();
  Status push_pull = client->PushPull(*table, keys, values, out);
  EXPECT_EQ(push_pull.code(), StatusCode::kInvalidArgument) << push_pull;
  ASSERT_TRUE(client->Pull(*table, keys, out).ok());
  EXPECT_EQ(out, std::vector<float>(out.size(), 0.0f))
      << "part of a refused push was applied";
  EXPECT_EQ(cluster.server(0).counters().pushes, 0u);
  EXPECT_EQ(cluster.server(1).counters().pushes, 0u);
}

// A call refused before anything is sent says so (Handle::refused(), which
// the Python package raises at the call); a server's refusal, however
// quick, does not: it is the Handle's, for Wait().
TEST(Cluster, AHandleTellsARefusalBeforeSendingFromAServersAnswer) {
  TestCluster cluster;
  auto client = cluster.Connect();
  auto table = client->CreateTable(AddTable("refusals", 2));
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<Key> keys = {3};
  std::vector<float> short_values = {1.0f};
  Handle bad_shape = client->PushAsync(*table, keys, short_values);
  EXPECT_TRUE(bad_shape.done());
  EXPECT_TRUE(bad_shape.refused());
  EXPECT_EQ(bad_shape.Wait().code(), StatusCode::kInvalidArgument);
  Handle unknown = client->PushAsync(TableId{999}, keys, short_values);
  EXPECT_TRUE(unknown.refused());
  EXPECT_FALSE(unknown.Wait().ok());
  // A NaN pushed to one server is refused by that server.
  const std::vector<float> nan = {1.0f,
                                  std::numeric_limits<float>::quiet_NaN()};
  Handle refused_by_server = client->PushAsync(*table, keys, nan);
  EXPECT_EQ(refused_by_server.Wait().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(refused_by_server.done());
  EXPECT_FALSE(refused_by_server.refused());
  const std::vector<float> ones = {1.0f, 1.0f};
  Handle applied = client->PushAsync(*table, keys, ones);
  EXPECT_TRUE(applied.Wait().ok());
  EXPECT_FALSE(applied.refused());
  EXPECT_FALSE(Handle().refused());
}

// Regression: the same with a width that differs from a key's stored one on
// a variable-width table.
TEST(Cluster, ARefusedVariableWidthPushSpanningServersChangesNothing) {
  TestCluster cluster;
  auto client = cluster.Connect();
  auto table = client->CreateTable(AddTable("widths", 0));
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<Key> keys(64);
  std::iota(keys.begin(), keys.end(), 0);
  ASSERT_EQ(OwnersOf(*table, keys).size(), 2u);
  std::vector<uint32_t> lengths(keys.size(), 2);
  std::vector<float> ones(keys.size() * 2, 1.0f);
  ASSERT_TRUE(client->Push(*table, keys, ones, lengths).ok());
  lengths.back() = 3;
  std::vector<float> wider(ones.size() + 1, 1.0f);
  Status push = client->Push(*table, keys, wider, lengths);
  EXPECT_EQ(push.code(), StatusCode::kInvalidArgument) << push;
  lengths.back() = 2;
  std::vector<float> out(ones.size(), -1.0f);
  ASSERT_TRUE(client->Pull(*table, keys, out, lengths).ok());
  EXPECT_EQ(out, ones) << "part of a refused push was applied";
}

}  // namespace
}  // namespace ductile
