// The gradient noise scale the servers estimate from the workers' pushes,
// against an oracle computed here from the gradients the test pushed.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "ductile/admin.h"
#include "ductile/table.h"
#include "gtest/gtest.h"
#include "server/noise_monitor.h"
#include "tests/test_cluster.h"

namespace ductile {
namespace {

using std::chrono::steady_clock;

TEST(NoiseMonitor, SamplesAboutOneKeyInN) {
  GradientNoiseMonitor all(1, 0.9);
  GradientNoiseMonitor off(0, 0.9);
  GradientNoiseMonitor eighth(8, 0.9);
  EXPECT_FALSE(off.enabled());
  int sampled = 0;
  constexpr int kKeys = 80000;
  for (Key key = 0; key < kKeys; ++key) {
    EXPECT_TRUE(all.Sampled(3, key));
    EXPECT_FALSE(off.Sampled(3, key));
    sampled += eighth.Sampled(3, key) ? 1 : 0;
  }
  EXPECT_GT(sampled, kKeys / 8 * 9 / 10);
  EXPECT_LT(sampled, kKeys / 8 * 11 / 10);
  // Another table samples other keys.
  int same = 0;
  for (Key key = 0; key < kKeys; ++key) {
    same += eighth.Sampled(3, key) && eighth.Sampled(4, key) ? 1 : 0;
  }
  EXPECT_LT(same, sampled / 4);
}

// One push of `worker` in `clock`: key k's gradient is {v, v}.
void PushTo(GradientNoiseMonitor& m, int32_t worker, int64_t clock,
            const std::vector<Key>& keys, float v, int32_t weight = 1) {
  const std::vector<float> g = {v, v};
  std::vector<std::span<const float>> values(keys.size(), g);
  m.OnPush(1, worker, clock, keys, values, weight);
}

// The noise scale in worker batches (for AdaScale) counts a push standing
// for m batches as the mean of m: its trace times m. Clocks of mixed
// weights are left out of it, and its averages start at 0.
TEST(NoiseMonitor, TheNoiseScaleInWorkerBatchesCountsThePushesWeights) {
  GradientNoiseMonitor m(1, 0.5);
  const std::vector<Key> keys = {1, 2};
  EXPECT_EQ(m.worker_noise_scale(), 0);
  // Clock 0 as in the test below (|G|^2 = 12, tr/b = 8), one batch each:
  // 8 / 12 in worker batches.
  PushTo(m, 0, 0, keys, 1);
  PushTo(m, 1, 0, keys, 3);
  ASSERT_TRUE(m.OnServerClock(1));
  EXPECT_EQ(m.worker_clocks(), 1u);
  EXPECT_DOUBLE_EQ(m.worker_noise_scale(), 8.0 / 12.0);
  // Clock 1, the same gradients standing for 3 batches each: the step
  // batch's trace 8 is a third of a worker batch's, 24. Averages (weight
  // 0.5, from 0): |G|^2 0.25 * 12 + 0.5 * 12 = 9, tr 0.25 * 8 + 0.5 * 24
  // = 14.
  PushTo(m, 0, 1, keys, 1, 3);
  PushTo(m, 1, 1, keys, 3, 3);
  ASSERT_TRUE(m.OnServerClock(2));
  EXPECT_EQ(m.worker_clocks(), 2u);
  EXPECT_DOUBLE_EQ(m.worker_noise_scale(), 14.0 / 9.0);
  // The step-batch estimate is that of the pushes as they are.
  EXPECT_DOUBLE_EQ(m.noise_trace(), 8);
  // Clock 2 of mixed weights: folded into the step-batch averages only.
  PushTo(m, 0, 2, keys, 1, 1);
  PushTo(m, 1, 2, keys, 3, 2);
  ASSERT_TRUE(m.OnServerClock(3));
  EXPECT_EQ(m.clocks(), 3u);
  EXPECT_EQ(m.worker_clocks(), 2u);
  EXPECT_DOUBLE_EQ(m.worker_noise_scale(), 14.0 / 9.0);
}

TEST(NoiseMonitor, FoldsAClockOnceEveryWorkerFinishedIt) {
  GradientNoiseMonitor m(1, 0.5);
  const std::vector<Key> keys = {1, 2};
  // Clock 0: workers' gradients 1 and 3 on 4 coordinates: S = (4 + 36) / 2
  // = 20, B = 4 * 2^2 = 16; |G|^2 = (2*16 - 20) / 1 = 12, tr/b = 2 * 4 = 8.
  PushTo(m, 0, 0, keys, 1);
  PushTo(m, 1, 0, keys, 3);
  EXPECT_FALSE(m.OnServerClock(0));  // clock 0 not finished by all
  EXPECT_TRUE(m.OnServerClock(1));
  EXPECT_EQ(m.clocks(), 1u);
  EXPECT_DOUBLE_EQ(m.gradient_sq(), 12);
  EXPECT_DOUBLE_EQ(m.noise_trace(), 8);
  // A late push of a folded clock changes nothing; one worker alone gives
  // nothing to compare.
  PushTo(m, 0, 0, keys, 100);
  PushTo(m, 0, 1, keys, 5);
  EXPECT_FALSE(m.OnServerClock(2));
  EXPECT_EQ(m.clocks(), 1u);
  // Clock 2, equal gradients: no noise; averaged with weight 0.5.
  PushTo(m, 0, 2, keys, 2);
  PushTo(m, 1, 2, keys, 2);
  EXPECT_TRUE(m.OnServerClock(3));
  EXPECT_DOUBLE_EQ(m.gradient_sq(), 0.5 * 12 + 0.5 * 16);
  EXPECT_DOUBLE_EQ(m.noise_trace(), 0.5 * 8);
  // A rollback forgets the open clocks, not the averages.
  PushTo(m, 0, 3, keys, 1);
  m.Reset();
  PushTo(m, 1, 3, keys, 1);
  EXPECT_FALSE(m.OnServerClock(4));
  EXPECT_EQ(m.clocks(), 2u) << "a clock of one worker was folded";
}

// Workers far apart: clocks past the bounds are left out whole, so the
// clocks open already (next to fold) are still estimated.
// A clock of many sampled keys is not freed where it is dropped (folded,
// left out past the bound on bytes, or forgotten by Reset): its sums are
// handed over, once, for the owner to free elsewhere. Smaller ones are
// freed in place. Folding is the same either way.
TEST(NoiseMonitor, TheSumsOfALargeDroppedClockAreHandedOverToBeFreed) {
  const size_t large = GradientNoiseMonitor::kFreeElsewhereKeys;
  std::vector<Key> many(large);
  for (size_t i = 0; i < large; ++i) many[i] = i;
  const std::vector<Key> few = {1, 2};
  // The sizes of the sums handed over, since the last call.
  std::vector<size_t> handed;
  auto take = [&] { return std::exchange(handed, {}); };
  auto hand_over = [&](GradientNoiseMonitor& m) {
    m.set_free_elsewhere([&](GradientNoiseMonitor::Sums sums) {
      handed.push_back(sums.size());
    });
  };

  GradientNoiseMonitor m(1, 0.9);
  hand_over(m);
  PushTo(m, 0, 0, few, 1);
  PushTo(m, 1, 0, few, 3);
  EXPECT_TRUE(m.OnServerClock(1));  // folded, small: freed in place
  EXPECT_TRUE(take().empty());
  PushTo(m, 0, 1, many, 1);
  PushTo(m, 1, 1, many, 3);
  EXPECT_TRUE(m.OnServerClock(2));  // folded, large: handed over
  EXPECT_EQ(m.clocks(), 2u);
  EXPECT_EQ(take(), std::vector<size_t>{large});
  EXPECT_FALSE(m.OnServerClock(3));  // no clock to fold: nothing more
  EXPECT_TRUE(take().empty());

  // Left out past the bound on bytes: its sums so far are handed over.
  GradientNoiseMonitor bounded(
      1, 0.9,
      large * (2 * sizeof(float) + GradientNoiseMonitor::kKeyOverheadBytes));
  hand_over(bounded);
  PushTo(bounded, 0, 0, many, 1);
  EXPECT_TRUE(take().empty());
  PushTo(bounded, 0, 0, {Key{large}}, 1);  // one key more: past the bound
  EXPECT_EQ(take(), std::vector<size_t>{large + 1});  // with that one
  PushTo(bounded, 1, 0, many, 3);  // the clock stays left out
  EXPECT_TRUE(take().empty());
  EXPECT_FALSE(bounded.OnServerClock(1));
  EXPECT_EQ(bounded.clocks(), 0u);

  // Forgotten by a rollback's Reset.
  GradientNoiseMonitor reset(1, 0.9);
  hand_over(reset);
  PushTo(reset, 0, 5, many, 1);
  reset.Reset();
  EXPECT_EQ(take(), std::vector<size_t>{large});

  // With no one to hand them to, they are freed in place.
  GradientNoiseMonitor alone(1, 0.9);
  PushTo(alone, 0, 0, many, 1);
  alone.Reset();
  EXPECT_TRUE(take().empty());
}

TEST(NoiseMonitor, ClocksPastItsBoundsAreLeftOutWhole) {
  GradientNoiseMonitor m(1, 0.9);
  const std::vector<Key> keys = {1};
  const int64_t open = GradientNoiseMonitor::kMaxOpenClocks;
  for (int64_t clock = 0; clock <= open; ++clock) PushTo(m, 0, clock, keys, 1);
  for (int64_t clock = 0; clock <= open; ++clock) PushTo(m, 1, clock, keys, 3);
  EXPECT_TRUE(m.OnServerClock(open + 1));
  EXPECT_EQ(m.clocks(), static_cast<uint64_t>(open));

  // A bound on bytes: a second key would pass it, so clock 0 goes whole
  // (even its first key), and its later pushes too.
  GradientNoiseMonitor small(1, 0.9, 2 * sizeof(float) + 64);
  PushTo(small, 0, 0, {1}, 1);
  PushTo(small, 0, 0, {2}, 1);
  PushTo(small, 1, 0, {1}, 3);
  PushTo(small, 0, 1, {1}, 1);
  PushTo(small, 1, 1, {1}, 3);
  EXPECT_TRUE(small.OnServerClock(2));
  EXPECT_EQ(small.clocks(), 1u);  // clock 1 only
  EXPECT_DOUBLE_EQ(small.gradient_sq(), 12.0 / 2);
}

// The per-clock estimates of McCandlish et al. (appendix A.1), averaged
// as the servers average them.
struct Oracle {
  double smoothing;
  double gradient_sq = 0;
  double noise_trace = 0;
  int clocks = 0;

