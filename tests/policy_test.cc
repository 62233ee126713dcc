// Policies: the runner's hooks, the built-in policies on made-up readings
// of a job (a fake clock, a throughput model), their specs, and a policy
// run by a live coordinator.
#include "ductile/policy.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ductile/admin.h"
#include "gtest/gtest.h"
#include "policy/builtin_policies.h"
#include "policy/policy_runner.h"
#include "tests/test_cluster.h"

namespace ductile {
namespace {

MemberStatus Worker(int32_t id, int64_t clock, double samples_per_s = 0,
                    const std::string& state = "active") {
  MemberStatus m;
  m.id = id;
  m.role = "worker";
  m.state = state;
  m.clock = clock;
  m.steps = static_cast<uint64_t>(clock);
  m.samples_per_s = samples_per_s;
  return m;
}

MemberStatus Server(int32_t id) {
  MemberStatus m;
  m.id = id;
  m.role = "server";
  m.state = "active";
  return m;
}

// Records the actions asked for; refuses sizes above `max_workers`.
class FakeActions final : public PolicyActions {
 public:
  Status Resize(int32_t workers, int32_t servers) override {
    if (max_workers > 0 && workers > max_workers) {
      return InvalidArgumentError("beyond max_workers");
    }
    if (unanswered > 0) {
      --unanswered;
      return DeadlineExceededError("the loop did not answer");
    }
    resizes.push_back(workers);
    (void)servers;
    return Status::Ok();
  }
  Status ReplaceWorker(int32_t id) override {
    replaced.push_back(id);
    return Status::Ok();
  }
  Status SetConsistency(const std::string& table,
                        const Consistency& consistency) override {
    models.emplace_back(table, ToString(consistency));
    return Status::Ok();
  }
  Status SetBatchesPerStep(int32_t n) override {
    if (n > 64) return InvalidArgumentError("beyond 64");
    batches.push_back(n);
    return Status::Ok();
  }
  int32_t max_workers = 0;
  int unanswered = 0;  // this many resizes fail as if unanswered
  std::vector<int32_t> resizes;
  std::vector<int32_t> replaced;
  std::vector<std::pair<std::string, std::string>> models;  // table, model
  std::vector<int32_t> batches;  // batches per step asked for
};

// Writes down each hook as it is called.
class Recorder final : public Policy {
 public:
  std::string name() const override { return "recorder"; }
  void OnStatus(const PolicyEvent& e, PolicyActions&) override {
    calls.push_back("status " + std::to_string(e.active_workers) + "w" +
                    std::to_string(e.active_servers) + "s clock " +
                    std::to_string(e.clock));
  }
  void AfterStep(int64_t from, const PolicyEvent& e, PolicyActions&) override {
    calls.push_back("step " + std::to_string(from) + "->" +
                    std::to_string(e.clock));
  }
  void AfterEpoch(int64_t from, const PolicyEvent& e, PolicyActions&) override {
    calls.push_back("epoch " + std::to_string(from) + "->" +
                    std::to_string(e.epoch));
  }
  void OnMembershipChange(const PolicyEvent& e, PolicyActions&) override {
    calls.push_back("members " + std::to_string(e.active_workers) + "w");
  }
  std::vector<std::string> calls;
};

TEST(PolicyRunner, HooksFollowWhatChangedBetweenReadings) {
  auto recorder = std::make_shared<Recorder>();
  PolicyRunner runner({recorder});
  FakeActions actions;
  ClusterStatus s;
  s.members = {Server(0), Worker(0, 3), Worker(1, 5)};
  runner.Run(s, 0, actions);     // the first reading sets the baseline
  runner.Run(s, 1000, actions);  // nothing changed
  s.members[1].clock = 4;
  s.members[2].clock = 6;
  runner.Run(s, 2000, actions);  // one step
  s.members.push_back(Worker(2, 0, 0, "joining"));
  runner.Run(s, 3000, actions);  // a joiner is not active yet
  s.members[3].state = "active";
  s.members[3].clock = 5;
  s.data_epoch = 1;
  runner.Run(s, 4000, actions);  // it is now; and an epoch ended
  s.members[1].state = "left";   // the slowest left: the clock moves on
  runner.Run(s, 5000, actions);
  EXPECT_EQ(recorder->calls,
            (std::vector<std::string>{
                "status 2w1s clock 3", "status 2w1s clock 3", "step 3->4",
                "status 2w1s clock 4", "status 2w1s clock 4", "members 3w",
                "epoch 0->1", "status 3w1s clock 4", "members 2w", "step 4->5",
                "status 2w1s clock 5"}));
}

// A job whose throughput grows by `per_worker` for each of the first
// `linear` workers and by `tail` for each one after: scaling flattens.
double Throughput(int32_t workers, int32_t linear, double per_worker,
                  double tail) {
  if (workers <= linear) return per_worker * workers;
  return per_worker * linear + tail * (workers - linear);
}

// Drives `policy` like the coordinator would: a reading every second; the
// job takes the size asked for `lag_ms` later (0: never once above
// `reachable`), its throughput is the model's.
struct Drive {
  int32_t start = 1;
  int32_t linear = 3;
  double tail = 50;
  int64_t lag_ms = 3000;
  int32_t reachable = 1 << 20;
  int64_t seconds = 600;
};

std::vector<int32_t> RunAutoscale(AutoscalePolicy& policy, FakeActions& actions,
                                  const Drive& d) {
  PolicyRunner runner({std::shared_ptr<Policy>(&policy, [](Policy*) {})});
  int32_t size = d.start;
  int32_t asked = d.start;
  int64_t asked_at = 0;
  std::vector<int32_t> sizes;
  for (int64_t t = 0; t <= d.seconds * 1000; t += 1000) {
    if (!actions.resizes.empty() && actions.resizes.back() != asked) {
      asked = actions.resizes.back();
      asked_at = t;
    }
    if (asked != size && t - asked_at >= d.lag_ms && asked <= d.reachable) {
      size = asked;
    }
    ClusterStatus s;
    s.members.push_back(Server(0));
    const double rate = Throughput(size, d.linear, 1000, d.tail);
    for (int32_t w = 0; w < size; ++w) {
      s.members.push_back(Worker(w, t / 100, rate / size));
    }
    s.samples_per_s = rate;
    runner.Run(s, t, actions);
    if (sizes.empty() || sizes.back() != size) sizes.push_back(size);
  }
  return sizes;
}

TEST(Autoscale, GrowsWhileAnAddedWorkerPaysThenShrinksBackAndStays) {
  AutoscaleOptions o;
  o.settle_ms = 5000;
  o.measure_ms = 5000;
  AutoscalePolicy policy(o);
  FakeActions actions;
  // Workers 1-3 add 1000 samples/s each, the 4th only 50: efficiency 0.05.
  const std::vector<int32_t> sizes = RunAutoscale(policy, actions, Drive{});
  EXPECT_EQ(actions.resizes, (std::vector<int32_t>{2, 3, 4, 3}));
  EXPECT_EQ(sizes, (std::vector<int32_t>{1, 2, 3, 4, 3}));
  EXPECT_EQ(policy.settled(), 3);
  ASSERT_EQ(policy.measured().size(), 4u);
  EXPECT_DOUBLE_EQ(policy.measured()[0].samples_per_s, 1000);
  EXPECT_DOUBLE_EQ(policy.measured()[1].efficiency, 1.0);
  EXPECT_DOUBLE_EQ(policy.measured()[2].efficiency, 1.0);
  EXPECT_DOUBLE_EQ(policy.measured()[3].efficiency, 50.0 / 1000.0);
}

TEST(Autoscale, AThresholdBelowTheLastStepsEfficiencyKeepsGrowing) {
  AutoscaleOptions o;
  o.settle_ms = 2000;
  o.measure_ms = 2000;
  o.threshold = 0.04;  // the 4th worker's 0.05 pays
  o.max_workers = 5;
  AutoscalePolicy policy(o);
  FakeActions actions;
  RunAutoscale(policy, actions, Drive{});
  // 4 -> 5 still pays (50 / (3050 / 4) = 0.066), and 5 is its limit.
  EXPECT_EQ(actions.resizes, (std::vector<int32_t>{2, 3, 4, 5}));
  EXPECT_EQ(policy.settled(), 5);
}

TEST(Autoscale, GrowsByItsStepAndStaysWhereTheJobCannotGo) {
  AutoscaleOptions o;
  o.settle_ms = 2000;
  o.measure_ms = 2000;
  o.step = 2;
  o.wait_ms = 20000;
  AutoscalePolicy policy(o);
  FakeActions actions;
  Drive d;
  d.linear = 100;
  d.reachable = 3;  // the launcher never gets the job to 5
  const std::vector<int32_t> sizes = RunAutoscale(policy, actions, d);
  // It gave up on 5 after wait_ms and took that target back.
  EXPECT_EQ(actions.resizes, (std::vector<int32_t>{3, 5, 3}));
  EXPECT_EQ(sizes, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(policy.settled(), 3);
}

TEST(Autoscale, MeasuresTheSizeTheJobHasUntilItAsksForOne) {
  AutoscaleOptions o;
  o.settle_ms = 2000;
  o.measure_ms = 2000;
  o.max_workers = 3;
  AutoscalePolicy policy(o);
  FakeActions actions;
  PolicyRunner runner({std::shared_ptr<Policy>(&policy, [](Policy*) {})});
  // The job's first readings: 1 active worker, then all 3 (the others
  // joined a little later); the policy starts from 3, not 1.
  for (int64_t t = 0; t <= 20000; t += 1000) {
    ClusterStatus s;
    const int32_t size = t < 2000 ? 1 : 3;
    for (int32_t w = 0; w < size; ++w) s.members.push_back(Worker(w, t, 100));
    s.samples_per_s = 100.0 * size;
    runner.Run(s, t, actions);
  }
  ASSERT_FALSE(policy.measured().empty());
  EXPECT_EQ(policy.measured()[0].workers, 3);
  EXPECT_EQ(policy.settled(), 3);  // its limit
  EXPECT_TRUE(actions.resizes.empty());
}

TEST(Autoscale, AnUnansweredResizeIsAskedAgainAtTheNextReading) {
  AutoscaleOptions o;
  o.settle_ms = 2000;
  o.measure_ms = 2000;
  AutoscalePolicy policy(o);
  FakeActions actions;
  actions.unanswered = 2;
  Drive d;
  d.linear = 100;
  d.seconds = 40;
  RunAutoscale(policy, actions, d);
  ASSERT_FALSE(actions.resizes.empty());
  EXPECT_EQ(actions.resizes[0], 2);  // after two failures, not given up
  EXPECT_EQ(policy.settled(), 0);    // still growing
}

TEST(Autoscale, ARefusedResizeEndsTheSearchWhereItIs) {
  AutoscaleOptions o;
  o.settle_ms = 1000;
  o.measure_ms = 1000;
  AutoscalePolicy policy(o);
  FakeActions actions;
  actions.max_workers = 2;  // the job's --max_workers
  Drive d;
  d.linear = 100;
  RunAutoscale(policy, actions, d);
  EXPECT_EQ(actions.resizes, (std::vector<int32_t>{2}));
  EXPECT_EQ(policy.settled(), 2);
}

ClusterStatus Rates(const std::vector<double>& rates) {
  ClusterStatus s;
  for (size_t i = 0; i < rates.size(); ++i) {
    s.members.push_back(Worker(static_cast<int32_t>(i), 100, rates[i]));
  }
  return s;
}

TEST(Stragglers, ReplacesOnceAWorkerSlowOverItsWindowAndNotOneThatDips) {
  StragglerOptions o;
  o.window = 5;
  StragglerPolicy policy(o);
  FakeActions actions;
  PolicyEvent e;
  const auto reading = [&](const ClusterStatus& s) {
    e.status = &s;
    policy.OnStatus(e, actions);
  };
  // Worker 3 runs at a third of the others; worker 0 dips to a tenth once
  // (its mean over 5 readings: 0.83 of the median); worker 4 has no
  // samples yet.
  ClusterStatus slow = Rates({100, 100, 100, 33, 0});
  ClusterStatus dip = Rates({10, 100, 100, 33, 0});
  reading(slow);
  reading(dip);
  reading(slow);
  reading(slow);
  EXPECT_TRUE(actions.replaced.empty());  // four readings: no full window
  reading(slow);
  EXPECT_EQ(actions.replaced, std::vector<int32_t>{3});
  // Asked once: while the request stands (and after), never again.
  slow.replace_workers = {3};
  for (int i = 0; i < 20; ++i) reading(slow);
  EXPECT_EQ(actions.replaced, std::vector<int32_t>{3});
  EXPECT_EQ(policy.replaced(), std::set<int32_t>{3});
}

TEST(Stragglers, AWorkerBackFromNoSamplesStartsItsWindowOver) {
  StragglerOptions o;
  o.window = 3;
  StragglerPolicy policy(o);
  FakeActions actions;
  PolicyEvent e;
  const auto reading = [&](const ClusterStatus& s) {
    e.status = &s;
    policy.OnStatus(e, actions);
  };
  ClusterStatus slow = Rates({100, 100, 20});
  ClusterStatus silent = Rates({100, 100, 0});
  reading(slow);
  reading(slow);
  reading(silent);  // its window starts over
  reading(slow);
  reading(slow);
  EXPECT_TRUE(actions.replaced.empty());
  reading(slow);
  EXPECT_EQ(actions.replaced, std::vector<int32_t>{2});
}

TEST(Stragglers, AWorkerInItsFirstStepsIsNotRated) {
  StragglerOptions o;
  o.window = 2;
  o.warmup_steps = 20;
  StragglerPolicy policy(o);
  FakeActions actions;
  ClusterStatus s = Rates({100, 100, 20});
  s.members[2].steps = 19;  // a newcomer, slow at its cold start
  PolicyEvent e;
  e.status = &s;
  for (int i = 0; i < 5; ++i) policy.OnStatus(e, actions);
  EXPECT_TRUE(actions.replaced.empty());
  s.members[2].steps = 20;
  policy.OnStatus(e, actions);
  policy.OnStatus(e, actions);
  EXPECT_EQ(actions.replaced, std::vector<int32_t>{2});
}

// Three workers at 50 samples/s of wall time, `readings` readings one
// second of steps apart; `wait` gives a worker's pulls' parked time and its
// callers' wait for pulls, in ms, per second. Returns whom the policy asked
// to replace.
std::vector<int32_t> ReplacedAfter(
    int32_t window, int readings,
    const std::function<std::pair<double, double>(int32_t)>& wait) {
  StragglerOptions o;
  o.window = window;
  StragglerPolicy policy(o);
  FakeActions actions;
  ClusterStatus s = Rates({50, 50, 50});
  PolicyEvent e;
  e.status = &s;
  for (int i = 1; i <= readings; ++i) {
    for (MemberStatus& m : s.members) {
      const auto [parked_ms, waited_ms] = wait(m.id);
      m.step_seconds = i;
      m.blocked_ms = static_cast<uint64_t>(i * parked_ms);
      m.pull_wait_seconds = i * waited_ms / 1000;
    }
    policy.OnStatus(e, actions);
  }
  return actions.replaced;
}

// Under BSP the slow worker paces the others: every worker makes the same
// samples per second of wall time, and the others spend most of theirs
// waiting on the bound for it. Rated without that wait, it stands out.
TEST(Stragglers, UnderBspTheWorkerTheOthersWaitForIsTheStraggler) {
  StragglerOptions o;
  o.window = 4;
  StragglerPolicy policy(o);
  FakeActions actions;
  ClusterStatus s = Rates({50, 50, 50});
  PolicyEvent e;
  e.status = &s;
  // Each reading, one second of steps each; workers 0 and 2 waited 750 ms
  // of it on pulls parked at the server, worker 1 (a quarter of their
  // speed) 10 ms. Worker 2's pulls went side by side (two tables): their
  // parked times add up to 1500 ms, but it waited 750 ms.
  for (int i = 1; i <= 3; ++i) {
    for (MemberStatus& m : s.members) {
      m.step_seconds = i;
      m.blocked_ms = static_cast<uint64_t>(i * (m.id == 1   ? 10
                                                : m.id == 2 ? 1500
                                                            : 750));
      m.pull_wait_seconds = i * (m.id == 1 ? 0.02 : 0.8);
    }
    policy.OnStatus(e, actions);
  }
  EXPECT_TRUE(actions.replaced.empty());  // three readings: no full window
  // A reading without new heartbeats keeps each worker's last share.
  policy.OnStatus(e, actions);
  EXPECT_EQ(actions.replaced, std::vector<int32_t>{1});
}

// Pulls parked side by side, or a prefetch parked while the worker
// computed, count no more than the worker waited for its pulls: a worker
// whose parked time is large but whose waits are short is slow itself.
TEST(Stragglers, ParkedTimeCountsNoMoreThanTheWorkerWaited) {
  // Worker 2 prefetches: 900 ms parked a second, 50 ms waited.
  EXPECT_EQ(ReplacedAfter(3, 3,
                          [](int32_t id) {
                            return id == 2 ? std::pair(900.0, 50.0)
                                           : std::pair(700.0, 700.0);
                          }),
            std::vector<int32_t>{2});
}

// Without the bound's waits the same wall rates tell nobody apart, and a
// worker that waited as long as the others is no straggler.
TEST(Stragglers, WorkersWaitingAlikeAreRatedAlike) {
  EXPECT_TRUE(ReplacedAfter(2, 10, [](int32_t) {
                return std::pair(500.0, 500.0);
              }).empty());
}

TEST(Stragglers, OneRatedWorkerHasNothingToBeComparedWith) {
  StragglerOptions o;
  o.window = 1;
  StragglerPolicy policy(o);
  FakeActions actions;
  ClusterStatus s = Rates({0, 5});
  PolicyEvent e;
  e.status = &s;
  for (int i = 0; i < 10; ++i) policy.OnStatus(e, actions);
  EXPECT_TRUE(actions.replaced.empty());
}

// A job of two workers and two tables (one SSP, one async; with `bsp`, a
// BSP table too)
// whose workers' blocked time and step time grow by the given amounts at
// each reading, as their heartbeats report them.
class BlockedJob {
 public:
  explicit BlockedJob(int32_t bound, bool bsp = false) : bsp_(bsp) {
    SetBound(bound);
  }
  void SetBound(int32_t bound) {
    Consistency ssp;
    ssp.mode = ConsistencyMode::kSsp;
    ssp.staleness = bound;
    status_.tables = {"w", "a"};
    status_.table_consistency = {ssp, Consistency{}};
    if (bsp_) {
      Consistency bsp;
      bsp.mode = ConsistencyMode::kBsp;
      status_.tables.push_back("b");
      status_.table_consistency.push_back(bsp);
    }
  }
  // One reading after `step_ms` of steps with `blocked_ms` of it blocked
  // (per worker); 0 and 0: no heartbeat since the last reading.
  const ClusterStatus& Read(double step_ms, double blocked_ms) {
    step_ms_ += step_ms;
    blocked_ms_ += blocked_ms;
    status_.members.clear();
    for (int32_t id : {0, 1}) {
      MemberStatus m = Worker(id, 10);
      m.step_seconds = step_ms_ / 1000;
      m.blocked_ms = static_cast<uint64_t>(blocked_ms_);
      status_.members.push_back(m);
    }
    status_.members.push_back(Server(0));
    event_.status = &status_;
    return status_;
  }
  // The job's training loss from the next reading on (0: none reported).
  void SetLoss(double loss) { status_.loss = loss; }
  void Run(StalenessPolicy& policy, FakeActions& actions, double step_ms,
           double blocked_ms) {
    Read(step_ms, blocked_ms);
    policy.OnStatus(event_, actions);
  }

 private:
  const bool bsp_;
  ClusterStatus status_;
  PolicyEvent event_;
  double step_ms_ = 0;
  double blocked_ms_ = 0;
};

TEST(Staleness, RaisesABoundThatBlocksAndNeverLowersBackIntoIt) {
  StalenessOptions o;
  o.window = 3;
  StalenessPolicy policy(o);
  FakeActions actions;
  BlockedJob job(1);
  // Half of each step blocked: the first reading only sets the baseline,
  // the next three fill the window.
  for (int i = 0; i < 3; ++i) job.Run(policy, actions, 1000, 500);
  EXPECT_TRUE(actions.models.empty());
  // Readings without a heartbeat since the last count for nothing.
  job.Run(policy, actions, 0, 0);
  EXPECT_TRUE(actions.models.empty());
  job.Run(policy, actions, 1000, 500);
  using Change = std::pair<std::string, std::string>;
  ASSERT_EQ(actions.models, (std::vector<Change>{{"w", "ssp(2)"}}));
  EXPECT_DOUBLE_EQ(policy.blocked_fraction(), 0.5);
  EXPECT_EQ(policy.blocking(), std::set<int32_t>{1});
  job.SetBound(2);
  // No longer blocked: bound 1 blocked before, so it stays at 2.
  for (int i = 0; i < 6; ++i) job.Run(policy, actions, 1000, 0);
  EXPECT_EQ(actions.models.size(), 1u);
  EXPECT_DOUBLE_EQ(policy.blocked_fraction(), 0);
  // Blocked again at 2: raised to 3.
  for (int i = 0; i < 3; ++i) job.Run(policy, actions, 1000, 300);
  ASSERT_EQ(actions.models.size(), 2u);
  EXPECT_EQ(actions.models[1], (Change{"w", "ssp(3)"}));
}

TEST(Staleness, LowersABoundThatCostsNothingDownToItsMinimum) {
  StalenessOptions o;
  o.window = 2;
  o.min_bound = 2;
  o.max_bound = 4;
  StalenessPolicy policy(o);
  FakeActions actions;
  BlockedJob job(4);
  job.Run(policy, actions, 1000, 0);  // the baseline
  for (int32_t bound = 4; bound > 1; --bound) {
    job.SetBound(bound);
    for (int i = 0; i < 2; ++i) job.Run(policy, actions, 1000, 10);  // 1%
  }
  using Change = std::pair<std::string, std::string>;
  EXPECT_EQ(actions.models,
            (std::vector<Change>{{"w", "ssp(3)"}, {"w", "ssp(2)"}}));
  // At its maximum a blocking bound stays.
  BlockedJob top(4);
  StalenessPolicy high(o);
  FakeActions none;
  for (int i = 0; i < 5; ++i) top.Run(high, none, 1000, 900);
  EXPECT_TRUE(none.models.empty());
  EXPECT_GT(high.blocked_fraction(), 0.8);
}

// A raise whose following readings show a higher loss is taken back, and
// that bound is not tried again however much the old one blocks.
TEST(Staleness, TakesBackARaiseAfterWhichTheLossRose) {
  StalenessOptions o;
  o.window = 2;
  StalenessPolicy policy(o);
  FakeActions actions;
  BlockedJob job(1);
  job.SetLoss(1.0);
  for (int i = 0; i < 3; ++i) job.Run(policy, actions, 1000, 500);
  using Change = std::pair<std::string, std::string>;
  ASSERT_EQ(actions.models, (std::vector<Change>{{"w", "ssp(2)"}}));
  job.SetBound(2);
  job.SetLoss(1.04);  // within loss_rise (5%): not yet judged
  job.Run(policy, actions, 1000, 0);
  EXPECT_EQ(actions.models.size(), 1u);
  job.SetLoss(1.2);  // mean over the window 1.12 > 1.05
  job.Run(policy, actions, 1000, 0);
  ASSERT_EQ(actions.models.size(), 2u);
  EXPECT_EQ(actions.models[1], (Change{"w", "ssp(1)"}));
  EXPECT_EQ(policy.hurting(), std::set<int32_t>{2});
  job.SetBound(1);
  for (int i = 0; i < 8; ++i) job.Run(policy, actions, 1000, 500);
  EXPECT_EQ(actions.models.size(), 2u);  // blocked, but 2 hurt
  EXPECT_DOUBLE_EQ(policy.blocked_fraction(), 0.5);
}

TEST(Staleness, KeepsARaiseAfterWhichTheLossFell) {
  StalenessOptions o;
  o.window = 2;
  StalenessPolicy policy(o);
  FakeActions actions;
  BlockedJob job(1);
  job.SetLoss(1.0);
  for (int i = 0; i < 3; ++i) job.Run(policy, actions, 1000, 500);
  job.SetBound(2);
  job.SetLoss(0.9);
  for (int i = 0; i < 4; ++i) job.Run(policy, actions, 1000, 100);
  using Change = std::pair<std::string, std::string>;
  EXPECT_EQ(actions.models, (std::vector<Change>{{"w", "ssp(2)"}}));
  EXPECT_TRUE(policy.hurting().empty());
  // Without a loss reported there is nothing to judge: raises stay.
  StalenessPolicy blind(o);
  FakeActions blind_actions;
  BlockedJob no_loss(1);
  for (int i = 0; i < 3; ++i) no_loss.Run(blind, blind_actions, 1000, 500);
  no_loss.SetBound(2);
  for (int i = 0; i < 4; ++i) no_loss.Run(blind, blind_actions, 1000, 100);
  EXPECT_EQ(blind_actions.models, (std::vector<Change>{{"w", "ssp(2)"}}));
}

TEST(Staleness, ChangesNothingWhileTheJobHasABspTable) {
  StalenessOptions o;
  o.window = 2;
  StalenessPolicy policy(o);
  FakeActions actions;
  BlockedJob job(1, /*bsp=*/true);
  for (int i = 0; i < 6; ++i) job.Run(policy, actions, 1000, 500);
  EXPECT_TRUE(actions.models.empty());
  EXPECT_DOUBLE_EQ(policy.blocked_fraction(), 0.5);
}

// Drives a gns-batch policy: a reading every second at clock 10 a second,
// a noise scale of noise(second) worker batches folded in over all those
// clocks (noise(second) / k in units of a step's batch when the workers
// train k batches a step: at once, as asked); the job takes the size asked
// for `lag_ms` later (never once above `reachable`).
struct NoiseDrive {
  int32_t start = 2;
  int64_t lag_ms = 3000;
  int32_t reachable = 1 << 20;
  int64_t seconds = 60;
  std::function<double(int64_t)> noise = [](int64_t s) {
    return 0.1 * s + 0.05;
  };
  // From this second on, all workers but one have finished (the job's end).
  int64_t finish_at = 1 << 30;
};

// The sizes the job went through.
std::vector<int32_t> RunGnsBatch(GnsBatchPolicy& policy, FakeActions& actions,
                                 const NoiseDrive& d) {
  PolicyRunner runner({std::shared_ptr<Policy>(&policy, [](Policy*) {})});
  int32_t size = d.start;
  int32_t asked = d.start;
  int64_t asked_at = 0;
  std::vector<int32_t> sizes = {size};
  for (int64_t t = 0; t <= d.seconds; ++t) {
    if (!actions.resizes.empty() && actions.resizes.back() != asked) {
      asked = actions.resizes.back();
      asked_at = t * 1000;
    }
    if (asked != size && t * 1000 - asked_at >= d.lag_ms &&
        asked <= d.reachable) {
      size = asked;
      sizes.push_back(size);
    }
    ClusterStatus s;
    s.members.push_back(Server(0));
    const int32_t active = t >= d.finish_at ? 1 : size;
    for (int32_t w = 0; w < size; ++w) {
      s.members.push_back(
          Worker(w, t * 10, 0, w < active ? "active" : "finished"));
    }
    if (!actions.resizes.empty()) s.target_workers = actions.resizes.back();
    s.data_batches_per_step =
        actions.batches.empty() ? 1 : actions.batches.back();
    s.noise_scale = d.noise(t) / s.data_batches_per_step;
    s.noise_scale_clocks = static_cast<uint64_t>(t * 10);
    runner.Run(s, t * 1000, actions);
  }
  return sizes;
}

TEST(GnsBatch, GrowsWhileTheNoiseScaleOutgrowsTheWorkersUpToItsMax) {
  GnsBatchOptions o;
  o.max = 4;
  GnsBatchPolicy policy(o);
  FakeActions actions;
  // The noise scale is 0.1 s + 0.05 worker batches: the mean of the five
  // readings up to second s is 0.1 (s - 2) + 0.05, above 2 workers from
  // s = 22 on, above 3 from s = 32 (readings start over once the job has
  // grown, at 25), and above 4 at s = 42, where the limit stops it.
  EXPECT_EQ(RunGnsBatch(policy, actions, NoiseDrive{}),
            (std::vector<int32_t>{2, 3, 4}));
  EXPECT_EQ(actions.resizes, (std::vector<int32_t>{3, 4}));
  ASSERT_EQ(policy.grown().size(), 2u);
  EXPECT_EQ(policy.grown()[0].clock, 220);
  EXPECT_EQ(policy.grown()[0].from, 2);
  EXPECT_EQ(policy.grown()[0].to, 3);
  EXPECT_NEAR(policy.grown()[0].noise_scale, 2.05, 1e-9);
  EXPECT_EQ(policy.grown()[1].clock, 320);
  EXPECT_EQ(policy.grown()[1].to, 4);
  EXPECT_NEAR(policy.grown()[1].noise_scale, 3.05, 1e-9);
  EXPECT_TRUE(policy.stopped());
}

// At the job's end its workers finish one by one: fewer active workers is
// no reason to ask for more than the target, let alone fewer (which would
// drain workers still training).
TEST(GnsBatch, WorkersFinishingAtTheEndAreNotRoomToGrowInto) {
  GnsBatchOptions o;
  o.max = 4;
  GnsBatchPolicy policy(o);
  FakeActions actions;
  NoiseDrive d;
  d.seconds = 40;
  d.finish_at = 34;  // after the growth to 4 (asked at 32, reached at 35)
  RunGnsBatch(policy, actions, d);
  EXPECT_EQ(actions.resizes, (std::vector<int32_t>{3, 4}));
  EXPECT_TRUE(policy.stopped());
  // A job whose workers finish before it ever grew stops it as well.
  GnsBatchPolicy early(o);
  FakeActions none;
  NoiseDrive quiet;
  quiet.finish_at = 10;
  RunGnsBatch(early, none, quiet);
  EXPECT_TRUE(none.resizes.empty());
  EXPECT_TRUE(early.stopped());
}

TEST(GnsBatch, StepsAndGrowAboveSetHowFastItGrows) {
  GnsBatchOptions o;
  o.step = 2;
  o.grow_above = 0.5;
  o.window = 1;
  GnsBatchPolicy policy(o);
  FakeActions actions;
  NoiseDrive d;
  d.seconds = 29;
  // Above 0.5 x 2 workers from second 10 (1.05), above 0.5 x 4 at 20
  // (readings start over at 13, when the job has 4), above 0.5 x 6 at 30.
  EXPECT_EQ(RunGnsBatch(policy, actions, d), (std::vector<int32_t>{2, 4, 6}));
  ASSERT_EQ(policy.grown().size(), 2u);
  EXPECT_EQ(policy.grown()[0].clock, 100);
  EXPECT_EQ(policy.grown()[1].clock, 200);
  EXPECT_FALSE(policy.stopped());
}

TEST(GnsBatch, AnEstimateOverTooFewClocksOrOfNothingIsNotRead) {
  GnsBatchOptions o;
  o.min_clocks = 300;  // reached at second 30
  o.window = 1;
  GnsBatchPolicy policy(o);
  FakeActions actions;
  NoiseDrive d;
  d.seconds = 40;
  d.noise = [](int64_t s) {
    if (s < 33) return s % 2 == 0 ? 50.0 : std::nan("");
    return 0.0;  // unknown again (one worker left, say) once it has 3
  };
  EXPECT_EQ(RunGnsBatch(policy, actions, d), (std::vector<int32_t>{2, 3}));
  ASSERT_EQ(policy.grown().size(), 1u);
  EXPECT_EQ(policy.grown()[0].clock, 300);
}

TEST(GnsBatch, ByBatchGrowsTheBatchesOfAStepAndLetsTheEstimateSettle) {
  GnsBatchOptions o;
  o.by = GnsBatchOptions::By::kBatch;
  o.max = 3;
  o.window = 1;
  o.min_clocks = 0;
  o.settle_clocks = 50;
  GnsBatchPolicy policy(o);
  FakeActions actions;
  NoiseDrive d;
  d.seconds = 70;
  // 0.1 s + 0.05 batches, over 2 workers' steps of k batches: above 2 x 1
  // at 20 (clock 200); readings wait for clock 250; above 2 x 2 at 40;
  // at 60, 3 batches a step is the limit.
  EXPECT_EQ(RunGnsBatch(policy, actions, d), (std::vector<int32_t>{2}));
  EXPECT_TRUE(actions.resizes.empty());
  EXPECT_EQ(actions.batches, (std::vector<int32_t>{2, 3}));
  ASSERT_EQ(policy.grown().size(), 2u);
  EXPECT_EQ(policy.grown()[0].clock, 200);
  EXPECT_EQ(policy.grown()[0].from, 1);
  EXPECT_EQ(policy.grown()[0].to, 2);
  EXPECT_EQ(policy.grown()[1].clock, 400);
  EXPECT_EQ(policy.grown()[1].to, 3);
  EXPECT_TRUE(policy.stopped());
  // Without the settling, the reading at 21 (the estimate still in the
  // smaller steps' units: not divided yet in a real job) would count.
  GnsBatchOptions eager = o;
  eager.settle_clocks = 0;
  GnsBatchPolicy unsettled(eager);
  FakeActions more;
  NoiseDrive spike = d;
  spike.noise = [](int64_t s) { return s == 21 ? 50.0 : 0.1 * s + 0.05; };
  RunGnsBatch(unsettled, more, spike);
  EXPECT_EQ(more.batches.size(), 2u);
  ASSERT_GE(unsettled.grown().size(), 2u);
  EXPECT_EQ(unsettled.grown()[1].clock, 210);
  GnsBatchPolicy settled(o);
  FakeActions fewer;
  RunGnsBatch(settled, fewer, spike);
  ASSERT_EQ(settled.grown().size(), 2u);
  EXPECT_EQ(settled.grown()[1].clock, 400);
}

TEST(GnsBatch, StopsWhereTheJobRefusesOrDoesNotGrowInTime) {
  {
    GnsBatchOptions o;
    GnsBatchPolicy policy(o);
    FakeActions actions;
    actions.max_workers = 2;
    RunGnsBatch(policy, actions, NoiseDrive{});
    EXPECT_TRUE(actions.resizes.empty());
    EXPECT_TRUE(policy.stopped());
  }
  {
    GnsBatchOptions o;
    o.wait_ms = 10000;
    GnsBatchPolicy policy(o);
    FakeActions actions;
    NoiseDrive d;
    d.reachable = 2;
    // Asks for 3 at 22; at 33, still 2, it takes the target back to 2.
    EXPECT_EQ(RunGnsBatch(policy, actions, d), (std::vector<int32_t>{2}));
    EXPECT_EQ(actions.resizes, (std::vector<int32_t>{3, 2}));
    EXPECT_TRUE(policy.stopped());
  }
  {
    GnsBatchOptions o;
    GnsBatchPolicy policy(o);
    FakeActions actions;
    actions.unanswered = 2;  // asked at 22 and 23 without an answer
    NoiseDrive d;
    d.seconds = 30;
    EXPECT_EQ(RunGnsBatch(policy, actions, d), (std::vector<int32_t>{2, 3}));
    ASSERT_EQ(policy.grown().size(), 1u);
    EXPECT_EQ(policy.grown()[0].clock, 240);
  }
}

// ---- comm-batch (a worker policy), driven with made-up step timings.

class FakeWorkerActions final : public WorkerPolicyActions {
 public:
  Status SetBatchesPerStep(int32_t batches) override {
    if (batches > refuse_above) {
      return InvalidArgumentError("refused " + std::to_string(batches));
    }
    set.push_back(batches);
    return Status::Ok();
  }
  Status SetConsistency(const std::string&, const Consistency&) override {
    return FailedPreconditionError("not here");
  }
  Status Leave() override { return FailedPreconditionError("not here"); }
  std::vector<int32_t> set;
  int32_t refuse_above = 64;
};

// Steps of `step_us` each, `wait_us` of it waiting for pushes and pulls,
// shown to `policy` after each; the batches a step follows what it set.
// Returns the batches a step of each step.
std::vector<int32_t> RunCommBatch(CommBatchPolicy& policy,
                                  FakeWorkerActions& actions, int steps,
                                  const std::function<uint64_t(int)>& wait_us,
                                  uint64_t step_us = 1000) {
  WorkerPolicyEvent e;
  e.worker_id = 0;
  std::vector<int32_t> sizes;
  for (int i = 0; i < steps; ++i) {
    e.batches_per_step = actions.set.empty() ? 1 : actions.set.back();
    sizes.push_back(e.batches_per_step);
    e.steps = static_cast<uint64_t>(i + 1);
    e.stats.steps = static_cast<uint64_t>(i + 1);
    e.stats.step_us += step_us;
    e.stats.pull_wait_us += wait_us(i) / 2;
    e.stats.push_wait_us += wait_us(i) - wait_us(i) / 2;
    policy.AfterStep(e, actions);
  }
  return sizes;
}

TEST(CommBatch, GrowsWhileWaitsOutweighTheStepsShareUpToItsMax) {
  CommBatchOptions o;
  o.window = 4;
  o.max = 3;
  CommBatchPolicy policy(o);
  FakeWorkerActions actions;
  // Waits are 0.8 of every step: each window of 4 steps grows it by one.
  // The first step has no step before it to measure against.
  const std::vector<int32_t> sizes =
      RunCommBatch(policy, actions, 20, [](int) { return 800; });
  EXPECT_EQ(actions.set, (std::vector<int32_t>{2, 3}));
  ASSERT_EQ(policy.grown().size(), 2u);
  EXPECT_EQ(policy.grown()[0].step, 5u);
  EXPECT_EQ(policy.grown()[1].step, 9u);
  EXPECT_DOUBLE_EQ(policy.grown()[0].wait_fraction, 0.8);
  EXPECT_EQ(sizes[4], 1);
  EXPECT_EQ(sizes[5], 2);
  EXPECT_EQ(sizes[9], 3);
  // At its max, the next window that would grow it stops it.
  EXPECT_TRUE(policy.stopped());
}

TEST(CommBatch, LeavesAComputeBoundWorkerAlone) {
  CommBatchOptions o;
  o.window = 4;
  CommBatchPolicy policy(o);
  FakeWorkerActions actions;
  // Waits 0.3 of the step, then exactly `above` (0.5): neither is above.
  RunCommBatch(policy, actions, 21, [](int i) { return i < 10 ? 300 : 500; });
  EXPECT_TRUE(actions.set.empty());
  EXPECT_DOUBLE_EQ(policy.wait_fraction(), 0.5);
  EXPECT_FALSE(policy.stopped());
  // Then waits grow: it grows with them.
  CommBatchPolicy later(o);
  RunCommBatch(later, actions, 21, [](int i) { return i < 12 ? 100 : 900; });
  EXPECT_EQ(actions.set, (std::vector<int32_t>{2, 3}));
}

TEST(CommBatch, StepsAndARefusalSetWhereItGoes) {
  {
    CommBatchOptions o;
    o.window = 2;
    o.step = 3;
    o.max = 8;
    CommBatchPolicy policy(o);
    FakeWorkerActions actions;
    RunCommBatch(policy, actions, 20, [](int) { return 900; });
    EXPECT_EQ(actions.set, (std::vector<int32_t>{4, 7, 8}));
  }
  {
    CommBatchOptions o;
    o.window = 2;
    CommBatchPolicy policy(o);
    FakeWorkerActions actions;
    actions.refuse_above = 2;
    RunCommBatch(policy, actions, 20, [](int) { return 900; });
    EXPECT_EQ(actions.set, (std::vector<int32_t>{2}));
    EXPECT_TRUE(policy.stopped());
  }
}

// Counters that go back (a new client, a reset) count for nothing: the
// window is made of real steps only.
TEST(CommBatch, CountersThatGoBackAreNotSteps) {
  CommBatchOptions o;
  o.window = 3;
  CommBatchPolicy policy(o);
  FakeWorkerActions actions;
  WorkerPolicyEvent e;
  auto step = [&](uint64_t step_us, uint64_t wait_us) {
    ++e.steps;
    ++e.stats.steps;
    e.stats.step_us += step_us;
    e.stats.pull_wait_us += wait_us;
    policy.AfterStep(e, actions);
  };
  e.stats.steps = 100;
  e.stats.step_us = 100000;
  e.stats.pull_wait_us = 90000;
  step(0, 0);               // the first reading: a baseline
  e.stats = ClientStats();  // went back (a new client)
  step(1000, 900);
  step(1000, 900);
  step(1000, 900);
  EXPECT_TRUE(actions.set.empty());  // 2 steps counted, not 3
  step(1000, 900);
  EXPECT_EQ(actions.set, (std::vector<int32_t>{2}));
}

// It grows from the size the steps take: a job that set 4 batches a step
// is not taken back to 2.
TEST(CommBatch, GrowsFromTheJobsSizeWhenThatIsMore) {
  CommBatchOptions o;
  o.window = 2;
  CommBatchPolicy policy(o);
  FakeWorkerActions actions;
  WorkerPolicyEvent e;
  e.batches_per_step = 4;
  for (int i = 0; i < 3; ++i) {
    ++e.steps;
    ++e.stats.steps;
    e.stats.step_us += 1000;
    e.stats.push_wait_us += 900;
    policy.AfterStep(e, actions);
  }
  EXPECT_EQ(actions.set, (std::vector<int32_t>{5}));
}

TEST(BuiltinWorkerPolicies, SpecsNameAPolicyAndItsParameters) {
  auto one = MakeBuiltinWorkerPolicies("comm-batch:above=0.3:window=7:max=4");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0]->name(), "comm-batch");
  auto none = MakeBuiltinWorkerPolicies("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  for (const char* bad :
       {"comm-batch:above=0", "comm-batch:above=1.5", "comm-batch:max=65",
        "comm-batch:step=0", "comm-batch:window=x", "comm-batch:speed=2",
        "comm-batch:max", "gns-batch", "comm-batch,"}) {
    auto p = MakeBuiltinWorkerPolicies(bad);
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(BuiltinPolicies, SpecsNameAPolicyAndItsParameters) {
  Result<std::vector<std::shared_ptr<Policy>>> two = MakeBuiltinPolicies(
      "autoscale:threshold=0.2:max=8:settle_s=1.5,stragglers:window=3");
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0]->name(), "autoscale");
  EXPECT_EQ((*two)[1]->name(), "stragglers");
  Result<std::vector<std::shared_ptr<Policy>>> three = MakeBuiltinPolicies(
      "staleness:raise_above=0.3:lower_below=0.05:window=4:max=8");
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ((*three)[0]->name(), "staleness");
  Result<std::vector<std::shared_ptr<Policy>>> four = MakeBuiltinPolicies(
      "gns-batch:grow_above=0.5:step=2:max=8:window=3:min_clocks=10:wait_s="
      "60");
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_EQ((*four)[0]->name(), "gns-batch");
  Result<std::vector<std::shared_ptr<Policy>>> none = MakeBuiltinPolicies("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  const std::map<std::string, std::string> bad = {
      {"gns", "unknown policy 'gns'"},
      {"gns-batch:grow_above=0", "grow_above must be in (0, 1000]"},
      {"gns-batch:step=2000", "step=2000"},
      {"gns-batch:batch=2", "gns-batch has no parameter 'batch'"},
      {"gns-batch:min_clocks=-5", "min_clocks=-5"},
      {"gns-batch:by=samples", "by must be workers or batch"},
      {"gns-batch:by=batch:max=65", "max up to 64 batches a step"},
      {"autoscale:speed=2", "no parameter 'speed'"},
      {"autoscale:step=0", "step=0 must be a number in"},
      {"autoscale:step=1.5", "must be a whole number"},
      {"autoscale:threshold=nan", "threshold=nan"},
      {"autoscale:max", "is not KEY=VALUE"},
      {"autoscale:max=2:max=3", "given twice"},
      {"stragglers:ratio=1", "ratio must be in (0, 1)"},
      {"stragglers:window=1e9", "window=1e9"},
      {"stragglers:warmup_steps=-1", "warmup_steps=-1"},
      {"stragglers,", "unknown policy ''"},
      {"staleness:raise_above=0", "raise_above must be in (0, 1]"},
      {"staleness:raise_above=0.1:lower_below=0.1",
       "lower_below must be below raise_above"},
      {"staleness:min=5:max=4", "max must be at least min"},
      {"staleness:step=0", "step=0 must be a number in"},
      {"staleness:bound=3", "staleness has no parameter 'bound'"},
      {"staleness:loss_rise=0", "loss_rise must be in (0, 10]"},
      {"staleness:loss_rise=11", "loss_rise=11"},
      {",autoscale", "unknown policy ''"},
  };
  for (const auto& [spec, message] : bad) {
    Result<std::vector<std::shared_ptr<Policy>>> p = MakeBuiltinPolicies(spec);
    ASSERT_FALSE(p.ok()) << spec;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << spec;
    EXPECT_NE(p.status().message().find(message), std::string::npos)
        << spec << ": " << p.status();
  }
}

// Asks, once it sees an active worker, for a target of 3 workers and for
// that worker to be replaced.
class AskOnce final : public Policy {
 public:
  std::string name() const override { return "ask-once"; }
  void OnStatus(const PolicyEvent& e, PolicyActions& actions) override {
    if (asked_ || e.active_workers < 1) return;
    asked_ = true;
    for (const MemberStatus& m : e.status->members) {
      if (m.role == "worker" && m.state == "active") {
        replace = actions.ReplaceWorker(m.id);
        break;
      }
    }
    resize = actions.Resize(3, 0);
    too_many = actions.Resize(1000, 0);
    unknown = actions.ReplaceWorker(77);
    done.store(true);
  }
  bool asked_ = false;            // the policy thread's only
  std::atomic<bool> done{false};  // the results below are set
  Status replace = Status::Ok(), resize = Status::Ok(), too_many = Status::Ok(),
         unknown = Status::Ok();
};

TEST(CoordinatorPolicies, ActionsReachTheStatusAndEndWithTheWorker) {
  auto policy = std::make_shared<AskOnce>();
  testing::TestClusterOptions options;
  options.num_servers = 1;
  options.num_workers = 2;  // one finishing does not end the job
  options.max_workers = 4;
  options.policies = {policy};
  options.policy_interval_ms = 100;
  testing::TestCluster cluster(options);
  std::unique_ptr<Client> worker = cluster.Connect();
  ASSERT_NE(worker, nullptr);
  ClusterStatus status;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    Result<ClusterStatus> s = QueryClusterStatus(cluster.address(), 5000);
    ASSERT_TRUE(s.ok()) << s.status();
    status = *s;
    // The status may be taken between two of the policy's actions: wait
    // for one that shows both.
    if (policy->done.load() && !status.replace_workers.empty() &&
        status.target_workers == 3) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(policy->done.load());
  EXPECT_TRUE(policy->replace.ok()) << policy->replace;
  EXPECT_TRUE(policy->resize.ok()) << policy->resize;
  EXPECT_EQ(policy->too_many.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(policy->unknown.code(), StatusCode::kNotFound);
  EXPECT_EQ(status.target_workers, 3);
  EXPECT_EQ(status.replace_workers, std::vector<int32_t>{worker->worker_id()});
  EXPECT_NE(
      FormatClusterStatus(status).find("replacing (a policy asked): "
                                       "worker " +
                                       std::to_string(worker->worker_id())),
      std::string::npos)
      << FormatClusterStatus(status);
  // Once the worker is gone, nothing is left to replace.
  ASSERT_TRUE(worker->Finish().ok());
  Result<ClusterStatus> after = QueryClusterStatus(cluster.address(), 5000);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(after->replace_workers.empty());
}

// Changes table "t" to SSP(3) once it exists, and tries an unknown table
// and a bad model.
class ChangeOnce final : public Policy {
 public:
  std::string name() const override { return "change-once"; }
  void OnStatus(const PolicyEvent& e, PolicyActions& actions) override {
    if (asked_ || e.status->tables.empty()) return;
    asked_ = true;
    Consistency ssp3;
    ssp3.mode = ConsistencyMode::kSsp;
    ssp3.staleness = 3;
    change = actions.SetConsistency("t", ssp3);
    unknown = actions.SetConsistency("nosuch", ssp3);
    Consistency bad = ssp3;
    bad.staleness = -1;
    invalid = actions.SetConsistency("t", bad);
    done.store(true);
  }
  bool asked_ = false;
  std::atomic<bool> done{false};
  Status change = Status::Ok(), unknown = Status::Ok(), invalid = Status::Ok();
};

TEST(CoordinatorPolicies, APolicyChangesATablesConsistencyForEveryone) {
  auto policy = std::make_shared<ChangeOnce>();
  testing::TestClusterOptions options;
  options.num_servers = 2;
  options.num_workers = 1;
  options.policies = {policy};
  options.policy_interval_ms = 100;
  testing::TestCluster cluster(options);
  std::unique_ptr<Client> worker = cluster.Connect();
  ASSERT_NE(worker, nullptr);
  TableOptions table;
  table.name = "t";
  table.consistency.mode = ConsistencyMode::kSsp;
  table.consistency.staleness = 1;
  Result<TableId> id = worker->CreateTable(table);
  ASSERT_TRUE(id.ok()) << id.status();
  ClusterStatus status;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool changed = false;
  while (!changed && std::chrono::steady_clock::now() < deadline) {
    Result<ClusterStatus> s = QueryClusterStatus(cluster.address(), 5000);
    ASSERT_TRUE(s.ok()) << s.status();
    status = *s;
    // The change may show before the policy's later actions return.
    changed = policy->done.load() && status.table_consistency.size() == 1 &&
              ToString(status.table_consistency[0]) == "ssp(3)";
    if (!changed) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(policy->done.load());
  EXPECT_TRUE(policy->change.ok()) << policy->change;
  EXPECT_EQ(policy->unknown.code(), StatusCode::kNotFound) << policy->unknown;
  EXPECT_EQ(policy->invalid.code(), StatusCode::kInvalidArgument)
      << policy->invalid;
  ASSERT_TRUE(changed) << FormatClusterStatus(status);
  EXPECT_NE(FormatClusterStatus(status).find("tables: t (ssp(3))"),
            std::string::npos)
      << FormatClusterStatus(status);
  // The worker goes on under the new model.
  for (int c = 0; c < 3; ++c) {
    ASSERT_TRUE(
        worker->Push(*id, std::vector<Key>{1}, std::vector<float>{1}).ok());
    worker->Clock();
  }
  std::vector<float> out(1);
  ASSERT_TRUE(worker->Pull(*id, std::vector<Key>{1}, out).ok());
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_TRUE(worker->Finish().ok());
}

// Asks, once the job has a table, for 3 batches a step (and for 0).
class BatchesOnce final : public Policy {
 public:
  std::string name() const override { return "batches-once"; }
  void OnStatus(const PolicyEvent& e, PolicyActions& actions) override {
    if (asked_ || e.status->tables.empty()) return;
    asked_ = true;
    three = actions.SetBatchesPerStep(3);
    zero = actions.SetBatchesPerStep(0);
    done.store(true);
  }
  bool asked_ = false;
  std::atomic<bool> done{false};
  Status three = Status::Ok(), zero = Status::Ok();
};

// The batch-size action: the workers learn it from the data plan, and
// pushes that stand for 3 batches move a BSP (mean) table with linear
// batch scaling 3 times as far.
TEST(CoordinatorPolicies, APolicySetsTheBatchesOfAStepAndTheRateFollows) {
  auto policy = std::make_shared<BatchesOnce>();
  testing::TestClusterOptions options;
  options.num_servers = 1;
  options.num_workers = 1;
  options.policies = {policy};
  options.policy_interval_ms = 100;
  testing::TestCluster cluster(options);
  std::unique_ptr<Client> worker = cluster.Connect();
  ASSERT_NE(worker, nullptr);
  TableOptions table;
  table.name = "t";
  table.rule = UpdateRule::kSgd;
  table.learning_rate = 1.0f;
  table.consistency.mode = ConsistencyMode::kBsp;
  table.batch_scaling.rule = BatchScaling::Rule::kLinear;
  table.batch_scaling.base_pushes = 1;
  Result<TableId> id = worker->CreateTable(table);
  ASSERT_TRUE(id.ok()) << id.status();
  // Train batches (pushing nothing) until the plan's answers carry the
  // new count.
  Result<Client::Batch> b = worker->NextBatch(1000, 1, nullptr, true);
  ASSERT_TRUE(b.ok()) << b.status();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (b->batches_per_step != 3 &&
         std::chrono::steady_clock::now() < deadline) {
    ASSERT_EQ(b->kind, Client::Batch::kTrain);
    const Client::Batch trained = *b;
    b = worker->NextBatch(1000, 1, &trained, true);
    ASSERT_TRUE(b.ok()) << b.status();
    worker->Clock();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(b->batches_per_step, 3);
  // The plan carries the count before the policy's second action returns.
  for (int i = 0; i < 3000 && !policy->done.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(policy->done.load());
  EXPECT_TRUE(policy->three.ok()) << policy->three;
  EXPECT_EQ(policy->zero.code(), StatusCode::kInvalidArgument) << policy->zero;
  Result<ClusterStatus> status = QueryClusterStatus(cluster.address(), 5000);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->data_batches_per_step, 3);
  EXPECT_NE(FormatClusterStatus(*status).find("; 3 batches a worker's step"),
            std::string::npos)
      << FormatClusterStatus(*status);
  // One push standing for one batch, then one for three.
  EXPECT_EQ(worker->SetPushWeight(0).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(
      worker->Push(*id, std::vector<Key>{1}, std::vector<float>{1}).ok());
  worker->Clock();
  ASSERT_TRUE(worker->SetPushWeight(3).ok());
  ASSERT_TRUE(
      worker->Push(*id, std::vector<Key>{1}, std::vector<float>{1}).ok());
  worker->Clock();
  std::vector<float> out(1);
  ASSERT_TRUE(worker->Pull(*id, std::vector<Key>{1}, out).ok());
  EXPECT_EQ(out[0], -4.0f);
  EXPECT_TRUE(worker->Finish().ok());
}

// Workers whose steps take different batches (a worker policy's
// comm-batch): under BSP (mean) the clock's mean is over their batches, a
// push of 3 batches counting 3 times. 3 x 1 and 1 x 5 make (3 + 5) / 4 =
// 2, not (1 + 5) / 2 = 3.
TEST(CoordinatorPolicies, ABspMeanWeighsEachPushByItsBatches) {
  testing::TestClusterOptions options;
  options.num_servers = 1;
  options.num_workers = 2;
  testing::TestCluster cluster(options);
  std::unique_ptr<Client> a = cluster.Connect();
  std::unique_ptr<Client> b = cluster.Connect();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  TableOptions table;
  table.name = "t";
  table.rule = UpdateRule::kSgd;
  table.learning_rate = 1.0f;
  table.consistency.mode = ConsistencyMode::kBsp;
  Result<TableId> id = a->CreateTable(table);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(b->CreateTable(table).ok());
  ASSERT_TRUE(a->SetPushWeight(3).ok());
  ASSERT_TRUE(a->Push(*id, std::vector<Key>{1}, std::vector<float>{1}).ok());
  ASSERT_TRUE(b->Push(*id, std::vector<Key>{1}, std::vector<float>{5}).ok());
  a->Clock();
  b->Clock();
  std::vector<float> out(1);
  ASSERT_TRUE(a->Pull(*id, std::vector<Key>{1}, out).ok());
  EXPECT_EQ(out[0], -2.0f);
  EXPECT_TRUE(a->Finish().ok());
  EXPECT_TRUE(b->Finish().ok());
}

}  // namespace
}  // namespace ductile
