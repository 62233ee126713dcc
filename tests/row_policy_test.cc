// Tables of rows by id (TableOptions::rows): a row is created at the push
// that admits it, a pull of an id not stored reads the initializer's value
// and stores nothing, rows idle too long or beyond the budget are removed,
// and checkpoints, rollbacks and slot moves carry exactly the live rows.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "consistency/bsp_buffer.h"
#include "ductile/admin.h"
#include "gtest/gtest.h"
#include "proto/table_config.h"
#include "server/admission_filter.h"
#include "server/checkpointer.h"
#include "server/initializer.h"
#include "server/parameter_table.h"
#include "server/table_set.h"
#include "tests/test_cluster.h"

namespace ductile {
namespace {

namespace fs = std::filesystem;
constexpr uint32_t kWidth = 4;
constexpr TableId kTable = 7;

TableOptions RowTable(RowPolicy rows = {}) {
  TableOptions o;
  o.name = "emb";
  o.value_width = kWidth;
  o.rule = UpdateRule::kAdd;
  o.init.kind = InitKind::kUniform;
  o.init.low = -1.0f;
  o.init.high = 1.0f;
  o.init.seed = 17;
  o.rows = rows;
  return o;
}

// A request for `keys` (ascending), with `values` (kWidth per key) if a
// push. The frames point into the object: keep it while the view is used.
class Request {
 public:
  Request(std::vector<Key> keys, std::vector<float> values)
      : keys_(std::move(keys)), values_(std::move(values)) {
    wire::Header h;
    h.set_type(values_.empty() ? wire::PULL : wire::PUSH);
    h.set_num_keys(keys_.size());
    h.set_values_frames(values_.empty() ? 0 : 1);
    const ByteSpan frames[2] = {
        {reinterpret_cast<const uint8_t*>(keys_.data()), keys_.size() * 8},
        {reinterpret_cast<const uint8_t*>(values_.data()), values_.size() * 4}};
    const size_t n = values_.empty() ? 1 : 2;
    status_ = data_.Parse(h, std::span<const ByteSpan>(frames, n), kWidth,
                          !values_.empty());
  }
  const Status& status() const { return status_; }
  const DataFrames& data() const { return data_; }

 private:
  std::vector<Key> keys_;
  std::vector<float> values_;
  DataFrames data_;
  Status status_;
};

// Pushes `g` (every element) to each of `keys` at push clock 0.
void Push(ParameterTable& table, std::vector<Key> keys, float g) {
  std::sort(keys.begin(), keys.end());
  Request r(keys, std::vector<float>(keys.size() * kWidth, g));
  ASSERT_TRUE(r.status().ok()) << r.status();
  ASSERT_TRUE(table.CheckPush(r.data()).ok());
  table.ApplyPush(r.data(), 0);
}

std::vector<float> Pull(ParameterTable& table, Key key) {
  Request r({key}, {});
  EXPECT_TRUE(r.status().ok()) << r.status();
  std::vector<float> out;
  table.Pull(r.data(), &out);
  return out;
}

std::vector<float> Initial(const TableOptions& o, Key key) {
  std::vector<float> v(kWidth);
  InitializeValue(o.init, kTable, key, v);
  return v;
}

std::vector<float> Plus(std::vector<float> v, float g) {
  for (float& x : v) x += g;
  return v;
}

std::vector<Key> StoredKeys(const ParameterTable& table) {
  std::vector<Key> keys;
  table.ForEachKey([&](Key k) { keys.push_back(k); });
  std::sort(keys.begin(), keys.end());
  return keys;
}

// ---- Rows by id.

TEST(RowsById, APullOfAnUnseenIdReadsTheInitializerAndStoresNothing) {
  const TableOptions o = RowTable();
  ParameterTable table(kTable, o, nullptr);
  const Key id = 0xfedcba9876543210ULL;  // any 64-bit id
  EXPECT_EQ(Pull(table, id), Initial(o, id));
  Request r({3, id}, {});
  ASSERT_TRUE(r.status().ok());
  std::vector<float> into(2 * kWidth, 99.0f);
  table.PullInto(r.data(), into.data());
  EXPECT_EQ(std::vector<float>(into.begin() + kWidth, into.end()),
            Initial(o, id));
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.stored_floats(), 0u);
  EXPECT_EQ(table.changed(), 0u);
  EXPECT_EQ(table.row_counts().admitted, 0u);
}

TEST(RowsById, ARowIsCreatedAtItsFirstPushFromTheInitializer) {
  const TableOptions o = RowTable();
  ParameterTable table(kTable, o, nullptr);
  const Key id = uint64_t{1} << 63;
  Push(table, {id}, 0.5f);
  EXPECT_EQ(table.size(), 1u);
  EXPECT_EQ(Pull(table, id), Plus(Initial(o, id), 0.5f));
  EXPECT_EQ(table.row_counts().admitted, 1u);
  Push(table, {id}, 0.25f);  // an existing row: no new admission
  EXPECT_EQ(Pull(table, id), Plus(Plus(Initial(o, id), 0.5f), 0.25f));
  EXPECT_EQ(table.row_counts().admitted, 1u);
}

// ---- Admission.

TEST(Admission, ARowIsStoredAtExactlyItsNthPush) {
  RowPolicy rows;
  rows.admit_after_pushes = 3;
  const TableOptions o = RowTable(rows);
  ParameterTable table(kTable, o, nullptr);
  for (int push = 1; push <= 2; ++push) {
    Push(table, {11, 12}, 1.0f);
    EXPECT_EQ(table.size(), 0u) << "push " << push;
    EXPECT_EQ(table.AdmissionCount(11), static_cast<uint32_t>(push));
    // Pulls read the initializer's value: the gradients were dropped.
    EXPECT_EQ(Pull(table, 11), Initial(o, 11));
  }
  EXPECT_EQ(table.row_counts().dropped_pushes, 4u);
  Push(table, {11}, 2.0f);  // 11's third push: stored, with this gradient
  EXPECT_EQ(StoredKeys(table), std::vector<Key>{11});
  EXPECT_EQ(Pull(table, 11), Plus(Initial(o, 11), 2.0f));
  EXPECT_EQ(Pull(table, 12), Initial(o, 12));
  EXPECT_EQ(table.row_counts().admitted, 1u);
  Push(table, {11, 12}, 1.0f);
  EXPECT_EQ(StoredKeys(table), (std::vector<Key>{11, 12}));
  EXPECT_EQ(Pull(table, 11), Plus(Initial(o, 11), 3.0f));
  EXPECT_EQ(table.row_counts().admitted, 2u);
  EXPECT_EQ(table.row_counts().dropped_pushes, 4u);
}

TEST(Admission, ZeroAndOneAdmitAtTheFirstPushAndHoldNoCounters) {
  for (uint32_t n : {0u, 1u}) {
    RowPolicy rows;
    rows.admit_after_pushes = n;
    ParameterTable table(kTable, RowTable(rows), nullptr);
    Push(table, {5}, 1.0f);
    EXPECT_EQ(table.size(), 1u) << n;
    EXPECT_EQ(table.row_counts().dropped_pushes, 0u) << n;
  }
  AdmissionFilter filter(1, 1 << 20);
  EXPECT_TRUE(filter.Add(5, 1));
  EXPECT_EQ(filter.bytes(), 0u);
}

// A BSP clock's combined push counts each of the pushes combined in it.
TEST(Admission, ACombinedClockCountsEachOfItsPushes) {
  RowPolicy rows;
  rows.admit_after_pushes = 3;
  const TableOptions o = RowTable(rows);
  ParameterTable table(kTable, o, nullptr);
  auto clock = [&](int32_t pushes) {
    std::unordered_map<Key, BspBuffer::Combined> keys;
    keys[21].values.assign(kWidth, 1.0f);
    keys[21].pushes = pushes;
    std::vector<Status> errors;
    table.ApplyCombinedAll(keys, BspCombine::kSum, 0, &errors);
    EXPECT_TRUE(errors.empty());
  };
  clock(2);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.AdmissionCount(21), 2u);
  clock(1);
  EXPECT_EQ(Pull(table, 21), Plus(Initial(o, 21), 1.0f));
}

