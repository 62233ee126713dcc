// Framing and validation of data messages (push, pull, replies).
//
// The codec knows nothing of sockets: it reads frames as byte spans, checks
// that they agree with the header, and hands out typed views into them (no
// copy unless a frame is misaligned for its element type). Every check a
// peer's message can fail returns InvalidArgument with a message naming the
// problem; nothing here aborts on input.
#ifndef DUCTILE_PROTO_CODEC_H_
#define DUCTILE_PROTO_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ductile/status.h"
#include "ductile/table.h"
#include "proto/ductile.pb.h"

namespace ductile {

using ByteSpan = std::span<const uint8_t>;

// Largest vector one key may hold, in floats (1 GiB).
inline constexpr uint32_t kMaxValueFloats = 1u << 28;

// The clocks and timeouts a message may carry. Beyond them, the sums and
// differences made of them could overflow (a parked pull's deadline, an
// SSP bound, the clock a consistency change starts from), and a push
// clock of 2^62 would hold every later checkpoint above it. A clock of -1
// means "none" in some messages.
inline constexpr int64_t kMaxClock = int64_t{1} << 40;
inline constexpr int64_t kMaxTimeoutMs = int64_t{30} * 24 * 3600 * 1000;

// Parses frame 0. Fails on garbage bytes (leaving `header` empty), an
// unknown message type, or a clock or timeout out of range (above).
Status ParseHeader(ByteSpan bytes, wire::Header* header);

// Typed, validated views of a data message's frames. Views point into the
// frames (or into `aligned_copies_` when a frame was misaligned) and live
// as long as both this object and the frames.
class DataFrames {
 public:
  // `frames` excludes the header (frames[0] is the keys frame).
  // `value_width` is the table's width (0 = variable: lengths required).
  // `expect_values` is false for pulls. `max_keys` bounds num_keys.
  Status Parse(const wire::Header& header, std::span<const ByteSpan> frames,
               uint32_t value_width, bool expect_values);

  std::span<const Key> keys() const { return keys_; }
  // Floats per key (width of key i).
  uint32_t length(size_t i) const {
    return lengths_.empty() ? width_ : lengths_[i];
  }
  std::span<const uint32_t> lengths() const { return lengths_; }
  // Key i's pushed vector (empty for pulls).
  std::span<const float> value(size_t i) const { return values_[i]; }
  std::span<const std::span<const float>> values() const { return values_; }
  uint64_t total_floats() const { return total_floats_; }

 private:
  template <typename T>
  Status View(ByteSpan frame, size_t count, const char* what,
              std::span<const T>* out);

  uint32_t width_ = 0;
  uint64_t total_floats_ = 0;
  std::span<const Key> keys_;
  std::span<const uint32_t> lengths_;
  std::vector<std::span<const float>> values_;
  std::vector<std::vector<uint64_t>> aligned_copies_;
};

// Checks a caller's arguments before a request is built: keys strictly
// increasing, lengths (if any) one per key and matching a fixed width, and
// `num_values` equal to the total width. Returns the total width.
Result<uint64_t> CheckRequestShape(std::span<const Key> keys,
                                   std::span<const uint32_t> lengths,
                                   uint32_t value_width, uint64_t num_values,
                                   const char* values_name);

// The Status carried by a reply header (an unknown code reads as kInternal).
Status StatusFromWire(const wire::Header& header);
// Writes `status` into a reply header.
void StatusToWire(const Status& status, wire::Header* header);

}  // namespace ductile

#endif  // DUCTILE_PROTO_CODEC_H_
