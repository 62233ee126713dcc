// Keys to slots (a fixed hash, part of the persistent format) and slots to
// servers (contiguous, balanced ranges).
#include "routing/slot_map.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace ductile {
namespace {

TEST(SplitMix64, IsTheSplitMix64Finaliser) {
  // Reference outputs of splitmix64 (x + golden gamma, then the finaliser),
  // computed independently of this code.
  EXPECT_EQ(SplitMix64(0), 0xe220a8397b1dcdafull);
  EXPECT_EQ(SplitMix64(1), 0x910a2dec89025cc1ull);
}

TEST(SlotOf, NeverChangesForAGivenTableAndKey) {
  // Part of the persistent format: a change here would misplace every key
  // stored by an earlier build. Values computed independently (Python).
  EXPECT_EQ(SlotOf(0, 0, 4096), 3018);
  EXPECT_EQ(SlotOf(1, 1, 4096), 2744);
  EXPECT_EQ(SlotOf(7, 123456789, 4096), 2696);
  EXPECT_EQ(SlotOf(3, ~Key{0}, 64), 17);
  EXPECT_EQ(SlotOf(2, 42, 8), 7);
}

TEST(SlotOf, IsStableAndInRangeForEverySlotCount) {
  for (int32_t num_slots : {1, 2, 7, 8, 64, 4096}) {
    for (TableId table : {0u, 1u, 99u}) {
      for (Key key = 0; key < 2000; ++key) {
        const Key k = key * 0x9e3779b97f4a7c15ull;  // small and huge keys
        const int32_t slot = SlotOf(table, k, num_slots);
        ASSERT_GE(slot, 0);
        ASSERT_LT(slot, num_slots);
        ASSERT_EQ(slot, SlotOf(table, k, num_slots));
      }
    }
  }
}

// Pearson's chi-square statistic of `counts` against a uniform spread.
double ChiSquare(const std::vector<int>& counts, int total) {
  const double expected = static_cast<double>(total) / counts.size();
  double chi2 = 0;
  for (int c : counts) chi2 += (c - expected) * (c - expected) / expected;
  return chi2;
}

TEST(SlotOf, SpreadsKeysEvenlyOverSixtyFourSlots) {
  // 63 degrees of freedom: chi-square has mean 63 and standard deviation
  // about 11; 150 is far in the tail (p < 1e-8) for a uniform hash, while
  // any real clustering lands far above it.
  constexpr int kSlots = 64, kKeys = 64000;
  struct Pattern {
    const char* name;
    Key (*key)(int i);
  };
  const Pattern patterns[] = {
      {"sequential", [](int i) { return Key(i); }},
      {"stride 4096", [](int i) { return Key(i) * 4096; }},
      {"stride 64", [](int i) { return Key(i) * 64; }},
      {"high bits", [](int i) { return Key(i) << 40; }},
  };
  for (const Pattern& p : patterns) {
    for (TableId table : {0u, 5u}) {
      std::vector<int> counts(kSlots, 0);
      for (int i = 0; i < kKeys; ++i) ++counts[SlotOf(table, p.key(i), kSlots)];
      EXPECT_LT(ChiSquare(counts, kKeys), 150.0)
          << p.name << " keys, table " << table;
      EXPECT_GT(*std::min_element(counts.begin(), counts.end()), 0)
          << p.name << " keys, table " << table;
    }
  }
}

TEST(SlotOf, PlacesTheSameKeyOfDifferentTablesInDifferentSlots) {
  // Otherwise every table's key 0 would land on one server.
  int same = 0;
  for (Key key = 0; key < 1000; ++key) {
    same += SlotOf(1, key, 4096) == SlotOf(2, key, 4096);
  }
  EXPECT_LT(same, 10);  // about 1000/4096 expected by chance
}

// Number of slots each server owns, in `server_ids` order.
std::vector<int> CountsOf(const std::vector<int32_t>& owner,
                          const std::vector<int32_t>& server_ids) {
  std::vector<int> counts;
  for (int32_t id : server_ids) {
    counts.push_back(
        static_cast<int>(std::count(owner.begin(), owner.end(), id)));
  }
  return counts;
}

TEST(AssignSlotsEvenly, GivesEachServerOneContiguousRangeInTheGivenOrder) {
  const std::vector<int32_t> ids = {0, 1, 2};
  const std::vector<int32_t> owner = AssignSlotsEvenly(64, ids);
  ASSERT_EQ(owner.size(), 64u);
  // 64 = 22 + 21 + 21: the first 64 % 3 servers get one more.
  std::vector<int32_t> expected;
  expected.insert(expected.end(), 22, 0);
  expected.insert(expected.end(), 21, 1);
  expected.insert(expected.end(), 21, 2);
  EXPECT_EQ(owner, expected);
}

TEST(AssignSlotsEvenly, SplitsEightSlotsOverTwoServersInHalves) {
  EXPECT_EQ(AssignSlotsEvenly(8, {0, 1}),
            (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1}));
}

TEST(AssignSlotsEvenly, KeepsTheCallersOrderOfUnsortedIds) {
  EXPECT_EQ(AssignSlotsEvenly(5, {7, 2, 5}),
            (std::vector<int32_t>{7, 7, 2, 2, 5}));
}

TEST(AssignSlotsEvenly, IsContiguousAndBalancedForManyShapes) {
  for (int32_t num_slots = 1; num_slots <= 100; ++num_slots) {
    for (int32_t n = 1; n <= 12; ++n) {
      std::vector<int32_t> ids(n);
      for (int32_t i = 0; i < n; ++i) ids[i] = 10 + 3 * i;
      const std::vector<int32_t> owner = AssignSlotsEvenly(num_slots, ids);
      ASSERT_EQ(owner.size(), static_cast<size_t>(num_slots));
      // Every slot has an owner from the list.
      for (int32_t o : owner) {
        ASSERT_NE(std::find(ids.begin(), ids.end(), o), ids.end())
            << num_slots << " slots, " << n << " servers";
      }
      // Balanced: counts differ by at most one.
      const std::vector<int> counts = CountsOf(owner, ids);
      const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
      EXPECT_LE(*hi - *lo, 1) << num_slots << " slots, " << n << " servers";
      // Contiguous: the owner changes at most n - 1 times along the slots,
      // and never back to an earlier server.
      int changes = 0;
      for (int32_t s = 1; s < num_slots; ++s) {
        if (owner[s] != owner[s - 1]) {
          ++changes;
          EXPECT_GT(owner[s], owner[s - 1]);  // ids are increasing here
        }
      }
      EXPECT_LE(changes, n - 1);
    }
  }
}

TEST(AssignSlotsEvenly, GivesExtraServersNoSlotsWhenServersOutnumberSlots) {
  const std::vector<int32_t> ids = {0, 1, 2, 3, 4};
  const std::vector<int32_t> owner = AssignSlotsEvenly(3, ids);
  EXPECT_EQ(owner, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(CountsOf(owner, ids), (std::vector<int>{1, 1, 1, 0, 0}));
}

TEST(AssignSlotsEvenly, LeavesEverySlotUnownedWithNoServers) {
  EXPECT_EQ(AssignSlotsEvenly(4, {}), (std::vector<int32_t>(4, -1)));
}

}  // namespace
}  // namespace ductile