// The filter's memory is fixed; an id may be admitted early when its
// counters collide (false admission), never late within a window with no
// aging. Counts halve after as many pushes as there are counters, so that
// ids seen once long ago fade and a flood of one-off ids does not fill
// the counters up: without the aging, 20000 ids over 1024 counters leave
// every counter at the threshold, and every new id admitted at once.
TEST(Admission, TheFilterIsBoundedAgesAndNeverAdmitsLateInAWindow) {
  constexpr uint32_t kN = 4;
  AdmissionFilter filter(kN, 1024);
  for (Key id = 0; id < 20000; ++id) filter.Add(id * 7919, 1);
  EXPECT_EQ(filter.bytes(), 1024u * sizeof(uint16_t));
  int admitted_at_once = 0;
  for (Key id = 1u << 30; id < (1u << 30) + 200; ++id) {
    admitted_at_once += filter.Count(id) + 1 >= kN;
  }
  EXPECT_LT(admitted_at_once, 100);
  // An id pushed once, then as many pushes of another as there are
  // counters: the first's count has faded.
  AdmissionFilter aging(2, 1024);
  EXPECT_FALSE(aging.Add(12345, 1));
  for (int i = 0; i < 1024; ++i) aging.Add(777, 1);
  EXPECT_EQ(aging.Count(12345), 0u);
  EXPECT_FALSE(aging.Add(12345, 1));
  // With room to spare and no aging yet, no collision: exact counts.
  AdmissionFilter roomy(kN, 1 << 20);
  for (Key id = 0; id < 1000; ++id) {
    EXPECT_FALSE(roomy.Add(id, 1));
    EXPECT_EQ(roomy.Count(id), 1u);
  }
  EXPECT_EQ(roomy.Count(5000), 0u);
  EXPECT_FALSE(roomy.Add(5000, 2));
  EXPECT_TRUE(roomy.Add(5000, 2));
  EXPECT_EQ(roomy.Count(5000), kN);  // saturated
}

// ---- Eviction.

TEST(Eviction, ARowNotUpdatedForTClocksIsRemoved) {
  RowPolicy rows;
  rows.evict_idle_clocks = 3;
  const TableOptions o = RowTable(rows);
  ParameterTable table(kTable, o, nullptr);
  Push(table, {1, 2}, 1.0f);  // at server clock 0
  table.SetClock(1);
  table.SetClock(2);
  Push(table, {2}, 1.0f);  // 2 updated at clock 2
  EXPECT_EQ(StoredKeys(table), (std::vector<Key>{1, 2}));
  table.SetClock(3);  // 1: three clocks without an update
  EXPECT_EQ(StoredKeys(table), std::vector<Key>{2});
  EXPECT_EQ(table.row_counts().evicted_idle, 1u);
  EXPECT_EQ(Pull(table, 1), Initial(o, 1));  // new again
  table.SetClock(4);
  EXPECT_EQ(StoredKeys(table), std::vector<Key>{2});
  table.SetClock(5);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.stored_floats(), 0u);
  EXPECT_EQ(table.row_counts().evicted_idle, 2u);
  // A pushed id again: a new row from the initializer.
  Push(table, {1}, 0.5f);
  EXPECT_EQ(Pull(table, 1), Plus(Initial(o, 1), 0.5f));
}

