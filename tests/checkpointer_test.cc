// A server's checkpointer on a real store: which versions it keeps when
// rounds fail; writes beside the request thread (a store whose writes wait
// at a gate the test opens, or fail when it says), and in line where the
// Env has no background thread.
#include "server/checkpointer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "proto/table_config.h"
#include "util/mutex.h"

namespace ductile {
namespace {

namespace fs = std::filesystem;

class RecordingLink final : public CoordinatorLink {
 public:
  void Send(const wire::Header& header) override { sent.push_back(header); }
  void Heartbeat(int64_t busy_ms) override { heartbeats.push_back(busy_ms); }
  std::vector<wire::Header> sent;
  std::vector<int64_t> heartbeats;  // busy_ms of each
};

class CheckpointerTest : public ::testing::Test {
 protected:
  CheckpointerTest() {
    char pattern[] = "/tmp/ductile-checkpointer-test-XXXXXX";
    dir_ = mkdtemp(pattern);
  }
  ~CheckpointerTest() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // One round as the coordinator runs it: prepare, commit at `clock`
  // (`last_complete`: the newest checkpoint in its catalog), write.
  void WriteRound(int64_t clock, int64_t last_complete) {
    wire::Header prepare;
    prepare.set_change_id(static_cast<uint64_t>(clock));
    prepare.set_timeout_ms(3000);
    checkpointer_.Prepare(prepare, /*generation=*/0);
    wire::Header commit;
    commit.set_change_id(static_cast<uint64_t>(clock));
    commit.set_clock(clock);
    commit.set_data_clock(last_complete);
    checkpointer_.Commit(commit, /*generation=*/0);
    ASSERT_EQ(checkpointer_.TakeDue(clock, /*workers_live=*/true), clock);
    checkpointer_.Write(clock, tables_, 0, 0);
    ASSERT_TRUE(checkpointer_.FinishWrite(tables_).ok());
  }

  std::vector<int64_t> Versions() {
    Result<std::vector<int64_t>> v = checkpointer_.store()->ListCheckpoints();
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : std::vector<int64_t>();
  }

  std::string dir_;
  RecordingLink link_;
  LiveCounters counters_;
  Checkpointer checkpointer_{SystemEnv(), &link_, &counters_};
  std::map<std::string, CustomRule> rules_;
  TableSet tables_{&rules_, 1};
};

TEST_F(CheckpointerTest, AVersionWhoseRoundFailsPushesNoCompleteOneOut) {
  ASSERT_TRUE(checkpointer_.Open(dir_, 1, /*keep_checkpoints=*/2).ok());
  WriteRound(2, -1);
  WriteRound(4, 2);
  // Written here, but the round fails on another server: the coordinator's
  // catalog still holds 2 and 4, and both must stay restorable.
  WriteRound(6, 4);
  EXPECT_EQ(Versions(), (std::vector<int64_t>{2, 4, 6}));
  // The next round drops what the failed one left.
  WriteRound(8, 4);
  EXPECT_EQ(Versions(), (std::vector<int64_t>{2, 4, 8}));
  // Once 8 is complete, the two newest complete ones are 4 and 8.
  WriteRound(10, 8);
  EXPECT_EQ(Versions(), (std::vector<int64_t>{4, 8, 10}));
}

// A server declared dead while alive rejoins the job with no keys: its
// store keeps the versions the coordinator's catalog names (others may read
// them in a rollback) and nothing else, and its next version holds only
// what it holds from then on, none of its keys from before.
TEST_F(CheckpointerTest, AfterStartingOverTheNextVersionHoldsOnlyNewKeys) {
  ASSERT_TRUE(checkpointer_.Open(dir_, 1, /*keep_checkpoints=*/4).ok());
  TableOptions options;
  options.name = "t";
  options.value_width = 2;
  ASSERT_TRUE(tables_.Create(ToWire(options, 3)).ok());
  ParameterTable* table = tables_.Find(3);
  ASSERT_NE(table, nullptr);
  const std::vector<float> one = {1.0f, 1.0f};
  for (Key k : {1, 2}) ASSERT_TRUE(table->ApplyOne(k, one, 0).ok());
  WriteRound(2, -1);
  ASSERT_TRUE(table->ApplyOne(3, one, 0).ok());
  WriteRound(4, 2);
  ASSERT_TRUE(table->ApplyOne(4, one, 0).ok());
  WriteRound(6, 4);  // a round the job abandoned with this server

  tables_.ClearKeys();
  ASSERT_TRUE(checkpointer_.StartOver({2, 4}, /*newest=*/4).ok());
  EXPECT_EQ(Versions(), (std::vector<int64_t>{2, 4}));
  ASSERT_TRUE(table->ApplyOne(9, one, 0).ok());  // moved here since
  WriteRound(8, 4);
  Result<LoadedCheckpoint> now = checkpointer_.store()->Load(8);
  ASSERT_TRUE(now.ok()) << now.status();
  ASSERT_EQ(now->entries.size(), 1u);
  EXPECT_EQ(now->entries[0].key, 9u);
  Result<LoadedCheckpoint> kept = checkpointer_.store()->Load(4);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->entries.size(), 3u);  // keys 1, 2, 3
}

// ---- Writes beside the request thread.

// What the test does to the store's writes: hold them at a gate, or fail
// the next ones.
class StoreControl {
 public:
  void CloseGate() {
    MutexLock lock(&mu_);
    gate_closed_ = true;
  }
  void OpenGate() {
    MutexLock lock(&mu_);
    gate_closed_ = false;
    cv_.SignalAll();
  }
  void FailNextWrites(int n) {
    MutexLock lock(&mu_);
    fail_next_ = n;
  }
  // Blocks until `n` writes have begun.
  void WaitForWrites(int n) {
    MutexLock lock(&mu_);
    while (writes_ < n) cv_.Wait(&mu_);
  }
  // The store's side: a write begins; OK, or the error it is to fail with.
  Status Enter() {
    MutexLock lock(&mu_);
    ++writes_;
    cv_.SignalAll();
    while (gate_closed_) cv_.Wait(&mu_);
    if (fail_next_ > 0) {
      --fail_next_;
      return FailedPreconditionError("injected write failure");
    }
    return Status::Ok();
  }

