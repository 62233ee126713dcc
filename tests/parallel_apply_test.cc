// Large pushes applied in pieces on several threads: ParallelRunner runs
// every piece once, and a table with a runner ends float for float where
// one without ends, for every rule, across pieces that cut keys, and for
// BSP clocks; a server with apply_threads does the same
// through the public API.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gtest/gtest.h"
#include "server/parameter_table.h"
#include "test_cluster.h"
#include "util/parallel_runner.h"
#include "util/update_rule.h"

namespace ductile {
namespace {

TEST(ParallelRunner, RunsEveryPieceOnceJobAfterJob) {
  for (int threads : {1, 2, 5}) {
    ParallelRunner runner(threads);
    EXPECT_EQ(runner.threads(), threads);
    for (size_t pieces : {size_t{0}, size_t{1}, size_t{3}, size_t{64}}) {
      for (int job = 0; job < 50; ++job) {
        std::vector<std::atomic<int>> runs(pieces);
        runner.Run(pieces, [&](size_t i) { runs[i].fetch_add(1); });
        for (size_t i = 0; i < pieces; ++i) {
          ASSERT_EQ(runs[i].load(), 1) << threads << " threads, piece " << i;
        }
      }
    }
  }
}

TEST(ParallelRunner, WhatThePiecesWroteIsVisibleAfterRun) {
  ParallelRunner runner(4);
  std::vector<uint64_t> out(1000);  // plain memory, no atomics
  for (uint64_t job = 1; job <= 20; ++job) {
    runner.Run(out.size(), [&](size_t i) { out[i] = job * i; });
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], job * i);
  }
}

TEST(ParallelRunner, DefaultThreadsAreTheCoresUpToEight) {
  EXPECT_EQ(ParallelRunner::DefaultThreads(0), 1);
  EXPECT_EQ(ParallelRunner::DefaultThreads(1), 1);
  EXPECT_EQ(ParallelRunner::DefaultThreads(6), 6);
  EXPECT_EQ(ParallelRunner::DefaultThreads(64), 8);
}

TableOptions Table(UpdateRule rule, uint32_t width) {
  TableOptions t;
  t.name = "t";
  t.rule = rule;
  t.value_width = width;
  t.learning_rate = 0.01f;
  return t;
}

// A push request of `keys`, each `width` floats of `values`; the frames
// live in the object.
struct Push {
  Push(std::vector<Key> k, std::vector<float> v, uint32_t width)
      : keys(std::move(k)), values(std::move(v)) {
    wire::Header h;
    h.set_type(wire::PUSH);
    h.set_num_keys(keys.size());
    h.set_values_frames(1);
    ByteSpan frames[2] = {
        {reinterpret_cast<const uint8_t*>(keys.data()), keys.size() * 8},
        {reinterpret_cast<const uint8_t*>(values.data()), values.size() * 4}};
    status = request.Parse(h, frames, width, true);
  }
  std::vector<Key> keys;
  std::vector<float> values;
  DataFrames request;
  Status status;
};

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Every key's value, compared bit for bit.
void ExpectSameTables(const ParameterTable& a, const ParameterTable& b,
                      const std::vector<Key>& keys) {
  ASSERT_EQ(a.size(), b.size());
  for (Key key : keys) {
    std::vector<float> va, vb;
    ASSERT_TRUE(a.Get(key, &va));
    ASSERT_TRUE(b.Get(key, &vb));
    ASSERT_EQ(va.size(), vb.size());
    ASSERT_EQ(std::memcmp(va.data(), vb.data(), va.size() * 4), 0)
        << "key " << key;
  }
  // Optimizer state and update counts too: what a checkpoint holds.
  std::vector<EntryRecord> ra, rb;
  a.Export([](Key) { return true; }, &ra);
  b.Export([](Key) { return true; }, &rb);
  auto by_key = [](const EntryRecord& x, const EntryRecord& y) {
    return x.key < y.key;
  };
  std::sort(ra.begin(), ra.end(), by_key);
  std::sort(rb.begin(), rb.end(), by_key);
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(ra[i].steps, rb[i].steps) << "key " << ra[i].key;
    EXPECT_EQ(ra[i].state, rb[i].state) << "key " << ra[i].key;
  }
}