TEST(Eviction, RowsBeyondTheBudgetGoLeastRecentlyUpdatedFirst) {
  RowPolicy rows;
  rows.max_rows = 3;
  ParameterTable table(kTable, RowTable(rows), nullptr);
  Push(table, {1, 2, 3}, 1.0f);
  Push(table, {1}, 1.0f);  // 1 is now the most recent
  Pull(table, 2);          // a pull is no use
  Push(table, {4}, 1.0f);
  EXPECT_EQ(StoredKeys(table), (std::vector<Key>{1, 3, 4}));
  Push(table, {5}, 1.0f);
  EXPECT_EQ(StoredKeys(table), (std::vector<Key>{1, 4, 5}));
  Push(table, {6, 7}, 1.0f);
  EXPECT_EQ(StoredKeys(table), (std::vector<Key>{5, 6, 7}));
  EXPECT_EQ(table.row_counts().evicted_budget, 4u);
  EXPECT_EQ(table.row_counts().admitted, 7u);
  EXPECT_EQ(table.stored_floats(), 3u * kWidth);
}

// With eviction by use, a push of more new rows than the budget does not
// push out the rows in frequent use: the rows pushed the fewest times go,
// the least recent of them first, and a new row with one update loses to
// the popular ones.
TEST(Eviction, LeastUsedKeepsThePopularRowsWhenAPushBringsMoreThanTheBudget) {
  RowPolicy rows;
  rows.max_rows = 3;
  rows.eviction = RowPolicy::Eviction::kLeastUsed;
  ParameterTable table(kTable, RowTable(rows), nullptr);
  for (int i = 0; i < 3; ++i) Push(table, {1, 2, 3}, 1.0f);
  Push(table, {4, 5, 6, 7}, 1.0f);  // least recent-first would keep 5, 6, 7
  EXPECT_EQ(StoredKeys(table), (std::vector<Key>{1, 2, 3}));
  EXPECT_EQ(Pull(table, 1), Plus(Initial(RowTable(rows), 1), 3.0f));
  Push(table, {8}, 1.0f);
  EXPECT_EQ(StoredKeys(table), (std::vector<Key>{1, 2, 3}));
  EXPECT_EQ(table.row_counts().evicted_budget, 5u);
  EXPECT_EQ(table.row_counts().admitted, 8u);
  // The rows, and the use counts' fewest counters (2 bytes each).
  EXPECT_EQ(table.stored_floats(), 3u * kWidth + 1024 * 2 / sizeof(float));
}

// The pushes of an id count while it is not stored too: an id evicted
// comes back with its count, and wins a place once it is pushed as often
// as the rows there (the oldest of equals goes).
TEST(Eviction, LeastUsedRemembersThePushesOfEvictedIds) {
  RowPolicy rows;
  rows.max_rows = 2;
  rows.eviction = RowPolicy::Eviction::kLeastUsed;
  ParameterTable table(kTable, RowTable(rows), nullptr);
  for (int i = 0; i < 2; ++i) Push(table, {1, 2}, 1.0f);
  Push(table, {3}, 1.0f);  // one push against two: it goes at once
  EXPECT_EQ(StoredKeys(table), (std::vector<Key>{1, 2}));
  EXPECT_EQ(table.UseCount(3), 1u);
  Push(table, {3}, 1.0f);  // two against two: 1, the oldest, goes
  EXPECT_EQ(StoredKeys(table), (std::vector<Key>{2, 3}));
  Push(table, {3}, 1.0f);
  // Stored again at its second push: its first was lost with the row.
  EXPECT_EQ(Pull(table, 3), Plus(Initial(RowTable(rows), 3), 2.0f));
  EXPECT_EQ(table.UseCount(3), 3u);
}

// Use counts are not stored: a row restored (a rollback) or moved in
// counts its steps as its pushes.
TEST(Eviction, LeastUsedCountsARestoredRowsStepsAsItsPushes) {
  RowPolicy rows;
  rows.max_rows = 2;
  rows.eviction = RowPolicy::Eviction::kLeastUsed;
  RowPolicy unbounded = rows;
  unbounded.max_rows = 0;
  ParameterTable source(kTable, RowTable(unbounded), nullptr);
  for (int i = 0; i < 5; ++i) Push(source, {10}, 1.0f);
  Push(source, {11}, 1.0f);
  std::vector<EntryRecord> moved;
  source.Export([](Key) { return true; }, &moved);
  ParameterTable target(kTable, RowTable(rows), nullptr);
  for (EntryRecord& e : moved) target.Restore(std::move(e), true);
  EXPECT_EQ(target.UseCount(10), 5u);
  Push(target, {12}, 1.0f);  // 11 and 12 were pushed once: 11 is older
  EXPECT_EQ(StoredKeys(target), (std::vector<Key>{10, 12}));
}

// Among rows updated equally often, the least recently updated goes.
TEST(Eviction, LeastUsedBreaksTiesByRecency) {
  RowPolicy rows;
  rows.max_rows = 3;
  rows.eviction = RowPolicy::Eviction::kLeastUsed;
  ParameterTable table(kTable, RowTable(rows), nullptr);
  Push(table, {1, 2, 3}, 1.0f);
  Push(table, {1}, 1.0f);  // 1: two updates, the most recent
  Push(table, {2}, 1.0f);  // 2: two updates, more recent still
  Push(table, {4}, 1.0f);  // 3 and 4 have one each: 3 is older
  EXPECT_EQ(StoredKeys(table), (std::vector<Key>{1, 2, 4}));
}

// With E rows over the budget, only the 2 E + kLeastUsedWindow least
// recently updated rows are compared: a row pushed once but more recently
// than they were stays.
TEST(Eviction, LeastUsedComparesOnlyTheLeastRecentRows) {
  constexpr Key kBudget = 2 + kLeastUsedWindow + 4;
  RowPolicy rows;
  rows.max_rows = kBudget;
  rows.eviction = RowPolicy::Eviction::kLeastUsed;
  ParameterTable table(kTable, RowTable(rows), nullptr);
  std::vector<Key> old;
  for (Key k = 1; k <= kBudget; ++k) old.push_back(k);
  Push(table, old, 1.0f);
  Push(table, old, 1.0f);  // two pushes each, in key order
  const Key once = 1000;
  Push(table, {once}, 1.0f);  // one over: the 66 oldest are compared
  std::vector<Key> expected(old.begin() + 1, old.end());
  expected.push_back(once);
  EXPECT_EQ(StoredKeys(table), expected);
}

