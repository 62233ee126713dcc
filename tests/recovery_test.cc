// Checkpoints in one process: which entries a table hands to a checkpoint,
// bitwise restore of values and optimizer state, the coordinator's durable
// state, and an on-demand checkpoint across two servers.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ductile/admin.h"
#include "gtest/gtest.h"
#include "server/parameter_table.h"
#include "storage/checkpoint_store.h"
#include "storage/coordinator_store.h"
#include "tests/test_cluster.h"

namespace ductile {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/ductile-recovery-test-XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A cluster of `servers` servers and one worker, keeping checkpoints in
// `dir`.
testing::TestClusterOptions CheckpointingCluster(const TempDir& dir,
                                                 int servers) {
  testing::TestClusterOptions options;
  options.num_servers = servers;
  options.num_workers = 1;
  options.coordinator_state_dir = dir.path() + "/coordinator";
  options.server.state_dir = dir.path() + "/servers";
  return options;
}

// Kills server `i` of `cluster` (its process gone, its store kept) and
// starts it again with the same id: the job rolls back.
Result<std::unique_ptr<Server>> RestartServer(
    testing::TestCluster& cluster, const testing::TestClusterOptions& options,
    int i) {
  const int32_t id = cluster.server(i).id();
  cluster.DestroyServer(i);
  ServerOptions s = options.server;
  s.coordinator_address = cluster.address();
  s.requested_id = id;
  return Server::Start(s);
}

// The worker of such a cluster, heartbeating every `heartbeat_ms`.
std::unique_ptr<Client> ConnectWorker(const testing::TestCluster& cluster,
                                      int64_t heartbeat_ms) {
  ClientOptions o;
  o.coordinator_address = cluster.address();
  o.heartbeat_interval_ms = heartbeat_ms;
  auto worker = Client::Connect(o);
  EXPECT_TRUE(worker.ok()) << worker.status();
  return worker.ok() ? std::move(*worker) : nullptr;
}

TableOptions AdamTable() {
  TableOptions o;
  o.name = "adam";
  o.value_width = 3;
  o.rule = UpdateRule::kAdam;
  o.learning_rate = 0.05f;
  return o;
}

void Push(ParameterTable& table, const std::vector<Key>& keys, float base) {
  std::vector<float> values;
  for (size_t i = 0; i < keys.size() * 3; ++i)
    values.push_back(base + 0.1f * i);
  DataFrames request;
  wire::Header h;
  h.set_type(wire::PUSH);
  h.set_num_keys(keys.size());
  h.set_values_frames(1);
  ByteSpan frames[2] = {
      {reinterpret_cast<const uint8_t*>(keys.data()), keys.size() * 8},
      {reinterpret_cast<const uint8_t*>(values.data()), values.size() * 4}};
  ASSERT_TRUE(request.Parse(h, frames, 3, true).ok());
  ASSERT_TRUE(table.CheckPush(request).ok());
  table.ApplyPush(request, 0);
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(TableCheckpoint, ChangesAreThePushedKeysOnlyAndOnlyOnce) {
  ParameterTable table(1, AdamTable(), nullptr);
  Push(table, {1, 5, 9}, 0.5f);
  Push(table, {5}, -0.25f);
  std::vector<EntryRecord> changed;
  table.TakeChanges(&changed);
  ASSERT_EQ(changed.size(), 3u);
  std::vector<Key> keys;
  for (const EntryRecord& e : changed) {
    keys.push_back(e.key);
    EXPECT_EQ(e.table, 1u);
    EXPECT_EQ(e.value.size(), 3u);
    EXPECT_EQ(e.state.size(), 6u);  // Adam: two moments per float
    EXPECT_EQ(e.steps, e.key == 5 ? 2 : 1);
  }
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<Key>{1, 5, 9}));
  // Taken: nothing changed since.
  changed.clear();
  table.TakeChanges(&changed);
  EXPECT_TRUE(changed.empty());
  Push(table, {9}, 1.0f);
  table.TakeChanges(&changed);
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].key, 9u);
}

