// The codec's validation of data messages, headers, request shapes and
// wire statuses, and the table options check. No sockets: frames are plain
// byte buffers built here.
#include "proto/codec.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/table_config.h"

namespace ductile {
namespace {

using ::testing::HasSubstr;

// Owns the bytes of a message's data frames (keys, values..., lengths).
// Each frame can be placed at an offset into its buffer, to read frames
// whose data is not aligned for their element type.
class Frames {
 public:
  template <typename T>
  Frames& Add(const std::vector<T>& items, size_t offset = 0) {
    const size_t bytes = items.size() * sizeof(T);
    auto& buffer = buffers_.emplace_back(bytes + offset + 1, uint8_t{0xAB});
    if (bytes > 0) std::memcpy(buffer.data() + offset, items.data(), bytes);
    offsets_.push_back(offset);
    sizes_.push_back(bytes);
    return *this;
  }
  // Appends a frame of raw bytes (to build frames of a wrong size).
  Frames& AddBytes(size_t bytes) {
    buffers_.emplace_back(bytes + 1, uint8_t{0});
    offsets_.push_back(0);
    sizes_.push_back(bytes);
    return *this;
  }

  std::vector<ByteSpan> spans() const {
    std::vector<ByteSpan> out;
    for (size_t i = 0; i < buffers_.size(); ++i) {
      out.emplace_back(buffers_[i].data() + offsets_[i], sizes_[i]);
    }
    return out;
  }

