// Rows by id (Client::PullRows, Client::PushRows): a batch's raw ids,
// unsorted and repeated, deduplicated on the worker, sent once per server,
// and re-expanded in the caller's order; RowBatch, the deduplication, on
// its own.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "client/row_batch.h"
#include "gtest/gtest.h"
#include "routing/slot_map.h"
#include "tests/test_cluster.h"

namespace ductile {
namespace {

using testing::TestCluster;

constexpr uint32_t kWidth = 3;

// Row `id` as the tests write it: distinct per id and per column, exact in
// float.
std::vector<float> RowOf(Key id) {
  std::vector<float> row(kWidth);
  for (uint32_t j = 0; j < kWidth; ++j) {
    row[j] = static_cast<float>(id % 1000) * 4.0f + static_cast<float>(j);
  }
  return row;
}

TableOptions Table(const std::string& name, UpdateRule rule,
                   float learning_rate = 0.01f) {
  TableOptions t;
  t.name = name;
  t.value_width = kWidth;
  t.rule = rule;
  t.learning_rate = learning_rate;
  return t;
}

// The servers owning `ids` of `table` in a fresh two-server cluster of 64
// slots (assigned in contiguous halves, the first to server 0).
std::set<int> OwnersOf(TableId table, std::span<const Key> ids) {
  std::set<int> owners;
  for (Key id : ids) owners.insert(SlotOf(table, id, 64) < 32 ? 0 : 1);
  return owners;
}

std::vector<Key> SortedUnique(std::vector<Key> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

// A batch as an embedding lookup has it: unsorted, with repeats (12 ids,
// 7 distinct), a hashed id near the top of the key space among them.
const std::vector<Key> kBatch = {
    42, 7, 901, 7, 0xFFFFFFFFFFFFFF00ull, 13, 42, 5, 7, 260, 901, 13};

uint64_t Requests(TestCluster& cluster) {
  return cluster.server(0).counters().requests +
         cluster.server(1).counters().requests;
}

TEST(RowBatch, KeysAreTheSortedDistinctIdsAndEachIdMapsToItsKey) {
  RowBatch batch(kBatch);
  const std::vector<Key> keys(batch.keys().begin(), batch.keys().end());
  EXPECT_EQ(keys, SortedUnique(kBatch));
  ASSERT_EQ(batch.num_ids(), kBatch.size());
  for (size_t i = 0; i < kBatch.size(); ++i) {
    EXPECT_EQ(batch.keys()[batch.row(i)], kBatch[i]) << "id " << i;
  }
}

// Large batches take the radix sort: hashed ids (every byte differs) and
// small ones (the high bytes shared), against a comparison sort.
TEST(RowBatch, LargeBatchesOfHashedOrSmallIdsMapEachIdToItsKey) {
  std::mt19937_64 rng(7);
  for (const Key range : {Key{0}, Key{5000}, Key{40}}) {
    std::vector<Key> ids(3000);
    for (Key& id : ids) {
      id = range == 0 ? rng() : rng() % range;
      if (range == 0 && rng() % 2 == 0) id = ids[rng() % 8];  // repeats
    }
    RowBatch batch(ids);
    const std::vector<Key> keys(batch.keys().begin(), batch.keys().end());
    ASSERT_EQ(keys, SortedUnique(ids)) << "range " << range;
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_EQ(batch.keys()[batch.row(i)], ids[i]) << "range " << range;
    }
  }
}

TEST(RowBatch, ExpandCopiesEachKeysRowToEveryPlaceOfItsId) {
  RowBatch batch(std::vector<Key>{9, 2, 9});  // keys {2, 9}
  const std::vector<float> unique = {1, 2, 3, 4};
  std::vector<float> out(6, -1.0f);
  batch.Expand(unique, 2, out);
  EXPECT_EQ(out, (std::vector<float>{3, 4, 1, 2, 3, 4}));
}

TEST(RowBatch, SumAddsTheRowsOfARepeatedId) {
  RowBatch batch(std::vector<Key>{9, 2, 9, 9});  // keys {2, 9}
  const std::vector<float> rows = {1, 10, 2, 20, 4, 40, 8, 80};
  std::vector<float> sums(4, -1.0f);
  batch.Sum(rows, 2, sums);
  EXPECT_EQ(sums, (std::vector<float>{2, 20, 13, 130}));
}

TEST(RowBatch, OnlyStrictlyIncreasingIdsGoOutAsTheyAre) {
  EXPECT_TRUE(RowBatch::IsStrictlyIncreasing(std::vector<Key>{}));
  EXPECT_TRUE(RowBatch::IsStrictlyIncreasing(std::vector<Key>{1, 5, 9}));
  EXPECT_FALSE(RowBatch::IsStrictlyIncreasing(std::vector<Key>{1, 5, 5}));
  EXPECT_FALSE(RowBatch::IsStrictlyIncreasing(std::vector<Key>{5, 1}));
}

TEST(SparseRows, APullGivesEachIdItsRowInTheCallersOrder) {
  TestCluster cluster;
  auto client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  auto table = client->CreateTable(Table("rows", UpdateRule::kAssign));
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(OwnersOf(*table, kBatch).size(), 2u) << "ids on one server";
  // Rows written with the plain call, one key each.
  const std::vector<Key> keys = SortedUnique(kBatch);
  std::vector<float> rows;
  for (Key k : keys) {
    for (float v : RowOf(k)) rows.push_back(v);
  }
  ASSERT_TRUE(client->Push(*table, keys, rows).ok());

  const uint64_t before = Requests(cluster);
  std::vector<float> out(kBatch.size() * kWidth, -1.0f);
  Handle pull = client->PullRowsAsync(*table, kBatch, out);
  ASSERT_TRUE(pull.Wait().ok());
  for (size_t i = 0; i < kBatch.size(); ++i) {
    const std::vector<float> got(out.begin() + i * kWidth,
                                 out.begin() + (i + 1) * kWidth);
    EXPECT_EQ(got, RowOf(kBatch[i])) << "id " << i << " = " << kBatch[i];
  }
  EXPECT_EQ(Requests(cluster) - before, 2u) << "one request per server";

  // Ids never written read as the initializer (zeros), repeats included.
  std::vector<Key> fresh = {77777, 3, 77777};
  std::vector<float> fresh_out(fresh.size() * kWidth, -1.0f);
  ASSERT_TRUE(client->PullRows(*table, fresh, fresh_out).ok());
  EXPECT_EQ(fresh_out, std::vector<float>(fresh_out.size(), 0.0f));
}

TEST(SparseRows, APushAppliesTheSumOfARepeatedIdsGradientsOnce) {
  TestCluster cluster;
  auto client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  // SGD with rate 0.5: each id ends at -0.5 times the sum of its rows.
  auto sgd = client->CreateTable(Table("sgd", UpdateRule::kSgd, 0.5f));
  // Assign: an id pushed once with the sum holds the sum; pushed once per
  // repeat, it would hold its last row.
  auto assign = client->CreateTable(Table("assign", UpdateRule::kAssign));
  ASSERT_TRUE(sgd.ok() && assign.ok());
  std::vector<float> grads(kBatch.size() * kWidth);
  std::map<Key, std::vector<float>> sums;
  for (size_t i = 0; i < kBatch.size(); ++i) {
    auto& sum = sums[kBatch[i]];
    sum.resize(kWidth, 0.0f);
    for (uint32_t j = 0; j < kWidth; ++j) {
      grads[i * kWidth + j] = static_cast<float>(i + 1) * (j + 1);
      sum[j] += grads[i * kWidth + j];
    }
  }
  const uint64_t pushes_before =
      cluster.server(0).counters().pushes + cluster.server(1).counters().pushes;
  ASSERT_TRUE(client->PushRows(*sgd, kBatch, grads).ok());
  ASSERT_TRUE(client->PushRowsAsync(*assign, kBatch, grads).Wait().ok());
  EXPECT_EQ(cluster.server(0).counters().pushes +
                cluster.server(1).counters().pushes - pushes_before,
            4u)
      << "each call: one push per server";

  const std::vector<Key> keys = SortedUnique(kBatch);
  std::vector<float> w(keys.size() * kWidth), a(keys.size() * kWidth);
  ASSERT_TRUE(client->Pull(*sgd, keys, w).ok());
  ASSERT_TRUE(client->Pull(*assign, keys, a).ok());
  for (size_t k = 0; k < keys.size(); ++k) {
    for (uint32_t j = 0; j < kWidth; ++j) {
      EXPECT_EQ(w[k * kWidth + j], -0.5f * sums[keys[k]][j])
          << "key " << keys[k] << " column " << j;
      EXPECT_EQ(a[k * kWidth + j], sums[keys[k]][j])
          << "key " << keys[k] << " column " << j;
    }
  }
}

// Ids already unique and sorted go out as they are: the same values as
// the plain calls.
TEST(SparseRows, SortedUniqueIdsGiveWhatThePlainCallsGive) {
  TestCluster cluster;
  auto client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  auto rows = client->CreateTable(Table("by_rows", UpdateRule::kSgd, 0.25f));
  auto plain = client->CreateTable(Table("plain", UpdateRule::kSgd, 0.25f));
  ASSERT_TRUE(rows.ok() && plain.ok());
  const std::vector<Key> keys = SortedUnique(kBatch);
  std::vector<float> grads(keys.size() * kWidth);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = float(i) - 4.0f;
  const uint64_t before = Requests(cluster);
  ASSERT_TRUE(client->PushRows(*rows, keys, grads).ok());
  EXPECT_EQ(Requests(cluster) - before, 2u) << "one request per server";
  ASSERT_TRUE(client->Push(*plain, keys, grads).ok());
  std::vector<float> by_rows(grads.size(), -1.0f), by_plain(grads.size());
  ASSERT_TRUE(client->PullRows(*rows, keys, by_rows).ok());
  ASSERT_TRUE(client->Pull(*plain, keys, by_plain).ok());
  EXPECT_EQ(by_rows, by_plain);
  for (size_t i = 0; i < grads.size(); ++i) {
    EXPECT_EQ(by_rows[i], -0.25f * grads[i]) << i;
  }
}

// A pull the worker cache answers completes on the caller's thread: its
// rows are expanded there too.
TEST(SparseRows, APullAnsweredByTheCacheIsExpandedToo) {
  TestCluster cluster;
  ClientOptions options;
  options.enable_cache = true;
  options.request_timeout_ms = 20000;
  options.connect_timeout_ms = 20000;
  auto client = cluster.ConnectWith(options);
  ASSERT_NE(client, nullptr);
  TableOptions t = Table("cached", UpdateRule::kAssign);
  t.consistency.mode = ConsistencyMode::kSsp;
  t.consistency.staleness = 2;
  auto table = client->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<Key> keys = SortedUnique(kBatch);
  std::vector<float> rows;
  for (Key k : keys) {
    for (float v : RowOf(k)) rows.push_back(v);
  }
  ASSERT_TRUE(client->Push(*table, keys, rows).ok());
  std::vector<float> out(kBatch.size() * kWidth);
  for (int round = 0; round < 2; ++round) {
    std::fill(out.begin(), out.end(), -1.0f);
    ASSERT_TRUE(client->PullRows(*table, kBatch, out).ok());
    for (size_t i = 0; i < kBatch.size(); ++i) {
      const std::vector<float> got(out.begin() + i * kWidth,
                                   out.begin() + (i + 1) * kWidth);
      EXPECT_EQ(got, RowOf(kBatch[i])) << "round " << round << " id " << i;
    }
  }
  EXPECT_GE(client->stats().cache_hits, 1u) << "the second pull was not cached";
}

TEST(SparseRows, BadInputIsRefusedBeforeAnythingIsSent) {
  TestCluster cluster;
  auto client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  auto table = client->CreateTable(Table("strict", UpdateRule::kAdd));
  TableOptions variable = Table("variable", UpdateRule::kAdd);
  variable.value_width = 0;
  auto var_table = client->CreateTable(variable);
  ASSERT_TRUE(table.ok() && var_table.ok());
  const uint64_t before = Requests(cluster);
  const size_t n = kBatch.size() * kWidth;
  std::vector<float> short_out(n - 1), long_grads(n + kWidth, 1.0f);
  std::vector<float> out(n), grads(n, 1.0f);

  Status s = client->PullRows(*table, kBatch, short_out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("out has"), std::string::npos) << s;
  s = client->PushRows(*table, kBatch, long_grads);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("grads has"), std::string::npos) << s;
  // The sorted path checks the same.
  const std::vector<Key> sorted = SortedUnique(kBatch);
  s = client->PushRows(*table, sorted, grads);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  s = client->PullRows(*var_table, kBatch, out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("variable-width"), std::string::npos) << s;
  s = client->PushRows(*var_table, kBatch, grads);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  s = client->PullRows(*table + 100, kBatch, out);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
  // A NaN in a repeated id's gradients: its sum is NaN, refused as a
  // plain push's would be.
  grads[kWidth] = std::numeric_limits<float>::quiet_NaN();
  s = client->PushRows(*table, kBatch, grads);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(Requests(cluster), before) << "a refused call sent a request";

  ASSERT_TRUE(client->PullRows(*table, kBatch, out).ok());
  EXPECT_EQ(out, std::vector<float>(n, 0.0f)) << "a refused push was applied";
  // No ids: nothing to do.
  EXPECT_TRUE(client->PullRows(*table, {}, std::span<float>()).ok());
  EXPECT_TRUE(client->PushRows(*table, {}, std::span<const float>()).ok());
}

}  // namespace
}  // namespace ductile
