// Update rules against hand-computed arithmetic, and the initializers'
// determinism and distributions.
#include "util/update_rule.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "server/initializer.h"

namespace ductile {
namespace {

constexpr double kTolerance = 1e-6;

TableOptions Rule(UpdateRule rule) {
  TableOptions t;
  t.name = "t";
  t.rule = rule;
  return t;
}

// One key's value with its optimizer state, updated by a kernel.
struct KeyState {
  KeyState(const UpdateRuleKernel& kernel, std::vector<float> w)
      : kernel(kernel),
        value(std::move(w)),
        state(kernel.state_floats(value.size()), 0.0f) {}
  void Push(const std::vector<float>& g) {
    ASSERT_EQ(g.size(), value.size());
    kernel.Apply(value, g, state, &steps);
  }
  const UpdateRuleKernel& kernel;
  std::vector<float> value;
  std::vector<float> state;
  int64_t steps = 0;
};

TEST(UpdateRuleKernel, KeepsTheDocumentedStateFloatsPerValue) {
  EXPECT_EQ(
      UpdateRuleKernel(Rule(UpdateRule::kAssign), nullptr).state_per_value(),
      0u);
  EXPECT_EQ(UpdateRuleKernel(Rule(UpdateRule::kAdd), nullptr).state_per_value(),
            0u);
  EXPECT_EQ(UpdateRuleKernel(Rule(UpdateRule::kSgd), nullptr).state_per_value(),
            0u);
  EXPECT_EQ(
      UpdateRuleKernel(Rule(UpdateRule::kMomentum), nullptr).state_per_value(),
      1u);
  EXPECT_EQ(
      UpdateRuleKernel(Rule(UpdateRule::kAdaGrad), nullptr).state_per_value(),
      1u);
  EXPECT_EQ(
      UpdateRuleKernel(Rule(UpdateRule::kAdam), nullptr).state_per_value(), 2u);
  CustomRule custom{
      [](std::span<float>, std::span<const float>, std::span<float>) {}, 3};
  EXPECT_EQ(
      UpdateRuleKernel(Rule(UpdateRule::kCustom), &custom).state_per_value(),
      3u);
}

TEST(UpdateRuleKernel, AssignReplacesTheValue) {
  UpdateRuleKernel kernel(Rule(UpdateRule::kAssign), nullptr);
  KeyState k(kernel, {1.0f, 2.0f});
  k.Push({5.0f, -3.0f});  // w = g = [5, -3]
  EXPECT_NEAR(k.value[0], 5.0, kTolerance);
  EXPECT_NEAR(k.value[1], -3.0, kTolerance);
  k.Push({0.5f, 0.25f});  // w = g = [0.5, 0.25]
  EXPECT_NEAR(k.value[0], 0.5, kTolerance);
  EXPECT_NEAR(k.value[1], 0.25, kTolerance);
  EXPECT_EQ(k.steps, 2);
}

TEST(UpdateRuleKernel, AddAccumulatesThePushes) {
  UpdateRuleKernel kernel(Rule(UpdateRule::kAdd), nullptr);
  KeyState k(kernel, {1.0f, 2.0f});
  k.Push({0.5f, -1.0f});  // [1 + 0.5, 2 - 1] = [1.5, 1]
  EXPECT_NEAR(k.value[0], 1.5, kTolerance);
  EXPECT_NEAR(k.value[1], 1.0, kTolerance);
  k.Push({0.25f, 0.25f});  // [1.75, 1.25]
  EXPECT_NEAR(k.value[0], 1.75, kTolerance);
  EXPECT_NEAR(k.value[1], 1.25, kTolerance);
  k.Push({-1.75f, 10.0f});  // [0, 11.25]
  EXPECT_NEAR(k.value[0], 0.0, kTolerance);
  EXPECT_NEAR(k.value[1], 11.25, kTolerance);
}

TEST(UpdateRuleKernel, SgdStepsAgainstTheGradientScaledByTheLearningRate) {
  TableOptions t = Rule(UpdateRule::kSgd);
  t.learning_rate = 0.1f;
  UpdateRuleKernel kernel(t, nullptr);
  KeyState k(kernel, {1.0f, -2.0f});
  k.Push({2.0f, 4.0f});  // [1 - 0.1*2, -2 - 0.1*4] = [0.8, -2.4]
  EXPECT_NEAR(k.value[0], 0.8, kTolerance);
  EXPECT_NEAR(k.value[1], -2.4, kTolerance);
  k.Push({-1.0f, 0.5f});  // [0.8 + 0.1, -2.4 - 0.05] = [0.9, -2.45]
  EXPECT_NEAR(k.value[0], 0.9, kTolerance);
  EXPECT_NEAR(k.value[1], -2.45, kTolerance);
}

TEST(LearningRateFactor, WarmsUpLinearlyThenDecaysByStepsOrACosine) {
  LearningRateSchedule s;
  EXPECT_EQ(LearningRateFactor(s, 0), 1.0f);  // constant unless set
  EXPECT_EQ(LearningRateFactor(s, 1'000'000), 1.0f);
  s.warmup_clocks = 4;
  EXPECT_EQ(LearningRateFactor(s, -3), 0.25f);  // as clock 0
  EXPECT_EQ(LearningRateFactor(s, 0), 0.25f);
  EXPECT_EQ(LearningRateFactor(s, 1), 0.5f);
  EXPECT_EQ(LearningRateFactor(s, 3), 1.0f);
  EXPECT_EQ(LearningRateFactor(s, 4), 1.0f);
  s.decay = LearningRateSchedule::Decay::kStep;
  s.step_clocks = 10;
  s.gamma = 0.5f;
  EXPECT_EQ(LearningRateFactor(s, 13), 1.0f);  // 9 clocks after warm-up
  EXPECT_EQ(LearningRateFactor(s, 14), 0.5f);
  EXPECT_EQ(LearningRateFactor(s, 33), 0.25f);
  EXPECT_EQ(LearningRateFactor(s, 34), 0.125f);
  s.decay = LearningRateSchedule::Decay::kCosine;
  s.total_clocks = 104;  // 100 clocks of cosine
  s.min_factor = 0.2f;
  EXPECT_NEAR(LearningRateFactor(s, 4), 1.0, 1e-6);
  EXPECT_NEAR(LearningRateFactor(s, 54), 0.6, 1e-6);  // half-way
  EXPECT_NEAR(LearningRateFactor(s, 29), 0.2 + 0.8 * 0.5 * (1 + std::sqrt(0.5)),
              1e-6);  // a quarter: cos(pi / 4)
  EXPECT_NEAR(LearningRateFactor(s, 104), 0.2, 1e-6);
  EXPECT_NEAR(LearningRateFactor(s, 5000), 0.2, 1e-6);  // kept after
}

TEST(UpdateRuleKernel, TheLearningRateFactorScalesEveryRulesStep) {
  TableOptions t = Rule(UpdateRule::kSgd);
  t.learning_rate = 0.5f;
  UpdateRuleKernel kernel(t, nullptr);
  std::vector<float> w = {1.0f};
  int64_t steps = 0;
  kernel.Apply(w, std::vector<float>{2.0f}, {}, &steps, 0.25f);
  EXPECT_EQ(w[0], 1.0f - 0.5f * 0.25f * 2.0f);
  // Adam's step is the learning rate (times the factor) at first.
  TableOptions a = Rule(UpdateRule::kAdam);
  a.learning_rate = 0.1f;
  UpdateRuleKernel adam(a, nullptr);
  std::vector<float> v = {0.0f}, state(2, 0.0f);
  steps = 0;
  adam.Apply(v, std::vector<float>{3.0f}, state, &steps, 0.5f);
  EXPECT_NEAR(v[0], -0.05, 1e-6);
  // The kernel's own factor follows the table's schedule.
  a.lr_schedule.warmup_clocks = 10;
  EXPECT_EQ(UpdateRuleKernel(a, nullptr).Factor(4), 0.5f);
}

TEST(UpdateRuleKernel, MomentumKeepsAVelocityPerValue) {
  TableOptions t = Rule(UpdateRule::kMomentum);
  t.learning_rate = 0.1f;
  t.momentum = 0.9f;
  UpdateRuleKernel kernel(t, nullptr);
  KeyState k(kernel, {1.0f, 0.0f});
  // Element 0: v = 0.9*0 + 1 = 1;            w = 1 - 0.1*1 = 0.9
  // Element 1: v = 0.9*0 + 0 = 0;            w = 0
  k.Push({1.0f, 0.0f});
  EXPECT_NEAR(k.value[0], 0.9, kTolerance);
  EXPECT_NEAR(k.value[1], 0.0, kTolerance);
  EXPECT_NEAR(k.state[0], 1.0, kTolerance);
  // Element 0: v = 0.9*1 + 1 = 1.9;          w = 0.9 - 0.19 = 0.71
  // Element 1: v = 0.9*0 + 2 = 2;            w = 0 - 0.2 = -0.2
  k.Push({1.0f, 2.0f});
  EXPECT_NEAR(k.value[0], 0.71, kTolerance);
  EXPECT_NEAR(k.value[1], -0.2, kTolerance);
  // Element 0: v = 0.9*1.9 - 2 = -0.29;      w = 0.71 + 0.029 = 0.739
  // Element 1: v = 0.9*2 + 0 = 1.8;          w = -0.2 - 0.18 = -0.38
  k.Push({-2.0f, 0.0f});
  EXPECT_NEAR(k.value[0], 0.739, kTolerance);
  EXPECT_NEAR(k.value[1], -0.38, kTolerance);
  EXPECT_NEAR(k.state[0], -0.29, kTolerance);
  EXPECT_NEAR(k.state[1], 1.8, kTolerance);
}

TEST(UpdateRuleKernel, AdaGradScalesByTheRootOfSummedSquares) {
  TableOptions t = Rule(UpdateRule::kAdaGrad);
  t.learning_rate = 0.5f;
  t.epsilon = 0.1f;  // large, so that its place in the formula shows
  UpdateRuleKernel kernel(t, nullptr);
  KeyState k(kernel, {1.0f});
  // h = 4;  w = 1 - 0.5*2 / (sqrt(4) + 0.1) = 1 - 1/2.1 = 0.5238095
  k.Push({2.0f});
  EXPECT_NEAR(k.value[0], 0.5238095, kTolerance);
  EXPECT_NEAR(k.state[0], 4.0, kTolerance);
  // h = 5;  w = 0.5238095 - 0.5 / (2.2360680 + 0.1) = 0.5238095 - 0.2140349
  //           = 0.3097747
  k.Push({1.0f});
  EXPECT_NEAR(k.value[0], 0.3097747, kTolerance);
  // h = 9;  w = 0.3097747 + 1 / (3 + 0.1) = 0.3097747 + 0.3225806 = 0.6323553
  k.Push({-2.0f});
  EXPECT_NEAR(k.value[0], 0.6323553, kTolerance);
  EXPECT_NEAR(k.state[0], 9.0, kTolerance);
}

TEST(UpdateRuleKernel, AdamIsBiasCorrectedWithAStepCountPerKey) {
  TableOptions t = Rule(UpdateRule::kAdam);
  t.learning_rate = 0.1f;
  t.beta1 = 0.9f;
  t.beta2 = 0.999f;
  t.epsilon = 1e-8f;
  UpdateRuleKernel kernel(t, nullptr);
  KeyState k(kernel, {1.0f, 1.0f});
  // Step 1, both elements: m_hat = g, v_hat = g^2, so w -= 0.1 * sign(g).
  //   e0: g = 1     m = 0.1,    v = 0.001       w = 0.9
  //   e1: g = -0.5  m = -0.05,  v = 0.00025     w = 1.1
  k.Push({1.0f, -0.5f});
  EXPECT_EQ(k.steps, 1);
  EXPECT_NEAR(k.value[0], 0.9, kTolerance);
  EXPECT_NEAR(k.value[1], 1.1, kTolerance);
  // State layout: m for every element, then v for every element.
  EXPECT_NEAR(k.state[0], 0.1, kTolerance);
  EXPECT_NEAR(k.state[1], -0.05, kTolerance);
  EXPECT_NEAR(k.state[2], 0.001, kTolerance);
  EXPECT_NEAR(k.state[3], 0.00025, kTolerance);
  // Step 2 (c1 = 1 - 0.9^2 = 0.19, c2 = 1 - 0.999^2 = 0.001999):
  //   e0: g = 1  m = 0.19, v = 0.001999: m_hat = 1, v_hat = 1;  w = 0.8
  //   e1: g = 2  m = 0.9*-0.05 + 0.2 = 0.155
  //              v = 0.999*0.00025 + 0.001*4 = 0.00424975
  //              m_hat = 0.155/0.19 = 0.8157895
  //              v_hat = 0.00424975/0.001999 = 2.1259380
  //              w = 1.1 - 0.1*0.8157895/1.4580597
  //                = 1.1 - 0.0559503 = 1.04404965
  k.Push({1.0f, 2.0f});
  EXPECT_NEAR(k.value[0], 0.8, kTolerance);
  EXPECT_NEAR(k.value[1], 1.0440496, kTolerance);
  // Step 3 (c1 = 0.271, c2 = 0.002997001):
  //   e0: g = -1    m = 0.171 - 0.1 = 0.071, v = 0.002997001
  //                 m_hat = 0.2619926, v_hat = 1
  //                 w = 0.8 - 0.02619926 = 0.7738007
  //   e1: g = 0.25  m = 0.1395 + 0.025 = 0.1645
  //                 v = 0.0042455003 + 0.0000625 = 0.0043080003
  //                 m_hat = 0.6070111, v_hat = 1.4374370
  //                 w = 1.04404965 - 0.1*0.6070111/1.1989316
  //                   = 1.04404965 - 0.0506293 = 0.9934203
  k.Push({-1.0f, 0.25f});
  EXPECT_EQ(k.steps, 3);
  EXPECT_NEAR(k.value[0], 0.7738007, kTolerance);
  EXPECT_NEAR(k.value[1], 0.9934203, kTolerance);
}

TEST(UpdateRuleKernel, AdamCountsStepsPerKeyNotPerTable) {
  TableOptions t = Rule(UpdateRule::kAdam);
  t.learning_rate = 0.1f;
  UpdateRuleKernel kernel(t, nullptr);
  KeyState busy(kernel, {1.0f});
  busy.Push({1.0f});
  busy.Push({1.0f});
  // A key's first update is bias-corrected as step 1 however many updates
  // other keys have seen: w = 1 - 0.1 * sign(g).
  KeyState fresh(kernel, {1.0f});
  fresh.Push({-3.0f});
  EXPECT_EQ(fresh.steps, 1);
  EXPECT_NEAR(fresh.value[0], 1.1, kTolerance);
}

TEST(UpdateRuleKernel, CustomRuleGetsValuePushAndItsOwnState) {
  // w = w/2 + g + s;  s += 1
  CustomRule custom{
      [](std::span<float> w, std::span<const float> g, std::span<float> s) {
        ASSERT_EQ(w.size(), g.size());
        ASSERT_EQ(s.size(), w.size());
        for (size_t i = 0; i < w.size(); ++i) {
          w[i] = w[i] * 0.5f + g[i] + s[i];
          s[i] += 1.0f;
        }
      },
      1};
  TableOptions t = Rule(UpdateRule::kCustom);
  t.custom_rule = "halve_add";
  UpdateRuleKernel kernel(t, &custom);
  KeyState k(kernel, {2.0f, 4.0f});
  k.Push({1.0f, 1.0f});  // [1 + 1 + 0, 2 + 1 + 0] = [2, 3]; s = [1, 1]
  EXPECT_NEAR(k.value[0], 2.0, kTolerance);
  EXPECT_NEAR(k.value[1], 3.0, kTolerance);
  k.Push({0.0f, -1.0f});  // [1 + 0 + 1, 1.5 - 1 + 1] = [2, 1.5]; s = [2, 2]
  EXPECT_NEAR(k.value[0], 2.0, kTolerance);
  EXPECT_NEAR(k.value[1], 1.5, kTolerance);
  EXPECT_NEAR(k.state[0], 2.0, kTolerance);
  EXPECT_NEAR(k.state[1], 2.0, kTolerance);
}

// ---------------------------------------------------------------------------
// InitializeValue.

Initializer Uniform(float low, float high, uint64_t seed = 1) {
  Initializer init;
  init.kind = InitKind::kUniform;
  init.low = low;
  init.high = high;
  init.seed = seed;
  return init;
}

Initializer Normal(float mean, float stddev, uint64_t seed = 1) {
  Initializer init;
  init.kind = InitKind::kNormal;
  init.mean = mean;
  init.stddev = stddev;
  init.seed = seed;
  return init;
}

std::vector<float> Init(const Initializer& init, TableId table, Key key,
                        size_t width) {
  std::vector<float> v(width, -12345.0f);
  InitializeValue(init, table, key, v);
  return v;
}

TEST(InitializeValue, ZerosAndConstantFillEveryElement) {
  Initializer zeros;
  EXPECT_EQ(Init(zeros, 1, 7, 5), std::vector<float>(5, 0.0f));
  Initializer constant;
  constant.kind = InitKind::kConstant;
  constant.value = -1.5f;
  EXPECT_EQ(Init(constant, 1, 7, 5), std::vector<float>(5, -1.5f));
}

TEST(InitializeValue, IsDeterministicPerSeedTableAndKey) {
  for (const Initializer& init : {Uniform(-1, 1), Normal(0, 1)}) {
    EXPECT_EQ(Init(init, 3, 1000, 16), Init(init, 3, 1000, 16));
    // Element i does not depend on the vector's length.
    const std::vector<float> shorter = Init(init, 3, 1000, 4);
    const std::vector<float> longer = Init(init, 3, 1000, 16);
    EXPECT_TRUE(std::equal(shorter.begin(), shorter.end(), longer.begin()));
  }
}

TEST(InitializeValue, DiffersBetweenKeysTablesAndSeeds) {
  for (const Initializer& init : {Uniform(-1, 1), Normal(0, 1)}) {
    const std::vector<float> base = Init(init, 3, 1000, 8);
    EXPECT_NE(base, Init(init, 3, 1001, 8));
    EXPECT_NE(base, Init(init, 4, 1000, 8));
    Initializer reseeded = init;
    reseeded.seed = 2;
    EXPECT_NE(base, Init(reseeded, 3, 1000, 8));
  }
  // Elements of one key differ from each other too.
  const std::vector<float> v = Init(Uniform(-1, 1), 0, 0, 8);
  EXPECT_NE(v[0], v[1]);
}

TEST(InitializeValue, UniformStaysWithinLowAndHighExclusive) {
  for (const auto& [low, high] : std::vector<std::pair<float, float>>{
           {-0.05f, 0.05f}, {0.0f, 1.0f}, {-3.0f, -2.0f}}) {
    const Initializer init = Uniform(low, high);
    float lo = high, hi = low;
    double sum = 0;
    constexpr int kKeys = 1000, kWidth = 100;
    for (Key key = 0; key < kKeys; ++key) {
      for (float x : Init(init, 9, key, kWidth)) {
        lo = std::min(lo, x);
        hi = std::max(hi, x);
        sum += x;
      }
    }
    EXPECT_GE(lo, low);
    EXPECT_LT(hi, high);
    // 100k samples cover the range and centre on its middle (the standard
    // error of the mean is (high - low) / sqrt(12 * 100000) < 0.001 * width).
    const double width = high - low;
    EXPECT_LT(lo, low + 0.01 * width);
    EXPECT_GT(hi, high - 0.01 * width);
    EXPECT_NEAR(sum / (kKeys * kWidth), (low + high) / 2.0, 0.01 * width);
  }
}

// `low + float(u) * (high - low)` can round to exactly `high` when u is
// close to 1 and high's ulp is coarser than (high - low) * 2^-24; with
// [1000, 1001) about 1 draw in 30000 did. The initializer clamps below high.
TEST(InitializeValue, UniformNeverReturnsHighEvenWhereFloatRoundingWould) {
  {
    const Initializer init = Uniform(1000.0f, 1001.0f);
    for (Key key = 0; key < 1000; ++key) {
      const std::vector<float> v = Init(init, 9, key, 100);
      for (size_t i = 0; i < v.size(); ++i) {
        ASSERT_GE(v[i], 1000.0f) << "key " << key << " element " << i;
        ASSERT_LT(v[i], 1001.0f) << "key " << key << " element " << i;
      }
    }
  }
  {
    const std::vector<float> v = Init(Uniform(1.0f, 2.0f), 9, 65472, 100);
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_LT(v[i], 2.0f) << "element " << i;
    }
  }
}

TEST(InitializeValue, NormalHasTheRequestedMeanAndStddev) {
  const Initializer init = Normal(0.5f, 2.0f, 77);
  constexpr int kKeys = 1000, kWidth = 100;
  constexpr double kN = kKeys * kWidth;
  double sum = 0, sum_sq = 0;
  int within_one_sd = 0;
  for (Key key = 0; key < kKeys; ++key) {
    for (float x : Init(init, 2, key, kWidth)) {
      sum += x;
      sum_sq += double{x} * x;
      within_one_sd += std::abs(x - 0.5) < 2.0;
    }
  }
  const double mean = sum / kN;
  const double stddev = std::sqrt(sum_sq / kN - mean * mean);
  // Standard errors: mean 2/sqrt(1e5) = 0.0063, stddev 2/sqrt(2e5) = 0.0045;
  // the bounds are about eight of them.
  EXPECT_NEAR(mean, 0.5, 0.05);
  EXPECT_NEAR(stddev, 2.0, 0.04);
  // Gaussian shape, not just two moments: 68.27% within one stddev.
  EXPECT_NEAR(within_one_sd / kN, 0.6827, 0.01);
}

// Adam's v starts half a page from m for keys of 4096 floats or more (4K
// aliasing), and the layout checkpoints carry has no gap.
TEST(UpdateRuleKernel, AdamsStateHasAGapInsideAndNoneOutside) {
  for (size_t n : {size_t{3}, size_t{4095}, size_t{4096}, size_t{8192},
                   size_t{5000}, size_t{1} << 20}) {
    const size_t gap = UpdateRuleKernel::AdamGap(n);
    if (n < 4096) {
      EXPECT_EQ(gap, 0u) << n;
    } else {
      EXPECT_LT(gap, 1024u) << n;
      EXPECT_EQ((n + gap) % 1024, 512u) << n;
    }
  }
  const UpdateRuleKernel adam(Rule(UpdateRule::kAdam), nullptr);
  const UpdateRuleKernel momentum(Rule(UpdateRule::kMomentum), nullptr);
  EXPECT_EQ(adam.state_floats(8192), 2 * 8192u + 512u);
  EXPECT_EQ(momentum.state_floats(8192), 8192u);
  for (const UpdateRuleKernel* kernel : {&adam, &momentum}) {
    for (size_t n : {size_t{3}, size_t{8192}, size_t{5000}}) {
      std::vector<float> exported(kernel->state_per_value() * n);
      for (size_t i = 0; i < exported.size(); ++i) exported[i] = 0.5f * i + 1;
      std::vector<float> inside =
          kernel->ImportState(std::vector<float>(exported), n);
      ASSERT_EQ(inside.size(), kernel->state_floats(n));
      EXPECT_EQ(kernel->ExportState(inside, n), exported) << n;
      // A state of the wrong size cannot be this key's: zeros.
      EXPECT_EQ(kernel->ImportState(std::vector<float>(7, 1.0f), n),
                std::vector<float>(kernel->state_floats(n), 0.0f));
    }
  }
}

// The gap changes where v lives, not what Adam computes: a wide key ends
// where the same floats, one at a time as keys of width 1, end.
TEST(UpdateRuleKernel, AdamOnAWideKeyMatchesAdamFloatByFloat) {
  TableOptions o = Rule(UpdateRule::kAdam);
  o.learning_rate = 0.01f;
  const UpdateRuleKernel kernel(o, nullptr);
  const size_t n = 8192;
  std::vector<float> w(n), g(n), state(kernel.state_floats(n), 0.0f);
  std::vector<float> w1(n), m1(n, 0.0f), v1(n, 0.0f);
  for (size_t i = 0; i < n; ++i) w[i] = w1[i] = std::sin(0.1f * i);
  int64_t steps = 0;
  std::vector<int64_t> steps1(n, 0);
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < n; ++i) g[i] = std::cos(0.3f * i + round);
    kernel.Apply(w, g, state, &steps);
    for (size_t i = 0; i < n; ++i) {
      float mv[2] = {m1[i], v1[i]};
      kernel.Apply(std::span<float>(&w1[i], 1),
                   std::span<const float>(&g[i], 1), mv, &steps1[i]);
      m1[i] = mv[0];
      v1[i] = mv[1];
    }
  }
  EXPECT_EQ(w, w1);
  std::vector<float> exported = kernel.ExportState(state, n);
  EXPECT_EQ(std::vector<float>(exported.begin(), exported.begin() + n), m1);
  EXPECT_EQ(std::vector<float>(exported.begin() + n, exported.end()), v1);
}