TEST(TableCheckpoint, RestoreIsBitwiseForValuesAndOptimizerState) {
  ParameterTable original(1, AdamTable(), nullptr);
  for (int i = 0; i < 5; ++i) Push(original, {2, 3}, 0.3f * i - 0.7f);
  std::vector<EntryRecord> saved;
  original.TakeChanges(&saved);
  ParameterTable restored(1, AdamTable(), nullptr);
  for (EntryRecord& e : saved) restored.Restore(EntryRecord(e), false);
  EXPECT_EQ(restored.changed(), 0u);
  // The same next update on both: equal bits only if the moments and the
  // step count (bias correction) came back exactly.
  Push(original, {2, 3}, 0.9f);
  Push(restored, {2, 3}, 0.9f);
  for (Key k : {2, 3}) {
    std::vector<float> a, b;
    ASSERT_TRUE(original.Get(k, &a));
    ASSERT_TRUE(restored.Get(k, &b));
    EXPECT_TRUE(SameBits(a, b)) << "key " << k;
  }
}

TEST(TableCheckpoint, AnEntryRestoredFromAnotherStoreCountsAsChanged) {
  ParameterTable table(1, AdamTable(), nullptr);
  EntryRecord e;
  e.table = 1;
  e.key = 7;
  e.value = {1, 2, 3};
  e.state = {0, 0, 0, 0, 0, 0};
  table.Restore(std::move(e), /*changed=*/true);
  std::vector<EntryRecord> changed;
  table.TakeChanges(&changed);
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].key, 7u);
}

TEST(CoordinatorStoreTest, ANewStoreIsEmptyAndASavedStateComesBack) {
  TempDir dir;
  {
    auto store = CoordinatorStore::Open({.dir = dir.path() + "/c"});
    ASSERT_TRUE(store.ok()) << store.status();
    auto loaded = (*store)->Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_FALSE(loaded->has_value());
    wire::CoordinatorState state;
    state.set_generation(4);
    state.mutable_routing()->set_epoch(9);
    auto* entry = state.add_catalog();
    entry->set_clock(120);
    auto* w = entry->add_workers();
    w->set_worker_id(1);
    w->set_resume_state("epoch=2 position=64");
    ASSERT_TRUE((*store)->Save(state).ok());
  }
  auto store = CoordinatorStore::Open({.dir = dir.path() + "/c"});
  ASSERT_TRUE(store.ok()) << store.status();
  auto loaded = (*store)->Load();
  ASSERT_TRUE(loaded.ok() && loaded->has_value());
  EXPECT_EQ((*loaded)->generation(), 4u);
  EXPECT_EQ((*loaded)->routing().epoch(), 9u);
  ASSERT_EQ((*loaded)->catalog_size(), 1);
  EXPECT_EQ((*loaded)->catalog(0).clock(), 120);
  EXPECT_EQ((*loaded)->catalog(0).workers(0).resume_state(),
            "epoch=2 position=64");
}

TEST(CoordinatorStoreTest, AnUnusableDirectoryIsAClearError) {
  auto store = CoordinatorStore::Open({.dir = "/proc/ductile-no/coordinator"});
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("/proc/ductile-no/coordinator"),
            std::string::npos)
      << store.status();
}

TEST(CoordinatorStoreTest, TwoCoordinatorsCannotShareADirectory) {
  TempDir dir;
  auto first = CoordinatorStore::Open({.dir = dir.path()});
  ASSERT_TRUE(first.ok());
  auto second = CoordinatorStore::Open({.dir = dir.path()});
  EXPECT_FALSE(second.ok());
}

TEST(OnDemandCheckpoint, WritesEveryServersShareAtOneClock) {
  TempDir dir;
  testing::TestCluster cluster(CheckpointingCluster(dir, 2));
  std::unique_ptr<Client> worker = cluster.Connect(/*as_worker=*/true);
  ASSERT_NE(worker, nullptr);
  TableOptions t = AdamTable();
  t.consistency.mode = ConsistencyMode::kSsp;
  t.consistency.staleness = 1;
  auto table = worker->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<Key> keys;
  for (Key k = 0; k < 40; ++k) keys.push_back(k);
  std::vector<float> g(keys.size() * 3, 0.5f);
  for (int c = 0; c < 5; ++c) {
    ASSERT_TRUE(worker->Push(*table, keys, g).ok());
    worker->Clock();
  }
  auto clock = RequestCheckpoint(cluster.address(), 20000);
  ASSERT_TRUE(clock.ok()) << clock.status();
  // Every push so far has a timestamp below the checkpoint's clock.
  EXPECT_GE(*clock, 5);
  auto status = QueryClusterStatus(cluster.address(), 5000);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->last_checkpoint_clock, *clock);
  EXPECT_EQ(status->checkpoints, 1);
  // Both servers' stores hold their share, together every key once, with
  // the values the servers hold.
  size_t entries = 0;
  for (int s = 0; s < 2; ++s) {
    auto loaded = LoadCheckpointFrom(dir.path() + "/servers/server-" +
                                         std::to_string(cluster.server(s).id()),
                                     *clock);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    entries += loaded->entries.size();
    for (const EntryRecord& e : loaded->entries) {
      EXPECT_EQ(e.steps, 5);
      std::vector<float> out(3);
      const std::vector<Key> one = {e.key};
      ASSERT_TRUE(worker->Pull(*table, one, out).ok());
      EXPECT_TRUE(SameBits(out, e.value)) << "key " << e.key;
    }
  }
  EXPECT_EQ(entries, keys.size());
}