 private:
  std::vector<std::vector<uint8_t>> buffers_;
  std::vector<size_t> offsets_;
  std::vector<size_t> sizes_;
};

wire::Header PushHeader(uint32_t num_keys, uint32_t values_frames,
                        bool has_lengths = false) {
  wire::Header h;
  h.set_type(wire::PUSH);
  h.set_num_keys(num_keys);
  h.set_values_frames(values_frames);
  h.set_has_lengths(has_lengths);
  return h;
}

wire::Header PullHeader(uint32_t num_keys, bool has_lengths = false) {
  wire::Header h;
  h.set_type(wire::PULL);
  h.set_num_keys(num_keys);
  h.set_has_lengths(has_lengths);
  return h;
}

std::vector<float> ToVector(std::span<const float> s) {
  return {s.begin(), s.end()};
}

// Parses and expects kInvalidArgument with `fragment` in the message.
void ExpectRefused(const wire::Header& header, const Frames& frames,
                   uint32_t width, bool expect_values,
                   const std::string& fragment) {
  DataFrames parsed;
  const std::vector<ByteSpan> spans = frames.spans();
  Status s = parsed.Parse(header, spans, width, expect_values);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr(fragment));
}

// ---------------------------------------------------------------------------
// DataFrames::Parse: well-formed messages.

TEST(DataFrames, ParsesAFixedWidthPushWithAllValuesInOneFrame) {
  Frames f;
  f.Add(std::vector<Key>{3, 8, 20}).Add(std::vector<float>{1, 2, 3, 4, 5, 6});
  DataFrames parsed;
  const auto spans = f.spans();
  ASSERT_TRUE(parsed.Parse(PushHeader(3, 1), spans, 2, true).ok());
  EXPECT_THAT(std::vector<Key>(parsed.keys().begin(), parsed.keys().end()),
              ::testing::ElementsAre(3u, 8u, 20u));
  EXPECT_EQ(parsed.total_floats(), 6u);
  EXPECT_TRUE(parsed.lengths().empty());
  EXPECT_EQ(parsed.length(1), 2u);
  EXPECT_EQ(ToVector(parsed.value(0)), (std::vector<float>{1, 2}));
  EXPECT_EQ(ToVector(parsed.value(1)), (std::vector<float>{3, 4}));
  EXPECT_EQ(ToVector(parsed.value(2)), (std::vector<float>{5, 6}));
}

TEST(DataFrames, ParsesAFixedWidthPushWithOneValuesFramePerKey) {
  Frames f;
  f.Add(std::vector<Key>{1, 2})
      .Add(std::vector<float>{0.5f, 1.5f, 2.5f})
      .Add(std::vector<float>{-1, -2, -3});
  DataFrames parsed;
  const auto spans = f.spans();
  ASSERT_TRUE(parsed.Parse(PushHeader(2, 2), spans, 3, true).ok());
  EXPECT_EQ(parsed.total_floats(), 6u);
  EXPECT_EQ(ToVector(parsed.value(0)), (std::vector<float>{0.5f, 1.5f, 2.5f}));
  EXPECT_EQ(ToVector(parsed.value(1)), (std::vector<float>{-1, -2, -3}));
}

TEST(DataFrames, ParsesAVariableWidthPushWithLengths) {
  Frames f;
  f.Add(std::vector<Key>{10, 11, 12})
      .Add(std::vector<float>{1, 2, 3, 4, 5, 6})
      .Add(std::vector<uint32_t>{1, 3, 2});
  DataFrames parsed;
  const auto spans = f.spans();
  ASSERT_TRUE(parsed.Parse(PushHeader(3, 1, true), spans, 0, true).ok());
  EXPECT_EQ(parsed.total_floats(), 6u);
  EXPECT_EQ(parsed.length(0), 1u);
  EXPECT_EQ(parsed.length(1), 3u);
  EXPECT_EQ(parsed.length(2), 2u);
  EXPECT_EQ(ToVector(parsed.value(0)), (std::vector<float>{1}));
  EXPECT_EQ(ToVector(parsed.value(1)), (std::vector<float>{2, 3, 4}));
  EXPECT_EQ(ToVector(parsed.value(2)), (std::vector<float>{5, 6}));
}

TEST(DataFrames, ParsesAVariableWidthPushWithOneValuesFramePerKey) {
  Frames f;
  f.Add(std::vector<Key>{4, 9})
      .Add(std::vector<float>{7, 8, 9, 10})
      .Add(std::vector<float>{11})
      .Add(std::vector<uint32_t>{4, 1});
  DataFrames parsed;
  const auto spans = f.spans();
  ASSERT_TRUE(parsed.Parse(PushHeader(2, 2, true), spans, 0, true).ok());
  EXPECT_EQ(parsed.total_floats(), 5u);
  EXPECT_EQ(ToVector(parsed.value(0)), (std::vector<float>{7, 8, 9, 10}));
  EXPECT_EQ(ToVector(parsed.value(1)), (std::vector<float>{11}));
}

TEST(DataFrames, AcceptsLengthsOnAFixedWidthTableWhenTheyMatchTheWidth) {
  Frames f;
  f.Add(std::vector<Key>{1, 2})
      .Add(std::vector<float>{1, 2, 3, 4})
      .Add(std::vector<uint32_t>{2, 2});
  DataFrames parsed;
  const auto spans = f.spans();
  ASSERT_TRUE(parsed.Parse(PushHeader(2, 1, true), spans, 2, true).ok());
  EXPECT_EQ(parsed.total_floats(), 4u);
}

TEST(DataFrames, ParsesAPullAsKeysOnlyWithNoValues) {
  Frames f;
  f.Add(std::vector<Key>{5, 6, 7});
  DataFrames parsed;
  const auto spans = f.spans();
  ASSERT_TRUE(parsed.Parse(PullHeader(3), spans, 4, false).ok());
  EXPECT_EQ(parsed.keys().size(), 3u);
  EXPECT_EQ(parsed.total_floats(), 12u);
}

TEST(DataFrames, ParsesAVariableWidthPullWithLengths) {
  Frames f;
  f.Add(std::vector<Key>{5, 6}).Add(std::vector<uint32_t>{3, 9});
  DataFrames parsed;
  const auto spans = f.spans();
  ASSERT_TRUE(parsed.Parse(PullHeader(2, true), spans, 0, false).ok());
  EXPECT_EQ(parsed.total_floats(), 12u);
  EXPECT_EQ(parsed.length(1), 9u);
}

TEST(DataFrames, AcceptsAnEmptyPushWithOneEmptyValuesFrame) {
  Frames f;
  f.Add(std::vector<Key>{}).Add(std::vector<float>{});
  DataFrames parsed;
  const auto spans = f.spans();
  ASSERT_TRUE(parsed.Parse(PushHeader(0, 1), spans, 4, true).ok());
  EXPECT_TRUE(parsed.keys().empty());
  EXPECT_EQ(parsed.total_floats(), 0u);
}

TEST(DataFrames, ReadsMisalignedFramesCorrectly) {
  // Every frame starts one byte past an aligned address, as ZeroMQ's
  // small-message storage may deliver it.
  const std::vector<Key> keys = {1, 0x0123456789abcdefull,
                                 0xfedcba9876543210ull};
  const std::vector<float> values = {1.25f, -2.5f, 3.75f, 1e-3f, 7, 8};
  const std::vector<uint32_t> lengths = {1, 2, 3};
  Frames f;
  f.Add(keys, 1).Add(values, 1).Add(lengths, 1);
  const auto spans = f.spans();
  for (const ByteSpan& s : spans) {
    ASSERT_NE(reinterpret_cast<uintptr_t>(s.data()) % alignof(uint32_t), 0u)
        << "the test must build misaligned frames";
  }
  DataFrames parsed;
  ASSERT_TRUE(parsed.Parse(PushHeader(3, 1, true), spans, 0, true).ok());
  EXPECT_EQ(std::vector<Key>(parsed.keys().begin(), parsed.keys().end()), keys);
  EXPECT_EQ(parsed.length(0), 1u);
  EXPECT_EQ(parsed.length(1), 2u);
  EXPECT_EQ(parsed.length(2), 3u);
  EXPECT_EQ(ToVector(parsed.value(0)), (std::vector<float>{1.25f}));
  EXPECT_EQ(ToVector(parsed.value(1)), (std::vector<float>{-2.5f, 3.75f}));
  EXPECT_EQ(ToVector(parsed.value(2)), (std::vector<float>{1e-3f, 7, 8}));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(
        reinterpret_cast<uintptr_t>(parsed.value(i).data()) % alignof(float),
        0u);
  }
}