  void Add(const std::vector<std::vector<float>>& gradients) {
    const double n = static_cast<double>(gradients.size());
    const size_t d = gradients[0].size();
    double small_sq = 0;
    std::vector<double> mean(d, 0.0);
    for (const auto& g : gradients) {
      for (size_t j = 0; j < d; ++j) {
        small_sq += double{g[j]} * g[j] / n;
        mean[j] += g[j] / n;
      }
    }
    double big_sq = 0;
    for (double m : mean) big_sq += m * m;
    const double g2 = (n * big_sq - small_sq) / (n - 1);
    const double trace = n * (small_sq - big_sq) / (n - 1);
    if (clocks++ == 0) {
      gradient_sq = g2;
      noise_trace = trace;
    } else {
      gradient_sq = smoothing * gradient_sq + (1 - smoothing) * g2;
      noise_trace = smoothing * noise_trace + (1 - smoothing) * trace;
    }
  }
};

// Four workers push gradients mu + noise (per coordinate: mean 0.5,
// standard deviation 1, over 64 coordinates) for 300 clocks to two servers.
// The servers' averages, added up, are the oracle's over the whole model;
// the noise scale is near its true value, 64 / (64 * 0.25) = 4 batches.
TEST(NoiseScale, TheServersEstimateMatchesTheGradientsPushed) {
  testing::TestClusterOptions options;
  options.num_servers = 2;
  options.server.noise_scale_sample = 1;
  testing::TestCluster cluster(options);
  constexpr int kWorkers = 4;
  constexpr int kClocks = 300;
  std::vector<std::unique_ptr<Client>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.push_back(cluster.Connect());
    ASSERT_NE(workers.back(), nullptr);
  }
  TableOptions table;
  table.name = "noisy";
  table.value_width = 4;
  table.rule = UpdateRule::kSgd;
  auto id = workers[0]->CreateTable(table);
  ASSERT_TRUE(id.ok()) << id.status();
  for (auto& w : workers) ASSERT_TRUE(w->GetTable(table.name).ok());
  std::vector<Key> keys(16);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = 1000 + 7 * i;
  const size_t d = keys.size() * 4;

