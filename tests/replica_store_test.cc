// A backup's copies: records replace rows and admission counts, evictions
// remove rows, buffered pushes stay until their clock is combined, and a
// takeover hands over exactly the rows, counts, pushes and windows of the
// slots taken.
#include "server/replica_store.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/record_codec.h"

namespace ductile {
namespace {

constexpr TableId kTable = 3;

RecordCodec::Records Parsed(const std::string& payload) {
  RecordCodec::Records records;
  Status s = RecordCodec::Parse(payload, "records", &records);
  EXPECT_TRUE(s.ok()) << s;
  return records;
}

std::string Row(Key key, float value, int64_t steps) {
  std::string out;
  RecordCodec::AppendEntry({kTable, key, {value, value}, {0.5f}, steps}, &out);
  return out;
}

auto Any() {
  return [](TableId, Key) { return true; };
}

TEST(RecordCodec, EveryKindOfRecordRoundTrips) {
  std::string payload = Row(7, 1.5f, 3);
  RecordCodec::AppendDeleted(kTable, 9, &payload);
  BspBuffer::Combined c{{2.0f, 4.0f}, 2, 3, 1.5f};
  RecordCodec::AppendBuffered(kTable, 12, 8, c, &payload);
  RecordCodec::AppendWindow({44, 10, {11, 13}}, &payload);
  RecordCodec::AppendCombinedBelow(12, &payload);
  RecordCodec::Records r = Parsed(payload);
  ASSERT_EQ(r.entries.size(), 1u);
  EXPECT_EQ(r.entries[0].key, 7u);
  EXPECT_EQ(r.entries[0].value, (std::vector<float>{1.5f, 1.5f}));
  EXPECT_EQ(r.entries[0].steps, 3);
  ASSERT_EQ(r.deleted.size(), 1u);
  EXPECT_EQ(r.deleted[0], std::make_pair(kTable, Key{9}));
  ASSERT_EQ(r.buffered.size(), 1u);
  EXPECT_EQ(r.buffered[0].second.clock, 12);
  EXPECT_EQ(r.buffered[0].second.key, 8u);
  EXPECT_EQ(r.buffered[0].second.combined.values, c.values);
  EXPECT_EQ(r.buffered[0].second.combined.batches, 3);
  ASSERT_EQ(r.windows.size(), 1u);
  EXPECT_EQ(r.windows[0].applied, (std::vector<uint64_t>{11, 13}));
  EXPECT_EQ(r.combined_below, 12);
}

TEST(RecordCodec, ACutOrUnknownRecordIsAClearError) {
  std::string payload = Row(7, 1.0f, 1);
  RecordCodec::Records r;
  Status s = RecordCodec::Parse(std::string_view(payload).substr(0, 10),
                                "records of server 1", &r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("records of server 1 ends inside a record"),
            std::string::npos)
      << s;
  s = RecordCodec::Parse("Z", "records", &r);
  EXPECT_NE(s.message().find("unknown type"), std::string::npos) << s;
}

TEST(ReplicaStore, ARowsLatestRecordWinsAndAnEvictionRemovesIt) {
  ReplicaStore store;
  store.Apply(1, Parsed(Row(7, 1.0f, 1) + Row(8, 2.0f, 1)));
  store.Apply(1, Parsed(Row(7, 3.0f, 2)));
  EXPECT_EQ(store.rows(), 2u);
  EXPECT_EQ(store.floats(), 6u);
  std::string evict;
  RecordCodec::AppendDeleted(kTable, 8, &evict);
  // Evicted and stored again in one payload: the row stays.
  store.Apply(1, Parsed(evict + Row(8, 5.0f, 1)));
  store.Apply(1, Parsed(evict));
  EXPECT_EQ(store.rows(), 1u);
  ReplicaStore::Taken t = store.Take(Any());
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(t.rows[0].key, 7u);
  EXPECT_EQ(t.rows[0].value, (std::vector<float>{3.0f, 3.0f}));
  EXPECT_EQ(t.rows[0].state, (std::vector<float>{0.5f}));
  EXPECT_EQ(t.rows[0].steps, 2);
  EXPECT_EQ(store.rows(), 0u);
  EXPECT_EQ(store.floats(), 0u);
}

// Rows parsed in place (views into the payload, decoded into the rows'
// own room by Apply) end as decoded ones do: the latest record of a row
// wins, one of another shape too, and a malformed row is refused by Parse
// all the same.
TEST(ReplicaStore, RowsParsedInPlaceEndAsDecodedOnes) {
  const auto in_place = [](const std::string& payload) {
    RecordCodec::Records records;
    Status s = RecordCodec::Parse(payload, "records", &records,
                                  /*rows_in_place=*/true);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_TRUE(records.entries.empty());
    return records;
  };
  ReplicaStore store;
  const std::string first = Row(7, 1.0f, 1) + Row(8, 2.0f, 1);
  store.Apply(1, in_place(first));
  std::string then = Row(7, 3.0f, 2);
  RecordCodec::AppendEntry({kTable, 8, {4.0f, 4.0f, 4.0f}, {}, 5}, &then);
  store.Apply(1, in_place(then));
  EXPECT_EQ(store.rows(), 2u);
  EXPECT_EQ(store.floats(), 6u);
  ReplicaStore::Taken t = store.Take(Any());
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0].key, 7u);
  EXPECT_EQ(t.rows[0].value, (std::vector<float>{3.0f, 3.0f}));
  EXPECT_EQ(t.rows[0].state, (std::vector<float>{0.5f}));
  EXPECT_EQ(t.rows[0].steps, 2);
  EXPECT_EQ(t.rows[1].key, 8u);
  EXPECT_EQ(t.rows[1].value, (std::vector<float>{4.0f, 4.0f, 4.0f}));
  EXPECT_TRUE(t.rows[1].state.empty());
  EXPECT_EQ(t.rows[1].steps, 5);
  std::string bad = Row(9, 1.0f, 1);
  bad[17] = 9;  // the row's value count: 9 floats, 2 there
  RecordCodec::Records r;
  Status s = RecordCodec::Parse(bad, "records", &r, /*rows_in_place=*/true);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unreadable row"), std::string::npos) << s;
}

