// What a client knows of its tables: known widths refuse a push before it
// is sent, and the cache gate follows consistency changes.
#include "client/table_registry.h"

#include <vector>

#include "gtest/gtest.h"
#include "proto/table_config.h"

namespace ductile {
namespace {

wire::TableConfig Table(TableId id, uint32_t width, ConsistencyMode mode) {
  TableOptions o;
  o.name = "t" + std::to_string(id);
  o.value_width = width;
  o.consistency.mode = mode;
  o.consistency.staleness = 2;
  return ToWire(o, id);
}

TEST(TableRegistry, AnUnknownTableIsNotFound) {
  TableRegistry r;
  EXPECT_EQ(r.Lookup(3, 0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.Name(3), "table 3");
}

TEST(TableRegistry, APushAgainstAKnownWidthIsRefusedAndUnknownKeysPass) {
  TableRegistry r;
  r.Remember(Table(1, 0, ConsistencyMode::kAsync));
  const std::vector<Key> keys = {4, 9};
  const std::vector<uint32_t> lengths = {2, 3};
  EXPECT_TRUE(r.CheckWidths(1, keys, lengths).ok()) << "nothing known yet";
  r.LearnWidths(1, keys, lengths, keys.size(), [](size_t j) { return j; });
  EXPECT_TRUE(r.CheckWidths(1, keys, lengths).ok());
  const std::vector<uint32_t> wider = {2, 4};
  Status s = r.CheckWidths(1, keys, wider);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("key 9"), std::string::npos) << s;
  EXPECT_NE(s.message().find("nothing was sent"), std::string::npos) << s;
  const std::vector<Key> other = {5};
  const std::vector<uint32_t> any = {7};
  EXPECT_TRUE(r.CheckWidths(1, other, any).ok());
}

TEST(TableRegistry, TheCacheGateClosesDuringAChangeAndOpensFromItsBoundary) {
  TableRegistry r;
  r.Remember(Table(2, 1, ConsistencyMode::kSsp));
  ASSERT_TRUE(r.Lookup(2, 0).ok());
  EXPECT_TRUE(r.Lookup(2, 0)->cache_readable);
  r.SuspendCache(2);
  EXPECT_TRUE(r.CacheSuspended(2));
  EXPECT_FALSE(r.Lookup(2, 10)->cache_readable);
  wire::ConsistencyConfig bsp;
  bsp.set_mode(static_cast<int>(ConsistencyMode::kBsp));
  r.ResumeCache(2, 8, bsp);
  EXPECT_FALSE(r.Lookup(2, 7)->cache_readable) << "the old model's clock";
  EXPECT_TRUE(r.Lookup(2, 8)->cache_readable);
  EXPECT_EQ(r.Lookup(2, 8)->mode, ConsistencyMode::kBsp);
}

// A server's pull reply sent before it heard of a change carries the old
// model; arriving after the commit, it must not bring that model back (the
// cache would then answer a BSP read with an SSP copy).
TEST(TableRegistry, AReplyWithAnOlderModelDoesNotUndoACommittedChange) {
  TableRegistry r;
  r.Remember(Table(5, 1, ConsistencyMode::kSsp));
  const wire::ConsistencyConfig ssp =
      ToWire(Consistency{ConsistencyMode::kSsp, 2, BspCombine::kMean});
  wire::ConsistencyConfig bsp;
  bsp.set_mode(static_cast<int>(ConsistencyMode::kBsp));
  bsp.set_from_clock(7);
  r.SuspendCache(5);
  r.ResumeCache(5, 7, bsp);
  r.SetConsistency(5, ssp);  // from clock 0: older
  EXPECT_EQ(r.Lookup(5, 7)->mode, ConsistencyMode::kBsp);
  wire::ConsistencyConfig newer = ssp;
  newer.set_from_clock(9);
  r.SetConsistency(5, newer);  // a change this client missed
  EXPECT_EQ(r.Lookup(5, 9)->mode, ConsistencyMode::kSsp);
  EXPECT_EQ(r.Lookup(5, 9)->staleness, 2);
}

TEST(TableRegistry, TheKernelMirrorsOnlyStatelessRules) {
  TableRegistry r;
  wire::TableConfig adam = Table(3, 1, ConsistencyMode::kSsp);
  adam.set_rule(static_cast<int>(UpdateRule::kAdam));
  r.Remember(adam);
  r.Remember(Table(4, 1, ConsistencyMode::kSsp));  // add
  EXPECT_FALSE(r.Lookup(3, 0)->kernel->stateless());
  EXPECT_TRUE(r.Lookup(4, 0)->kernel->stateless());
}

}  // namespace
}  // namespace ductile
