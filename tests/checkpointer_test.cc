// A server's checkpointer on a real store: which versions it keeps when
// rounds fail.
#include "server/checkpointer.h"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/table_config.h"

namespace ductile {
namespace {

namespace fs = std::filesystem;

class RecordingLink final : public CoordinatorLink {
 public:
  void Send(const wire::Header& header) override { sent.push_back(header); }
  void Heartbeat(int64_t) override {}
  std::vector<wire::Header> sent;
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
    ASSERT_TRUE(checkpointer_.Write(clock, tables_, 0, 0).ok());
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

}  // namespace
}  // namespace ductile