 private:
  Mutex mu_;
  CondVar cv_;
  bool gate_closed_ GUARDED_BY(mu_) = false;
  int fail_next_ GUARDED_BY(mu_) = 0;
  int writes_ GUARDED_BY(mu_) = 0;
};

// A real store whose WriteCheckpoint passes StoreControl first.
class ControlledStore final : public CheckpointStore {
 public:
  ControlledStore(std::unique_ptr<CheckpointStore> store, StoreControl* control)
      : store_(std::move(store)), control_(control) {}
  Status WriteCheckpoint(int64_t clock, uint64_t epoch,
                         const std::vector<TableRecord>& tables,
                         const std::vector<EntryRecord>& changed_entries,
                         const std::vector<std::pair<TableId, Key>>& deleted,
                         const std::vector<FilterRecord>& filters,
                         const std::string& blob) override {
    DUCTILE_RETURN_IF_ERROR(control_->Enter());
    return store_->WriteCheckpoint(clock, epoch, tables, changed_entries,
                                   deleted, filters, blob);
  }
  Result<std::vector<int64_t>> ListCheckpoints() const override {
    return store_->ListCheckpoints();
  }
  Result<LoadedCheckpoint> LoadLatest() const override {
    return store_->LoadLatest();
  }
  Result<LoadedCheckpoint> Load(int64_t clock) const override {
    return store_->Load(clock);
  }
  Status RollBackTo(int64_t clock) override {
    return store_->RollBackTo(clock);
  }
  Status DiscardAll() override { return store_->DiscardAll(); }
  Status StartOver(const std::vector<int64_t>& keep) override {
    return store_->StartOver(keep);
  }
  Status DropCheckpoint(int64_t clock) override {
    return store_->DropCheckpoint(clock);
  }

