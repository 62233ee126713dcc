#include "apps/data_cursor.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <utility>

#include "apps/fmnist_data.h"

namespace ductile::apps {
namespace {

// Samples of `num_samples` that PartitionIndices gives `rank`.
uint64_t ShareSize(uint64_t num_samples, int rank, int world_size) {
  const uint64_t world = static_cast<uint64_t>(world_size);
  const uint64_t r = static_cast<uint64_t>(rank);
  return num_samples / world + (r < num_samples % world ? 1 : 0);
}

}  // namespace

std::string DataCursorState::ToString() const {
  return "num_samples=" + std::to_string(num_samples) +
         " seed=" + std::to_string(seed) + " rank=" + std::to_string(rank) +
         " world_size=" + std::to_string(world_size) +
         " epoch=" + std::to_string(epoch) +
         " position=" + std::to_string(position);
}

Result<DataCursorState> DataCursorState::FromString(std::string_view text) {
  DataCursorState state;
  struct Field {
    std::string_view name;
    bool seen;
  };
  Field fields[] = {{"num_samples", false}, {"seed", false},
                    {"rank", false},        {"world_size", false},
                    {"epoch", false},       {"position", false}};
  size_t pos = 0;
  while (true) {
    pos = text.find_first_not_of(' ', pos);
    if (pos == std::string_view::npos) break;
    const size_t end = std::min(text.find(' ', pos), text.size());
    const std::string_view token = text.substr(pos, end - pos);
    pos = end;
    const size_t equals = token.find('=');
    const std::string_view name = token.substr(0, equals);
    const std::string_view value = equals == std::string_view::npos
                                       ? std::string_view()
                                       : token.substr(equals + 1);
    auto bad = [&](const std::string& why) {
      return InvalidArgumentError("data cursor state '" + std::string(text) +
                                  "': " + why);
    };
    Field* field = nullptr;
    for (Field& f : fields) {
      if (f.name == name) field = &f;
    }
    if (field == nullptr || equals == std::string_view::npos) {
      return bad("unexpected '" + std::string(token) + "'");
    }
    if (field->seen) return bad(std::string(name) + " appears twice");
    field->seen = true;
    uint64_t number = 0;
    const auto [rest, error] =
        std::from_chars(value.data(), value.data() + value.size(), number);
    if (error != std::errc() || rest != value.data() + value.size() ||
        value.empty()) {
      return bad(std::string(name) + " is not a number");
    }
    const bool is_int = name == "rank" || name == "world_size";
    if (is_int &&
        number > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
      return bad(std::string(name) + " is out of range");
    }
    if (name == "num_samples") state.num_samples = number;
    if (name == "seed") state.seed = number;
    if (name == "rank") state.rank = static_cast<int>(number);
    if (name == "world_size") state.world_size = static_cast<int>(number);
    if (name == "epoch") state.epoch = number;
    if (name == "position") state.position = number;
  }
  for (const Field& f : fields) {
    if (!f.seen) {
      return InvalidArgumentError("data cursor state '" + std::string(text) +
                                  "' lacks " + std::string(f.name));
    }
  }
  return state;
}

DataCursor::DataCursor(const DataCursorState& state)
    : state_(state),
      share_(PartitionIndices(state.num_samples, state.rank, state.world_size,
                              state.seed, state.epoch)) {}

Result<DataCursor> DataCursor::Create(uint64_t num_samples, int rank,
                                      int world_size, uint64_t seed) {
  DataCursorState state;
  state.num_samples = num_samples;
  state.seed = seed;
  state.rank = rank;
  state.world_size = world_size;
  return Restore(state);
}

Result<DataCursor> DataCursor::Restore(const DataCursorState& state) {
  if (state.world_size < 1 || state.rank < 0 ||
      state.rank >= state.world_size) {
    return InvalidArgumentError(
        "data cursor rank " + std::to_string(state.rank) +
        " is not in [0, world_size=" + std::to_string(state.world_size) + ")");
  }
  if (state.num_samples > std::numeric_limits<size_t>::max()) {
    return InvalidArgumentError("data cursor num_samples too large");
  }
  const uint64_t share =
      ShareSize(state.num_samples, state.rank, state.world_size);
  // position == share happens only for an empty share (position 0): a
  // cursor moves to the next epoch as soon as it uses up its share.
  if (state.position >= share && !(share == 0 && state.position == 0)) {
    return InvalidArgumentError(
        "data cursor position " + std::to_string(state.position) +
        " is beyond rank " + std::to_string(state.rank) + "'s share of " +
        std::to_string(share) + " samples");
  }
  return DataCursor(state);
}

void DataCursor::Next(size_t batch_size, std::vector<size_t>* batch) {
  batch->clear();
  if (share_.empty()) return;
  const size_t begin = static_cast<size_t>(state_.position);
  const size_t end = begin + std::min(batch_size, share_.size() - begin);
  batch->assign(share_.begin() + begin, share_.begin() + end);
  state_.position = end;
  if (end == share_.size()) {
    state_.epoch += 1;
    state_.position = 0;
    share_ = PartitionIndices(state_.num_samples, state_.rank,
                              state_.world_size, state_.seed, state_.epoch);
  }
}

}  // namespace ductile::apps
