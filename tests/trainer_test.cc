// The training apps' parameter layout on the servers.
#include "train/trainer.h"

#include <cstdint>

#include "gtest/gtest.h"
#include "proto/table_config.h"

namespace ductile::train {
namespace {

uint64_t Chunks(uint64_t floats) {
  const uint64_t chunk = TensorChunkFloats(floats);
  return (floats + chunk - 1) / chunk;
}

// Logistic regression's weights (784 x 10) used to be one chunk, so one
// server held the whole model; now they are 31 keys, spread over the slots.
TEST(TensorChunks, ASmallModelSpreadsOverManyKeys) {
  EXPECT_EQ(TensorChunkFloats(7840), 256u);
  EXPECT_EQ(Chunks(7840), 31u);
  EXPECT_EQ(Chunks(10), 1u);  // a bias: one key
  // The MLP's first layer (784 x 256): 64 chunks.
  EXPECT_EQ(Chunks(784 * 256), 64u);
  // Large blocks keep chunks of at most 8192 floats.
  EXPECT_EQ(TensorChunkFloats(100'000'000), 8192u);
}

// A rate meant for another batch: linear for SGD and momentum, the square
// root for Adam and AdaGrad, unchanged without lr_for_batch or at its batch.
TEST(LearningRateForBatch, ScalesByTheRatioOrItsSquareRootByOptimizer) {
  TrainerOptions o;
  o.learning_rate = 0.01f;
  o.batch_size = 256;
  EXPECT_EQ(LearningRateForBatch(o), 0.01f);  // lr_for_batch 0: as given
  o.lr_for_batch = 64;
  o.optimizer = UpdateRule::kSgd;
  EXPECT_FLOAT_EQ(LearningRateForBatch(o), 0.04f);
  o.optimizer = UpdateRule::kMomentum;
  EXPECT_FLOAT_EQ(LearningRateForBatch(o), 0.04f);
  o.optimizer = UpdateRule::kAdam;
  EXPECT_FLOAT_EQ(LearningRateForBatch(o), 0.02f);
  o.optimizer = UpdateRule::kAdaGrad;
  EXPECT_FLOAT_EQ(LearningRateForBatch(o), 0.02f);
  o.batch_size = 16;  // a smaller batch: a smaller rate
  EXPECT_FLOAT_EQ(LearningRateForBatch(o), 0.005f);
  o.optimizer = UpdateRule::kSgd;
  EXPECT_FLOAT_EQ(LearningRateForBatch(o), 0.0025f);
  o.lr_for_batch = 16;  // meant for this batch
  EXPECT_EQ(LearningRateForBatch(o), 0.01f);
}

// The flags' schedule in epochs becomes clocks at the workers' pace.
TEST(ScheduleInClocks, EpochsBecomeClocksAtTheWorkersPace) {
  TrainerOptions o;
  o.epochs = 10;
  LearningRateSchedule s = ScheduleInClocks(o, 100.0);
  EXPECT_EQ(s.warmup_clocks, 0);
  EXPECT_EQ(s.decay, LearningRateSchedule::Decay::kNone);
  o.lr_warmup_epochs = 0.5;
  o.lr_decay = "cosine";
  o.lr_min_factor = 0.1f;
  s = ScheduleInClocks(o, 100.0);
  EXPECT_EQ(s.warmup_clocks, 50);
  EXPECT_EQ(s.decay, LearningRateSchedule::Decay::kCosine);
  EXPECT_EQ(s.total_clocks, 1000);
  EXPECT_EQ(s.min_factor, 0.1f);
  o.lr_decay = "step";
  o.lr_step_epochs = 3;
  o.lr_gamma = 0.2f;
  s = ScheduleInClocks(o, 234.5);  // 469 batches an epoch, 2 workers
  EXPECT_EQ(s.decay, LearningRateSchedule::Decay::kStep);
  EXPECT_EQ(s.step_clocks, 704);  // 703.5 rounded
  EXPECT_EQ(s.gamma, 0.2f);
  EXPECT_TRUE(ValidateTableOptions([&] {
                TableOptions t;
                t.name = "t";
                t.lr_schedule = s;
                return t;
              }())
                  .ok());
}

TEST(BatchScalingOf, TheFlagsBecomeTheTablesScalingAgainstTheWorkersNow) {
  TrainerOptions o;
  // No rule: the same setting whatever a worker counted.
  EXPECT_EQ(BatchScalingOf(o, 3).rule, BatchScaling::Rule::kNone);
  EXPECT_EQ(BatchScalingOf(o, 3).base_pushes, 1);
  EXPECT_EQ(BatchScalingOf(o, 3).ramp_clocks, 0);
  o.lr_scaling = "sqrt";
  o.lr_scaling_ramp = 7;
  const BatchScaling b = BatchScalingOf(o, 3);
  EXPECT_EQ(b.rule, BatchScaling::Rule::kSqrt);
  EXPECT_EQ(b.base_pushes, 3);
  EXPECT_EQ(b.ramp_clocks, 7);
  o.lr_scaling = "linear";
  EXPECT_EQ(BatchScalingOf(o, 2).rule, BatchScaling::Rule::kLinear);
  EXPECT_EQ(BatchScalingOf(o, 0).base_pushes, 1);
}

}  // namespace
}  // namespace ductile::train
