// ShardedMap (util/sharded_map.h) against std::map as the oracle: every
// operation the tables use, in random sequences, including erasing and
// extracting while iterating.
#include "util/sharded_map.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "util/taken_nodes.h"

namespace ductile {
namespace {

using Map = ShardedMap<uint64_t, std::string, 16>;

// Every element, once, as the oracle holds it.
void ExpectSame(const Map& map, const std::map<uint64_t, std::string>& oracle) {
  ASSERT_EQ(map.size(), oracle.size());
  EXPECT_EQ(map.empty(), oracle.empty());
  std::map<uint64_t, std::string> seen;
  size_t visited = 0;
  for (const auto& [key, value] : map) {
    ++visited;
    EXPECT_TRUE(seen.emplace(key, value).second) << "key " << key << " twice";
  }
  EXPECT_EQ(visited, oracle.size());
  EXPECT_EQ(seen, oracle);
  for (const auto& [key, value] : oracle) {
    const auto it = map.find(key);
    ASSERT_NE(it, map.end()) << key;
    EXPECT_EQ(it->first, key);
    EXPECT_EQ(it->second, value);
    EXPECT_EQ(map.count(key), 1u);
    EXPECT_EQ(map.at(key), value);
  }
}

// Keys 0, stride, 2 stride, ... (n of them), each the string of its index,
// in both.
void Fill(size_t n, uint64_t stride, Map* map,
          std::map<uint64_t, std::string>* oracle) {
  for (uint64_t k = 0; k < n; ++k) {
    (*map)[k * stride] = std::to_string(k);
    (*oracle)[k * stride] = std::to_string(k);
  }
}

TEST(ShardedMap, AnEmptyMapHasNothingToVisitOrFind) {
  const Map map;
  EXPECT_EQ(map.begin(), map.end());
  EXPECT_EQ(map.find(7), map.end());
  EXPECT_EQ(map.count(7), 0u);
  EXPECT_TRUE(map.empty());
  EXPECT_THROW((void)map.at(7), std::out_of_range);
}

TEST(ShardedMap, RandomOperationsMatchAnOrderedMap) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    Map map;
    std::map<uint64_t, std::string> oracle;
    // Keys from a small range, so that operations meet existing keys.
    auto key = [&] { return rng() % 300; };
    for (int op = 0; op < 2000; ++op) {
      const uint64_t k = key();
      const std::string v = std::to_string(rng() % 1000);
      switch (rng() % 6) {
        case 0: {  // try_emplace keeps an existing value
          const auto [it, added] = map.try_emplace(k, v);
          const auto [oit, oadded] = oracle.try_emplace(k, v);
          ASSERT_EQ(added, oadded);
          ASSERT_EQ(it->first, k);
          ASSERT_EQ(it->second, oit->second);
          break;
        }
        case 1:  // operator[] assigns
          map[k] = v;
          oracle[k] = v;
          break;
        case 2:  // erase by key
          ASSERT_EQ(map.erase(k), oracle.erase(k));
          break;
        case 3: {  // erase by iterator, found by key
          auto it = map.find(k);
          ASSERT_EQ(it == map.end(), oracle.count(k) == 0);
          if (it != map.end()) {
            map.erase(it);
            oracle.erase(k);
          }
          break;
        }
        case 4: {  // extract: the node leaves with its key and value
          auto it = map.find(k);
          if (it != map.end()) {
            auto node = map.extract(it);
            ASSERT_EQ(node.key(), k);
            ASSERT_EQ(node.mapped(), oracle.at(k));
            oracle.erase(k);
          }
          break;
        }
        default:  // a lookup
          ASSERT_EQ(map.count(k), oracle.count(k));
          break;
      }
      ASSERT_EQ(map.size(), oracle.size());
    }
    ExpectSame(map, oracle);
  }
}