TEST(DataFrames, ReadsMisalignedPerKeyValueFramesCorrectly) {
  Frames f;
  f.Add(std::vector<Key>{2, 4, 6}, 3)
      .Add(std::vector<float>{1, 2}, 1)
      .Add(std::vector<float>{3, 4}, 2)
      .Add(std::vector<float>{5, 6}, 3);
  DataFrames parsed;
  const auto spans = f.spans();
  ASSERT_TRUE(parsed.Parse(PushHeader(3, 3), spans, 2, true).ok());
  EXPECT_EQ(std::vector<Key>(parsed.keys().begin(), parsed.keys().end()),
            (std::vector<Key>{2, 4, 6}));
  EXPECT_EQ(ToVector(parsed.value(0)), (std::vector<float>{1, 2}));
  EXPECT_EQ(ToVector(parsed.value(1)), (std::vector<float>{3, 4}));
  EXPECT_EQ(ToVector(parsed.value(2)), (std::vector<float>{5, 6}));
}

// ---------------------------------------------------------------------------
// DataFrames::Parse: malformed messages.

TEST(DataFrames, RejectsAPushWhoseValuesFrameIsMissing) {
  Frames f;
  f.Add(std::vector<Key>{1, 2, 3});
  ExpectRefused(PushHeader(3, 1), f, 4, true, "frames");
}

TEST(DataFrames, RejectsAMessageWithMoreFramesThanAnnounced) {
  Frames f;
  f.Add(std::vector<Key>{1})
      .Add(std::vector<float>{1})
      .Add(std::vector<float>{2});
  ExpectRefused(PushHeader(1, 1), f, 1, true, "frames");
}

TEST(DataFrames, RejectsAMessageWhoseLengthsFrameIsMissing) {
  Frames f;
  f.Add(std::vector<Key>{1, 2}).Add(std::vector<float>{1, 2, 3});
  ExpectRefused(PushHeader(2, 1, true), f, 0, true, "frames");
}

TEST(DataFrames, RejectsAValuesFrameCountThatIsNeitherOneNorNumKeys) {
  Frames f;
  f.Add(std::vector<Key>{1, 2, 3})
      .Add(std::vector<float>{1})
      .Add(std::vector<float>{2, 3});
  ExpectRefused(PushHeader(3, 2), f, 1, true, "values_frames");
}

TEST(DataFrames, RejectsAnEmptyPushWithNoValuesFrame) {
  Frames f;
  f.Add(std::vector<Key>{});
  ExpectRefused(PushHeader(0, 0), f, 1, true, "values_frames");
}

TEST(DataFrames, RejectsAKeysFrameThatIsNotAMultipleOfEightBytes) {
  Frames f;
  f.AddBytes(23).Add(std::vector<float>{1, 2, 3});
  ExpectRefused(PushHeader(3, 1), f, 1, true, "keys frame has 23 bytes");
}

TEST(DataFrames, RejectsAKeysFrameThatDisagreesWithNumKeys) {
  Frames f;
  f.Add(std::vector<Key>{1, 2}).Add(std::vector<float>{1, 2, 3});
  ExpectRefused(PushHeader(3, 1), f, 1, true, "keys frame has 16 bytes");
}

TEST(DataFrames, RejectsUnsortedKeys) {
  Frames f;
  f.Add(std::vector<Key>{1, 9, 4}).Add(std::vector<float>{1, 2, 3});
  ExpectRefused(PushHeader(3, 1), f, 1, true, "not strictly increasing");
}

TEST(DataFrames, RejectsDuplicateKeys) {
  Frames f;
  f.Add(std::vector<Key>{1, 4, 4}).Add(std::vector<float>{1, 2, 3});
  ExpectRefused(PushHeader(3, 1), f, 1, true,
                "not strictly increasing at index 2");
}

