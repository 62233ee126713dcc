// DataCursor: where one worker is in its stream of minibatches, so that
// training can stop and resume at exactly the same sample.
//
// A cursor walks this rank's share of each epoch, PartitionIndices(
// num_samples, rank, world_size, seed, epoch) (apps/fmnist_data.h), in
// order, a batch at a time. Batches do not cross epochs: the last batch of
// an epoch may be short, and the next starts the next epoch in a fresh
// shuffle. Its whole state is the small DataCursorState, which Save returns
// and Restore takes back.
//
// Example:
//   Result<DataCursor> cursor = DataCursor::Create(data.num_samples, rank,
//                                                  world_size, seed);
//   std::vector<size_t> batch;
//   while (cursor->epoch() < num_epochs) {
//     cursor->Next(64, &batch);
//     ... train on data[batch] ...
//     if (time_to_checkpoint) store(cursor->Save().ToString());
//   }
//   // Later, maybe in another process:
//   Result<DataCursorState> state = DataCursorState::FromString(stored);
//   Result<DataCursor> resumed = DataCursor::Restore(*state);
//
// Thread safety: a DataCursor is not thread-safe; DataCursorState is a
// plain value.
#ifndef DUCTILE_APPS_DATA_CURSOR_H_
#define DUCTILE_APPS_DATA_CURSOR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ductile/status.h"

namespace ductile::apps {

// Everything a DataCursor is: which partition it walks and where it is.
struct DataCursorState {
  // The data set's size and the shuffle seed (PartitionIndices' arguments).
  uint64_t num_samples = 0;
  uint64_t seed = 0;
  // This worker's rank in [0, world_size).
  int rank = 0;
  int world_size = 1;
  // The epoch the next batch comes from, and the position of its first
  // sample in this rank's share of that epoch, in [0, share size).
  uint64_t epoch = 0;
  uint64_t position = 0;

  // "num_samples=60000 seed=7 rank=1 world_size=4 epoch=3 position=128":
  // one line of text for logs and checkpoint metadata. Stable: FromString
  // of it gives the same state back in any later version.
  std::string ToString() const;
  // Parses ToString's output: the six fields, each once, in any order.
  // InvalidArgument if a field is missing, repeated, unknown or not a
  // number in range. Does not check that the state is consistent (Restore
  // does).
  static Result<DataCursorState> FromString(std::string_view text);

  friend bool operator==(const DataCursorState&,
                         const DataCursorState&) = default;
};

class DataCursor {
 public:
  // A cursor at the start of epoch 0. InvalidArgument unless world_size >=
  // 1 and 0 <= rank < world_size.
  static Result<DataCursor> Create(uint64_t num_samples, int rank,
                                   int world_size, uint64_t seed);

  // A cursor in exactly the state Save returned, whose next batch starts at
  // the same sample. InvalidArgument if the state is inconsistent (rank out
  // of range, position beyond the rank's share of an epoch).
  static Result<DataCursor> Restore(const DataCursorState& state);

  DataCursorState Save() const { return state_; }

  // Replaces *batch with the indices of the next min(batch_size, samples
  // left in this rank's share of the epoch) samples and moves past them,
  // into the next epoch when the share is used up. A rank with an empty
  // share (num_samples < world_size) gets empty batches and stays in its
  // epoch.
  void Next(size_t batch_size, std::vector<size_t>* batch);

  // The epoch the next batch comes from.
  uint64_t epoch() const { return state_.epoch; }
  // Where the next batch starts in this rank's share of that epoch.
  uint64_t position() const { return state_.position; }
  // Samples in this rank's share of each epoch.
  size_t share_size() const { return share_.size(); }

 private:
  explicit DataCursor(const DataCursorState& state);

  DataCursorState state_;
  // This rank's share of state_.epoch, in order.
  std::vector<size_t> share_;
};

}  // namespace ductile::apps

#endif  // DUCTILE_APPS_DATA_CURSOR_H_