TEST(ShardedMap, ErasingWhileIteratingVisitsEveryOtherKeyOnce) {
  Map map;
  std::map<uint64_t, std::string> oracle;
  Fill(1000, 7919, &map, &oracle);
  // Erase the odd values, extract the multiples of 10, as EraseIf and
  // TakenNodes::Take do: each returns the iterator after the one removed.
  TakenNodes<Map> taken;
  size_t visited = 0;
  for (auto it = map.begin(); it != map.end();) {
    ++visited;
    const uint64_t v = std::stoull(it->second);
    if (v % 10 == 0) {
      oracle.erase(it->first);
      it = taken.Take(map, it);
    } else if (v % 2 == 1) {
      oracle.erase(it->first);
      it = map.erase(it);
    } else {
      ++it;
    }
  }
  EXPECT_EQ(visited, 1000u);
  EXPECT_EQ(taken.size(), 100u);
  ExpectSame(map, oracle);
  map.clear();
  EXPECT_TRUE(map.empty());
  EXPECT_EQ(map.begin(), map.end());
}

// A copy holds the same; a map moved from is empty and usable.
TEST(ShardedMap, ACopyIsEqualAndAMapMovedFromIsEmpty) {
  Map map;
  std::map<uint64_t, std::string> oracle;
  Fill(500, 31, &map, &oracle);
  const Map copy = map;
  ExpectSame(copy, oracle);
  Map moved = std::move(map);
  ExpectSame(moved, oracle);
  ExpectSame(map, {});  // NOLINT(bugprone-use-after-move): what is tested
  map[7] = "seven";
  ExpectSame(map, {{7, "seven"}});
  Map assigned;
  assigned = std::move(moved);
  ExpectSame(assigned, oracle);
  ExpectSame(moved, {});  // NOLINT(bugprone-use-after-move)
}

TEST(ShardedMap, ReferencesStayValidAsTheMapGrows) {
  Map map;
  std::string& first = map[1];
  first = "one";
  for (uint64_t k = 2; k < 20000; ++k) map[k] = "x";
  EXPECT_EQ(&map.at(1), &first);
  EXPECT_EQ(first, "one");
}

// The shards do not all grow at once: once the map holds 50,000 keys, no
// 1,000 more make more than 20 of its 256 shards rehash (with one load
// factor for all, every shard rehashes within the same few inserts at each
// doubling).
TEST(ShardedMap, TheShardsGrowAtDifferentSizes) {
  using Big = ShardedMap<uint64_t, int, 256>;
  Big map;
  std::vector<size_t> buckets(Big::shards());
  size_t most_at_once = 0;
  for (uint64_t key = 0; key < 400000; ++key) {
    map[key * 2654435761u] = 1;
    if ((key + 1) % 1000 != 0) continue;
    size_t grew = 0;
    for (size_t i = 0; i < Big::shards(); ++i) {
      grew += map.bucket_count(i) != buckets[i];
      buckets[i] = map.bucket_count(i);
    }
    if (key >= 50000) most_at_once = std::max(most_at_once, grew);
  }
  EXPECT_LE(most_at_once, 20u);
  EXPECT_GT(Big::MaxLoadFactor(255), Big::MaxLoadFactor(0));
}

// Keys in the patterns tables see (consecutive ids, ids of one feature
// high in the key, multiples of a stride) are spread over every shard,
// none with more than twice its share.
TEST(ShardedMap, PatternedKeysSpreadOverTheShards) {
  const std::vector<std::pair<std::string, uint64_t>> patterns = {
      {"consecutive", 1}, {"stride 4096", 4096}, {"feature << 40", 1}};
  for (const auto& [name, stride] : patterns) {
    SCOPED_TRACE(name);
    std::vector<size_t> load(ShardedMap<uint64_t, int, 256>::shards());
    const size_t n = 256 * 100;
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t key =
          name == "feature << 40" ? ((i % 26) << 40) | (i / 26) : i * stride;
      ++load[ShardedMap<uint64_t, int, 256>::ShardOf(key)];
    }
    const auto [least, most] = std::minmax_element(load.begin(), load.end());
    EXPECT_GT(*least, 0u);
    EXPECT_LE(*most, 2 * n / load.size());
  }
}

}  // namespace
}  // namespace ductile