TEST(DataFrames, RejectsUnsortedKeysOnAPull) {
  Frames f;
  f.Add(std::vector<Key>{8, 2});
  ExpectRefused(PullHeader(2), f, 1, false, "not strictly increasing");
}

TEST(DataFrames, RejectsAValuesFrameOfTheWrongSize) {
  Frames f;
  f.Add(std::vector<Key>{1, 2}).Add(std::vector<float>{1, 2, 3});
  ExpectRefused(PushHeader(2, 1), f, 2, true,
                "values frame has 12 bytes, expected 16");
}

TEST(DataFrames, RejectsAPerKeyValueFrameOfTheWrongSize) {
  Frames f;
  f.Add(std::vector<Key>{1, 2})
      .Add(std::vector<float>{1, 2})
      .Add(std::vector<float>{3});
  ExpectRefused(PushHeader(2, 2), f, 2, true,
                "value frame has 4 bytes, expected 8");
}

TEST(DataFrames, RejectsValuesThatDisagreeWithVariableLengths) {
  Frames f;
  f.Add(std::vector<Key>{1, 2})
      .Add(std::vector<float>{1, 2, 3})
      .Add(std::vector<uint32_t>{2, 2});
  ExpectRefused(PushHeader(2, 1, true), f, 0, true, "values frame");
}

TEST(DataFrames, RejectsLengthsThatDifferFromTheFixedWidth) {
  Frames f;
  f.Add(std::vector<Key>{5, 6})
      .Add(std::vector<float>{1, 2, 3, 4, 5, 6, 7})
      .Add(std::vector<uint32_t>{4, 3});
  ExpectRefused(PushHeader(2, 1, true), f, 4, true,
                "length of key 6 is 3, table width is 4");
}

TEST(DataFrames, RejectsALengthsFrameOfTheWrongSize) {
  Frames f;
  f.Add(std::vector<Key>{5, 6})
      .Add(std::vector<float>{1, 2, 3})
      .Add(std::vector<uint32_t>{3});
  ExpectRefused(PushHeader(2, 1, true), f, 0, true, "lengths frame has 4");
}

TEST(DataFrames, RejectsAVariableWidthPushWithoutLengths) {
  Frames f;
  f.Add(std::vector<Key>{5, 6}).Add(std::vector<float>{1, 2});
  ExpectRefused(PushHeader(2, 1), f, 0, true, "needs a lengths frame");
}

TEST(DataFrames, RejectsAVariableWidthPullWithoutLengths) {
  Frames f;
  f.Add(std::vector<Key>{5, 6});
  ExpectRefused(PullHeader(2), f, 0, false, "needs a lengths frame");
}

TEST(DataFrames, RejectsValuesFramesOnAPull) {
  Frames f;
  f.Add(std::vector<Key>{5, 6}).Add(std::vector<float>{1, 2});
  wire::Header h = PullHeader(2);
  h.set_values_frames(1);
  ExpectRefused(h, f, 1, false, "a pull carries no values");
}

// ---------------------------------------------------------------------------
// ParseHeader.

TEST(ParseHeader, ReadsAWellFormedHeader) {
  wire::Header h = PushHeader(3, 1);
  h.set_seq(42);
  h.set_client_id(-7);
  h.set_epoch(9);
  const std::string bytes = h.SerializeAsString();
  wire::Header parsed;
  ASSERT_TRUE(ParseHeader({reinterpret_cast<const uint8_t*>(bytes.data()),
                           bytes.size()},
                          &parsed)
                  .ok());
  EXPECT_EQ(parsed.type(), wire::PUSH);
  EXPECT_EQ(parsed.seq(), 42u);
  EXPECT_EQ(parsed.client_id(), -7);
  EXPECT_EQ(parsed.epoch(), 9u);
  EXPECT_EQ(parsed.num_keys(), 3u);
}

TEST(ParseHeader, RejectsAnEmptyFrame) {
  wire::Header parsed;
  Status s = ParseHeader({}, &parsed);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("empty header"));
}

TEST(ParseHeader, RejectsGarbageBytes) {
  // A varint that never ends: no protobuf parser can accept it.
  const std::vector<uint8_t> garbage(16, 0xFF);
  wire::Header parsed;
  Status s = ParseHeader(garbage, &parsed);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not a valid protobuf"));
}