TEST(OnDemandCheckpoint, WithoutAStateDirectoryIsAClearError) {
  testing::TestCluster cluster;
  auto clock = RequestCheckpoint(cluster.address(), 5000);
  ASSERT_FALSE(clock.ok());
  EXPECT_EQ(clock.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(clock.status().message().find("state directory"), std::string::npos)
      << clock.status();
}

// Checkpoints failing in a row (here: none can be kept) show in the status
// as a problem, with the reason.
TEST(OnDemandCheckpoint, FailuresInARowShowAsAProblemInTheStatus) {
  TempDir dir;
  testing::TestClusterOptions options = CheckpointingCluster(dir, 1);
  options.server.state_dir.clear();  // the server keeps none
  testing::TestCluster cluster(options);
  ASSERT_FALSE(RequestCheckpoint(cluster.address(), 5000).ok());
  Result<ClusterStatus> status = QueryClusterStatus(cluster.address(), 5000);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_NE(status->problem.find("1 checkpoint(s) failed in a row"),
            std::string::npos)
      << status->problem;
  EXPECT_NE(status->problem.find("keeps no checkpoints"), std::string::npos)
      << status->problem;
  const std::string text = FormatClusterStatus(*status);
  EXPECT_NE(text.find("problem: 1 checkpoint(s) failed"), std::string::npos)
      << text;
}

// A server writing a large checkpoint sends no heartbeat meanwhile; it says
// so first, and is not declared dead (which would roll the job back) while
// it writes. The write here (100 MB) takes longer than the timeout.
TEST(OnDemandCheckpoint, ALongWriteIsNotTakenForADeadServer) {
  TempDir dir;
  testing::TestClusterOptions options = CheckpointingCluster(dir, 1);
  options.heartbeat_timeout_ms = 150;
  testing::TestCluster cluster(options);
  std::unique_ptr<Client> worker = ConnectWorker(cluster, 20);
  ASSERT_NE(worker, nullptr);
  // 100 keys of 1 MB, pushed one request at a time: the server heartbeats
  // between requests, so only the checkpoint's write is one long silence.
  TableOptions t;
  t.name = "big";
  t.rule = UpdateRule::kAdd;
  t.value_width = 1 << 18;
  auto table = worker->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<float> g(t.value_width, 1.0f);
  for (Key k = 0; k < 100; ++k) {
    const std::vector<Key> one = {k};
    ASSERT_TRUE(worker->Push(*table, one, g).ok());
  }
  worker->Clock();
  auto clock = RequestCheckpoint(cluster.address(), 60000);
  ASSERT_TRUE(clock.ok()) << clock.status();
  auto status = QueryClusterStatus(cluster.address(), 5000);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->generation, 0u) << "the job rolled back";
  EXPECT_EQ(status->last_checkpoint_clock, *clock);
}