TEST(Eviction, HeldEvictionsWaitForTheRelease) {
  RowPolicy rows;
  rows.max_rows = 2;
  rows.evict_idle_clocks = 1;
  ParameterTable table(kTable, RowTable(rows), nullptr);
  table.HoldEvictions(true);
  Push(table, {1, 2, 3}, 1.0f);
  table.SetClock(5);
  EXPECT_EQ(table.size(), 3u);
  Push(table, {4}, 1.0f);  // at clock 5
  table.HoldEvictions(false);
  table.SetClock(5);  // 1, 2, 3 idle; 4 is not
  EXPECT_EQ(StoredKeys(table), std::vector<Key>{4});
  EXPECT_EQ(table.row_counts().evicted_idle, 3u);
}

// Rows evicted and pushed again between checkpoints: the change list stays
// within a bound, and a checkpoint takes each live row once.
TEST(Eviction, ChurnKeepsTheChangeListBoundedAndTakesEachRowOnce) {
  RowPolicy rows;
  rows.max_rows = 2;
  ParameterTable table(kTable, RowTable(rows), nullptr);
  for (int i = 0; i < 1000; ++i) {
    Push(table, {static_cast<Key>(i % 5)}, 1.0f);
    EXPECT_LE(table.changed(), 200u) << i;
  }
  EXPECT_EQ(table.row_counts().evicted_budget, 998u);
  std::vector<EntryRecord> changes;
  table.TakeChanges(&changes);
  std::vector<Key> keys;
  for (const EntryRecord& e : changes) keys.push_back(e.key);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, StoredKeys(table));
  EXPECT_EQ(keys, (std::vector<Key>{3, 4}));  // 998 % 5, 999 % 5
  EXPECT_EQ(table.changed(), 0u);
}

// Only rows the store may hold are listed for the next checkpoint to
// delete: one admitted and evicted between two checkpoints is not (the
// list would grow with every such row until a checkpoint), one a
// checkpoint took is, and so is one evicted again after it came back
// before the store's copy was deleted.
TEST(Eviction, OnlyRowsTheStoreMayHoldAreListedForDeletion) {
  RowPolicy rows;
  rows.max_rows = 1;
  ParameterTable table(kTable, RowTable(rows), nullptr);
  table.set_keeps_evicted(true);
  auto evicted = [&] {
    std::vector<std::pair<TableId, Key>> out;
    table.TakeEvicted(&out);
    std::vector<Key> keys;
    for (const auto& [t, k] : out) keys.push_back(k);
    std::sort(keys.begin(), keys.end());
    return keys;
  };
  Push(table, {1}, 1.0f);
  Push(table, {2}, 1.0f);  // 1 evicted, never written
  EXPECT_EQ(evicted(), std::vector<Key>{});
  std::vector<EntryRecord> changes;
  table.TakeChanges(&changes);  // a checkpoint writes 2
  Push(table, {3}, 1.0f);       // 2 evicted: the store holds it
  Push(table, {2}, 1.0f);       // back before its delete: 3 evicted
  Push(table, {4}, 1.0f);       // 2 evicted again
  EXPECT_EQ(evicted(), std::vector<Key>{2});
}

// ---- Options.

TEST(RowOptions, BadValuesAreRefusedNamingTheField) {
  auto refused = [](RowPolicy rows, const std::string& field) {
    const Status s = ValidateTableOptions(RowTable(rows));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
  };
  RowPolicy r;
  r.admit_after_pushes = 65536;
  refused(r, "rows.admit_after_pushes");
  r = {};
  r.admission_counters = 1023;
  refused(r, "rows.admission_counters");
  r.admission_counters = (uint64_t{1} << 24) + 1;
  refused(r, "rows.admission_counters");
  r = {};
  r.evict_idle_clocks = -1;
  refused(r, "rows.evict_idle_clocks");
  r.evict_idle_clocks = (int64_t{1} << 40) + 1;
  refused(r, "rows.evict_idle_clocks");
  r = {};
  r.max_rows = (uint64_t{1} << 40) + 1;
  refused(r, "rows.max_rows");
  r = {};
  r.eviction = static_cast<RowPolicy::Eviction>(2);
  refused(r, "rows.eviction");
  r = {};
  r.admit_after_pushes = 65535;
  r.admission_counters = 1024;
  r.evict_idle_clocks = int64_t{1} << 40;
  r.max_rows = uint64_t{1} << 40;
  EXPECT_TRUE(ValidateTableOptions(RowTable(r)).ok());
}

TEST(RowOptions, ThePolicySurvivesTheWireAndItsAbsenceIsTheDefault) {
  RowPolicy r;
  r.admit_after_pushes = 5;
  r.admission_counters = 4096;
  r.evict_idle_clocks = 9;
  r.max_rows = 1000;
  r.eviction = RowPolicy::Eviction::kLeastUsed;
  const wire::TableConfig c = ToWire(RowTable(r), kTable);
  const TableOptions back = FromWire(c);
  EXPECT_EQ(back.rows.eviction, RowPolicy::Eviction::kLeastUsed);
  EXPECT_EQ(back.rows.admit_after_pushes, 5u);
  EXPECT_EQ(back.rows.admission_counters, 4096u);
  EXPECT_EQ(back.rows.evict_idle_clocks, 9);
  EXPECT_EQ(back.rows.max_rows, 1000u);
  EXPECT_FALSE(SameTable(c, ToWire(RowTable(), kTable)));
  // A config written before the field existed is a table without policy.
  const wire::TableConfig plain = ToWire(RowTable(), kTable);
  EXPECT_FALSE(plain.has_rows());
  EXPECT_EQ(FromWire(plain).rows.max_rows, 0u);
  EXPECT_EQ(FromWire(plain).rows.eviction, RowPolicy::Eviction::kLeastRecent);
  // A peer's value out of range is refused, not taken for another.
  wire::TableConfig lie = c;
  lie.mutable_rows()->set_eviction(1u << 20);
  EXPECT_EQ(ValidateTableOptions(FromWire(lie)).code(),
            StatusCode::kInvalidArgument);
}