TEST(ParallelApply, PiecesEndFloatForFloatWhereOneThreadEnds) {
  ParallelRunner runner(4);
  std::mt19937 rng(7);
  // Widths that make pieces cut keys, keys cut pieces, and one key alone
  // larger than the parallel threshold.
  const std::vector<std::pair<uint32_t, size_t>> shapes = {
      {1000, 40}, {4096, 20}, {70000, 1}, {3, 12000}};
  for (UpdateRule rule :
       {UpdateRule::kAssign, UpdateRule::kAdd, UpdateRule::kSgd,
        UpdateRule::kMomentum, UpdateRule::kAdaGrad, UpdateRule::kAdam}) {
    for (const auto& [width, count] : shapes) {
      SCOPED_TRACE(::testing::Message()
                   << "rule " << static_cast<int>(rule) << ", " << count
                   << " keys of " << width);
      ASSERT_GE(width * count, ParameterTable::kParallelMinFloats);
      ParameterTable serial(1, Table(rule, width), nullptr);
      ParameterTable parallel(1, Table(rule, width), nullptr);
      parallel.set_runner(&runner);
      std::vector<Key> keys(count);
      for (size_t i = 0; i < count; ++i) keys[i] = 3 * i + 1;
      for (int round = 0; round < 3; ++round) {
        Push push(keys, Random(size_t{width} * count, rng), width);
        ASSERT_TRUE(push.status.ok()) << push.status;
        serial.ApplyPush(push.request, round);
        parallel.ApplyPush(push.request, round);
      }
      ExpectSameTables(serial, parallel, keys);
      EXPECT_EQ(serial.changed(), parallel.changed());
    }
  }
}

// The finiteness check of a push runs on the request thread, or in pieces
// on the runner's threads from kParallelCheckMinFloats floats: either way a
// NaN or infinity anywhere (first float, last, on either side of a key's
// edge, inside a key that spans pieces) is found, and the error names the
// key that holds the first one.
TEST(ParallelApply, ANonFiniteFloatAnywhereInALargePushIsFound) {
  const float kBad[] = {std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()};
  std::mt19937 rng(11);
  for (int threads : {1, 4}) {
    ParallelRunner runner(threads);
    for (const auto& [width, count] : std::vector<std::pair<uint32_t, size_t>>{
             {1000, 40}, {70000, 1}, {3, 12000}, {131072, 9}}) {
      ParameterTable table(1, Table(UpdateRule::kSgd, width), nullptr);
      table.set_runner(&runner);
      std::vector<Key> keys(count);
      for (size_t i = 0; i < count; ++i) keys[i] = 5 * i + 2;
      const std::vector<float> clean = Random(size_t{width} * count, rng);
      Push ok(keys, clean, width);
      ASSERT_TRUE(ok.status.ok());
      EXPECT_TRUE(table.CheckPush(ok.request).ok());
      const size_t n = clean.size();
      // The first and last floats, the middle, both sides of a key's edge,
      // and both sides of every edge between the check's pieces (at most
      // kMinPieceFloats apart: the edges of the smallest pieces).
      std::vector<size_t> positions = {0,         n - 1, n / 2,
                                       width - 1, width, n - width};
      for (size_t edge = ParameterTable::kMinPieceFloats; edge < n;
           edge += ParameterTable::kMinPieceFloats) {
        positions.push_back(edge - 1);
        positions.push_back(edge);
      }
      for (size_t k = 0; k < positions.size(); ++k) {
        const size_t at = positions[k];
        if (at >= n) continue;  // one key: no float past its edge
        for (size_t b = 0; b < 3; ++b) {
          // Every kind of bad float at each position of the small pushes;
          // one kind per position, in turn, in the large one.
          if (n >= ParameterTable::kParallelCheckMinFloats && b != k % 3) {
            continue;
          }
          const float bad = kBad[b];
          SCOPED_TRACE(::testing::Message()
                       << threads << " threads, " << count << " keys of "
                       << width << ", float " << at << " = " << bad);
          std::vector<float> values = clean;
          values[at] = bad;
          Push push(keys, values, width);
          ASSERT_TRUE(push.status.ok());
          const Status s = table.CheckPush(push.request);
          EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
          EXPECT_NE(s.message().find("key " + std::to_string(keys[at / width]) +
                                     " of table"),
                    std::string::npos)
              << s;
        }
      }
      // Two bad floats: the first key holding one is named.
      std::vector<float> values = clean;
      values[n - 1] = kBad[0];
      if (count > 1) values[width + 1] = kBad[1];
      Push push(keys, values, width);
      const Status s = table.CheckPush(push.request);
      EXPECT_NE(
          s.message().find("key " + std::to_string(keys[count > 1 ? 1 : 0]) +
                           " of table"),
          std::string::npos)
          << s;
    }
  }
}

