#include "apps/data_cursor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "apps/fmnist_data.h"

namespace ductile::apps {
namespace {

DataCursor MustCreate(uint64_t n, int rank, int world, uint64_t seed) {
  Result<DataCursor> cursor = DataCursor::Create(n, rank, world, seed);
  EXPECT_TRUE(cursor.ok()) << cursor.status();
  return std::move(*cursor);
}

// The next `count` batches of `cursor`, concatenated.
std::vector<size_t> Take(DataCursor& cursor, size_t batch_size, int count) {
  std::vector<size_t> all, batch;
  for (int i = 0; i < count; ++i) {
    cursor.Next(batch_size, &batch);
    all.insert(all.end(), batch.begin(), batch.end());
  }
  return all;
}

TEST(DataCursor, WalksThisRanksPartitionInOrder) {
  DataCursor cursor = MustCreate(100, 1, 3, 42);
  EXPECT_EQ(cursor.share_size(), 33u);
  const std::vector<size_t> expected = PartitionIndices(100, 1, 3, 42, 0);
  std::vector<size_t> batch;
  cursor.Next(10, &batch);
  EXPECT_EQ(batch,
            std::vector<size_t>(expected.begin(), expected.begin() + 10));
  EXPECT_EQ(cursor.epoch(), 0u);
  EXPECT_EQ(cursor.position(), 10u);
}

TEST(DataCursor, BatchesStopAtTheEpochEndAndTheNextEpochIsReshuffled) {
  DataCursor cursor = MustCreate(100, 0, 3, 42);  // 34 samples a epoch
  std::vector<size_t> batch;
  for (int i = 0; i < 3; ++i) cursor.Next(10, &batch);
  EXPECT_EQ(cursor.position(), 30u);
  cursor.Next(10, &batch);
  EXPECT_EQ(batch.size(), 4u);  // the short last batch of epoch 0
  EXPECT_EQ(cursor.epoch(), 1u);
  EXPECT_EQ(cursor.position(), 0u);
  cursor.Next(34, &batch);
  EXPECT_EQ(batch, PartitionIndices(100, 0, 3, 42, 1));
  EXPECT_NE(batch, PartitionIndices(100, 0, 3, 42, 0));
  EXPECT_EQ(cursor.epoch(), 2u);
}

TEST(DataCursor, CoversEverySampleOncePerEpochAcrossRanks) {
  const uint64_t n = 101;
  const int world = 4;
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<size_t> seen;
    for (int rank = 0; rank < world; ++rank) {
      DataCursor cursor = MustCreate(n, rank, world, 9);
      std::vector<size_t> batch;
      // Skip to `epoch`, then take all of it.
      while (cursor.epoch() < epoch) cursor.Next(7, &batch);
      while (cursor.epoch() == epoch) {
        cursor.Next(7, &batch);
        seen.insert(seen.end(), batch.begin(), batch.end());
      }
    }
    std::sort(seen.begin(), seen.end());
    std::vector<size_t> all(n);
    for (size_t i = 0; i < n; ++i) all[i] = i;
    EXPECT_EQ(seen, all) << "epoch " << epoch;
  }
}

TEST(DataCursor, SaveAndRestoreResumesAtTheSameSample) {
  // Share of 333 a epoch: batches of 64 end epoch 0 with a short one.
  for (int before : {0, 3, 5, 6, 7, 12}) {
    SCOPED_TRACE("after " + std::to_string(before) + " batches");
    DataCursor original = MustCreate(1000, 2, 3, 5);
    Take(original, 64, before);
    const DataCursorState saved = original.Save();
    const std::vector<size_t> expected = Take(original, 64, 10);

    // Through the text form, as a checkpoint would store it.
    Result<DataCursorState> parsed =
        DataCursorState::FromString(saved.ToString());
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, saved);
    Result<DataCursor> resumed = DataCursor::Restore(*parsed);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    EXPECT_EQ(resumed->epoch(), saved.epoch);
    EXPECT_EQ(resumed->position(), saved.position);
    EXPECT_EQ(Take(*resumed, 64, 10), expected);
  }
}

TEST(DataCursor, StateTextNamesEveryField) {
  DataCursorState state;
  state.num_samples = 60000;
  state.seed = 7;
  state.rank = 1;
  state.world_size = 4;
  state.epoch = 3;
  state.position = 128;
  EXPECT_EQ(state.ToString(),
            "num_samples=60000 seed=7 rank=1 world_size=4 epoch=3 "
            "position=128");
  Result<DataCursorState> reordered = DataCursorState::FromString(
      "  epoch=3 position=128 seed=7 rank=1 world_size=4 num_samples=60000 ");
  ASSERT_TRUE(reordered.ok()) << reordered.status();
  EXPECT_EQ(*reordered, state);
}

TEST(DataCursor, MalformedStateTextIsRejected) {
  for (const char* text : {
           "",
           "num_samples=10 seed=1 rank=0 world_size=1 epoch=0",
           "num_samples=10 seed=1 rank=0 world_size=1 epoch=0 position=0 "
           "epoch=1",
           "num_samples=10 seed=1 rank=0 world_size=1 epoch=0 position=x",
           "num_samples=10 seed=1 rank=0 world_size=1 epoch=0 position=-1",
           "num_samples=10 seed=1 rank=0 world_size=1 epoch=0 position",
           "num_samples=10 seed=1 rank=0 world_size=1 epoch=0 position=0 x=1",
           "num_samples=10 seed=1 rank=99999999999 world_size=1 epoch=0 "
           "position=0",
       }) {
    EXPECT_EQ(DataCursorState::FromString(text).status().code(),
              StatusCode::kInvalidArgument)
        << text;
  }
}

TEST(DataCursor, InconsistentStatesAreInvalidArguments) {
  EXPECT_EQ(DataCursor::Create(10, 3, 3, 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DataCursor::Create(10, -1, 3, 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DataCursor::Create(10, 0, 0, 1).status().code(),
            StatusCode::kInvalidArgument);
  DataCursorState state = MustCreate(10, 0, 3, 1).Save();  // share of 4
  state.position = 3;
  EXPECT_TRUE(DataCursor::Restore(state).ok());
  state.position = 4;
  EXPECT_EQ(DataCursor::Restore(state).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(DataCursor, RankWithoutSamplesGetsEmptyBatches) {
  DataCursor cursor = MustCreate(2, 2, 3, 1);
  EXPECT_EQ(cursor.share_size(), 0u);
  std::vector<size_t> batch = {1, 2, 3};
  cursor.Next(8, &batch);
  EXPECT_TRUE(batch.empty());
  EXPECT_EQ(cursor.epoch(), 0u);
}

}  // namespace
}  // namespace ductile::apps
