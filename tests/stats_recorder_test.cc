// A worker's step time and its split (ClientStats): what StatsRecorder
// makes of the steps, waits and samples it is told of.
#include "client/stats_recorder.h"

#include <chrono>
#include <cmath>
#include <memory>
#include <thread>

#include "client/operation.h"
#include "gtest/gtest.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// An operation keeps the statistics its waits go to alive: a thread still
// waiting on it when its client (their owner) is destroyed records there.
TEST(StatsRecorder, AnOperationKeepsItsWaitStatisticsAlive) {
  auto stats = std::make_shared<StatsRecorder>();
  const std::weak_ptr<StatsRecorder> alive = stats;
  internal::Operation op;
  op.Hold();
  op.SetWaitStats(stats, /*pull=*/true);
  stats.reset();  // the client let them go
  EXPECT_FALSE(alive.expired());
  std::thread waiter([&] { EXPECT_TRUE(op.Wait().ok()); });
  op.Release();
  waiter.join();
  EXPECT_FALSE(alive.expired());
}

TEST(StatsRecorder, AStepIsSplitIntoWaitsForPushesAndPullsAndTheRest) {
  StatsRecorder r;
  const Clock::time_point t0{};
  r.RecordWait(/*pull=*/true, 5000);  // before the first step: not counted
  r.RecordSamples(7);
  r.RecordStep(t0);
  EXPECT_EQ(r.Snapshot().steps, 0u);
  r.RecordWait(/*pull=*/true, 3000);
  r.RecordWait(/*pull=*/false, 1000);
  r.RecordSamples(64);
  r.RecordStep(t0 + milliseconds(10));
  ClientStats s = r.Snapshot();
  EXPECT_EQ(s.steps, 1u);
  EXPECT_EQ(s.step_us, 10000u);
  EXPECT_EQ(s.pull_wait_us, 3000u);
  EXPECT_EQ(s.push_wait_us, 1000u);
  EXPECT_EQ(s.samples, 64u);
  EXPECT_DOUBLE_EQ(s.recent_step_us, 10000);
  EXPECT_DOUBLE_EQ(s.recent_samples_per_s, 6400);

  // A second step twice as long, with no waits: the recent values move a
  // tenth of the way; the rate weighs the first step's samples and time by
  // e^-(20 ms / 1 s) against the second's.
  r.RecordSamples(64);
  r.RecordStep(t0 + milliseconds(30));
  s = r.Snapshot();
  EXPECT_EQ(s.steps, 2u);
  EXPECT_EQ(s.step_us, 30000u);
  EXPECT_EQ(s.pull_wait_us, 3000u);
  EXPECT_EQ(s.samples, 128u);
  EXPECT_DOUBLE_EQ(s.recent_step_us, 11000);
  EXPECT_DOUBLE_EQ(s.recent_pull_wait_us, 2700);
  EXPECT_DOUBLE_EQ(s.recent_push_wait_us, 900);
  const double d = std::exp(-0.02);
  EXPECT_NEAR(s.recent_samples_per_s, (64 * d + 64) / (0.01 * d + 0.02), 1e-6);
}

// A worker stopped 400 ms after every 100 ms of fast steps makes a fifth
// of its running rate over wall time, and that is what it reports; a steady
// worker reports its steps' rate.
TEST(StatsRecorder, TheRateIsOverWallTimeSoStallsBetweenFastStepsCount) {
  StatsRecorder duty, steady;
  Clock::time_point t{}, u{};  // duty's clock and steady's
  duty.RecordStep(t);
  steady.RecordStep(u);
  for (int cycle = 0; cycle < 10; ++cycle) {
    for (int i = 0; i < 200; ++i) {  // 100 ms of 0.5 ms steps of 64 samples
      t += std::chrono::microseconds(500);
      duty.RecordSamples(64);
      duty.RecordStep(t);
      u += std::chrono::microseconds(500);
      steady.RecordSamples(64);
      steady.RecordStep(u);
    }
    // One step that took 400 ms longer (the process was stopped).
    t += milliseconds(400) + std::chrono::microseconds(500);
    duty.RecordSamples(64);
    duty.RecordStep(t);
  }
  const double running = 64 / 0.0005;  // 128,000 samples/s
  EXPECT_NEAR(steady.Snapshot().recent_samples_per_s, running, 1e-9 * running);
  // Over wall time the duty-cycled worker makes 0.2 of `running`; read
  // right after a stall, the last second holds a little more stall than
  // that (about 0.14).
  const double reported = duty.Snapshot().recent_samples_per_s;
  EXPECT_LT(reported, 0.3 * running) << reported;
  EXPECT_GT(reported, 0.1 * running) << reported;
}

TEST(StatsRecorder, WaitsSideBySideCountAtMostTheStep) {
  StatsRecorder r;
  const Clock::time_point t0{};
  r.RecordStep(t0);
  // Two threads each waited the whole step for pulls, and one for a push.
  r.RecordWait(/*pull=*/false, 4000);
  r.RecordWait(/*pull=*/true, 4000);
  r.RecordWait(/*pull=*/true, 4000);
  r.RecordStep(t0 + milliseconds(4));
  const ClientStats s = r.Snapshot();
  EXPECT_EQ(s.push_wait_us, 4000u);
  EXPECT_EQ(s.pull_wait_us, 0u);
  EXPECT_LE(s.push_wait_us + s.pull_wait_us, s.step_us);
}

TEST(StatsRecorder, ItAllTravelsInTheHeartbeat) {
  StatsRecorder r;
  const Clock::time_point t0{};
  r.RecordStep(t0);
  r.RecordWait(/*pull=*/true, 250);
  r.RecordSamples(32);
  r.RecordStep(t0 + milliseconds(2));
  wire::WorkerMetrics m;
  r.Fill(&m);
  EXPECT_EQ(m.steps(), 1u);
  EXPECT_EQ(m.step_us(), 2000u);
  EXPECT_EQ(m.pull_wait_us(), 250u);
  EXPECT_EQ(m.samples(), 32u);
  EXPECT_DOUBLE_EQ(m.recent_samples_per_s(), 16000);
}

}  // namespace
}  // namespace ductile