// ---- Checkpoints, rollbacks and slot moves.

class RowCheckpoints : public ::testing::Test {
 protected:
  class NoLink final : public CoordinatorLink {
   public:
    void Send(const wire::Header&) override {}
    void Heartbeat(int64_t) override {}
  };

  RowCheckpoints() {
    char pattern[] = "/tmp/ductile-sparse-rows-test-XXXXXX";
    dir_ = mkdtemp(pattern);
  }
  ~RowCheckpoints() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  ParameterTable& Open(RowPolicy rows) {
    EXPECT_TRUE(checkpointer_.Open(dir_, 1, /*keep_checkpoints=*/10).ok());
    tables_.set_keeps_evicted(checkpointer_.enabled());
    EXPECT_TRUE(tables_.Create(ToWire(RowTable(rows), kTable)).ok());
    return *tables_.Find(kTable);
  }

  void Write(int64_t clock) {
    wire::Header prepare;
    prepare.set_change_id(static_cast<uint64_t>(clock));
    prepare.set_timeout_ms(3000);
    checkpointer_.Prepare(prepare, 0);
    wire::Header commit;
    commit.set_change_id(static_cast<uint64_t>(clock));
    commit.set_clock(clock);
    commit.set_data_clock(checkpointer_.last_checkpoint());
    checkpointer_.Commit(commit, 0);
    ASSERT_EQ(checkpointer_.TakeDue(clock, true), clock);
    checkpointer_.Write(clock, tables_, 0, 0);
    ASSERT_TRUE(checkpointer_.FinishWrite(tables_).ok());
  }

  std::vector<Key> KeysAt(int64_t clock) {
    Result<LoadedCheckpoint> c = checkpointer_.store()->Load(clock);
    EXPECT_TRUE(c.ok()) << c.status();
    std::vector<Key> keys;
    if (c.ok()) {
      for (const EntryRecord& e : c->entries) keys.push_back(e.key);
    }
    return keys;
  }

  std::string dir_;
  NoLink link_;
  LiveCounters counters_;
  Checkpointer checkpointer_{SystemEnv(), &link_, &counters_};
  std::map<std::string, CustomRule> rules_;
  TableSet tables_{&rules_, 1};
};

TEST_F(RowCheckpoints, ACheckpointHoldsExactlyTheLiveRows) {
  RowPolicy rows;
  rows.max_rows = 3;
  rows.evict_idle_clocks = 4;
  ParameterTable& table = Open(rows);
  Push(table, {1, 2, 3}, 1.0f);
  Write(1);
  EXPECT_EQ(KeysAt(1), (std::vector<Key>{1, 2, 3}));
  Push(table, {4}, 1.0f);  // 1 goes (budget)
  Push(table, {5}, 1.0f);  // 2 goes
  Push(table, {1}, 1.0f);  // 3 goes; 1 is back, a new row
  Write(2);
  EXPECT_EQ(KeysAt(2), (std::vector<Key>{1, 4, 5}));
  EXPECT_EQ(KeysAt(2), StoredKeys(table));
  // Idle rows go at the clock; a row evicted and pushed again before the
  // checkpoint is written once, not also deleted.
  tables_.SetClock(3);
  Push(table, {5}, 1.0f);
  tables_.SetClock(4);  // 1 and 4, pushed at clock 0, go
  EXPECT_EQ(StoredKeys(table), std::vector<Key>{5});
  Push(table, {4}, 1.0f);
  Write(5);
  EXPECT_EQ(KeysAt(5), (std::vector<Key>{4, 5}));
  EXPECT_EQ(KeysAt(5), StoredKeys(table));
}

TEST_F(RowCheckpoints,
       ARollbackRestoresTheLiveRowsAndTheirIdleClocksStartThere) {
  RowPolicy rows;
  rows.evict_idle_clocks = 2;
  ParameterTable& table = Open(rows);
  Push(table, {1, 2}, 1.0f);
  tables_.SetClock(1);
  Push(table, {2}, 1.0f);
  tables_.SetClock(2);  // 1 goes
  Write(2);
  std::vector<float> two;
  ASSERT_TRUE(table.Get(2, &two));
  Push(table, {3}, 1.0f);
  tables_.SetClock(7);  // everything goes

  // Roll back to clock 2, as the restorer does.
  Result<LoadedCheckpoint> c = checkpointer_.store()->Load(2);
  ASSERT_TRUE(c.ok()) << c.status();
  tables_.ClearKeys();
  for (EntryRecord& e : c->entries) table.Restore(std::move(e), false);
  ASSERT_TRUE(checkpointer_.store()->RollBackTo(2).ok());
  checkpointer_.Reset(2);
  tables_.RestartClock(2);
  EXPECT_EQ(StoredKeys(table), std::vector<Key>{2});
  std::vector<float> restored;
  ASSERT_TRUE(table.Get(2, &restored));
  EXPECT_EQ(restored, two);
  tables_.SetClock(3);
  EXPECT_EQ(table.size(), 1u);  // idle since the rollback's clock, 2
  tables_.SetClock(4);
  EXPECT_EQ(table.size(), 0u);
  Write(4);
  EXPECT_TRUE(KeysAt(4).empty());
}

