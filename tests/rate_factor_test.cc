// Client::SetRateFactor: a worker's learning-rate schedule reaches every
// update rule on the servers, per push, and under BSP as the clock's mean.
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "ductile/client.h"
#include "gtest/gtest.h"
#include "tests/test_cluster.h"

namespace ductile {
namespace {

using testing::TestCluster;
using testing::TestClusterOptions;

TestClusterOptions Sized(int servers, int workers) {
  TestClusterOptions options;
  options.num_servers = servers;
  options.num_workers = workers;
  return options;
}

TableOptions Table(const std::string& name, UpdateRule rule, float rate,
                   ConsistencyMode mode) {
  TableOptions table;
  table.name = name;
  table.rule = rule;
  table.learning_rate = rate;
  table.consistency.mode = mode;
  return table;
}

std::vector<float> PullOne(Client& c, TableId id) {
  std::vector<float> out(1);
  EXPECT_TRUE(c.Pull(id, std::vector<Key>{1}, out).ok());
  return out;
}

Status PushOne(Client& c, TableId id, float g) {
  return c.Push(id, std::vector<Key>{1}, std::vector<float>{g});
}

// Adam's step is lr * m_hat / (sqrt(v_hat) + eps): a constant gradient
// moves the value by about lr a step whatever its size, so a push with a
// factor of 0.5 moves it by lr / 2, one with 2 by 2 lr. Scaling the
// gradient instead would not change Adam's step at all.
TEST(RateFactor, ScalesAdamsStepPerPush) {
  TestCluster cluster(Sized(1, 1));
  std::unique_ptr<Client> w = cluster.Connect();
  ASSERT_NE(w, nullptr);
  Result<TableId> id = w->CreateTable(
      Table("adam", UpdateRule::kAdam, 0.1f, ConsistencyMode::kAsync));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(w->SetRateFactor(*id, 0.5f).ok());
  ASSERT_TRUE(PushOne(*w, *id, 4.0f).ok());
  EXPECT_NEAR(PullOne(*w, *id)[0], -0.05f, 1e-5);
  ASSERT_TRUE(w->SetRateFactor(*id, 2.0f).ok());
  ASSERT_TRUE(PushOne(*w, *id, 4.0f).ok());
  EXPECT_NEAR(PullOne(*w, *id)[0], -0.25f, 1e-5);
  ASSERT_TRUE(w->SetRateFactor(*id, 1.0f).ok());  // back to the table's
  ASSERT_TRUE(PushOne(*w, *id, 4.0f).ok());
  EXPECT_NEAR(PullOne(*w, *id)[0], -0.35f, 1e-5);
  EXPECT_TRUE(w->Finish().ok());
}

// Under BSP (mean) a clock's pushes are averaged and the rule steps once:
// its factor is the mean of theirs. 0.5 and 1.5 give 1: the mean of 2
// and 4 with SGD at rate 1 moves the value by 3 (factors applied per push
// would give 0.5 x 2 / 2 + 1.5 x 4 / 2 = 3.5).
TEST(RateFactor, ABspClockStepsWithItsPushesMeanFactor) {
  TestCluster cluster(Sized(1, 2));
  std::unique_ptr<Client> a = cluster.Connect();
  std::unique_ptr<Client> b = cluster.Connect();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const TableOptions table =
      Table("t", UpdateRule::kSgd, 1.0f, ConsistencyMode::kBsp);
  Result<TableId> id = a->CreateTable(table);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(b->CreateTable(table).ok());
  ASSERT_TRUE(a->SetRateFactor(*id, 0.5f).ok());
  ASSERT_TRUE(b->SetRateFactor(*id, 1.5f).ok());
  ASSERT_TRUE(PushOne(*a, *id, 2.0f).ok());
  ASSERT_TRUE(PushOne(*b, *id, 4.0f).ok());
  a->Clock();
  b->Clock();
  EXPECT_FLOAT_EQ(PullOne(*a, *id)[0], -3.0f);
  EXPECT_TRUE(a->Finish().ok());
  EXPECT_TRUE(b->Finish().ok());
}

// A factor only changes the table it was set for.
TEST(RateFactor, OnlyItsTableIsScaled) {
  TestCluster cluster(Sized(2, 1));
  std::unique_ptr<Client> w = cluster.Connect();
  ASSERT_NE(w, nullptr);
  Result<TableId> scaled = w->CreateTable(
      Table("scaled", UpdateRule::kSgd, 1.0f, ConsistencyMode::kAsync));
  Result<TableId> plain = w->CreateTable(
      Table("plain", UpdateRule::kSgd, 1.0f, ConsistencyMode::kAsync));
  ASSERT_TRUE(scaled.ok() && plain.ok());
  ASSERT_TRUE(w->SetRateFactor(*scaled, 0.25f).ok());
  for (TableId id : {*scaled, *plain}) ASSERT_TRUE(PushOne(*w, id, 1.0f).ok());
  EXPECT_FLOAT_EQ(PullOne(*w, *scaled)[0], -0.25f);
  EXPECT_FLOAT_EQ(PullOne(*w, *plain)[0], -1.0f);
  EXPECT_TRUE(w->Finish().ok());
}

TEST(RateFactor, AFactorOutsideItsRangeIsRefused) {
  TestCluster cluster(Sized(1, 1));
  std::unique_ptr<Client> w = cluster.Connect();
  ASSERT_NE(w, nullptr);
  Result<TableId> id = w->CreateTable(
      Table("t", UpdateRule::kSgd, 1.0f, ConsistencyMode::kAsync));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(w->SetRateFactor(*id, 3.0f).ok());
  for (float bad : {0.0f, -1.0f, 2e6f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(w->SetRateFactor(*id, bad).code(), StatusCode::kInvalidArgument)
        << bad;
  }
  // The last factor accepted still holds.
  ASSERT_TRUE(PushOne(*w, *id, 1.0f).ok());
  EXPECT_FLOAT_EQ(PullOne(*w, *id)[0], -3.0f);
  EXPECT_TRUE(w->Finish().ok());
}

}  // namespace
}  // namespace ductile
