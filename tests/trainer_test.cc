// The training apps' parameter layout on the servers.
#include "apps/trainer.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace ductile::apps {
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

}  // namespace
}  // namespace ductile::apps