TEST(ReplicaStore, BufferedPushesStayUntilTheirPrimaryCombinesTheirClock) {
  ReplicaStore store;
  std::string pushes;
  BspBuffer::Combined c{{1.0f}, 1, 1, 0.0f};
  RecordCodec::AppendBuffered(kTable, 5, 7, c, &pushes);
  RecordCodec::AppendBuffered(kTable, 6, 7, c, &pushes);
  store.Apply(1, Parsed(pushes));
  // The same key's pushes of clock 5, combined further: replaced.
  std::string more;
  RecordCodec::AppendBuffered(kTable, 5, 7, {{3.0f}, 2, 2, 0.0f}, &more);
  store.Apply(1, Parsed(more));
  std::string combined;
  RecordCodec::AppendCombinedBelow(6, &combined);
  // Another primary's mark drops only its own pushes.
  store.Apply(2, Parsed(combined));
  ReplicaStore copy = store;
  ReplicaStore::Taken all = copy.Take(Any());
  ASSERT_EQ(all.buffered.size(), 2u);
  EXPECT_EQ(all.buffered[0].second.clock, 5);
  EXPECT_EQ(all.buffered[0].second.combined.values, (std::vector<float>{3.0f}));
  EXPECT_EQ(all.buffered[0].second.combined.pushes, 2);
  store.Apply(1, Parsed(combined));
  ReplicaStore::Taken t = store.Take(Any());
  ASSERT_EQ(t.buffered.size(), 1u);
  EXPECT_EQ(t.buffered[0].second.clock, 6);
}

// A slot moved from primary 1 to primary 2 (a new pair): its copy here is
// dropped whole, 2 sends the slot's pushes again, with what it added, and
// 1's marks no longer reach 2's pushes.
TEST(ReplicaStore, AMovedSlotsPushesAreTheNewPrimarys) {
  ReplicaStore store;
  std::string before;
  RecordCodec::AppendBuffered(kTable, 5, 7, {{1.0f}, 1, 1, 0.0f}, &before);
  store.Apply(1, Parsed(before));
  EXPECT_EQ(store.Drop(Any()), 1u);
  std::string after;
  RecordCodec::AppendBuffered(kTable, 5, 7, {{3.0f}, 2, 2, 0.0f}, &after);
  store.Apply(2, Parsed(after));
  std::string combined;
  RecordCodec::AppendCombinedBelow(6, &combined);
  store.Apply(1, Parsed(combined));
  ReplicaStore::Taken t = store.Take(Any());
  ASSERT_EQ(t.buffered.size(), 1u);
  EXPECT_EQ(t.buffered[0].second.combined.pushes, 2);
}