// A wide Adam key's optimizer state leaves the table (checkpoints, slot
// moves) as m then v, 2 x width floats, and comes back to the same bits.
TEST(ParallelApply, AWideAdamKeysStateTravelsWithoutItsGap) {
  const uint32_t width = 8192;
  ParameterTable original(1, Table(UpdateRule::kAdam, width), nullptr);
  std::mt19937 rng(17);
  const std::vector<Key> keys = {4, 9};
  for (int round = 0; round < 3; ++round) {
    Push push(keys, Random(width * keys.size(), rng), width);
    ASSERT_TRUE(push.status.ok());
    // What the memory limit is checked against: the floats stored, gap
    // included.
    const uint64_t before = original.stored_floats();
    const uint64_t added = original.NewFloats(push.request);
    original.ApplyPush(push.request, round);
    EXPECT_EQ(original.stored_floats() - before, added);
  }
  std::vector<EntryRecord> saved;
  original.TakeChanges(&saved);
  ASSERT_EQ(saved.size(), 2u);
  for (const EntryRecord& e : saved) EXPECT_EQ(e.state.size(), 2u * width);
  ParameterTable restored(1, Table(UpdateRule::kAdam, width), nullptr);
  for (EntryRecord& e : saved) restored.Restore(EntryRecord(e), false);
  EXPECT_EQ(restored.stored_floats(), original.stored_floats());
  Push next(keys, Random(width * keys.size(), rng), width);
  ASSERT_TRUE(next.status.ok());
  original.ApplyPush(next.request, 3);
  restored.ApplyPush(next.request, 3);
  ExpectSameTables(original, restored, keys);
}

struct Combined {
  std::vector<float> values;
  int32_t pushes = 0;
  int32_t batches = 0;    // 0: as many as pushes
  float rate_sum = 0.0f;  // 0: a learning-rate factor of 1
};

