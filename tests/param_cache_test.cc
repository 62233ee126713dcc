// The worker-side cache: freshness by data clock, read-my-writes, and the
// rule that a fetch never overwrites a newer local write.
#include "client/param_cache.h"

#include <limits>
#include <numeric>
#include <vector>

#include "ductile/client.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace ductile {
namespace {

UpdateRuleKernel Rule(UpdateRule rule, float learning_rate) {
  TableOptions options;
  options.rule = rule;
  options.learning_rate = learning_rate;
  return UpdateRuleKernel(options, /*custom=*/nullptr);
}

auto Width(uint32_t w) {
  return std::pair{[w](size_t i) { return uint64_t{i} * w; },
                   [w](size_t) { return w; }};
}

TEST(ParamCache, AnswersOnlyWhenEveryKeyIsFreshEnough) {
  ParamCache cache;
  auto [offset, length] = Width(2);
  const std::vector<Key> keys = {1, 2};
  std::vector<float> out(4, -1.0f);
  EXPECT_FALSE(cache.TryRead(7, keys, offset, length, 0, out));
  cache.Install(7, 1, std::vector<float>{1, 2}, /*data_clock=*/5, cache.Mark());
  EXPECT_FALSE(
      cache.TryRead(7, keys, offset, length, 0, out));  // key 2 missing
  cache.Install(7, 2, std::vector<float>{3, 4}, /*data_clock=*/3, cache.Mark());
  EXPECT_TRUE(cache.TryRead(7, keys, offset, length, 3, out));
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_FALSE(
      cache.TryRead(7, keys, offset, length, 4, out));  // key 2 too old
  EXPECT_FALSE(cache.TryRead(8, keys, offset, length, 0, out));  // other table
}

TEST(ParamCache, AppliesOwnPushesForRulesItCanCompute) {
  ParamCache cache;
  auto [offset, length] = Width(1);
  const std::vector<Key> key = {9};
  std::vector<float> out(1);
  cache.Install(1, 9, std::vector<float>{10}, 0, cache.Mark());
  cache.Write(1, key, offset, length, std::vector<float>{2},
              Rule(UpdateRule::kAdd, 0));
  ASSERT_TRUE(cache.TryRead(1, key, offset, length, 0, out));
  EXPECT_EQ(out[0], 12.0f);
  cache.Write(1, key, offset, length, std::vector<float>{2},
              Rule(UpdateRule::kSgd, 0.5f));
  ASSERT_TRUE(cache.TryRead(1, key, offset, length, 0, out));
  EXPECT_EQ(out[0], 11.0f);
  cache.Write(1, key, offset, length, std::vector<float>{4},
              Rule(UpdateRule::kAssign, 0));
  ASSERT_TRUE(cache.TryRead(1, key, offset, length, 0, out));
  EXPECT_EQ(out[0], 4.0f);
  // Adam's state lives on the server: the copy is dropped.
  cache.Write(1, key, offset, length, std::vector<float>{1},
              Rule(UpdateRule::kAdam, 0.1f));
  EXPECT_FALSE(cache.TryRead(1, key, offset, length, 0, out));
}

TEST(ParamCache, AFetchIssuedBeforeALocalWriteDoesNotOverwriteIt) {
  ParamCache cache;
  auto [offset, length] = Width(1);
  const std::vector<Key> key = {3};
  std::vector<float> out(1);
  cache.Install(1, 3, std::vector<float>{1}, 0, cache.Mark());
  const uint64_t fetch_issued = cache.Mark();
  cache.Write(1, key, offset, length, std::vector<float>{5},
              Rule(UpdateRule::kAdd, 0));
  // The fetch's reply (server value 1 + others' 100, without our +5) lands.
  cache.Install(1, 3, std::vector<float>{101}, 2, fetch_issued);
  ASSERT_TRUE(cache.TryRead(1, key, offset, length, 0, out));
  EXPECT_EQ(out[0], 6.0f);  // still ours; a later fetch refreshes it
  cache.Install(1, 3, std::vector<float>{106}, 3, cache.Mark());
  ASSERT_TRUE(cache.TryRead(1, key, offset, length, 3, out));
  EXPECT_EQ(out[0], 106.0f);
}

TEST(ParamCache, AClientAnswersFreshEnoughPullsLocallyAndReadsItsWrites) {
  testing::TestCluster cluster({.num_servers = 2, .num_workers = 1});
  ClientOptions o;
  o.coordinator_address = cluster.address();
  o.enable_cache = true;
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  TableOptions t;
  t.name = "cached";
  t.value_width = 2;
  t.rule = UpdateRule::kAdd;
  t.consistency = {ConsistencyMode::kSsp, 2};
  auto table = (*client)->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_TRUE((*client)->Barrier().ok());
  std::vector<Key> keys = {1, 2, 3, 4};
  std::vector<float> ones(8, 1.0f), out(8);
  ASSERT_TRUE((*client)->Pull(*table, keys, out).ok());  // miss: fetched
  EXPECT_EQ((*client)->stats().cache_misses, 1u);
  ASSERT_TRUE((*client)->Push(*table, keys, ones).ok());
  ASSERT_TRUE((*client)->Pull(*table, keys, out).ok());  // hit, own write
  EXPECT_EQ((*client)->stats().cache_hits, 1u);
  EXPECT_EQ(out, ones);
  // Within the bound the copy (fetched at server clock 0) still serves.
  (*client)->Clock();
  (*client)->Clock();
  ASSERT_TRUE((*client)->Pull(*table, keys, out).ok());
  EXPECT_EQ((*client)->stats().cache_hits, 2u);
  // At clock 3 it needs data of server clock >= 1: fetched again.
  (*client)->Clock();
  ASSERT_TRUE((*client)->Pull(*table, keys, out).ok());
  EXPECT_EQ((*client)->stats().cache_misses, 2u);
  EXPECT_EQ(out, ones);
}

// A refused push (a NaN) changes nothing, the worker's cached copy
// included: reads answered from it still show the stored values.
TEST(ParamCache, ARefusedPushIsNotMirroredInTheCache) {
  testing::TestCluster cluster({.num_servers = 1, .num_workers = 1});
  ClientOptions o;
  o.coordinator_address = cluster.address();
  o.enable_cache = true;
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  TableOptions t;
  t.name = "cached";
  t.value_width = 1;
  t.rule = UpdateRule::kAdd;
  t.consistency = {ConsistencyMode::kSsp, 2};
  auto table = (*client)->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<Key> keys = {5};
  std::vector<float> out(1, -1.0f);
  ASSERT_TRUE((*client)->Pull(*table, keys, out).ok());  // fetched: 0
  const std::vector<float> nan = {std::numeric_limits<float>::quiet_NaN()};
  EXPECT_EQ((*client)->Push(*table, keys, nan).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE((*client)->Pull(*table, keys, out).ok());
  EXPECT_EQ((*client)->stats().cache_hits, 1u);
  EXPECT_EQ(out[0], 0.0f);
}

}  // namespace
}  // namespace ductile
