#include "proto/codec.h"

#include <cstring>
#include <string>

namespace ductile {

Status ParseHeader(ByteSpan bytes, wire::Header* header) {
  if (bytes.empty()) return InvalidArgumentError("empty header frame");
  if (!header->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    header->Clear();  // nothing of it is to be trusted, not even its seq
    return InvalidArgumentError("header frame is not a valid protobuf (" +
                                std::to_string(bytes.size()) + " bytes)");
  }
  if (!wire::MessageType_IsValid(header->type()) ||
      header->type() == wire::MESSAGE_UNKNOWN) {
    return InvalidArgumentError("unknown message type " +
                                std::to_string(header->type()));
  }
  if (header->clock() < -1 || header->clock() > kMaxClock) {
    return InvalidArgumentError("clock " + std::to_string(header->clock()) +
                                " is out of range (-1 to " +
                                std::to_string(kMaxClock) + ")");
  }
  if (header->timeout_ms() < 0 || header->timeout_ms() > kMaxTimeoutMs) {
    return InvalidArgumentError(
        "timeout_ms " + std::to_string(header->timeout_ms()) +
        " is out of range (0 to " + std::to_string(kMaxTimeoutMs) + ")");
  }
  return Status::Ok();
}

template <typename T>
Status DataFrames::View(ByteSpan frame, size_t count, const char* what,
                        std::span<const T>* out) {
  if (frame.size() != count * sizeof(T)) {
    return InvalidArgumentError(
        std::string(what) + " frame has " + std::to_string(frame.size()) +
        " bytes, expected " + std::to_string(count * sizeof(T)));
  }
  if (count == 0) {
    *out = {};
    return Status::Ok();
  }
  if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(T) == 0) {
    *out = {reinterpret_cast<const T*>(frame.data()), count};
    return Status::Ok();
  }
  // Misaligned (rare: ZeroMQ's small-message storage): copy once.
  auto& copy = aligned_copies_.emplace_back((frame.size() + 7) / 8);
  std::memcpy(copy.data(), frame.data(), frame.size());
  *out = {reinterpret_cast<const T*>(copy.data()), count};
  return Status::Ok();
}

Status DataFrames::Parse(const wire::Header& header,
                         std::span<const ByteSpan> frames, uint32_t value_width,
                         bool expect_values) {
  width_ = value_width;
  const size_t n = header.num_keys();
  const size_t values_frames = header.values_frames();
  if (!expect_values && values_frames != 0) {
    return InvalidArgumentError(
        "a pull carries no values, but header "
        "announces " +
        std::to_string(values_frames) + " value frames");
  }
  if (expect_values && values_frames != 1 && values_frames != n) {
    return InvalidArgumentError("values_frames must be 1 or num_keys (" +
                                std::to_string(n) + "), got " +
                                std::to_string(values_frames));
  }
  if (expect_values && n == 0 && values_frames != 1) {
    return InvalidArgumentError("values_frames must be 1 for an empty push");
  }
  const size_t expected_frames =
      1 + values_frames + (header.has_lengths() ? 1 : 0);
  if (frames.size() != expected_frames) {
    return InvalidArgumentError(
        "message has " + std::to_string(frames.size() + 1) +
        " frames, header announces " + std::to_string(expected_frames + 1));
  }
  DUCTILE_RETURN_IF_ERROR(View(frames[0], n, "keys", &keys_));
  for (size_t i = 1; i < n; ++i) {
    if (keys_[i] <= keys_[i - 1]) {
      return InvalidArgumentError("keys are not strictly increasing at index " +
                                  std::to_string(i));
    }
  }
  lengths_ = {};
  if (header.has_lengths()) {
    DUCTILE_RETURN_IF_ERROR(View(frames.back(), n, "lengths", &lengths_));
    for (size_t i = 0; i < n; ++i) {
      if (lengths_[i] > kMaxValueFloats) {
        return InvalidArgumentError(
            "length of key " + std::to_string(keys_[i]) + " is " +
            std::to_string(lengths_[i]) + " floats, over the limit of " +
            std::to_string(kMaxValueFloats));
      }
      if (value_width != 0 && lengths_[i] != value_width) {
        return InvalidArgumentError(
            "length of key " + std::to_string(keys_[i]) + " is " +
            std::to_string(lengths_[i]) + ", table width is " +
            std::to_string(value_width));
      }
    }
  } else if (value_width == 0) {
    return InvalidArgumentError("variable-width table needs a lengths frame");
  }
  total_floats_ = 0;
  for (size_t i = 0; i < n; ++i) total_floats_ += length(i);

  values_.clear();
  if (!expect_values) return Status::Ok();
  values_.resize(n);
  if (values_frames == 1) {
    std::span<const float> all;
    DUCTILE_RETURN_IF_ERROR(View(frames[1], total_floats_, "values", &all));
    uint64_t offset = 0;
    for (size_t i = 0; i < n; ++i) {
      values_[i] = all.subspan(offset, length(i));
      offset += length(i);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      DUCTILE_RETURN_IF_ERROR(
          View(frames[1 + i], length(i), "value", &values_[i]));
    }
  }
  return Status::Ok();
}