TEST(BatchScaling, TheFactorIsThePushesOverTheBaseOrItsRoot) {
  BatchScaling b;
  b.base_pushes = 2;
  EXPECT_EQ(BatchScalingFactor(b, 4), 1.0f);  // kNone
  b.rule = BatchScaling::Rule::kLinear;
  EXPECT_EQ(BatchScalingFactor(b, 4), 2.0f);
  EXPECT_EQ(BatchScalingFactor(b, 1), 0.5f);
  EXPECT_EQ(BatchScalingFactor(b, 0), 1.0f);  // no pushes: nothing to scale
  b.rule = BatchScaling::Rule::kSqrt;
  EXPECT_FLOAT_EQ(BatchScalingFactor(b, 4), std::sqrt(2.0f));
  EXPECT_FLOAT_EQ(BatchScalingFactor(b, 8), 2.0f);
}

// AdaScale's gain (phi + 1) / (phi / k + 1), phi in base global batches.
TEST(BatchScalingFactor, AdaScalesGainLiesBetweenOneAndLinear) {
  BatchScaling b;
  b.rule = BatchScaling::Rule::kAdaScale;
  b.base_pushes = 2;
  // No estimate (0, negative, not finite): 1.
  EXPECT_EQ(BatchScalingFactor(b, 8), 1.0f);
  EXPECT_EQ(BatchScalingFactor(b, 8, -3.0), 1.0f);
  EXPECT_EQ(BatchScalingFactor(b, 8, std::nan("")), 1.0f);
  EXPECT_EQ(BatchScalingFactor(b, 8, HUGE_VAL), 1.0f);
  // 8 pushes over a base of 2: k = 4. A noise scale of 2 worker batches is
  // phi = 1 base batch: (1 + 1) / (1/4 + 1) = 1.6.
  EXPECT_FLOAT_EQ(BatchScalingFactor(b, 8, 2.0), 1.6f);
  // Noise that dominates: near linear (4); a gradient that dominates: near 1.
  EXPECT_NEAR(BatchScalingFactor(b, 8, 2e6), 4.0f, 1e-4);
  EXPECT_NEAR(BatchScalingFactor(b, 8, 2e-6), 1.0f, 1e-5);
  // The base size itself: 1, whatever the noise; fewer pushes: below 1.
  EXPECT_FLOAT_EQ(BatchScalingFactor(b, 2, 5.0), 1.0f);
  // k = 1/2, phi = 1: 2 / 3.
  EXPECT_FLOAT_EQ(BatchScalingFactor(b, 1, 2.0), 2.0f / 3.0f);
  // The gain grows with k and with the noise, and never passes k.
  for (int32_t pushes = 2; pushes <= 64; pushes *= 2) {
    float last = 1.0f;
    for (double noise : {0.1, 1.0, 10.0, 100.0, 1000.0}) {
      const float gain = BatchScalingFactor(b, pushes, noise);
      EXPECT_GE(gain, last) << pushes << " pushes, noise " << noise;
      EXPECT_LE(gain, pushes / 2.0f * (1 + 1e-6f));
      last = gain;
    }
  }
}