  std::mt19937_64 random(12345);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  Oracle oracle{GradientNoiseMonitor::kDefaultSmoothing};
  for (int clock = 0; clock < kClocks; ++clock) {
    std::vector<std::vector<float>> gradients(kWorkers, std::vector<float>(d));
    for (auto& g : gradients) {
      for (float& v : g) v = 0.5f + noise(random);
    }
    for (int w = 0; w < kWorkers; ++w) {
      Status pushed = workers[w]->Push(*id, keys, gradients[w]);
      ASSERT_TRUE(pushed.ok()) << pushed;
    }
    for (auto& w : workers) w->Clock();
    oracle.Add(gradients);
  }

  // Clock kClocks - 1 is folded once every worker's CLOCK reached the
  // servers.
  double gradient_sq = 0;
  double noise_trace = 0;
  const auto deadline = steady_clock::now() + std::chrono::seconds(20);
  while (true) {
    gradient_sq = noise_trace = 0;
    bool all = true;
    for (int s = 0; s < cluster.num_servers(); ++s) {
      const ServerCounters c = cluster.server(s).counters();
      all = all && c.gns_clocks == kClocks;
      gradient_sq += c.gns_gradient_sq;
      noise_trace += c.gns_noise_trace;
    }
    if (all) break;
    ASSERT_LT(steady_clock::now(), deadline)
        << "the servers did not fold every clock";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NEAR(gradient_sq, oracle.gradient_sq,
              1e-5 * std::abs(oracle.gradient_sq));
  EXPECT_NEAR(noise_trace, oracle.noise_trace,
              1e-5 * std::abs(oracle.noise_trace));
  const double scale = noise_trace / gradient_sq;
  EXPECT_GT(scale, 3.4);
  EXPECT_LT(scale, 4.7);

  // The status adds the servers' shares up the same way, once the
  // heartbeats of both carry them.
  const auto folded_everywhere = [&](const ClusterStatus& s) {
    int servers = 0;
    for (const MemberStatus& m : s.members) {
      if (m.role != "server") continue;
      if (m.counters.gns_clocks != kClocks) return false;
      ++servers;
    }
    return servers == cluster.num_servers();
  };
  Result<ClusterStatus> status = QueryClusterStatus(cluster.address(), 10000);
  while (status.ok() && !folded_everywhere(*status) &&
         steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    status = QueryClusterStatus(cluster.address(), 10000);
  }
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(folded_everywhere(*status)) << FormatClusterStatus(*status);
  ASSERT_EQ(status->noise_scale_clocks, static_cast<uint64_t>(kClocks));
  EXPECT_NEAR(status->noise_scale, scale, 1e-9 * scale);
  EXPECT_NE(FormatClusterStatus(*status).find("gradient noise scale: "),
            std::string::npos);
  for (auto& w : workers) EXPECT_TRUE(w->Finish().ok());
}

// One worker gives one batch size only: nothing to estimate, and nothing
// is reported. A server with the monitor off keeps no state for it.
TEST(NoiseScale, OneWorkerOrTheMonitorOffReportsNothing) {
  for (uint32_t sample : {1u, 0u}) {
    testing::TestClusterOptions options;
    options.num_servers = 1;
    options.server.noise_scale_sample = sample;
    testing::TestCluster cluster(options);
    std::vector<std::unique_ptr<Client>> workers;
    for (int w = 0; w < (sample == 0 ? 2 : 1); ++w) {
      workers.push_back(cluster.Connect());
      ASSERT_NE(workers.back(), nullptr);
    }
    TableOptions table;
    table.name = "quiet";
    table.rule = UpdateRule::kSgd;
    auto id = workers[0]->CreateTable(table);
    ASSERT_TRUE(id.ok()) << id.status();
    for (auto& w : workers) ASSERT_TRUE(w->GetTable(table.name).ok());
    const std::vector<Key> keys = {1, 2};
    for (int clock = 0; clock < 5; ++clock) {
      for (auto& w : workers) {
        Status pushed = w->Push(*id, keys, std::vector<float>{1, 2});
        ASSERT_TRUE(pushed.ok()) << pushed;
        w->Clock();
      }
    }
    // Pulls after the last clock: every worker's CLOCKs reached the
    // server before its pull.
    std::vector<float> out(2);
    for (auto& w : workers) ASSERT_TRUE(w->Pull(*id, keys, out).ok());
    EXPECT_EQ(cluster.server(0).counters().min_clock, 5);
    const ServerCounters c = cluster.server(0).counters();
    EXPECT_EQ(c.gns_clocks, 0u) << "sample " << sample;
    EXPECT_EQ(c.gns_gradient_sq, 0.0);
    for (auto& w : workers) EXPECT_TRUE(w->Finish().ok());
  }
}

// AdaScale's gain is one for the whole model: the coordinator adds the
// servers' shares up and sends the sum back, and every server scales by it
// rather than by its own share's noise scale. Keys 0, 4, 8, ... are far
// noisier than the rest, so the two servers' own estimates differ.
TEST(NoiseScale, EveryServerScalesByTheJobsNoiseScale) {
  testing::TestClusterOptions options;
  options.num_servers = 2;
  options.server.noise_scale_sample = 1;
  testing::TestCluster cluster(options);
  constexpr int kWorkers = 2;
  constexpr int kClocks = 2 * static_cast<int>(kAdaScaleMinClocks);
  std::vector<std::unique_ptr<Client>> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.push_back(cluster.Connect());
    ASSERT_NE(workers.back(), nullptr);
  }
  TableOptions table;
  table.name = "uneven";
  table.value_width = 1;
  table.rule = UpdateRule::kSgd;
  auto id = workers[0]->CreateTable(table);
  ASSERT_TRUE(id.ok()) << id.status();
  for (auto& w : workers) ASSERT_TRUE(w->GetTable(table.name).ok());
  std::vector<Key> keys(24);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<Key>(i);
  std::mt19937_64 random(7);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (int clock = 0; clock < kClocks; ++clock) {
    for (auto& w : workers) {
      std::vector<float> g(keys.size());
      for (size_t i = 0; i < g.size(); ++i) {
        g[i] = 0.5f + (i % 4 == 0 ? 4.0f : 0.2f) * noise(random);
      }
      Status pushed = w->Push(*id, keys, g);
      ASSERT_TRUE(pushed.ok()) << pushed;
    }
    for (auto& w : workers) w->Clock();
  }