Result<uint64_t> CheckRequestShape(std::span<const Key> keys,
                                   std::span<const uint32_t> lengths,
                                   uint32_t value_width, uint64_t num_values,
                                   const char* values_name) {
  for (size_t i = 1; i < keys.size(); ++i) {
    if (keys[i] <= keys[i - 1]) {
      return InvalidArgumentError("keys must be strictly increasing; key[" +
                                  std::to_string(i) +
                                  "] = " + std::to_string(keys[i]) +
                                  " follows " + std::to_string(keys[i - 1]));
    }
  }
  uint64_t total = 0;
  if (!lengths.empty()) {
    if (lengths.size() != keys.size()) {
      return InvalidArgumentError("got " + std::to_string(lengths.size()) +
                                  " lengths for " +
                                  std::to_string(keys.size()) + " keys");
    }
    for (size_t i = 0; i < lengths.size(); ++i) {
      if (lengths[i] > kMaxValueFloats) {
        return InvalidArgumentError(
            "length[" + std::to_string(i) +
            "] = " + std::to_string(lengths[i]) + " is over the limit of " +
            std::to_string(kMaxValueFloats) + " floats per key");
      }
      if (value_width != 0 && lengths[i] != value_width) {
        return InvalidArgumentError("length[" + std::to_string(i) +
                                    "] = " + std::to_string(lengths[i]) +
                                    " but the table's width is " +
                                    std::to_string(value_width));
      }
      total += lengths[i];
    }
  } else {
    if (value_width == 0) {
      return InvalidArgumentError(
          "a variable-width table needs lengths for every key");
    }
    total = static_cast<uint64_t>(keys.size()) * value_width;
  }
  if (num_values != total) {
    return InvalidArgumentError(
        std::string(values_name) + " has " + std::to_string(num_values) +
        " floats, but the keys' widths add up to " + std::to_string(total));
  }
  return total;
}

Status StatusFromWire(const wire::Header& header) {
  const int code = header.status_code();
  if (code == 0) return Status::Ok();
  switch (static_cast<StatusCode>(code)) {
    case StatusCode::kCancelled:
    case StatusCode::kInvalidArgument:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kNotFound:
    case StatusCode::kAlreadyExists:
    case StatusCode::kPermissionDenied:
    case StatusCode::kResourceExhausted:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAborted:
    case StatusCode::kInternal:
    case StatusCode::kUnavailable:
      return Status(static_cast<StatusCode>(code), header.status_message());
    default:
      return InternalError("peer sent unknown status code " +
                           std::to_string(code) + ": " +
                           header.status_message());
  }
}

void StatusToWire(const Status& status, wire::Header* header) {
  header->set_status_code(static_cast<int>(status.code()));
  header->set_status_message(status.message());
}

}  // namespace ductile