 private:
  const std::unique_ptr<CheckpointStore> store_;
  StoreControl* const control_;
};

// The real clock and stores (through ControlledStore), and a real
// background thread unless `background` is false.
class ControlledEnv final : public Env {
 public:
  ControlledEnv(StoreControl* control, bool background)
      : control_(control), background_(background) {}
  // How far Now() runs ahead of the system's clock.
  std::atomic<int64_t> ahead_ms{0};
  TimePoint Now() override {
    return SystemEnv()->Now() + std::chrono::milliseconds(ahead_ms.load());
  }
  int64_t UnixMs() override { return SystemEnv()->UnixMs(); }
  uint64_t RandomU64() override { return 7; }
  int32_t ProcessId() override { return 1; }
  std::unique_ptr<Transport> NewTransport(const std::string&, const Security&,
                                          int) override {
    return nullptr;
  }
  Result<std::unique_ptr<CheckpointStore>> OpenCheckpointStore(
      const CheckpointStoreOptions& options) override {
    Result<std::unique_ptr<CheckpointStore>> store =
        CheckpointStore::Open(options);
    if (!store.ok()) return store.status();
    return std::unique_ptr<CheckpointStore>(
        new ControlledStore(std::move(*store), control_));
  }
  Result<LoadedCheckpoint> LoadCheckpointFrom(const std::string& dir,
                                              int64_t clock) override {
    return SystemEnv()->LoadCheckpointFrom(dir, clock);
  }
  Result<std::unique_ptr<CoordinatorStore>> OpenCoordinatorStore(
      const CoordinatorStoreOptions&) override {
    return FailedPreconditionError("no coordinator store here");
  }
  std::unique_ptr<BackgroundThread> NewBackgroundThread(
      const std::string& name, BackgroundThread::Priority priority) override {
    return background_ ? SystemEnv()->NewBackgroundThread(name, priority)
                       : nullptr;
  }

 private:
  StoreControl* const control_;
  const bool background_;
};

class BackgroundWrites : public ::testing::Test {
 protected:
  static constexpr TableId kTable = 3;