TEST(ParseHeader, RejectsATruncatedLengthDelimitedField) {
  // Field 21 (status_message), length 10, but only 2 bytes follow.
  const std::vector<uint8_t> truncated = {0xAA, 0x01, 0x0A, 'a', 'b'};
  wire::Header parsed;
  EXPECT_EQ(ParseHeader(truncated, &parsed).code(),
            StatusCode::kInvalidArgument);
}

TEST(ParseHeader, RejectsMessageTypeZero) {
  wire::Header h;
  h.set_seq(5);  // something to serialize; type stays MESSAGE_UNKNOWN
  const std::string bytes = h.SerializeAsString();
  ASSERT_FALSE(bytes.empty());
  wire::Header parsed;
  Status s = ParseHeader(
      {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, &parsed);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("unknown message type 0"));
}

TEST(ParseHeader, RejectsAMessageTypeOutsideTheEnum) {
  // Field 1 (type) = 99, as a newer or broken peer could send it.
  const std::vector<uint8_t> bytes = {0x08, 99, 0x10, 0x01};
  wire::Header parsed;
  Status s = ParseHeader(bytes, &parsed);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("unknown message type 99"));
}

// ---------------------------------------------------------------------------
// CheckRequestShape.

TEST(CheckRequestShape, ReturnsTheTotalWidthOfAFixedWidthRequest) {
  const std::vector<Key> keys = {1, 2, 3};
  Result<uint64_t> total = CheckRequestShape(keys, {}, 4, 12, "values");
  ASSERT_TRUE(total.ok()) << total.status();
  EXPECT_EQ(*total, 12u);
}

TEST(CheckRequestShape, ReturnsTheSumOfLengthsOfAVariableWidthRequest) {
  const std::vector<Key> keys = {1, 2, 3};
  const std::vector<uint32_t> lengths = {1, 5, 2};
  Result<uint64_t> total = CheckRequestShape(keys, lengths, 0, 8, "values");
  ASSERT_TRUE(total.ok()) << total.status();
  EXPECT_EQ(*total, 8u);
}

TEST(CheckRequestShape, AcceptsAnEmptyRequest) {
  Result<uint64_t> total = CheckRequestShape({}, {}, 3, 0, "values");
  ASSERT_TRUE(total.ok()) << total.status();
  EXPECT_EQ(*total, 0u);
}

