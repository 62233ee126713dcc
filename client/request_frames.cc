#include "client/request_frames.h"

#include <cstring>
#include <utility>
#include <vector>

namespace ductile {
namespace {

// Values of at least this many bytes per key go out as one frame per key,
// read in place, rather than gathered into one buffer.
constexpr uint64_t kFramePerKeyBytes = 16384;

}  // namespace

OutMessage BuildDataRequest(wire::Header& header,
                            const std::shared_ptr<DataOperation>& op,
                            size_t begin, size_t count,
                            std::span<const uint32_t> indices, bool push,
                            std::span<float> shm_values) {
  const bool contiguous = indices.empty();
  auto index = [&](size_t j) -> size_t {
    return contiguous ? begin + j : indices[j];
  };
  const bool variable = op->width == 0;
  uint64_t floats = 0;
  for (size_t j = 0; j < count; ++j) floats += op->length(index(j));
  if (push && !shm_values.empty() && shm_values.size() == floats) {
    float* to = shm_values.data();
    for (size_t j = 0; j < count;) {
      // A run of keys contiguous in the caller's arrays: one copy.
      size_t run = 1;
      while (j + run < count && index(j + run) == index(j) + run) ++run;
      const size_t i = index(j);
      const uint64_t run_floats =
          op->offset(i + run - 1) + op->length(i + run - 1) - op->offset(i);
      std::memcpy(to, op->values.data() + op->offset(i),
                  run_floats * sizeof(float));
      to += run_floats;
      j += run;
    }
    header.set_values_frames(0);
    push = false;  // no values frame
  } else {
    header.clear_push_shm();
  }
  const bool per_key_frames =
      push && !contiguous && count > 1 &&
      floats * sizeof(float) / count >= kFramePerKeyBytes;
  if (push) header.set_values_frames(per_key_frames ? count : 1);

  auto borrow = [&op](OutMessage& out, const void* data, size_t bytes) {
    op->Hold();
    out.AddBorrowed(data, bytes, [op] { op->Release(); });
  };
  OutMessage out;
  out.AddString(header.SerializeAsString());
  if (contiguous) {
    borrow(out, op->keys.data() + begin, count * sizeof(Key));
    if (push) {
      borrow(out, op->values.data() + op->offset(begin),
             floats * sizeof(float));
    }
    if (variable) {
      borrow(out, op->lengths.data() + begin, count * sizeof(uint32_t));
    }
    return out;
  }
  std::vector<Key> keys(count);
  for (size_t j = 0; j < count; ++j) keys[j] = op->keys[index(j)];
  out.AddOwned(std::move(keys));
  if (push && per_key_frames) {
    for (size_t j = 0; j < count; ++j) {
      const size_t i = index(j);
      borrow(out, op->values.data() + op->offset(i),
             op->length(i) * sizeof(float));
    }
  } else if (push) {
    std::vector<float> values;
    values.reserve(floats);
    for (size_t j = 0; j < count; ++j) {
      const size_t i = index(j);
      const float* v = op->values.data() + op->offset(i);
      values.insert(values.end(), v, v + op->length(i));
    }
    out.AddOwned(std::move(values));
  }
  if (variable) {
    std::vector<uint32_t> lengths(count);
    for (size_t j = 0; j < count; ++j) lengths[j] = op->lengths[index(j)];
    out.AddOwned(std::move(lengths));
  }
  return out;
}

}  // namespace ductile