// The admission filter's counts go into each checkpoint by slot (those
// changed since the previous one), a rollback puts back those of the cut,
// and slots whose counts went (moved away) are deleted from the store.
TEST_F(RowCheckpoints, ACheckpointStoresTheCountsAndARollbackRestoresTheCut) {
  RowPolicy rows;
  rows.admit_after_pushes = 3;
  ParameterTable& table = Open(rows);
  tables_.set_num_slots(16);
  Push(table, {1, 2}, 1.0f);
  Push(table, {1}, 1.0f);
  Write(1);
  Result<LoadedCheckpoint> one = checkpointer_.store()->Load(1);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(one->entries.empty());
  ASSERT_FALSE(one->filters.empty());
  for (const FilterRecord& f : one->filters) EXPECT_EQ(f.table, kTable);
  Push(table, {1, 2, 3}, 1.0f);  // 1 is admitted
  Write(2);
  EXPECT_EQ(KeysAt(2), std::vector<Key>{1});

  // Roll back to clock 1, as the restorer does.
  tables_.ClearKeys();
  EXPECT_EQ(table.AdmissionCount(1), 0u);
  for (const FilterRecord& f : one->filters) {
    ASSERT_TRUE(table.RestoreCounts(f, /*changed=*/false).ok());
  }
  ASSERT_TRUE(checkpointer_.store()->RollBackTo(1).ok());
  checkpointer_.Reset(1);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.AdmissionCount(1), 2u);
  EXPECT_EQ(table.AdmissionCount(2), 1u);
  EXPECT_EQ(table.AdmissionCount(3), 0u);
  Push(table, {1, 2}, 1.0f);  // 1 at its third push, 2 at its second
  EXPECT_EQ(StoredKeys(table), std::vector<Key>{1});
  Write(3);
  Result<LoadedCheckpoint> three = checkpointer_.store()->Load(3);
  ASSERT_TRUE(three.ok()) << three.status();
  ParameterTable reloaded(kTable, RowTable(rows), nullptr);
  reloaded.set_num_slots(16);
  for (const FilterRecord& f : three->filters) {
    ASSERT_TRUE(reloaded.RestoreCounts(f, false).ok());
  }
  for (Key k : {1, 2, 3}) {
    EXPECT_EQ(reloaded.AdmissionCount(k), table.AdmissionCount(k)) << k;
  }
  EXPECT_EQ(reloaded.AdmissionCount(2), 2u);
  // Every slot moves away: the store deletes their counts.
  EXPECT_GT(table.EraseCounts([](int32_t) { return true; }), 0u);
  EXPECT_EQ(table.AdmissionCount(2), 0u);
  Write(4);
  Result<LoadedCheckpoint> four = checkpointer_.store()->Load(4);
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_TRUE(four->filters.empty());
}

// A slot move: the source copies its rows out (Export) with evictions
// held, the target puts them in (Restore) as used at its clock, the source
// drops them when the move is done (EraseIf).
TEST(RowSlotMove, TheMovedRowsAreExactlyTheLiveOnesAndTakePartInTheBudget) {
  RowPolicy rows;
  rows.max_rows = 4;
  rows.evict_idle_clocks = 10;
  ParameterTable source(kTable, RowTable(rows), nullptr);
  ParameterTable target(kTable, RowTable(rows), nullptr);
  Push(source, {1, 2, 3, 4, 5}, 1.0f);  // 1 goes
  auto odd = [](Key k) { return k % 2 == 1; };
  source.HoldEvictions(true);
  std::vector<EntryRecord> moved;
  source.Export(odd, &moved);
  Push(source, {6}, 1.0f);  // held: no row goes while the move is under way
  source.SetClock(20);
  EXPECT_EQ(StoredKeys(source), (std::vector<Key>{2, 3, 4, 5, 6}));
  ASSERT_EQ(moved.size(), 2u);  // 3 and 5
  target.SetClock(20);
  Push(target, {10, 12}, 1.0f);
  for (EntryRecord& e : moved) target.Restore(std::move(e), true);
  EXPECT_EQ(source.EraseIf(odd), 2u);
  source.HoldEvictions(false);
  EXPECT_EQ(StoredKeys(source), (std::vector<Key>{2, 4, 6}));
  // On the target, the moved rows count as used at its clock, after 10
  // and 12.
  Push(target, {14}, 1.0f);
  EXPECT_EQ(StoredKeys(target), (std::vector<Key>{3, 5, 12, 14}));
  target.SetClock(30);
  EXPECT_EQ(target.size(), 0u);
  source.SetClock(30);
  EXPECT_EQ(source.size(), 0u);
}

// Rows a move hands out to be freed elsewhere (EraseIf into an Erased)
// leave the table as erased ones do: gone from it, from its count of
// floats and from its order of use, while the Erased holds them.
TEST(RowSlotMove, RowsTakenOutToBeFreedElsewhereLeaveTheTableAsErasedOnesDo) {
  RowPolicy rows;
  rows.max_rows = 4;
  ParameterTable table(kTable, RowTable(rows), nullptr);
  Push(table, {1, 2, 3, 4}, 1.0f);
  const uint64_t floats = table.stored_floats();
  auto erased = std::make_unique<ParameterTable::Erased>();
  EXPECT_EQ(table.EraseIf([](Key k) { return k % 2 == 1; }, erased.get()), 2u);
  EXPECT_EQ(erased->size(), 2u);
  EXPECT_EQ(StoredKeys(table), (std::vector<Key>{2, 4}));
  EXPECT_EQ(table.stored_floats(), floats / 2);
  erased.reset();  // freed: the table does not notice
  // Two more rows fit under the budget; a fifth evicts the least recently
  // updated of the ones left.
  Push(table, {5, 6}, 1.0f);
  EXPECT_EQ(StoredKeys(table), (std::vector<Key>{2, 4, 5, 6}));
  Push(table, {7}, 1.0f);
  EXPECT_EQ(StoredKeys(table), (std::vector<Key>{4, 5, 6, 7}));
}