TEST(ParallelApply, ABspClocksCombinedPushesMatchOneThread) {
  ParallelRunner runner(4);
  std::mt19937 rng(13);
  const uint32_t width = 2048;
  for (BspCombine combine : {BspCombine::kMean, BspCombine::kSum}) {
    ParameterTable serial(1, Table(UpdateRule::kMomentum, width), nullptr);
    ParameterTable parallel(1, Table(UpdateRule::kMomentum, width), nullptr);
    parallel.set_runner(&runner);
    std::vector<Key> keys;
    for (int clock = 0; clock < 3; ++clock) {
      std::unordered_map<Key, Combined> a, b;
      for (Key key = 0; key < 40; ++key) {
        if (clock == 0) keys.push_back(key);
        Combined c{Random(width, rng), 1 + static_cast<int32_t>(key % 3)};
        a[key] = c;
        b[key] = c;
      }
      // A key first pushed in a BSP clock is created by both.
      a[1000] = b[1000] = Combined{Random(width, rng), 2};
      if (clock == 0) keys.push_back(1000);
      std::vector<Status> ea, eb;
      serial.ApplyCombinedAll(a, combine, clock, &ea);
      parallel.ApplyCombinedAll(b, combine, clock, &eb);
      EXPECT_TRUE(ea.empty());
      EXPECT_TRUE(eb.empty());
    }
    ExpectSameTables(serial, parallel, keys);
    std::unordered_map<Key, Combined> wrong;
    for (Key key = 0; key < 20; ++key) {
      wrong[key] = Combined{Random(width, rng), 1};
    }
    wrong[3] = Combined{Random(width / 2, rng), 1};
    std::vector<Status> errors;
    parallel.ApplyCombinedAll(wrong, combine, 3, &errors);
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_EQ(errors[0].code(), StatusCode::kInvalidArgument);
    std::vector<float> v;
    ASSERT_TRUE(parallel.Get(3, &v));
    EXPECT_EQ(v.size(), width);
  }
}

TEST(ParallelApply, CustomRulesRunOnTheCallerOnly) {
  ParallelRunner runner(4);
  std::atomic<int> calls{0};
  std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> elsewhere{false};
  CustomRule rule{
      [&](std::span<float> w, std::span<const float> g, std::span<float>) {
        calls.fetch_add(1);
        if (std::this_thread::get_id() != caller) elsewhere = true;
        for (size_t i = 0; i < w.size(); ++i) w[i] += 2 * g[i];
      },
      0};
  TableOptions t = Table(UpdateRule::kCustom, 4096);
  t.custom_rule = "double";
  ParameterTable table(1, t, &rule);
  table.set_runner(&runner);
  std::mt19937 rng(3);
  std::vector<Key> keys(16);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  Push push(keys, Random(4096 * keys.size(), rng), 4096);
  ASSERT_TRUE(push.status.ok());
  table.ApplyPush(push.request, 0);
  EXPECT_EQ(calls.load(), 16);
  EXPECT_FALSE(elsewhere.load());
}

// Through a server: Adam pushes of 64K floats from two clients at once,
// applied by 4 threads, end where the same pushes applied in the server's
// order by one kernel end (Adam's result depends on the order; the pushes
// of each round are equal, so any order gives the same).
TEST(ParallelApply, AServerWithApplyThreadsMatchesTheKernel) {
  testing::TestClusterOptions o;
  o.num_servers = 1;
  o.server.apply_threads = 4;
  testing::TestCluster cluster(o);
  auto a = cluster.Connect();
  auto b = cluster.Connect();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const uint32_t width = 16384;
  TableOptions t = Table(UpdateRule::kAdam, width);
  t.name = "adam";
  auto table = a->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  auto info = b->GetTable("adam");
  ASSERT_TRUE(info.ok()) << info.status();
  const TableId table_b = info->id;
  const std::vector<Key> keys = {1, 2, 3, 4};
  std::mt19937 rng(5);
  UpdateRuleKernel kernel(t, nullptr);
  std::vector<std::vector<float>> expected;
  for (Key key : keys) {
    std::vector<float> v(width);
    ASSERT_TRUE(a->Pull(*table, std::span<const Key>(&key, 1), v).ok());
    expected.push_back(v);
  }
  std::vector<std::vector<float>> state(
      keys.size(), std::vector<float>(kernel.state_floats(width), 0.0f));
  std::vector<int64_t> steps(keys.size(), 0);
  for (int round = 0; round < 4; ++round) {
    const std::vector<float> g = Random(width * keys.size(), rng);
    std::thread other([&] { EXPECT_TRUE(b->Push(table_b, keys, g).ok()); });
    EXPECT_TRUE(a->Push(*table, keys, g).ok());
    other.join();
    for (size_t k = 0; k < keys.size(); ++k) {
      std::span<const float> gk(g.data() + k * width, width);
      for (int twice = 0; twice < 2; ++twice) {
        kernel.Apply(expected[k], gk, state[k], &steps[k]);
      }
    }
  }
  for (size_t k = 0; k < keys.size(); ++k) {
    std::vector<float> v(width);
    ASSERT_TRUE(a->Pull(*table, std::span<const Key>(&keys[k], 1), v).ok());
    EXPECT_EQ(v, expected[k]) << "key " << keys[k];
  }
}