TEST(ReplicaStore, ATakeoverTakesOnlyItsSlotsAndEveryWindowIsKept) {
  ReplicaStore store;
  std::string a = Row(1, 1.0f, 1);
  RecordCodec::AppendWindow({44, 3, {5}}, &a);
  std::string b = Row(2, 2.0f, 1);
  RecordCodec::AppendWindow({44, 3, {6}}, &b);
  store.Apply(/*primary=*/1, Parsed(a));
  store.Apply(/*primary=*/2, Parsed(b));
  ReplicaStore::Taken t = store.Take([](TableId, Key key) { return key == 1; });
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(t.rows[0].key, 1u);
  std::vector<uint64_t> seqs;
  for (const RequestDedup::Window& w : store.Windows()) {
    EXPECT_EQ(w.client, 44);
    seqs.insert(seqs.end(), w.applied.begin(), w.applied.end());
  }
  std::sort(seqs.begin(), seqs.end());
  EXPECT_EQ(seqs, (std::vector<uint64_t>{5, 6}));
  EXPECT_EQ(store.rows(), 1u);  // primary 2's row stays
  EXPECT_EQ(store.Drop([](TableId, Key) { return true; }), 1u);
  EXPECT_EQ(store.rows(), 0u);
  store.DropWindows(1);
  ASSERT_EQ(store.Windows().size(), 1u);
  EXPECT_EQ(store.Windows()[0].applied, (std::vector<uint64_t>{6}));
}

// Rows dropped into a Dropped leave the store (its counts, a later Take)
// at once; only their memory waits for the Dropped to go.
TEST(ReplicaStore, DroppedRowsLeaveAtOnceAndTheirMemoryGoesWithTheDropped) {
  ReplicaStore store;
  store.Apply(1, Parsed(Row(1, 1.0f, 1) + Row(2, 2.0f, 1) + Row(3, 3.0f, 1)));
  ASSERT_EQ(store.floats(), 9u);
  {
    ReplicaStore::Dropped dropped;
    EXPECT_EQ(store.Drop([](TableId, Key key) { return key != 2; }, &dropped),
              2u);
    EXPECT_EQ(dropped.size(), 2u);
    EXPECT_EQ(store.rows(), 1u);
    EXPECT_EQ(store.floats(), 3u);
    // A record of a dropped row stores it anew.
    store.Apply(1, Parsed(Row(3, 4.0f, 2)));
  }
  ReplicaStore::Taken t = store.Take(Any());
  ASSERT_EQ(t.rows.size(), 2u);
  std::sort(
      t.rows.begin(), t.rows.end(),
      [](const EntryRecord& a, const EntryRecord& b) { return a.key < b.key; });
  EXPECT_EQ(t.rows[0].key, 2u);
  EXPECT_EQ(t.rows[1].key, 3u);
  EXPECT_EQ(t.rows[1].value, (std::vector<float>{4.0f, 4.0f}));
  EXPECT_EQ(t.rows[1].steps, 2);
}

TEST(ReplicaStore, AdmissionCountsAreHeldBySlotLatestFirstAndTakenOver) {
  ReplicaStore store;
  std::string a;
  RecordCodec::AppendFilter({kTable, 5, "old counts"}, &a);
  RecordCodec::AppendFilter({kTable, 6, "six"}, &a);
  RecordCodec::AppendFilter({kTable, 7, "seven"}, &a);
  store.Apply(/*primary=*/1, Parsed(a));
  std::string b;
  RecordCodec::AppendFilter({kTable, 5, "new counts"}, &b);
  RecordCodec::AppendFilter({kTable, 7, ""}, &b);  // none any more
  store.Apply(/*primary=*/1, Parsed(b));
  std::vector<FilterRecord> taken =
      store.TakeFilters([](int32_t slot) { return slot == 5 || slot == 7; });
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].slot, 5);
  EXPECT_EQ(taken[0].counts, "new counts");
  EXPECT_EQ(store.DropFilters([](int32_t) { return true; }), 1u);  // slot 6
  EXPECT_TRUE(store.TakeFilters([](int32_t) { return true; }).empty());
}

}  // namespace
}  // namespace ductile