// A whole server: admission and eviction through a worker's pushes and
// clocks, and the server's counters.
TEST(RowServer, AWorkersPushesAndClocksAdmitAndEvictRows) {
  testing::TestClusterOptions options;
  options.num_servers = 1;
  options.num_workers = 1;
  testing::TestCluster cluster(options);
  std::unique_ptr<Client> worker = cluster.Connect();
  ASSERT_NE(worker, nullptr);
  RowPolicy rows;
  rows.admit_after_pushes = 2;
  rows.evict_idle_clocks = 2;
  rows.max_rows = 2;
  Result<TableId> table = worker->CreateTable(RowTable(rows));
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<float> g(kWidth, 1.0f);
  auto push = [&](Key key) {
    const std::vector<Key> keys = {key};
    ASSERT_TRUE(worker->Push(*table, keys, g).ok());
  };
  auto pull = [&](Key key) {
    const std::vector<Key> keys = {key};
    std::vector<float> out(kWidth);
    EXPECT_TRUE(worker->Pull(*table, keys, out).ok());
    return out;
  };
  push(1);
  ServerCounters c = cluster.server(0).counters();
  EXPECT_EQ(c.keys_stored, 0u);
  EXPECT_EQ(c.row_pushes_dropped, 1u);
  std::vector<float> init(kWidth);
  InitializeValue(RowTable(rows).init, *table, 1, init);
  EXPECT_EQ(pull(1), init);
  push(1);  // admitted
  EXPECT_EQ(pull(1), Plus(init, 1.0f));
  for (Key key : {2, 3}) {
    push(key);
    push(key);
  }
  c = cluster.server(0).counters();
  EXPECT_EQ(c.keys_stored, 2u);  // 1 went: the budget
  EXPECT_EQ(c.rows_admitted, 3u);
  EXPECT_EQ(c.rows_evicted_budget, 1u);
  // 1 was evicted: its id reads the initializer's value again.
  EXPECT_EQ(pull(1), init);
  worker->Clock();
  worker->Clock();
  pull(1);  // after the clocks on the same connection
  c = cluster.server(0).counters();
  EXPECT_EQ(c.min_clock, 2);
  EXPECT_EQ(c.keys_stored, 0u);
  EXPECT_EQ(c.rows_evicted_idle, 2u);
  EXPECT_TRUE(worker->Finish().ok());
}

// With replicas, a slot's admission counts are on its backup too: a
// server killed and started again at once is taken over with no rollback,
// and an id one push short of the threshold is stored at its next push
// wherever its slot went.
TEST(RowServer, AdmissionCountsSurviveATakeover) {
  testing::TestClusterOptions options;
  options.num_servers = 2;
  options.num_workers = 1;
  options.replicas = 2;
  testing::TestCluster cluster(options);
  std::unique_ptr<Client> worker = cluster.Connect();
  ASSERT_NE(worker, nullptr);
  TableOptions t;
  t.name = "admitted";
  t.rule = UpdateRule::kAdd;
  t.rows.admit_after_pushes = 3;
  Result<TableId> table = worker->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<Key> ids;
  for (Key k = 0; k < 40; ++k) ids.push_back(k * 104729);
  std::sort(ids.begin(), ids.end());
  const std::vector<float> ones(ids.size(), 1.0f);
  for (int p = 0; p < 2; ++p) ASSERT_TRUE(worker->Push(*table, ids, ones).ok());
  const uint64_t held = cluster.server(1).counters().keys_stored;
  ASSERT_EQ(held + cluster.server(0).counters().keys_stored, 0u);
  ServerOptions again = options.server;
  again.coordinator_address = cluster.address();
  again.requested_id = cluster.server(1).id();
  cluster.DestroyServer(1);
  Result<std::unique_ptr<Server>> restarted = Server::Start(again);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  // The third push of every id: each is stored, its third push applied.
  ASSERT_TRUE(worker->Push(*table, ids, ones).ok());
  std::vector<float> out(ids.size());
  ASSERT_TRUE(worker->Pull(*table, ids, out).ok());
  EXPECT_EQ(out, ones);
  Result<ClusterStatus> status = QueryClusterStatus(cluster.address(), 5000);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->generation, 0u);  // no rollback
  EXPECT_GE(status->takeovers, 1u);
  EXPECT_TRUE(worker->Finish().ok());
}

