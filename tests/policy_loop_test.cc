// The policy thread's schedule (coordinator/policy_loop.h) on a simulated
// clock: a reading once an interval has passed by the Env's time, the
// policies' hooks run on it at that time, no burst after a slow reading,
// a failed reading skipped and a cancelled one ending the loop.
#include "coordinator/policy_loop.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sim/mem_stores.h"
#include "sim/sim_env.h"
#include "sim/sim_network.h"

namespace ductile {
namespace {

using sim::MemDisk;
using sim::NetworkFaults;
using sim::SimEnv;
using sim::SimNetwork;
using std::chrono::milliseconds;

// Records the time of each reading it is shown.
class RecordingPolicy final : public Policy {
 public:
  std::string name() const override { return "recording"; }
  void OnStatus(const PolicyEvent& event, PolicyActions&) override {
    readings.push_back(event.now_ms);
  }
  std::vector<int64_t> readings;
};

class NoActions final : public PolicyActions {
 public:
  Status Resize(int32_t, int32_t) override { return Status::Ok(); }
  Status ReplaceWorker(int32_t) override { return Status::Ok(); }
  Status SetConsistency(const std::string&, const Consistency&) override {
    return Status::Ok();
  }
  Status SetBatchesPerStep(int32_t) override { return Status::Ok(); }
};

class PolicyLoopTest : public ::testing::Test {
 protected:
  PolicyLoopTest()
      : network_(1, NetworkFaults()),
        env_(&network_, &disk_, "coordinator"),
        policy_(std::make_shared<RecordingPolicy>()),
        loop_(&env_, {policy_}, milliseconds(1000), &actions_) {}

  void Advance(milliseconds by) { network_.AdvanceTo(network_.now() + by); }
  int64_t NowMs() {
    return std::chrono::duration_cast<milliseconds>(
               network_.now().time_since_epoch())
        .count();
  }
  // A reading that takes `takes` of the Env's time.
  PolicyLoop::StatusQuery Query(milliseconds takes = milliseconds(0)) {
    return [this, takes]() -> Result<ClusterStatus> {
      ++queries_;
      Advance(takes);
      return ClusterStatus();
    };
  }

  SimNetwork network_;
  MemDisk disk_;
  SimEnv env_;
  std::shared_ptr<RecordingPolicy> policy_;
  NoActions actions_;
  PolicyLoop loop_;
  int queries_ = 0;
};

TEST_F(PolicyLoopTest, AReadingIsDueOnceAnIntervalHasPassedOnTheEnvsClock) {
  const auto start = network_.now();
  EXPECT_FALSE(loop_.Due());
  EXPECT_EQ(loop_.TimeToNextTick(), milliseconds(1000));
  Advance(milliseconds(999));
  EXPECT_FALSE(loop_.Due());
  EXPECT_EQ(loop_.TimeToNextTick(), milliseconds(1));
  Advance(milliseconds(1));
  ASSERT_TRUE(loop_.Due());
  EXPECT_EQ(loop_.TimeToNextTick(), milliseconds(0));
  ASSERT_TRUE(loop_.Tick(Query()));
  EXPECT_EQ(queries_, 1);
  // The hooks ran on that reading, at the Env's time.
  EXPECT_EQ(policy_->readings, std::vector<int64_t>{NowMs()});
  EXPECT_FALSE(loop_.Due());
  EXPECT_EQ(loop_.next_tick(), start + milliseconds(2000));
}

TEST_F(PolicyLoopTest, AReadingLongerThanTheIntervalCausesNoBurst) {
  Advance(milliseconds(1000));
  ASSERT_TRUE(loop_.Tick(Query(milliseconds(2500))));
  // Due at once (it is late), but once: the missed intervals are not
  // made up.
  EXPECT_EQ(loop_.next_tick(), network_.now());
  ASSERT_TRUE(loop_.Due());
  ASSERT_TRUE(loop_.Tick(Query()));
  EXPECT_FALSE(loop_.Due());
  EXPECT_EQ(loop_.TimeToNextTick(), milliseconds(1000));
  EXPECT_EQ(policy_->readings.size(), 2u);
}

TEST_F(PolicyLoopTest, AFailedReadingIsSkippedAndACancelledOneEndsTheLoop) {
  Advance(milliseconds(1000));
  ASSERT_TRUE(loop_.Tick([]() -> Result<ClusterStatus> {
    return UnavailableError("the loop is busy");
  }));
  EXPECT_TRUE(policy_->readings.empty());
  EXPECT_EQ(loop_.TimeToNextTick(), milliseconds(1000));
  Advance(milliseconds(1000));
  EXPECT_FALSE(loop_.Tick([]() -> Result<ClusterStatus> {
    return CancelledError("coordinator stopped");
  }));
  EXPECT_TRUE(policy_->readings.empty());
}

}  // namespace
}  // namespace ductile