TEST(BatchScaleRamp, ANewTargetIsReachedOverTheRampsClocks) {
  BatchScaleRamp ramp(4);
  // The first clock takes its target at once: nothing was in force before.
  EXPECT_EQ(ramp.Next(0, 1.0f), 1.0f);
  EXPECT_EQ(ramp.Next(1, 1.0f), 1.0f);
  // From clock 2 on the target is 2: 1.25, 1.5, 1.75, then 2.
  EXPECT_EQ(ramp.Next(2, 2.0f), 1.25f);
  EXPECT_EQ(ramp.Next(3, 2.0f), 1.5f);
  EXPECT_EQ(ramp.Next(4, 2.0f), 1.75f);
  EXPECT_EQ(ramp.Next(5, 2.0f), 2.0f);
  EXPECT_EQ(ramp.Next(9, 2.0f), 2.0f);
  EXPECT_EQ(ramp.Next(9, 5.0f), 2.0f);  // the newest clock again: no ramp
  // A late clock (a moved-in key's) gets its own clock's factor and starts
  // nothing, whatever it asks for.
  EXPECT_EQ(ramp.Next(3, 7.0f), 1.5f);
  EXPECT_EQ(ramp.Next(10, 2.0f), 2.0f);
  // Back down, changed again half way: each ramp starts from the factor
  // the clock before had.
  EXPECT_EQ(ramp.Next(11, 1.0f), 1.75f);
  EXPECT_EQ(ramp.Next(12, 1.0f), 1.5f);
  EXPECT_EQ(ramp.Next(13, 3.0f), 1.875f);  // 1.5 + (3 - 1.5) / 4
  EXPECT_EQ(ramp.Next(16, 3.0f), 3.0f);
  // Without a ramp a change is immediate.
  BatchScaleRamp now(0);
  EXPECT_EQ(now.Next(0, 1.0f), 1.0f);
  EXPECT_EQ(now.Next(1, 2.0f), 2.0f);
  BatchScaleRamp one(1);
  EXPECT_EQ(one.Next(0, 1.0f), 1.0f);
  EXPECT_EQ(one.Next(1, 2.0f), 2.0f);
}

}  // namespace
}  // namespace ductile