// A server restarted in process with its id and state: the job rolls back
// to the checkpoint, also after a consistency change (the servers' tables
// then differ from the coordinator's first configuration).
TEST(Rollback, ARestartedServerRestoresTheCheckpointAfterAConsistencyChange) {
  TempDir dir;
  const testing::TestClusterOptions options = CheckpointingCluster(dir, 2);
  testing::TestCluster cluster(options);
  std::unique_ptr<Client> worker = ConnectWorker(cluster, 50);
  ASSERT_NE(worker, nullptr);
  TableOptions t;
  t.name = "count";
  t.rule = UpdateRule::kAdd;
  t.consistency.mode = ConsistencyMode::kSsp;
  t.consistency.staleness = 1;
  auto table = worker->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<Key> keys;
  for (Key k = 0; k < 20; ++k) keys.push_back(k);
  const std::vector<float> one(keys.size(), 1.0f);
  auto step = [&] {
    ASSERT_TRUE(worker->Push(*table, keys, one).ok());
    worker->Clock();
  };
  for (int c = 0; c < 3; ++c) step();
  Consistency wider;
  wider.mode = ConsistencyMode::kSsp;
  wider.staleness = 3;
  ASSERT_TRUE(worker->SetConsistency(*table, wider).ok());
  for (int c = 3; c < 6; ++c) step();
  auto clock = RequestCheckpoint(cluster.address(), 20000);
  ASSERT_TRUE(clock.ok()) << clock.status();
  ASSERT_EQ(*clock, 6);  // above every push so far (timestamps 0-5)
  step();                // timestamp 6: after the checkpoint
  auto restarted = RestartServer(cluster, options, 1);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  auto r = worker->AwaitRecovery(30000);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->clock, 6);
  EXPECT_EQ(worker->clock(), 6);
  // Every key, on either server, holds the six pushes before the cut.
  std::vector<float> out(keys.size());
  ASSERT_TRUE(worker->Pull(*table, keys, out).ok());
  for (size_t k = 0; k < keys.size(); ++k) EXPECT_EQ(out[k], 6.0f) << k;
  auto status = QueryClusterStatus(cluster.address(), 5000);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->generation, 1u);
  EXPECT_FALSE(status->recovering);
  // And the job goes on from there.
  step();
  ASSERT_TRUE(worker->Pull(*table, keys, out).ok());
  for (size_t k = 0; k < keys.size(); ++k) EXPECT_EQ(out[k], 7.0f) << k;
}

// The shared data plan rolls back with the model: batches trained after
// the checkpoint are handed out again, those before are not, so each
// batch's push (1 on its own key) is in the final state exactly once.
TEST(Rollback, TheDataPlanGoesBackWithTheModel) {
  TempDir dir;
  const testing::TestClusterOptions options = CheckpointingCluster(dir, 2);
  testing::TestCluster cluster(options);
  std::unique_ptr<Client> worker = ConnectWorker(cluster, 50);
  ASSERT_NE(worker, nullptr);
  TableOptions t;
  t.name = "batches";
  t.rule = UpdateRule::kAdd;
  t.consistency.mode = ConsistencyMode::kSsp;
  t.consistency.staleness = 1;
  auto table = worker->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  constexpr int64_t kBatches = 8, kEpochs = 2;
  Client::Batch batch;
  auto take = [&](const Client::Batch* trained) {
    auto next = worker->NextBatch(kBatches, kEpochs, trained, true);
    ASSERT_TRUE(next.ok()) << next.status();
    batch = *next;
  };
  // One step: push the batch's 1, report it (before the clock), clock.
  auto step = [&]() -> Status {
    const Key key = static_cast<Key>(batch.epoch * kBatches + batch.index);
    const float one = 1.0f;
    DUCTILE_RETURN_IF_ERROR(worker->Push(*table, {&key, 1}, {&one, 1}));
    auto next = worker->NextBatch(kBatches, kEpochs, &batch, true);
    DUCTILE_RETURN_IF_ERROR(next.status());
    batch = *next;
    worker->Clock();
    return Status::Ok();
  };
  take(nullptr);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(step().ok());  // into epoch 1
  auto clock = RequestCheckpoint(cluster.address(), 20000);
  ASSERT_TRUE(clock.ok()) << clock.status();
  ASSERT_EQ(*clock, 10);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(step().ok());  // lost below
  auto restarted = RestartServer(cluster, options, 1);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  auto r = worker->AwaitRecovery(30000);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->clock, 10);
  // The batch held before the rollback is nobody's; the plan is the
  // checkpoint's: 10 batches done, 6 to go.
  take(nullptr);
  EXPECT_EQ(batch.kind, Client::Batch::kTrain);
  EXPECT_EQ(batch.epoch, 1);
  EXPECT_EQ(batch.index, 2);
  int steps = 0;
  while (batch.kind == Client::Batch::kTrain) {
    ASSERT_TRUE(step().ok());
    ++steps;
  }
  EXPECT_EQ(steps, 6);
  EXPECT_EQ(batch.kind, Client::Batch::kEnd);
  std::vector<Key> keys;
  for (Key k = 0; k < kBatches * kEpochs; ++k) keys.push_back(k);
  std::vector<float> out(keys.size());
  ASSERT_TRUE(worker->Pull(*table, keys, out).ok());
  for (size_t k = 0; k < keys.size(); ++k) EXPECT_EQ(out[k], 1.0f) << k;
}

}  // namespace
}  // namespace ductile