// A job rolled back: the checkpoint held exactly the live rows (rows
// evicted before it are not in it, nor restored), and the restored rows'
// idle clocks start at the checkpoint's clock.
TEST(RowServer, ARollbackRestoresExactlyTheLiveRowsOfTheCheckpoint) {
  char pattern[] = "/tmp/ductile-sparse-rows-job-XXXXXX";
  const std::string dir = mkdtemp(pattern);
  testing::TestClusterOptions options;
  options.num_servers = 2;
  options.num_workers = 1;
  options.coordinator_state_dir = dir + "/coordinator";
  options.server.state_dir = dir + "/servers";
  {
    testing::TestCluster cluster(options);
    ClientOptions o;
    o.coordinator_address = cluster.address();
    o.heartbeat_interval_ms = 50;
    Result<std::unique_ptr<Client>> connected = Client::Connect(o);
    ASSERT_TRUE(connected.ok()) << connected.status();
    Client& worker = **connected;
    TableOptions t;
    t.name = "rows";
    t.rule = UpdateRule::kAdd;
    t.consistency.mode = ConsistencyMode::kSsp;
    t.consistency.staleness = 1;
    t.rows.evict_idle_clocks = 2;
    Result<TableId> table = worker.CreateTable(t);
    ASSERT_TRUE(table.ok()) << table.status();
    std::vector<Key> cold, hot;
    for (Key k = 0; k < 20; ++k) {
      cold.push_back(k);
      hot.push_back(1000 + k);
    }
    auto push = [&](const std::vector<Key>& keys) {
      ASSERT_TRUE(
          worker.Push(*table, keys, std::vector<float>(keys.size(), 1.0f))
              .ok());
    };
    push(cold);
    for (int c = 0; c < 3; ++c) {
      push(hot);
      worker.Clock();  // at server clock 2 the cold rows go
    }
    Result<int64_t> clock = RequestCheckpoint(cluster.address(), 20000);
    ASSERT_TRUE(clock.ok()) << clock.status();
    ASSERT_EQ(*clock, 3);
    size_t entries = 0;
    for (int s = 0; s < 2; ++s) {
      Result<LoadedCheckpoint> loaded =
          LoadCheckpointFrom(options.server.state_dir + "/server-" +
                                 std::to_string(cluster.server(s).id()),
                             3);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      for (const EntryRecord& e : loaded->entries) {
        EXPECT_GE(e.key, 1000u);
        EXPECT_EQ(e.value, std::vector<float>{3.0f});
      }
      entries += loaded->entries.size();
    }
    EXPECT_EQ(entries, hot.size());
    push(cold);  // stored again, after the cut
    worker.Clock();
    ServerOptions again = options.server;
    again.coordinator_address = cluster.address();
    again.requested_id = cluster.server(1).id();
    cluster.DestroyServer(1);
    Result<std::unique_ptr<Server>> restarted = Server::Start(again);
    ASSERT_TRUE(restarted.ok()) << restarted.status();
    Result<Client::Recovery> r = worker.AwaitRecovery(30000);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->clock, 3);
    std::vector<float> out(hot.size());
    ASSERT_TRUE(worker.Pull(*table, hot, out).ok());
    EXPECT_EQ(out, std::vector<float>(hot.size(), 3.0f));
    ASSERT_TRUE(worker.Pull(*table, cold, out).ok());
    EXPECT_EQ(out, std::vector<float>(cold.size(), 0.0f));
    EXPECT_EQ(cluster.server(0).counters().keys_stored +
                  (*restarted)->counters().keys_stored,
              hot.size());
    // Idle since clock 3: gone when the server clock reaches 5.
    worker.Clock();
    ASSERT_TRUE(worker.Pull(*table, hot, out).ok());
    EXPECT_EQ(cluster.server(0).counters().keys_stored +
                  (*restarted)->counters().keys_stored,
              hot.size());
    worker.Clock();
    ASSERT_TRUE(worker.Pull(*table, hot, out).ok());
    EXPECT_EQ(cluster.server(0).counters().keys_stored +
                  (*restarted)->counters().keys_stored,
              0u);
    EXPECT_TRUE(worker.Finish().ok());
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// A server joining a running job: the rows moved to it count as updated
// at the server clock they arrive at, which it has from the workers'
// clocks when it joins, and the rows of both servers are the live ones.
TEST(RowServer, RowsMovedToAJoiningServerAreIdleFromTheClockTheyArriveAt) {
  testing::TestCluster cluster({.num_servers = 1, .num_workers = 1});
  std::unique_ptr<Client> worker = cluster.Connect();
  ASSERT_NE(worker, nullptr);
  TableOptions t;
  t.name = "rows";
  t.rule = UpdateRule::kAdd;
  t.rows.evict_idle_clocks = 3;
  Result<TableId> table = worker->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<Key> keys;
  for (Key k = 0; k < 64; ++k) keys.push_back(k * 0x9e3779b97f4a7c15ULL);
  std::sort(keys.begin(), keys.end());
  const std::vector<float> ones(keys.size(), 1.0f);
  for (int c = 0; c < 10; ++c) {
    ASSERT_TRUE(worker->Push(*table, keys, ones).ok());
    worker->Clock();
  }
  // Updated at server clock 9, the rows move at clock 10.
  const int joined = cluster.AddServer();
  bool moved = false;
  for (int i = 0; i < 3000 && !moved; ++i) {
    Result<ClusterStatus> status = QueryClusterStatus(cluster.address(), 5000);
    if (status.ok() && status->slots_moving == 0) {
      for (const MemberStatus& m : status->members) {
        moved = moved || (m.id == cluster.server(joined).id() && m.slots > 0);
      }
    }
    if (!moved) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(moved);
  // The rows each server holds once it has the worker's clocks so far (a
  // pull after them on the same connections).
  auto stored = [&](int server) {
    std::vector<float> out(keys.size());
    EXPECT_TRUE(worker->Pull(*table, keys, out).ok());
    return cluster.server(server).counters().keys_stored;
  };
  std::vector<float> values(keys.size());
  ASSERT_TRUE(worker->Pull(*table, keys, values).ok());
  EXPECT_EQ(values, std::vector<float>(keys.size(), 10.0f));
  const uint64_t moved_rows = stored(joined);
  EXPECT_GT(moved_rows, 0u);
  EXPECT_LT(moved_rows, keys.size());
  EXPECT_EQ(stored(0) + moved_rows, keys.size());
  worker->Clock();  // 11
  EXPECT_EQ(stored(0) + stored(joined), keys.size());
  worker->Clock();  // 12: three clocks since 9 on the first server
  EXPECT_EQ(stored(0), 0u);
  EXPECT_EQ(stored(joined), moved_rows);
  worker->Clock();  // 13: three clocks since 10 on the joined one
  EXPECT_EQ(stored(joined), 0u);
  EXPECT_EQ(cluster.server(0).counters().rows_evicted_idle +
                cluster.server(joined).counters().rows_evicted_idle,
            keys.size());
  EXPECT_TRUE(worker->Finish().ok());
}

}  // namespace
}  // namespace ductile