// A BSP (mean) table with linear batch scaling against one worker: SGD with
// rate 1 and every push 1, so each clock moves the value by its factor.
TEST(BatchScaledTable, AClocksRateFollowsItsPushesAndRampsToANewCount) {
  ParallelRunner runner(3);
  for (bool parallel : {false, true}) {
    TableOptions t = Table(UpdateRule::kSgd, parallel ? 40000 : 2);
    t.learning_rate = 1.0f;
    t.batch_scaling.rule = BatchScaling::Rule::kLinear;
    t.batch_scaling.base_pushes = 1;
    t.batch_scaling.ramp_clocks = 4;
    ParameterTable table(1, t, nullptr);
    if (parallel) table.set_runner(&runner);
    auto clock_of = [&](int32_t pushes) {
      std::unordered_map<Key, Combined> keys;
      // `pushes` pushes of 1 summed: their mean is 1.
      keys[5] = Combined{
          std::vector<float>(t.value_width, static_cast<float>(pushes)),
          pushes};
      return keys;
    };
    // Clocks 0-1 with one worker, then two: factors 1, 1, 1.25, 1.5,
    // 1.75, 2, 2.
    const int32_t pushes[] = {1, 1, 2, 2, 2, 2, 2};
    for (int64_t c = 0; c < 7; ++c) {
      std::unordered_map<Key, Combined> keys = clock_of(pushes[c]);
      std::vector<Status> errors;
      table.ApplyCombinedAll(keys, BspCombine::kMean, c, &errors);
      ASSERT_TRUE(errors.empty());
    }
    std::vector<float> v;
    ASSERT_TRUE(table.Get(5, &v));
    EXPECT_EQ(v.front(), -10.5f) << "parallel " << parallel;
    EXPECT_EQ(v.back(), -10.5f) << "parallel " << parallel;
    // By the sum the pushes' sum carries the count already: factor 1.
    std::unordered_map<Key, Combined> summed = clock_of(2);
    std::vector<Status> errors;
    table.ApplyCombinedAll(summed, BspCombine::kSum, 7, &errors);
    ASSERT_TRUE(table.Get(5, &v));
    EXPECT_EQ(v.front(), -12.5f);
    // A rollback starts the clocks again: the first one's count is in
    // force at once, with no ramp from before.
    table.Clear();
    std::unordered_map<Key, Combined> after = clock_of(3);
    table.ApplyCombinedAll(after, BspCombine::kMean, 2, &errors);
    ASSERT_TRUE(table.Get(5, &v));
    EXPECT_EQ(v.front(), -3.0f);
    EXPECT_TRUE(errors.empty());
  }
}