  // Once both servers folded every clock and heard back from the
  // coordinator, each scales by the sum of the shares.
  const auto own = [](const ServerCounters& c) {
    return c.gns_batch_noise_trace / c.gns_batch_gradient_sq;
  };
  double job = 0;
  ServerCounters c[2];
  const auto deadline = steady_clock::now() + std::chrono::seconds(20);
  while (true) {
    for (int s = 0; s < 2; ++s) c[s] = cluster.server(s).counters();
    job = (c[0].gns_batch_noise_trace + c[1].gns_batch_noise_trace) /
          (c[0].gns_batch_gradient_sq + c[1].gns_batch_gradient_sq);
    const bool folded =
        c[0].gns_batch_clocks == kClocks && c[1].gns_batch_clocks == kClocks;
    if (folded && std::abs(c[0].adascale_noise_scale - job) < 1e-9 * job &&
        std::abs(c[1].adascale_noise_scale - job) < 1e-9 * job) {
      break;
    }
    ASSERT_LT(steady_clock::now(), deadline)
        << "clocks " << c[0].gns_batch_clocks << " " << c[1].gns_batch_clocks
        << ", job " << job << ", in use " << c[0].adascale_noise_scale << " "
        << c[1].adascale_noise_scale;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // The servers' own estimates differ from each other and from the job's:
  // each would have scaled by another gain.
  EXPECT_GT(std::abs(own(c[0]) - own(c[1])), 0.2 * job)
      << own(c[0]) << " " << own(c[1]);
  EXPECT_GT(std::abs(own(c[0]) - job), 0.05 * job);
  EXPECT_GT(std::abs(own(c[1]) - job), 0.05 * job);
  for (auto& w : workers) EXPECT_TRUE(w->Finish().ok());
}

}  // namespace
}  // namespace ductile