  BackgroundWrites() {
    char pattern[] = "/tmp/ductile-checkpointer-test-XXXXXX";
    dir_ = mkdtemp(pattern);
  }
  ~BackgroundWrites() override {
    checkpointer_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Opens the checkpointer (a background thread unless `background` is
  // false) and a table of width 2 (rows beyond `max_rows` evicted).
  ParameterTable& Open(bool background = true, uint64_t max_rows = 0) {
    env_ = std::make_unique<ControlledEnv>(&control_, background);
    checkpointer_ =
        std::make_unique<Checkpointer>(env_.get(), &link_, &counters_);
    EXPECT_TRUE(checkpointer_->Open(dir_, 1, /*keep_checkpoints=*/10).ok());
    tables_.set_keeps_evicted(true);
    TableOptions options;
    options.name = "t";
    options.value_width = 2;
    options.rows.max_rows = max_rows;
    EXPECT_TRUE(tables_.Create(ToWire(options, kTable)).ok());
    return *tables_.Find(kTable);
  }

  // A round up to its write's start: prepare, commit at `clock`, the cut
  // due and handed to the writer.
  void StartRound(int64_t clock) {
    Commit(clock, checkpointer_->last_checkpoint());
    ASSERT_EQ(checkpointer_->TakeDue(clock, /*workers_live=*/true), clock);
    checkpointer_->Write(clock, tables_, 0, 0);
  }
  // `last_complete`: the newest checkpoint in the coordinator's catalog.
  void Commit(int64_t clock, int64_t last_complete) {
    wire::Header prepare;
    prepare.set_change_id(static_cast<uint64_t>(clock));
    prepare.set_timeout_ms(60000);
    checkpointer_->Prepare(prepare, /*generation=*/0);
    wire::Header commit = prepare;
    commit.set_clock(clock);
    commit.set_data_clock(last_complete);
    checkpointer_->Commit(commit, /*generation=*/0);
  }

  // The CHECKPOINT_DONE reports sent: clock -> status code.
  std::vector<std::pair<int64_t, int>> Reports() const {
    std::vector<std::pair<int64_t, int>> out;
    for (const wire::Header& h : link_.sent) {
      if (h.type() == wire::CHECKPOINT_DONE) {
        out.emplace_back(h.clock(), h.status_code());
      }
    }
    return out;
  }

  // Key -> value in the version at `clock`.
  std::map<Key, std::vector<float>> At(int64_t clock) {
    std::map<Key, std::vector<float>> out;
    Result<LoadedCheckpoint> c = checkpointer_->store()->Load(clock);
    EXPECT_TRUE(c.ok()) << c.status();
    if (c.ok()) {
      for (const EntryRecord& e : c->entries) out[e.key] = e.value;
    }
    return out;
  }

  std::vector<float> Value(ParameterTable& table, Key key) {
    std::vector<float> v;
    EXPECT_TRUE(table.Get(key, &v));
    return v;
  }

  std::string dir_;
  StoreControl control_;
  RecordingLink link_;
  LiveCounters counters_;
  std::map<std::string, CustomRule> rules_;
  TableSet tables_{&rules_, 1};
  std::unique_ptr<ControlledEnv> env_;
  std::unique_ptr<Checkpointer> checkpointer_;
};

const std::vector<float> kOne = {1.0f, 1.0f};

TEST_F(BackgroundWrites, TheRequestThreadGoesOnWhileTheStoreWrites) {
  ParameterTable& table = Open();
  for (Key k : {1, 2}) ASSERT_TRUE(table.ApplyOne(k, kOne, 0).ok());
  control_.CloseGate();
  StartRound(2);  // returns with the store's write held at the gate
  control_.WaitForWrites(1);
  EXPECT_TRUE(checkpointer_->writing());
  EXPECT_FALSE(checkpointer_->Poll(tables_));
  EXPECT_TRUE(Reports().empty()) << "reported before it is written";
  EXPECT_EQ(counters_.Snapshot().checkpoints_written, 0u);
  control_.OpenGate();
  ASSERT_TRUE(checkpointer_->FinishWrite(tables_).ok());
  EXPECT_FALSE(checkpointer_->writing());
  EXPECT_EQ(Reports(), (std::vector<std::pair<int64_t, int>>{{2, 0}}));
  EXPECT_EQ(counters_.Snapshot().checkpoints_written, 1u);
  EXPECT_EQ(counters_.Snapshot().checkpoint_clock, 2);
  EXPECT_EQ(At(2).size(), 2u);
}

TEST_F(BackgroundWrites, ARowChangedWhileItsWriteIsInFlightGoesToTheNextCut) {
  ParameterTable& table = Open();
  for (Key k : {1, 2}) ASSERT_TRUE(table.ApplyOne(k, kOne, 0).ok());
  const std::vector<float> at_cut = Value(table, 1);
  control_.CloseGate();
  StartRound(2);
  control_.WaitForWrites(1);
  ASSERT_TRUE(table.ApplyOne(1, kOne, 2).ok());
  const std::vector<float> after = Value(table, 1);
  ASSERT_NE(after, at_cut);
  control_.OpenGate();
  ASSERT_TRUE(checkpointer_->FinishWrite(tables_).ok());
  EXPECT_EQ(At(2)[1], at_cut) << "the cut holds the state at its clock";
  EXPECT_EQ(table.changed(), 1u);
  StartRound(4);
  ASSERT_TRUE(checkpointer_->FinishWrite(tables_).ok());
  EXPECT_EQ(At(4)[1], after);
  EXPECT_EQ(At(4).size(), 2u);
}

// The coordinator runs one round at a time, so a commit arrives during a
// write only when it gave up on that write's round (too slow): the cut
// waits for the store, and the version of the round given up is dropped.
TEST_F(BackgroundWrites, ACutDueWhileAWriteIsInFlightWaitsForIt) {
  ParameterTable& table = Open();
  ASSERT_TRUE(table.ApplyOne(1, kOne, 0).ok());
  control_.CloseGate();
  StartRound(2);
  control_.WaitForWrites(1);
  ASSERT_TRUE(table.ApplyOne(2, kOne, 2).ok());
  Commit(4, /*last_complete=*/-1);
  // The server clock reached 4, but the store is the first write's.
  EXPECT_EQ(checkpointer_->TakeDue(4, /*workers_live=*/true), std::nullopt);
  EXPECT_TRUE(checkpointer_->Holds(4)) << "pushes beyond the cut wait";
  // Its deadline stands meanwhile (60 s ahead).
  EXPECT_TRUE(checkpointer_->NextDeadline().has_value());
  control_.OpenGate();
  ASSERT_TRUE(checkpointer_->FinishWrite(tables_).ok());
  ASSERT_EQ(checkpointer_->TakeDue(4, /*workers_live=*/true), 4);
  checkpointer_->Write(4, tables_, 0, 0);
  ASSERT_TRUE(checkpointer_->FinishWrite(tables_).ok());
  EXPECT_EQ(Reports(), (std::vector<std::pair<int64_t, int>>{{2, 0}, {4, 0}}));
  Result<std::vector<int64_t>> versions =
      checkpointer_->store()->ListCheckpoints();
  ASSERT_TRUE(versions.ok());
  EXPECT_EQ(*versions, std::vector<int64_t>{4});
  EXPECT_EQ(At(4).size(), 2u);
}

// A store that hangs fails the rounds behind it: the cut waiting for the
// write in flight expires on its deadline, saying why, and its pushes go
// through. A commit at the clock of the write in flight is refused.
TEST_F(BackgroundWrites, ACutWaitingForAHungWriteExpiresOnItsDeadline) {
  ParameterTable& table = Open();
  ASSERT_TRUE(table.ApplyOne(1, kOne, 0).ok());
  control_.CloseGate();
  StartRound(2);
  control_.WaitForWrites(1);
  Commit(2, /*last_complete=*/-1);  // the round at 2 again: refused
  ASSERT_EQ(Reports().size(), 1u);
  EXPECT_EQ(Reports()[0], (std::pair<int64_t, int>{
                              2, static_cast<int>(StatusCode::kAborted)}));
  Commit(4, /*last_complete=*/-1);
  EXPECT_TRUE(checkpointer_->Holds(4));
  env_->ahead_ms.store(61000);  // past the commit's 60 s
  EXPECT_TRUE(checkpointer_->Expire([](int64_t) { return std::string("none"); },
                                    /*generation=*/0));
  EXPECT_FALSE(checkpointer_->Holds(4)) << "its pushes go through";
  ASSERT_EQ(Reports().size(), 2u);
  EXPECT_EQ(Reports()[1],
            (std::pair<int64_t, int>{
                4, static_cast<int>(StatusCode::kDeadlineExceeded)}));
  const wire::Header& last = link_.sent.back();
  EXPECT_NE(last.status_message().find(
                "the checkpoint write at clock 2 was still in flight"),
            std::string::npos)
      << last.status_message();
  control_.OpenGate();
  ASSERT_TRUE(checkpointer_->FinishWrite(tables_).ok());
}

TEST_F(BackgroundWrites, AFailedWriteCountsItsRowsChangedAgain) {
  ParameterTable& table = Open();
  for (Key k : {1, 2}) ASSERT_TRUE(table.ApplyOne(k, kOne, 0).ok());
  control_.CloseGate();
  control_.FailNextWrites(1);
  StartRound(2);
  control_.WaitForWrites(1);
  ASSERT_TRUE(table.ApplyOne(1, kOne, 2).ok());  // changed again meanwhile
  control_.OpenGate();
  EXPECT_FALSE(checkpointer_->FinishWrite(tables_).ok());
  ASSERT_EQ(Reports().size(), 1u);
  EXPECT_NE(Reports()[0].second, 0) << "the failure is reported";
  EXPECT_EQ(counters_.Snapshot().checkpoints_written, 0u);
  EXPECT_EQ(checkpointer_->last_checkpoint(), -1);
  EXPECT_EQ(table.changed(), 2u) << "each row once";
  StartRound(4);
  ASSERT_TRUE(checkpointer_->FinishWrite(tables_).ok());
  std::map<Key, std::vector<float>> at4 = At(4);
  EXPECT_EQ(at4.size(), 2u);
  EXPECT_EQ(at4[1], Value(table, 1));
  EXPECT_EQ(at4[2], Value(table, 2));
}

// A row evicted, its delete in a write that fails, and stored again while
// that write was in flight: the store still holds its old row, so its next
// eviction deletes it there.
TEST_F(BackgroundWrites, AFailedDeleteIsMadeAtTheRowsNextEviction) {
  ParameterTable& table = Open(/*background=*/true, /*max_rows=*/1);
  ASSERT_TRUE(table.ApplyOne(1, kOne, 0).ok());
  StartRound(2);
  ASSERT_TRUE(checkpointer_->FinishWrite(tables_).ok());
  ASSERT_TRUE(table.ApplyOne(2, kOne, 2).ok());  // 1 goes
  control_.CloseGate();
  control_.FailNextWrites(1);
  StartRound(4);  // writes 2, deletes 1: fails
  control_.WaitForWrites(1);
  ASSERT_TRUE(table.ApplyOne(1, kOne, 4).ok());  // 1 is back, 2 goes
  control_.OpenGate();
  EXPECT_FALSE(checkpointer_->FinishWrite(tables_).ok());
  ASSERT_TRUE(table.ApplyOne(3, kOne, 5).ok());  // 1 goes again
  StartRound(6);
  ASSERT_TRUE(checkpointer_->FinishWrite(tables_).ok());
  std::map<Key, std::vector<float>> at6 = At(6);
  ASSERT_EQ(at6.size(), 1u) << "the store keeps an evicted row";
  EXPECT_EQ(at6.begin()->first, 3u);
}

TEST_F(BackgroundWrites, FinishWriteWaitsForTheWriteInFlight) {
  ParameterTable& table = Open();
  ASSERT_TRUE(table.ApplyOne(1, kOne, 0).ok());
  control_.CloseGate();
  StartRound(2);
  std::thread opener([this] {
    control_.WaitForWrites(1);
    control_.OpenGate();
  });
  // As a rollback does before it touches the store.
  ASSERT_EQ(link_.heartbeats.size(), 2u);  // the copy's busy spell, and 0
  const Status s = checkpointer_->FinishWrite(tables_);
  opener.join();
  ASSERT_TRUE(s.ok()) << s;
  // The wait is announced as a busy spell too (no heartbeat goes out
  // meanwhile), and ended.
  ASSERT_EQ(link_.heartbeats.size(), 4u);
  EXPECT_GT(link_.heartbeats[2], 0);
  EXPECT_EQ(link_.heartbeats[3], 0);
  EXPECT_EQ(Reports(), (std::vector<std::pair<int64_t, int>>{{2, 0}}));
  Result<std::vector<int64_t>> versions =
      checkpointer_->store()->ListCheckpoints();
  ASSERT_TRUE(versions.ok());
  EXPECT_EQ(*versions, std::vector<int64_t>{2});
}

TEST_F(BackgroundWrites, AServerShutDownDuringAWriteFinishesIt) {
  ParameterTable& table = Open();
  for (Key k : {1, 2}) ASSERT_TRUE(table.ApplyOne(k, kOne, 0).ok());
  control_.CloseGate();
  StartRound(2);
  control_.WaitForWrites(1);
  std::atomic<bool> destroyed{false};
  std::thread shutdown([&] {
    checkpointer_.reset();
    destroyed.store(true);
  });
  // The destructor waits for the write held at the gate.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(destroyed.load()) << "destroyed with its write in flight";
  control_.OpenGate();
  shutdown.join();
  // The version is complete on disk (a store opened afresh reads it).
  CheckpointStoreOptions o;
  o.dir = dir_ + "/server-1";
  Result<std::unique_ptr<CheckpointStore>> store = CheckpointStore::Open(o);
  ASSERT_TRUE(store.ok()) << store.status();
  Result<LoadedCheckpoint> loaded = (*store)->LoadLatest();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->clock, 2);
  EXPECT_EQ(loaded->entries.size(), 2u);
}

// The simulation's Env has no background thread: each write is done, and
// reported, before Write returns, at the same point of every run.
TEST_F(BackgroundWrites, WithoutABackgroundThreadTheWriteIsDoneInLine) {
  ParameterTable& table = Open(/*background=*/false);
  ASSERT_TRUE(table.ApplyOne(1, kOne, 0).ok());
  StartRound(2);
  EXPECT_FALSE(checkpointer_->writing());
  EXPECT_EQ(Reports(), (std::vector<std::pair<int64_t, int>>{{2, 0}}));
  EXPECT_EQ(counters_.Snapshot().checkpoints_written, 1u);
  EXPECT_EQ(At(2).size(), 1u);
}

}  // namespace
}  // namespace ductile
