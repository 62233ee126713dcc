// The shared data plan (coordinator/data_plan.h): every batch of an epoch is
// handed out once, what a worker gone held goes to the next to ask, and
// the plan at a clock is exactly the batches pushed before it.
#include "coordinator/data_plan.h"

#include <map>
#include <random>
#include <set>
#include <utility>

#include "gtest/gtest.h"

namespace ductile {
namespace {

using Grant = DataPlan::Grant;

TEST(DataPlan, HandsOutEachBatchOfAnEpochOnceThenTheNextEpoch) {
  DataPlan plan;
  ASSERT_TRUE(plan.Configure(3, 2).ok());
  std::set<std::pair<int64_t, int64_t>> seen;
  int64_t clock = 0;
  for (int i = 0; i < 6; ++i) {
    const int32_t worker = i % 2;
    const Grant g = plan.Next(worker);
    ASSERT_EQ(g.kind, wire::DataGrant::GRANTED) << i;
    EXPECT_TRUE(seen.insert({g.epoch, g.batch}).second) << i;
    plan.Done(worker, g.epoch, g.batch, clock++);
    EXPECT_EQ(plan.epochs_done(), i < 2 ? 0 : i < 5 ? 1 : 2) << i;
  }
  EXPECT_EQ(seen.size(), 6u);
  EXPECT_EQ(plan.Next(0).kind, wire::DataGrant::END);
}

TEST(DataPlan, AWorkerAskingAgainGetsTheBatchItHolds) {
  DataPlan plan;
  ASSERT_TRUE(plan.Configure(4, 1).ok());
  const Grant a = plan.Next(7);
  const Grant again = plan.Next(7);
  EXPECT_EQ(again.epoch, a.epoch);
  EXPECT_EQ(again.batch, a.batch);
  // A report of a batch it does not hold (a resend, a stale one) is
  // ignored.
  plan.Done(7, 0, a.batch + 1, 3);
  EXPECT_EQ(plan.Next(7).batch, a.batch);
  EXPECT_EQ(plan.batches_done_in_current(), 0);
}

TEST(DataPlan, WhatALeaverHeldGoesToTheNextWorkerInTheSameEpoch) {
  DataPlan plan;
  ASSERT_TRUE(plan.Configure(2, 2).ok());
  const Grant a = plan.Next(0);  // epoch 0 batch 0
  const Grant b = plan.Next(1);  // epoch 0 batch 1
  plan.Done(0, a.epoch, a.batch, 0);
  plan.Release(1);  // worker 1 left holding batch 1
  const Grant c = plan.Next(0);
  EXPECT_EQ(c.epoch, 0);
  EXPECT_EQ(c.batch, b.batch);
  EXPECT_EQ(plan.epochs_done(), 0);
  plan.Done(0, c.epoch, c.batch, 1);
  EXPECT_EQ(plan.epochs_done(), 1);
}

TEST(DataPlan, TheLastBatchesInFlightMeanWaitNotEnd) {
  DataPlan plan;
  ASSERT_TRUE(plan.Configure(1, 1).ok());
  const Grant a = plan.Next(0);
  EXPECT_EQ(plan.Next(1).kind, wire::DataGrant::WAIT);
  plan.Release(0);  // it died: the batch is worker 1's now
  const Grant b = plan.Next(1);
  ASSERT_EQ(b.kind, wire::DataGrant::GRANTED);
  EXPECT_EQ(b.batch, a.batch);
  plan.Done(1, b.epoch, b.batch, 4);
  EXPECT_EQ(plan.Next(1).kind, wire::DataGrant::END);
}

TEST(DataPlan, AnEpochOpensWhileTheLastOneHasBatchesInFlight) {
  DataPlan plan;
  ASSERT_TRUE(plan.Configure(1, 3).ok());
  EXPECT_EQ(plan.Next(0).epoch, 0);
  EXPECT_EQ(plan.Next(1).epoch, 1);  // worker 0 still holds epoch 0's
  plan.Release(0);
  EXPECT_EQ(plan.Next(2).epoch, 0);  // the lowest epoch first
}

TEST(DataPlan, AWorkerHoldsAFewAheadAcrossAnEpochsEnd) {
  DataPlan plan;
  ASSERT_TRUE(plan.Configure(3, 2).ok());
  wire::DataGrant::Kind kind;
  const auto held = plan.Take(0, 4, &kind);
  EXPECT_EQ(kind, wire::DataGrant::GRANTED);
  EXPECT_EQ(held, (std::vector<std::pair<int64_t, int64_t>>{
                      {0, 0}, {0, 1}, {0, 2}, {1, 0}}));
  // Asking again tops up, keeping the order; what it holds is not given
  // to another.
  plan.Done(0, 0, 1, 7);
  EXPECT_EQ(plan.Take(0, 4, &kind), (std::vector<std::pair<int64_t, int64_t>>{
                                        {0, 0}, {0, 2}, {1, 0}, {1, 1}}));
  EXPECT_EQ(plan.Take(1, 4, &kind),
            (std::vector<std::pair<int64_t, int64_t>>{{1, 2}}));
  EXPECT_TRUE(plan.Take(2, 4, &kind).empty());
  EXPECT_EQ(kind, wire::DataGrant::WAIT);
  // Gone: all it held is free again, lowest first.
  plan.Release(0);
  EXPECT_EQ(plan.Take(2, 2, &kind),
            (std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {0, 2}}));
}

TEST(DataPlan, TheShapeMustMatch) {
  DataPlan plan;
  EXPECT_FALSE(plan.Configure(0, 1).ok());
  EXPECT_FALSE(plan.Configure(1, 0).ok());
  // A peer's claim cannot make the coordinator allocate without bound.
  EXPECT_EQ(plan.Configure(int64_t{1} << 40, 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.Configure(1, int64_t{1} << 40).code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(plan.configured());
  ASSERT_TRUE(plan.Configure(10, 2).ok());
  EXPECT_TRUE(plan.Configure(10, 2).ok());
  const Status s = plan.Configure(11, 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("2 epoch(s) of 10 batch(es)"), std::string::npos)
      << s.message();
}

TEST(DataPlan, AtAClockHoldsExactlyTheBatchesPushedBeforeIt) {
  DataPlan plan;
  ASSERT_TRUE(plan.Configure(4, 2).ok());
  // Batches done at clocks 0..5 (epoch 0 in full, two of epoch 1).
  for (int64_t clock = 0; clock < 6; ++clock) {
    const Grant g = plan.Next(0);
    plan.Done(0, g.epoch, g.batch, clock);
  }
  const Grant held = plan.Next(1);
  EXPECT_EQ(held.epoch, 1);

  const wire::DataPlanState at5 = plan.At(5);
  DataPlan restored = plan;
  restored.Restore(at5);
  EXPECT_EQ(restored.holders(), 0u);
  // Clock 5's batch (epoch 1 batch 1) is to do again, then the rest.
  std::vector<std::pair<int64_t, int64_t>> left;
  for (int i = 0; i < 3; ++i) {
    const Grant g = restored.Next(0);
    ASSERT_EQ(g.kind, wire::DataGrant::GRANTED);
    left.push_back({g.epoch, g.batch});
    restored.Done(0, g.epoch, g.batch, 10 + i);
  }
  EXPECT_EQ(left,
            (std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 2}, {1, 3}}));
  EXPECT_EQ(restored.Next(0).kind, wire::DataGrant::END);

  // At clock 2 only epoch 0's first two batches were in.
  DataPlan early = plan;
  early.Restore(plan.At(2));
  EXPECT_EQ(early.current_epoch(), 0);
  EXPECT_EQ(early.batches_done_in_current(), 2);
  // No checkpoint: the start, with the same shape.
  DataPlan start = plan;
  start.Restore(wire::DataPlanState());
  EXPECT_EQ(start.batches_per_epoch(), 4);
  EXPECT_EQ(start.Next(0).epoch, 0);
}

TEST(DataPlan, ForgettingKeepsWhatLaterCheckpointsNeed) {
  DataPlan plan;
  ASSERT_TRUE(plan.Configure(2, 3).ok());
  for (int64_t clock = 0; clock < 4; ++clock) {
    const Grant g = plan.Next(0);
    plan.Done(0, g.epoch, g.batch, clock);
  }
  plan.Forget(2);  // epoch 0 (clocks 0, 1) sealed; epoch 1 (2, 3) kept
  EXPECT_EQ(plan.current_epoch(), 1);
  DataPlan back = plan;
  back.Restore(plan.At(3));  // epoch 1's batch at clock 3 undone
  EXPECT_EQ(back.current_epoch(), 1);
  EXPECT_EQ(back.batches_done_in_current(), 1);
}

TEST(DataPlan, WireRoundTripKeepsHoldersAndRejectsNonsense) {
  DataPlan plan;
  ASSERT_TRUE(plan.Configure(3, 2).ok());
  const Grant a = plan.Next(0);
  plan.Done(0, a.epoch, a.batch, 1);
  const Grant b = plan.Next(5);
  DataPlan copy;
  ASSERT_TRUE(copy.FromWire(plan.ToWire()).ok());
  EXPECT_EQ(copy.ToWire().SerializeAsString(),
            plan.ToWire().SerializeAsString());
  EXPECT_EQ(copy.Next(5).batch, b.batch);

  wire::DataPlanState bad = plan.ToWire();
  bad.mutable_open(0)->add_done_clock(3);  // an epoch of 4 batches
  EXPECT_FALSE(copy.FromWire(bad).ok());
  bad = plan.ToWire();
  bad.mutable_held(0)->set_batch(a.batch);  // held and done
  EXPECT_FALSE(copy.FromWire(bad).ok());
}

TEST(DataPlan, BatchesPerStepSurviveARestartAndARollback) {
  DataPlan plan;
  EXPECT_EQ(plan.batches_per_step(), 1);
  EXPECT_EQ(plan.SetBatchesPerStep(0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.SetBatchesPerStep(65).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(plan.SetBatchesPerStep(3).ok());
  // Set before the first claim: kept across the coordinator's restart too.
  DataPlan restarted;
  ASSERT_TRUE(restarted.FromWire(plan.ToWire()).ok());
  EXPECT_EQ(restarted.batches_per_step(), 3);
  ASSERT_TRUE(plan.Configure(4, 2).ok());
  const Grant a = plan.Next(0);
  plan.Done(0, a.epoch, a.batch, 1);
  ASSERT_TRUE(restarted.FromWire(plan.ToWire()).ok());
  EXPECT_EQ(restarted.batches_per_step(), 3);
  // A checkpoint's plan does not carry it; a rollback keeps the one in
  // force.
  const wire::DataPlanState at2 = plan.At(2);
  EXPECT_EQ(at2.batches_per_step(), 0);
  ASSERT_TRUE(plan.SetBatchesPerStep(5).ok());
  plan.Restore(at2);
  EXPECT_EQ(plan.batches_per_step(), 5);
  EXPECT_EQ(plan.epochs_done(), 0);
  wire::DataPlanState bad = plan.ToWire();
  bad.set_batches_per_step(100);
  EXPECT_FALSE(restarted.FromWire(bad).ok());
}

// Random workers joining, leaving and dying: every batch of every epoch
// is done exactly once.
TEST(DataPlan, RandomChurnTrainsEveryBatchExactlyOnce) {
  for (uint32_t seed = 1; seed <= 50; ++seed) {
    std::mt19937 rng(seed);
    DataPlan plan;
    ASSERT_TRUE(plan.Configure(17, 3).ok());
    std::map<std::pair<int64_t, int64_t>, int> trained;
    std::set<int32_t> live = {0, 1, 2};
    std::map<int32_t, Grant> holding;
    int32_t next_id = 3;
    int64_t clock = 0;
    for (int step = 0; step < 10000; ++step) {
      const int action = rng() % 10;
      if (action == 0 && live.size() < 5) {
        live.insert(next_id++);
        continue;
      }
      if (action == 1 && live.size() > 1) {
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        holding.erase(*it);  // left or died before training it
        plan.Release(*it);
        live.erase(it);
        continue;
      }
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      const int32_t w = *it;
      auto h = holding.find(w);
      if (h != holding.end()) {
        ++trained[{h->second.epoch, h->second.batch}];
        plan.Done(w, h->second.epoch, h->second.batch, clock++);
        holding.erase(h);
      }
      const Grant g = plan.Next(w);
      if (g.kind == wire::DataGrant::END) break;
      if (g.kind == wire::DataGrant::GRANTED) holding[w] = g;
    }
    ASSERT_EQ(trained.size(), 17u * 3) << "seed " << seed;
    for (const auto& [batch, times] : trained) {
      EXPECT_EQ(times, 1) << "seed " << seed << " epoch " << batch.first
                          << " batch " << batch.second;
    }
  }
}

}  // namespace
}  // namespace ductile