TEST(CheckRequestShape, RejectsUnsortedKeys) {
  const std::vector<Key> keys = {1, 7, 3};
  Result<uint64_t> total = CheckRequestShape(keys, {}, 1, 3, "values");
  EXPECT_EQ(total.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(total.status().message(), HasSubstr("key[2] = 3 follows 7"));
}

TEST(CheckRequestShape, RejectsRepeatedKeys) {
  const std::vector<Key> keys = {1, 1};
  Result<uint64_t> total = CheckRequestShape(keys, {}, 1, 2, "values");
  EXPECT_EQ(total.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(total.status().message(), HasSubstr("strictly increasing"));
}

TEST(CheckRequestShape, RejectsALengthsCountThatDiffersFromTheKeyCount) {
  const std::vector<Key> keys = {1, 2, 3};
  const std::vector<uint32_t> lengths = {1, 1};
  Result<uint64_t> total = CheckRequestShape(keys, lengths, 0, 2, "values");
  EXPECT_EQ(total.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(total.status().message(), HasSubstr("got 2 lengths for 3 keys"));
}

TEST(CheckRequestShape, RejectsALengthThatDiffersFromTheFixedWidth) {
  const std::vector<Key> keys = {1, 2};
  const std::vector<uint32_t> lengths = {4, 5};
  Result<uint64_t> total = CheckRequestShape(keys, lengths, 4, 9, "values");
  EXPECT_EQ(total.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(total.status().message(),
              HasSubstr("length[1] = 5 but the table's width is 4"));
}

TEST(CheckRequestShape, RejectsAVariableWidthRequestWithoutLengths) {
  const std::vector<Key> keys = {1, 2};
  Result<uint64_t> total = CheckRequestShape(keys, {}, 0, 2, "values");
  EXPECT_EQ(total.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(total.status().message(), HasSubstr("needs lengths"));
}

TEST(CheckRequestShape, RejectsAValueCountThatDiffersFromTheWidthsAndNamesIt) {
  const std::vector<Key> keys = {1, 2};
  Result<uint64_t> total = CheckRequestShape(keys, {}, 3, 5, "out");
  EXPECT_EQ(total.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(total.status().message(),
              HasSubstr("out has 5 floats, but the keys' widths add up to 6"));
}

// ---------------------------------------------------------------------------
// StatusFromWire / StatusToWire.

TEST(StatusFromWire, ReadsCodeZeroAsOk) {
  wire::Header h;
  h.set_status_message("ignored");
  EXPECT_TRUE(StatusFromWire(h).ok());
}

TEST(StatusFromWire, KeepsEveryKnownCodeAndItsMessage) {
  for (StatusCode code :
       {StatusCode::kCancelled, StatusCode::kInvalidArgument,
        StatusCode::kDeadlineExceeded, StatusCode::kNotFound,
        StatusCode::kAlreadyExists, StatusCode::kPermissionDenied,
        StatusCode::kResourceExhausted, StatusCode::kFailedPrecondition,
        StatusCode::kAborted, StatusCode::kInternal,
        StatusCode::kUnavailable}) {
    wire::Header h;
    StatusToWire(Status(code, "what went wrong"), &h);
    Status s = StatusFromWire(h);
    EXPECT_EQ(s.code(), code);
    EXPECT_EQ(s.message(), "what went wrong");
  }
}

TEST(StatusFromWire, MapsUnknownCodesToInternal) {
  for (int code : {2, 11, 12, 15, 99, -1}) {
    wire::Header h;
    h.set_status_code(code);
    h.set_status_message("peer's words");
    Status s = StatusFromWire(h);
    EXPECT_EQ(s.code(), StatusCode::kInternal) << code;
    EXPECT_THAT(s.message(), HasSubstr(std::to_string(code)));
    EXPECT_THAT(s.message(), HasSubstr("peer's words"));
  }
}

TEST(StatusToWire, WritesAnOkStatusAsCodeZero) {
  wire::Header h;
  h.set_status_code(5);
  StatusToWire(Status::Ok(), &h);
  EXPECT_EQ(h.status_code(), 0);
  EXPECT_TRUE(StatusFromWire(h).ok());
}

// ---------------------------------------------------------------------------
// ValidateTableOptions.

TableOptions ValidTable() {
  TableOptions t;
  t.name = "weights";
  return t;
}

void ExpectInvalid(const TableOptions& t, const std::string& fragment) {
  Status s = ValidateTableOptions(t);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr(fragment));
}

TEST(ValidateTableOptions, AcceptsTheDefaultsWithAName) {
  EXPECT_TRUE(ValidateTableOptions(ValidTable()).ok());
}

TEST(ValidateTableOptions, AcceptsNamesOfEveryAllowedCharacterUpTo128) {
  TableOptions t = ValidTable();
  t.name = "Az09_.-";
  EXPECT_TRUE(ValidateTableOptions(t).ok());
  t.name = std::string(128, 'x');
  EXPECT_TRUE(ValidateTableOptions(t).ok());
}

TEST(ValidateTableOptions, RejectsBadNames) {
  TableOptions t = ValidTable();
  t.name = "";
  ExpectInvalid(t, "1-128 characters");
  t.name = std::string(129, 'x');
  ExpectInvalid(t, "1-128 characters");
  for (const char* name : {"has space", "a/b", "tab\t", "caf\xc3\xa9", "a:b"}) {
    t.name = name;
    ExpectInvalid(t, "may hold only");
  }
}

TEST(ValidateTableOptions, RejectsAWidthOverTheLimit) {
  TableOptions t = ValidTable();
  t.value_width = (1u << 28) + 1;
  ExpectInvalid(t, "value_width");
  t.value_width = 1u << 28;
  EXPECT_TRUE(ValidateTableOptions(t).ok());
}

TEST(ValidateTableOptions, RejectsAnUnknownRule) {
  TableOptions t = ValidTable();
  t.rule = static_cast<UpdateRule>(7);
  ExpectInvalid(t, "unknown update rule 7");
  t.rule = static_cast<UpdateRule>(-1);
  ExpectInvalid(t, "unknown update rule");
}

TEST(ValidateTableOptions, RejectsACustomRuleWithoutAName) {
  TableOptions t = ValidTable();
  t.rule = UpdateRule::kCustom;
  ExpectInvalid(t, "custom_rule");
  t.custom_rule = "clipped_add";
  EXPECT_TRUE(ValidateTableOptions(t).ok());
}

TEST(ValidateTableOptions, RejectsANegativeOrNonFiniteLearningRate) {
  TableOptions t = ValidTable();
  t.learning_rate = -0.1f;
  ExpectInvalid(t, "learning_rate");
  t.learning_rate = std::numeric_limits<float>::infinity();
  ExpectInvalid(t, "learning_rate");
  t.learning_rate = std::numeric_limits<float>::quiet_NaN();
  ExpectInvalid(t, "learning_rate");
}

TEST(ValidateTableOptions, RejectsMomentumOfOneOrMore) {
  TableOptions t = ValidTable();
  t.momentum = 1.0f;
  ExpectInvalid(t, "momentum");
  t.momentum = 1.5f;
  ExpectInvalid(t, "momentum");
  t.momentum = -0.1f;
  ExpectInvalid(t, "momentum");
  t.momentum = 0.999f;
  EXPECT_TRUE(ValidateTableOptions(t).ok());
}

TEST(ValidateTableOptions, RejectsBetasOutsideZeroToOne) {
  TableOptions t = ValidTable();
  t.beta1 = 1.0f;
  ExpectInvalid(t, "beta1 and beta2");
  t = ValidTable();
  t.beta2 = 1.0f;
  ExpectInvalid(t, "beta1 and beta2");
  t = ValidTable();
  t.beta2 = std::numeric_limits<float>::quiet_NaN();
  ExpectInvalid(t, "beta1 and beta2");
}

TEST(ValidateTableOptions, RejectsLearningRateSchedulesOutOfRange) {
  TableOptions t = ValidTable();
  t.lr_schedule.warmup_clocks = -1;
  ExpectInvalid(t, "warmup_clocks");
  t = ValidTable();
  t.lr_schedule.gamma = 0.0f;  // checked even when no step decay uses it
  ExpectInvalid(t, "gamma");
  t.lr_schedule.gamma = std::numeric_limits<float>::quiet_NaN();
  ExpectInvalid(t, "gamma");
  t = ValidTable();
  t.lr_schedule.min_factor = 1.5f;
  ExpectInvalid(t, "min_factor");
  t = ValidTable();
  t.lr_schedule.decay = LearningRateSchedule::Decay::kStep;
  ExpectInvalid(t, "step_clocks >= 1");
  t.lr_schedule.step_clocks = 100;
  EXPECT_TRUE(ValidateTableOptions(t).ok());
  t = ValidTable();
  t.lr_schedule.decay = LearningRateSchedule::Decay::kCosine;
  t.lr_schedule.warmup_clocks = 10;
  t.lr_schedule.total_clocks = 10;
  ExpectInvalid(t, "total_clocks (10) > warmup_clocks (10)");
  t.lr_schedule.total_clocks = 11;
  EXPECT_TRUE(ValidateTableOptions(t).ok());
  t.lr_schedule.decay = static_cast<LearningRateSchedule::Decay>(7);
  ExpectInvalid(t, "unknown decay 7");
}

TEST(ValidateTableOptions, RejectsBatchScalingOutOfRange) {
  TableOptions t = ValidTable();
  t.batch_scaling.base_pushes = 0;
  ExpectInvalid(t, "base_pushes must be in [1, 1000000], not 0");
  t = ValidTable();
  t.batch_scaling.ramp_clocks = -1;
  ExpectInvalid(t, "ramp_clocks must be in [0, 2^40], not -1");
  t = ValidTable();
  t.batch_scaling.rule = static_cast<BatchScaling::Rule>(9);
  ExpectInvalid(t, "batch_scaling: unknown rule 9");
  t.batch_scaling.rule = BatchScaling::Rule::kSqrt;
  EXPECT_TRUE(ValidateTableOptions(t).ok());
}

TEST(TableConfig, BatchScalingSurvivesTheWire) {
  TableOptions t = ValidTable();
  t.batch_scaling.rule = BatchScaling::Rule::kLinear;
  t.batch_scaling.base_pushes = 3;
  t.batch_scaling.ramp_clocks = 40;
  const TableOptions back = FromWire(ToWire(t, 3));
  EXPECT_EQ(back.batch_scaling.rule, BatchScaling::Rule::kLinear);
  EXPECT_EQ(back.batch_scaling.base_pushes, 3);
  EXPECT_EQ(back.batch_scaling.ramp_clocks, 40);
  // A config written before the field existed reads as no scaling, valid.
  wire::TableConfig old = ToWire(ValidTable(), 3);
  old.clear_batch_scaling();
  const TableOptions read = FromWire(old);
  EXPECT_EQ(read.batch_scaling.rule, BatchScaling::Rule::kNone);
  EXPECT_TRUE(ValidateTableOptions(read).ok());
}

TEST(TableConfig, ALearningRateScheduleSurvivesTheWire) {
  TableOptions t = ValidTable();
  t.lr_schedule.warmup_clocks = 5;
  t.lr_schedule.decay = LearningRateSchedule::Decay::kCosine;
  t.lr_schedule.total_clocks = 500;
  t.lr_schedule.min_factor = 0.05f;
  t.lr_schedule.gamma = 0.3f;
  t.lr_schedule.step_clocks = 7;
  const TableOptions back = FromWire(ToWire(t, 3));
  EXPECT_EQ(back.lr_schedule.warmup_clocks, 5);
  EXPECT_EQ(back.lr_schedule.decay, LearningRateSchedule::Decay::kCosine);
  EXPECT_EQ(back.lr_schedule.total_clocks, 500);
  EXPECT_EQ(back.lr_schedule.min_factor, 0.05f);
  EXPECT_EQ(back.lr_schedule.gamma, 0.3f);
  EXPECT_EQ(back.lr_schedule.step_clocks, 7);
  // A config without one (as written before schedules existed) reads as
  // the constant schedule, which is valid.
  wire::TableConfig old = ToWire(ValidTable(), 3);
  old.clear_lr_schedule();
  EXPECT_TRUE(ValidateTableOptions(FromWire(old)).ok());
  EXPECT_EQ(FromWire(old).lr_schedule.decay,
            LearningRateSchedule::Decay::kNone);
  // ... and is the same table as one made now with the same options, so
  // that making it again is not refused.
  EXPECT_TRUE(SameTable(old, ToWire(ValidTable(), 3)));
  EXPECT_FALSE(SameTable(old, ToWire(t, 3)));
}

TEST(ValidateTableOptions, RejectsEpsilonOfZeroOrLess) {
  TableOptions t = ValidTable();
  t.epsilon = 0.0f;
  ExpectInvalid(t, "epsilon");
  t.epsilon = -1e-8f;
  ExpectInvalid(t, "epsilon");
  t.epsilon = std::numeric_limits<float>::quiet_NaN();
  ExpectInvalid(t, "epsilon");
}

TEST(ValidateTableOptions, RejectsAUniformInitializerWithLowNotBelowHigh) {
  TableOptions t = ValidTable();
  t.init.kind = InitKind::kUniform;
  t.init.low = 1.0f;
  t.init.high = 1.0f;
  ExpectInvalid(t, "low < high");
  t.init.low = 2.0f;
  ExpectInvalid(t, "low < high");
  t.init.low = 0.5f;
  EXPECT_TRUE(ValidateTableOptions(t).ok());
}

TEST(ValidateTableOptions, RejectsANormalInitializerWithNegativeStddev) {
  TableOptions t = ValidTable();
  t.init.kind = InitKind::kNormal;
  t.init.stddev = -1.0f;
  ExpectInvalid(t, "stddev");
}

// Found by tests/fuzz/table_config_fuzzer: a normal initializer with a NaN
// mean (or a constant one with a NaN value) made NaN weights, and a NaN in
// a parameter the kind does not use made a table unequal to itself, so a
// resent creation was refused as "a different table".
TEST(ValidateTableOptions, RejectsNonFiniteInitializerParametersUsedOrNot) {
  const float kInf = std::numeric_limits<float>::infinity();
  const float kNan = std::numeric_limits<float>::quiet_NaN();
  for (InitKind kind : {InitKind::kZeros, InitKind::kConstant,
                        InitKind::kUniform, InitKind::kNormal}) {
    for (float bad : {kNan, kInf, -kInf}) {
      for (float Initializer::*field :
           {&Initializer::value, &Initializer::low, &Initializer::high,
            &Initializer::mean, &Initializer::stddev}) {
        TableOptions t = ValidTable();
        t.init.kind = kind;
        t.init.*field = bad;
        ExpectInvalid(t, "must be finite");
      }
    }
  }
}

TEST(ValidateTableOptions, RejectsAnUnknownInitializer) {
  TableOptions t = ValidTable();
  t.init.kind = static_cast<InitKind>(4);
  ExpectInvalid(t, "unknown initializer 4");
}

// Text fields are bytes on the wire: a peer sending names that are not
// UTF-8 gets a clear refusal where names matter (table creation), and
// cannot make libprotobuf log a line per message.
TEST(ParseHeader, TextThatIsNotUtf8ParsesSilentlyAndIsRefusedAsATableName) {
  wire::Header h;
  h.set_type(wire::TABLE_CREATE);
  h.set_name("\xff\xfe-not-utf8");
  h.mutable_table()->set_name("\xc3\x28");
  h.set_status_message("\x80");
  const std::string bytes = h.SerializeAsString();
  wire::Header parsed;
  ::testing::internal::CaptureStderr();
  const Status s = ParseHeader(
      {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, &parsed);
  const std::string logged = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(logged, "");
  EXPECT_EQ(parsed.table().name(), "\xc3\x28");
  const Status refused = ValidateTableOptions(FromWire(parsed.table()));
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("[A-Za-z0-9_.-]"));
}

}  // namespace
}  // namespace ductile