// Workers that train several batches a step say so with each push
// (Header::batch_weight): the factor counts the batches, not the pushes,
// and the mean is still over the pushes.
TEST(BatchScaledTable, AClocksRateCountsTheBatchesItsPushesStandFor) {
  ParallelRunner runner(3);
  for (bool parallel : {false, true}) {
    TableOptions t = Table(UpdateRule::kSgd, parallel ? 40000 : 2);
    t.learning_rate = 1.0f;
    t.batch_scaling.rule = BatchScaling::Rule::kLinear;
    t.batch_scaling.base_pushes = 2;
    t.batch_scaling.ramp_clocks = 0;  // at once
    ParameterTable table(1, t, nullptr);
    if (parallel) table.set_runner(&runner);
    // Clock 0: two pushes of 1, one batch each: factor 1, step -1. Clock 1:
    // two pushes of 1 standing for 3 batches each (summed 3 times over,
    // BspBuffer::Add): mean 1, factor 3, step -3. Clock 2: one push of 1
    // for 2 batches, the other key's for one (the most any key had
    // counts): factor 1, step -1.
    std::unordered_map<Key, Combined> c0, c1, c2;
    c0[5] = Combined{std::vector<float>(t.value_width, 2.0f), 2, 2};
    c1[5] = Combined{std::vector<float>(t.value_width, 6.0f), 2, 6};
    c2[5] = Combined{std::vector<float>(t.value_width, 2.0f), 1, 2};
    c2[6] = Combined{std::vector<float>(t.value_width, 1.0f), 1, 1};
    int64_t clock = 0;
    for (auto* keys : {&c0, &c1, &c2}) {
      std::vector<Status> errors;
      table.ApplyCombinedAll(*keys, BspCombine::kMean, clock++, &errors);
      ASSERT_TRUE(errors.empty());
    }
    std::vector<float> v;
    ASSERT_TRUE(table.Get(5, &v));
    EXPECT_EQ(v.front(), -5.0f) << "parallel " << parallel;
    EXPECT_EQ(v.back(), -5.0f) << "parallel " << parallel;
    ASSERT_TRUE(table.Get(6, &v));
    EXPECT_EQ(v.front(), -1.0f) << "parallel " << parallel;
  }
}

// An AdaScale table steps by the gain of the noise scale its server set,
// 1 before any: SGD, rate 1, a mean update of 1 from 4 pushes (base 1).
TEST(BatchScaledTable, AnAdaScaleTableFollowsItsServersNoiseScale) {
  TableOptions t = Table(UpdateRule::kSgd, 2);
  t.learning_rate = 1.0f;
  t.batch_scaling.rule = BatchScaling::Rule::kAdaScale;
  t.batch_scaling.base_pushes = 1;
  t.batch_scaling.ramp_clocks = 0;  // at once
  ParameterTable table(1, t, nullptr);
  std::unordered_map<Key, Combined> keys;
  auto apply = [&](int64_t clock) {
    keys[5] = Combined{std::vector<float>(2, 4.0f), 4};
    std::vector<Status> errors;
    table.ApplyCombinedAll(keys, BspCombine::kMean, clock, &errors);
    ASSERT_TRUE(errors.empty());
  };
  std::vector<float> v;
  apply(0);  // no estimate yet: factor 1
  ASSERT_TRUE(table.Get(5, &v));
  EXPECT_FLOAT_EQ(v.front(), -1.0f);
  // phi = 3 worker batches, k = 4: (3 + 1) / (3/4 + 1) = 16/7.
  table.SetNoiseScale(3.0);
  apply(1);
  ASSERT_TRUE(table.Get(5, &v));
  EXPECT_FLOAT_EQ(v.front(), -1.0f - 16.0f / 7.0f);
  // Noise far above: the linear rule's 4.
  table.SetNoiseScale(1e9);
  apply(2);
  ASSERT_TRUE(table.Get(5, &v));
  EXPECT_NEAR(v.front(), -1.0f - 16.0f / 7.0f - 4.0f, 1e-4);
}

// Pushes applied one by one (async, SSP) are one worker's batch each.
TEST(BatchScaledTable, PushesAppliedOneByOneAreNotScaled) {
  TableOptions t = Table(UpdateRule::kSgd, 1);
  t.learning_rate = 1.0f;
  t.batch_scaling.rule = BatchScaling::Rule::kLinear;
  t.batch_scaling.base_pushes = 1;
  ParameterTable table(1, t, nullptr);
  Push push({4}, {1.0f}, 1);
  ASSERT_TRUE(push.status.ok());
  table.ApplyPush(push.request, 0);
  table.ApplyPush(push.request, 0);
  std::vector<float> v;
  ASSERT_TRUE(table.Get(4, &v));
  EXPECT_EQ(v[0], -2.0f);
}

}  // namespace
}  // namespace ductile
