// A ServerNode on the simulated network (tests/scripted_server.h) fed
// hand-built messages, frame by frame, by a scripted client: malformed
// requests get an error reply and are counted, never crash the server or
// change a table; resent requests are applied once; keys of another
// server's slot get a "moved" reply with the routing table, and a resend
// of a push applied before its slot moved is a duplicate; the server's
// limits (message and key sizes, stored floats, a client's exactly-once
// window) refuse what is past them. The cases that need real sockets
// (shared memory, a peer that does not read its replies) are in
// bad_input_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "ductile/table.h"
#include "proto/codec.h"
#include "proto/ductile.pb.h"
#include "routing/slot_map.h"
#include "server/request_admission.h"
#include "tests/scripted_server.h"

namespace ductile {
namespace {

using std::chrono::milliseconds;
using testing::Bytes;
using testing::Floats;
using testing::Got;
using ::testing::HasSubstr;
using testing::kClientId;
using testing::kServer1Address;
using testing::kSlots;
using testing::kTable;
using testing::kWidth;
using testing::ScriptedCluster;

constexpr uint64_t kEpoch = 1;  // the scripted coordinator's routing epoch
constexpr int64_t kRawClientId = 4242;
constexpr int64_t kWorkerClientId = 4343;  // worker 0's, where it is one

// A data request's header as a raw peer (client kRawClientId) builds it.
wire::Header Request(wire::MessageType type, TableId table, uint64_t seq,
                     uint32_t num_keys, int64_t client_id = kRawClientId) {
  wire::Header h;
  h.set_type(type);
  h.set_seq(seq);
  h.set_client_id(client_id);
  h.set_table_id(table);
  h.set_epoch(kEpoch);
  h.set_num_keys(num_keys);
  if (type != wire::PULL) h.set_values_frames(1);
  return h;
}

std::string Serialize(const wire::Header& h) { return h.SerializeAsString(); }

// The server's one reply to `frames`, or nullopt (and a test failure).
std::optional<Got> OneReply(ScriptedCluster& cluster,
                            const std::vector<std::string>& frames) {
  std::vector<Got> replies = cluster.Exchange(frames);
  EXPECT_EQ(replies.size(), 1u);
  if (replies.size() != 1) return std::nullopt;
  return std::move(replies[0]);
}

// A plain client's pull of `keys` (of `lengths`, on a variable-width
// table) from `table`: its status, and its values in `out`.
Status Pull(ScriptedCluster& cluster, TableId table, uint64_t seq,
            const std::vector<Key>& keys, std::vector<float>* out,
            const std::vector<uint32_t>& lengths = {}) {
  wire::Header h = Request(wire::PULL, table, seq,
                           static_cast<uint32_t>(keys.size()), kClientId);
  std::vector<std::string> frames = {"", Bytes(keys)};
  if (!lengths.empty()) {
    h.set_has_lengths(true);
    frames.push_back(Bytes(lengths));
  }
  frames[0] = Serialize(h);
  std::optional<Got> reply = OneReply(cluster, frames);
  if (!reply) return InternalError("no reply");
  EXPECT_EQ(reply->header.seq(), seq);
  *out = Floats(reply->data);
  return StatusFromWire(reply->header);
}

// A plain client's push of `values` to `keys` of `table`.
Status Push(ScriptedCluster& cluster, TableId table, uint64_t seq,
            const std::vector<Key>& keys, const std::vector<float>& values) {
  const wire::Header h = Request(wire::PUSH, table, seq,
                                 static_cast<uint32_t>(keys.size()), kClientId);
  std::optional<Got> reply =
      OneReply(cluster, {Serialize(h), Bytes(keys), Bytes(values)});
  if (!reply) return InternalError("no reply");
  EXPECT_EQ(reply->header.seq(), seq);
  return StatusFromWire(reply->header);
}

// One server (owning every slot), its kAdd table kTable of width 4
// holding known values at keys 1, 2, 3, a plain client (kClientId) and a
// raw peer (kRawClientId) on the same connection.
class ScriptedServerTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kMaxMessageBytes = 1 << 20;

  void SetUp() override {
    ServerOptions options;
    options.max_message_bytes = kMaxMessageBytes;
    cluster_ = std::make_unique<ScriptedCluster>(options);
    cluster_->Register();
    ASSERT_FALSE(HasFatalFailure());
    initial_.resize(keys_.size() * kWidth);
    std::iota(initial_.begin(), initial_.end(), 1.0f);
    ASSERT_TRUE(ClientPush(table_, keys_, initial_).ok());
    ExpectTableHolds(keys_, initial_);
    errors_before_ = counters().errors;
  }

  ServerCounters counters() { return cluster_->server().counters(); }

  Status ClientPush(TableId table, const std::vector<Key>& keys,
                    const std::vector<float>& values) {
    return Push(*cluster_, table, ++client_seq_, keys, values);
  }
  Status ClientPull(TableId table, const std::vector<Key>& keys,
                    std::vector<float>* out,
                    const std::vector<uint32_t>& lengths = {}) {
    return Pull(*cluster_, table, ++client_seq_, keys, out, lengths);
  }

  void ExpectTableHolds(const std::vector<Key>& keys,
                        const std::vector<float>& expected) {
    std::vector<float> out;
    Status s = ClientPull(table_, keys, &out);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(out, expected);
  }

  // Sends `frames` as the raw peer, without running the network.
  void Send(const std::vector<std::string>& frames) {
    cluster_->SendFrames(frames);
  }

  // The next reply to the raw peer's requests, in the order sent, or
  // nullopt with a test failure.
  std::optional<Got> NextReply() {
    if (replies_.empty()) {
      cluster_->Run(milliseconds(5));
      for (Got& got : cluster_->TakeAtClient()) {
        replies_.push_back(std::move(got));
      }
    }
    if (replies_.empty()) {
      ADD_FAILURE() << "no reply within 5 ms";
      return std::nullopt;
    }
    Got got = std::move(replies_.front());
    replies_.pop_front();
    return got;
  }

  // Sends `frames` and expects an error reply naming the problem.
  void ExpectRefused(const std::vector<std::string>& frames, StatusCode code,
                     const std::string& fragment,
                     std::optional<uint64_t> seq = std::nullopt) {
    Send(frames);
    ++bad_messages_;
    std::optional<Got> got = NextReply();
    ASSERT_TRUE(got.has_value());
    const wire::Header& reply = got->header;
    EXPECT_EQ(reply.type(), wire::DATA_REPLY);
    EXPECT_EQ(reply.status_code(), static_cast<int>(code))
        << reply.status_message();
    EXPECT_THAT(reply.status_message(), HasSubstr(fragment));
    EXPECT_FALSE(reply.moved());
    EXPECT_FALSE(reply.duplicate());
    if (seq) {
      EXPECT_EQ(reply.seq(), *seq);
    }
  }

  // The plain client still pushes and pulls correctly, and every bad
  // message was counted as one error.
  void ExpectStillServing() {
    const std::vector<Key> keys = {2, 500};
    const std::vector<float> delta(keys.size() * kWidth, 0.5f);
    ASSERT_TRUE(ClientPush(table_, keys, delta).ok());
    std::vector<float> expected(initial_.begin() + kWidth,
                                initial_.begin() + 2 * kWidth);
    for (float& x : expected) x += 0.5f;
    expected.insert(expected.end(), kWidth, 0.5f);
    ExpectTableHolds(keys, expected);
    EXPECT_EQ(counters().errors - errors_before_, bad_messages_);
  }

  // A well-formed push of `values` to keys_ (frames after the header).
  std::vector<std::string> PushFrames(const wire::Header& h,
                                      const std::vector<float>& values) {
    return {Serialize(h), Bytes(keys_), Bytes(values)};
  }

  std::unique_ptr<ScriptedCluster> cluster_;
  const TableId table_ = kTable;
  const std::vector<Key> keys_ = {1, 2, 3};
  std::vector<float> initial_;
  uint64_t errors_before_ = 0;
  uint64_t bad_messages_ = 0;
  uint64_t client_seq_ = 1 << 20;  // the plain client's, apart from the peer's
  std::deque<Got> replies_;        // read, not yet looked at
};

// ---------------------------------------------------------------------------
// Malformed requests.

using ServerBadInput = ScriptedServerTest;

TEST_F(ServerBadInput, ATruncatedPushIsRefused) {
  // The header announces 3 keys with one values frame; the values frame is
  // missing.
  const wire::Header h = Request(wire::PUSH, table_, 11, 3);
  ExpectRefused({Serialize(h), Bytes(keys_)}, StatusCode::kInvalidArgument,
                "frames", 11);
  ExpectTableHolds(keys_, initial_);
  ExpectStillServing();
}

TEST_F(ServerBadInput, APushWithLengthsOtherThanTheTableWidthIsRefused) {
  wire::Header h = Request(wire::PUSH, table_, 12, 3);
  h.set_has_lengths(true);
  const std::vector<uint32_t> lengths = {4, 3, 4};
  const std::vector<float> values(11, 1.0f);
  ExpectRefused({Serialize(h), Bytes(keys_), Bytes(values), Bytes(lengths)},
                StatusCode::kInvalidArgument,
                "length of key 2 is 3, table width is 4", 12);
  ExpectTableHolds(keys_, initial_);
  ExpectStillServing();
}

TEST_F(ServerBadInput, APushWithTooFewValuesIsRefused) {
  const wire::Header h = Request(wire::PUSH, table_, 13, 3);
  ExpectRefused(PushFrames(h, std::vector<float>(11, 1.0f)),
                StatusCode::kInvalidArgument,
                "values frame has 44 bytes, expected 48", 13);
  ExpectTableHolds(keys_, initial_);
  ExpectStillServing();
}

TEST_F(ServerBadInput, UnsortedKeysAreRefused) {
  const wire::Header h = Request(wire::PUSH, table_, 14, 3);
  const std::vector<Key> unsorted = {3, 1, 2};
  ExpectRefused(
      {Serialize(h), Bytes(unsorted), Bytes(std::vector<float>(12, 1.0f))},
      StatusCode::kInvalidArgument, "not strictly increasing", 14);
  ExpectTableHolds(keys_, initial_);
  ExpectStillServing();
}

TEST_F(ServerBadInput, AnUnknownTableIdIsRefusedWithNotFound) {
  const wire::Header h = Request(wire::PUSH, table_ + 999, 15, 3);
  ExpectRefused(PushFrames(h, std::vector<float>(12, 1.0f)),
                StatusCode::kNotFound,
                "unknown table id " + std::to_string(table_ + 999), 15);
  ExpectStillServing();
}

TEST_F(ServerBadInput, ARequestOverTheSizeLimitIsRefused) {
  // A well-formed push of 1.5 MiB to a server whose limit is 1 MiB:
  // 65536 keys (512 KiB) and 65536 * 4 floats (1 MiB).
  constexpr uint32_t kKeys = 65536;
  std::vector<Key> keys(kKeys);
  std::iota(keys.begin(), keys.end(), Key{1000});
  const std::vector<float> values(size_t{kKeys} * kWidth, 1.0f);
  const wire::Header h = Request(wire::PUSH, table_, 16, kKeys);
  ExpectRefused({Serialize(h), Bytes(keys), Bytes(values)},
                StatusCode::kInvalidArgument, "over the server's limit", 16);
  // Nothing of it was applied.
  ExpectTableHolds({1000, 1001}, std::vector<float>(2 * kWidth, 0.0f));
  ExpectStillServing();
}

TEST_F(ServerBadInput, GarbageBytesAsHeaderAreRefused) {
  ExpectRefused({std::string(16, '\xff'), Bytes(keys_)},
                StatusCode::kInvalidArgument, "not a valid protobuf");
  ExpectStillServing();
}

TEST_F(ServerBadInput, AnEmptyHeaderFrameIsRefused) {
  ExpectRefused({std::string()}, StatusCode::kInvalidArgument,
                "empty header frame");
  ExpectStillServing();
}

TEST_F(ServerBadInput, AMessageTypeOutsideTheEnumIsRefused) {
  // A valid push header with field 1 (type) set again to 99: the last
  // value on the wire wins.
  std::string header = Serialize(Request(wire::PUSH, table_, 17, 3));
  header += std::string("\x08\x63", 2);
  ExpectRefused({header, Bytes(keys_), Bytes(std::vector<float>(12, 1.0f))},
                StatusCode::kInvalidArgument, "unknown message type 99");
  ExpectTableHolds(keys_, initial_);
  ExpectStillServing();
}

TEST_F(ServerBadInput, ACoordinatorMessageTypeIsRefused) {
  wire::Header h = Request(wire::HEARTBEAT, table_, 18, 0);
  ExpectRefused({Serialize(h)}, StatusCode::kInvalidArgument, "not type 11",
                18);
  ExpectStillServing();
}

TEST_F(ServerBadInput, NonFiniteValuesAreRefusedAndLeaveTheTableUnchanged) {
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  const float kInf = std::numeric_limits<float>::infinity();
  // One bad float in the middle key; the other keys' values are fine, and
  // must not be applied either (a push is all or nothing).
  for (float bad : {kNaN, kInf, -kInf}) {
    std::vector<float> values(12, 100.0f);
    values[kWidth + 2] = bad;
    const wire::Header h = Request(wire::PUSH, table_, 19, 3);
    ExpectRefused(PushFrames(h, values), StatusCode::kInvalidArgument,
                  "non-finite value", 19);
    ExpectTableHolds(keys_, initial_);
  }
  ExpectStillServing();
}

TEST_F(ServerBadInput, AHeaderOnlyMessageIsRefused) {
  // A pull announcing two keys, with no keys frame at all.
  const wire::Header h = Request(wire::PULL, table_, 20, 2);
  ExpectRefused({Serialize(h)}, StatusCode::kInvalidArgument, "frames", 20);
  ExpectStillServing();
}

TEST_F(ServerBadInput, AHeaderOnlyPushIsRefused) {
  const wire::Header h = Request(wire::PUSH, table_, 21, 3);
  ExpectRefused({Serialize(h)}, StatusCode::kInvalidArgument, "frames", 21);
  ExpectTableHolds(keys_, initial_);
  ExpectStillServing();
}

TEST_F(ServerBadInput, APullCarryingValuesIsRefused) {
  wire::Header h = Request(wire::PULL, table_, 22, 3);
  h.set_values_frames(1);
  ExpectRefused(PushFrames(h, std::vector<float>(12, 1.0f)),
                StatusCode::kInvalidArgument, "a pull carries no values", 22);
  ExpectTableHolds(keys_, initial_);
  ExpectStillServing();
}

TEST_F(ServerBadInput, ServerKeepsServingAfterEveryKindOfBadMessageInARow) {
  const std::vector<float> twelve(12, 1.0f);
  std::vector<float> nan_values(12, 1.0f);
  nan_values[5] = std::numeric_limits<float>::quiet_NaN();
  wire::Header lengths_header = Request(wire::PUSH, table_, 2, 3);
  lengths_header.set_has_lengths(true);
  std::string type_99 = Serialize(Request(wire::PUSH, table_, 7, 3));
  type_99 += std::string("\x08\x63", 2);
  std::vector<Key> big_keys(65536);
  std::iota(big_keys.begin(), big_keys.end(), Key{1000});

  ExpectRefused({Serialize(Request(wire::PUSH, table_, 1, 3)), Bytes(keys_)},
                StatusCode::kInvalidArgument, "frames");
  ExpectRefused({Serialize(lengths_header), Bytes(keys_),
                 Bytes(std::vector<float>(11, 1.0f)),
                 Bytes(std::vector<uint32_t>{4, 3, 4})},
                StatusCode::kInvalidArgument, "table width is 4");
  ExpectRefused({Serialize(Request(wire::PUSH, table_, 3, 3)),
                 Bytes(std::vector<Key>{3, 1, 2}), Bytes(twelve)},
                StatusCode::kInvalidArgument, "not strictly increasing");
  ExpectRefused(PushFrames(Request(wire::PUSH, table_ + 999, 4, 3), twelve),
                StatusCode::kNotFound, "unknown table id");
  ExpectRefused(
      {Serialize(Request(wire::PUSH, table_, 5, 65536)), Bytes(big_keys),
       Bytes(std::vector<float>(65536 * kWidth, 1.0f))},
      StatusCode::kInvalidArgument, "over the server's limit");
  ExpectRefused({std::string(16, '\xff')}, StatusCode::kInvalidArgument,
                "not a valid protobuf");
  ExpectRefused({type_99, Bytes(keys_), Bytes(twelve)},
                StatusCode::kInvalidArgument, "unknown message type");
  ExpectRefused(PushFrames(Request(wire::PUSH, table_, 8, 3), nan_values),
                StatusCode::kInvalidArgument, "non-finite");
  ExpectRefused({Serialize(Request(wire::PULL, table_, 9, 3))},
                StatusCode::kInvalidArgument, "frames");
  EXPECT_EQ(bad_messages_, 9u);
  ExpectTableHolds(keys_, initial_);
  ExpectStillServing();
}

TEST_F(ServerBadInput, ARequestListingTooManyPriorSeqsIsRefused) {
  wire::Header h = Request(wire::PUSH, table_, 12, 3);
  for (uint64_t i = 0; i <= RequestAdmission::kMaxPriorSeqs; ++i) {
    h.add_prior_seqs(i + 1);
  }
  ExpectRefused(PushFrames(h, std::vector<float>(3 * kWidth, 1.0f)),
                StatusCode::kInvalidArgument, "earlier sequence numbers", 12);
  ExpectTableHolds(keys_, initial_);
  ExpectStillServing();
}

// A pull on a variable-width table creates missing keys with the widths the
// request names. Those widths are bounded (kMaxValueFloats per key, and the
// server's message limit for the reply) so that one small request cannot
// make the server allocate gigabytes and die: it gets an error reply.
TEST_F(ServerBadInput, APullOfAHugeNewVariableWidthKeyIsRefused) {
  constexpr TableId kVariable = 1;
  TableOptions t;
  t.name = "variable";
  t.value_width = 0;
  const Status created = cluster_->CreateTable(t, kVariable);
  ASSERT_TRUE(created.ok()) << created;
  // Over the per-key limit.
  wire::Header h = Request(wire::PULL, kVariable, 90, 1);
  h.set_has_lengths(true);
  ExpectRefused({Serialize(h), Bytes(std::vector<Key>{7}),
                 Bytes(std::vector<uint32_t>{0xFFFFFFFFu})},
                StatusCode::kInvalidArgument, "over the limit", 90);
  // Within it, but the reply would be over the server's message limit.
  h.set_seq(91);
  ExpectRefused({Serialize(h), Bytes(std::vector<Key>{7}),
                 Bytes(std::vector<uint32_t>{1u << 20})},
                StatusCode::kInvalidArgument, "reply limit", 91);
  // Nothing was created for the refused key.
  std::vector<float> out;
  const Status pulled = ClientPull(kVariable, {7}, &out, {2});
  ASSERT_TRUE(pulled.ok()) << pulled;
  EXPECT_EQ(out, std::vector<float>(2, 0.0f));
  ExpectStillServing();
}

// A BSP push is checked when it arrives and applied at its clock's end. A
// push of the same absent key with another width from a peer that is no
// worker, in between, creates the key with its width: the buffered push
// no longer fits. It is dropped with an error, never written past the
// key's value. (A pull in between once created the key too; it now stores
// nothing.)
TEST_F(ServerBadInput, ABufferedBspPushThatNoLongerFitsItsKeyIsDropped) {
  constexpr TableId kBspVariable = 1;
  TableOptions t;
  t.name = "bsp-variable";
  t.value_width = 0;
  t.rule = UpdateRule::kAssign;
  t.consistency = {ConsistencyMode::kBsp, 0};
  const Status created = cluster_->CreateTable(t, kBspVariable);
  ASSERT_TRUE(created.ok()) << created;
  // Worker 0, the job's only one, pushes 4096 floats to key 77 at clock 0:
  // held until its clock ends.
  cluster_->SetWorkers({0}, /*change_id=*/1);
  const std::vector<Key> key = {77};
  wire::Header worker_push =
      Request(wire::PUSH, kBspVariable, 94, 1, kWorkerClientId);
  worker_push.set_worker_id(0);
  worker_push.set_clock(0);
  worker_push.set_has_lengths(true);
  std::optional<Got> reply =
      OneReply(*cluster_, {Serialize(worker_push), Bytes(key),
                           Bytes(std::vector<float>(4096, 5.0f)),
                           Bytes(std::vector<uint32_t>{4096})});
  ASSERT_TRUE(reply.has_value());
  ASSERT_EQ(reply->header.status_code(), 0) << reply->header.status_message();
  // A pull of another width stores nothing (it once created the key).
  wire::Header h = Request(wire::PULL, kBspVariable, 95, 1);
  h.set_has_lengths(true);
  Send({Serialize(h), Bytes(key), Bytes(std::vector<uint32_t>{1})});
  reply = NextReply();
  ASSERT_TRUE(reply.has_value());
  ASSERT_EQ(reply->header.status_code(), 0) << reply->header.status_message();
  // Another peer pushes key 77 with width 1 (no worker: not held by BSP).
  wire::Header push = Request(wire::PUSH, kBspVariable, 96, 1);
  push.set_has_lengths(true);
  Send({Serialize(push), Bytes(key), Bytes(std::vector<float>{3.0f}),
        Bytes(std::vector<uint32_t>{1})});
  reply = NextReply();
  ASSERT_TRUE(reply.has_value());
  ASSERT_EQ(reply->header.status_code(), 0) << reply->header.status_message();
  // The clock ends: the 4096 floats do not fit the 1-float key.
  wire::Header clock =
      Request(wire::CLOCK, kBspVariable, 97, 0, kWorkerClientId);
  clock.set_values_frames(0);
  clock.set_worker_id(0);
  clock.set_clock(1);
  EXPECT_TRUE(cluster_->Exchange({Serialize(clock)}).empty());
  ++bad_messages_;
  std::vector<float> out;
  const Status pulled = ClientPull(kBspVariable, key, &out, {1});
  ASSERT_TRUE(pulled.ok()) << pulled;
  EXPECT_EQ(out, std::vector<float>{3.0f});
  ExpectStillServing();
}

// Clocks and timeouts are range-checked where the header is read: sums
// made of them (a parked pull's deadline, an SSP bound, a consistency
// change's first clock) cannot overflow.
TEST_F(ServerBadInput, ClocksAndTimeoutsOutOfRangeAreRefused) {
  constexpr TableId kSsp = 1;
  TableOptions t;
  t.name = "ssp";
  t.value_width = kWidth;
  t.consistency = {ConsistencyMode::kSsp, 2};
  const Status created = cluster_->CreateTable(t, kSsp);
  ASSERT_TRUE(created.ok()) << created;
  const std::vector<Key> key = {1};
  uint64_t seq = 100;
  for (int64_t clock : {std::numeric_limits<int64_t>::min(), int64_t{-2},
                        kMaxClock + 1, std::numeric_limits<int64_t>::max()}) {
    wire::Header pull = Request(wire::PULL, kSsp, ++seq, 1);
    pull.set_worker_id(0);
    pull.set_clock(clock);
    ExpectRefused({Serialize(pull), Bytes(key)}, StatusCode::kInvalidArgument,
                  "clock " + std::to_string(clock) + " is out of range", seq);
    wire::Header push = Request(wire::PUSH, kSsp, ++seq, 1);
    push.set_clock(clock);
    ExpectRefused(
        {Serialize(push), Bytes(key), Bytes(std::vector<float>(kWidth, 1.0f))},
        StatusCode::kInvalidArgument, "is out of range", seq);
  }
  for (int64_t timeout :
       {int64_t{-1}, kMaxTimeoutMs + 1, std::numeric_limits<int64_t>::max()}) {
    wire::Header pull = Request(wire::PULL, kSsp, ++seq, 1);
    pull.set_clock(50);  // parked: beyond the bound
    pull.set_timeout_ms(timeout);
    ExpectRefused({Serialize(pull), Bytes(key)}, StatusCode::kInvalidArgument,
                  "timeout_ms " + std::to_string(timeout) + " is out of range",
                  seq);
  }
  ExpectStillServing();
}

// A push standing for more worker batches than any worker trains in a step
// is refused on every path (async here), and nothing of it is applied.
TEST_F(ServerBadInput, APushWithAnAbsurdBatchWeightIsRefused) {
  constexpr TableId kWeighted = 1;
  TableOptions t;
  t.name = "weighted";
  t.value_width = kWidth;
  const Status created = cluster_->CreateTable(t, kWeighted);
  ASSERT_TRUE(created.ok()) << created;
  const std::vector<Key> key = {1};
  wire::Header push = Request(wire::PUSH, kWeighted, 300, 1);
  push.set_batch_weight(70000);
  ExpectRefused(
      {Serialize(push), Bytes(key), Bytes(std::vector<float>(kWidth, 1.0f))},
      StatusCode::kInvalidArgument, "batch weight is 70000", 300);
  std::vector<float> out;
  const Status pulled = ClientPull(kWeighted, key, &out);
  ASSERT_TRUE(pulled.ok()) << pulled;
  EXPECT_EQ(out, std::vector<float>(kWidth, 0.0f));
  ExpectStillServing();
}

// A learning-rate factor that is not a finite number in (0, 1e6] is
// refused, and nothing of its push is applied.
TEST_F(ServerBadInput, APushWithABadRateFactorIsRefused) {
  constexpr TableId kRated = 1;
  TableOptions t;
  t.name = "rated";
  t.value_width = kWidth;
  const Status created = cluster_->CreateTable(t, kRated);
  ASSERT_TRUE(created.ok()) << created;
  const std::vector<Key> key = {1};
  uint64_t seq = 300;
  for (float factor : {-1.0f, 2e6f, std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity()}) {
    wire::Header push = Request(wire::PUSH, kRated, ++seq, 1);
    push.set_rate_factor(factor);
    ExpectRefused(
        {Serialize(push), Bytes(key), Bytes(std::vector<float>(kWidth, 1.0f))},
        StatusCode::kInvalidArgument, "learning-rate factor", seq);
  }
  std::vector<float> out;
  const Status pulled = ClientPull(kRated, key, &out);
  ASSERT_TRUE(pulled.ok()) << pulled;
  EXPECT_EQ(out, std::vector<float>(kWidth, 0.0f));
  ExpectStillServing();
}

// ---------------------------------------------------------------------------
// Exactly-once application of resent requests.

class ServerResend : public ScriptedServerTest {
 protected:
  // Sends a one-key push (or push-pull) of `values` to `key` as
  // (kRawClientId, seq); the reply is read with ExpectOk.
  void SendPush(Key key, uint64_t seq, uint64_t done_below,
                const std::vector<float>& values,
                wire::MessageType type = wire::PUSH,
                const std::vector<uint64_t>& priors = {}) {
    wire::Header h = Request(type, table_, seq, 1);
    h.set_done_below(done_below);
    for (uint64_t prior : priors) h.add_prior_seqs(prior);
    Send({Serialize(h), Bytes(std::vector<Key>{key}), Bytes(values)});
  }
  // Expects an OK reply to `seq`, flagged duplicate or not.
  void ExpectOk(uint64_t seq, bool duplicate,
                std::vector<std::string>* frames = nullptr) {
    std::optional<Got> got = NextReply();
    ASSERT_TRUE(got.has_value());
    const wire::Header& reply = got->header;
    EXPECT_EQ(reply.type(), wire::DATA_REPLY);
    EXPECT_EQ(reply.status_code(), 0) << reply.status_message();
    EXPECT_EQ(reply.seq(), seq);
    EXPECT_EQ(reply.duplicate(), duplicate) << "seq " << seq;
    if (frames != nullptr) *frames = std::move(got->data);
  }
};

TEST_F(ServerResend, ThePushSentThreeTimesIsAppliedOnce) {
  const ServerCounters before = counters();
  const std::vector<float> values = {1, 2, 3, 4};
  for (int i = 0; i < 3; ++i) SendPush(10, 100, 0, values);
  ExpectOk(100, false);
  ExpectOk(100, true);
  ExpectOk(100, true);
  ExpectTableHolds({10}, values);
  const ServerCounters after = counters();
  EXPECT_EQ(after.duplicates - before.duplicates, 2u);
  EXPECT_EQ(after.pushes - before.pushes, 1u);
  EXPECT_EQ(after.errors - before.errors, 0u);
}

TEST_F(ServerResend, AResendBelowTheDoneBelowMarkIsADuplicate) {
  const ServerCounters before = counters();
  SendPush(10, 100, 100, {1, 2, 3, 4});
  ExpectOk(100, false);
  // Seq 101 says every seq below 101 has completed: the server may forget
  // that it applied 100.
  SendPush(10, 101, 101, {10, 10, 10, 10});
  ExpectOk(101, false);
  // A late copy of 100, carrying either the current mark or an older one.
  SendPush(10, 100, 101, {1, 2, 3, 4});
  ExpectOk(100, true);
  SendPush(10, 100, 0, {1, 2, 3, 4});
  ExpectOk(100, true);
  // A late copy of 101 once the mark has passed it.
  SendPush(10, 102, 102, {0, 0, 0, 1});
  ExpectOk(102, false);
  SendPush(10, 101, 103, {10, 10, 10, 10});
  ExpectOk(101, true);
  ExpectTableHolds({10}, {11, 12, 13, 15});
  const ServerCounters after = counters();
  EXPECT_EQ(after.duplicates - before.duplicates, 3u);
  EXPECT_EQ(after.pushes - before.pushes, 3u);
}

TEST_F(ServerResend, AResentPushPullIsNotReappliedButStillReturnsTheValue) {
  const std::vector<float> values = {1, 1, 1, 1};
  for (int i = 0; i < 2; ++i) {
    SendPush(20, 300, 0, values, wire::PUSH_PULL);
    std::vector<std::string> frames;
    ExpectOk(300, i > 0, &frames);
    ASSERT_EQ(frames.size(), 1u);  // the values, after the header
    ASSERT_EQ(frames[0].size(), kWidth * sizeof(float));
    EXPECT_EQ(Floats(frames), values);
  }
  ExpectTableHolds({20}, values);
}

TEST_F(ServerResend, AnOlderSeqArrivingAfterANewerOneIsApplied) {
  // After a re-split, seq 202 can reach a server before seq 201 (still open,
  // so done_below stays 201): both are new.
  SendPush(30, 202, 201, {1, 0, 0, 0});
  ExpectOk(202, false);
  SendPush(30, 201, 201, {0, 1, 0, 0});
  ExpectOk(201, false);
  ExpectTableHolds({30}, {1, 1, 0, 0});
}

// A push re-sent under a new seq after the server it went to left the job
// lists its old seq: if that was applied here (a moved window brings the
// old server's), the push is a duplicate; if not, it is applied.
TEST_F(ServerResend, APushWhosePriorSeqWasAppliedIsADuplicate) {
  SendPush(40, 500, 500, {1, 0, 0, 0});
  ExpectOk(500, false);
  SendPush(40, 510, 500, {1, 0, 0, 0}, wire::PUSH, {505, 500});
  ExpectOk(510, true);
  SendPush(40, 511, 500, {0, 1, 0, 0}, wire::PUSH, {506});
  ExpectOk(511, false);
  ExpectTableHolds({40}, {1, 1, 0, 0});
}

// ---------------------------------------------------------------------------
// Routing: a key of a slot the server does not own.

// Slots 0-7 on server 0 (the one under test), 8-15 on server 1, as the
// coordinator assigns them to two servers.
std::vector<int32_t> SlotsOfServer1() {
  const std::vector<int32_t> owner = AssignSlotsEvenly(kSlots, {0, 1});
  std::vector<int32_t> slots;
  for (int32_t slot = 0; slot < kSlots; ++slot) {
    if (owner[slot] == 1) slots.push_back(slot);
  }
  return slots;
}

// The first key of kTable whose slot is on server `server`.
Key KeyOn(int32_t server) {
  const std::vector<int32_t> owner = AssignSlotsEvenly(kSlots, {0, 1});
  Key key = 0;
  while (owner[SlotOf(kTable, key, kSlots)] != server) ++key;
  return key;
}

TEST(ServerRouting, AKeyOfAnotherServersSlotIsAnsweredMovedWithTheRouting) {
  ScriptedCluster cluster;
  cluster.Register(SlotsOfServer1());
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  // A key on each server.
  const Key on_0 = KeyOn(0), on_1 = KeyOn(1);
  const std::vector<Key> both = {std::min(on_0, on_1), std::max(on_0, on_1)};

  const ServerCounters before = cluster.server().counters();
  const std::vector<float> values(kWidth, 1.0f);
  wire::Header h = Request(wire::PUSH, kTable, 50, 1);
  std::optional<Got> got = OneReply(
      cluster, {Serialize(h), Bytes(std::vector<Key>{on_1}), Bytes(values)});
  ASSERT_TRUE(got.has_value());
  const wire::Header& reply = got->header;
  EXPECT_EQ(reply.type(), wire::DATA_REPLY);
  EXPECT_EQ(reply.seq(), 50u);
  EXPECT_TRUE(reply.moved());
  EXPECT_EQ(reply.status_code(), static_cast<int>(StatusCode::kUnavailable));
  ASSERT_TRUE(reply.has_routing());
  const wire::RoutingTable& routing = reply.routing();
  EXPECT_GE(routing.epoch(), 1u);
  ASSERT_EQ(routing.num_slots(), kSlots);
  ASSERT_EQ(routing.slot_owner_size(), kSlots);
  EXPECT_EQ(routing.slot_owner(SlotOf(kTable, on_1, kSlots)), 1);
  bool names_server_1 = false;
  for (const wire::ServerEndpoint& e : routing.servers()) {
    if (e.id() == 1) {
      names_server_1 = true;
      EXPECT_EQ(e.tcp_address(), kServer1Address);
    }
  }
  EXPECT_TRUE(names_server_1) << routing.DebugString();

  // A push mixing an owned key with a foreign one is refused as a whole.
  h.set_seq(51);
  h.set_num_keys(2);
  got = OneReply(cluster, {Serialize(h), Bytes(both),
                           Bytes(std::vector<float>(2 * kWidth, 1.0f))});
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(got->header.moved());
  EXPECT_EQ(got->header.seq(), 51u);

  const ServerCounters after = cluster.server().counters();
  EXPECT_EQ(after.redirects - before.redirects, 2u);
  EXPECT_EQ(after.pushes - before.pushes, 0u);
  EXPECT_EQ(after.errors - before.errors, 0u);
  // Nothing was applied: not the owned key, and the foreign one is not
  // held here at all.
  EXPECT_EQ(cluster.Pull(52, {on_0}), std::vector<float>(kWidth, 0.0f));
  std::vector<float> stored;
  EXPECT_FALSE(cluster.server().GetForTesting(kTable, on_1, &stored));
}

// A push that server A applied, resent with the same (client_id, seq) after
// its slot moved to server B (the client resends on a reply timeout), must
// be answered "duplicate", not "moved": a "moved" reply tells the client the
// request was not applied, and B would apply it a second time. (The server
// checks for duplicates before slot ownership.) The move is scripted: the
// coordinator's MIGRATE_OUT, a target that acknowledges every chunk, and
// the routing that gives the slot to server 1.
TEST(ServerRouting, AResendOfAnAppliedPushAfterItsSlotMovedIsADuplicate) {
  ScriptedCluster cluster;
  cluster.Register(SlotsOfServer1());
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  const Key key = KeyOn(0);
  const int32_t slot = SlotOf(kTable, key, kSlots);

  const std::vector<std::string> frames = {
      Serialize(Request(wire::PUSH, kTable, 70, 1)),
      Bytes(std::vector<Key>{key}), Bytes(std::vector<float>(kWidth, 1.0f))};
  std::optional<Got> reply = OneReply(cluster, frames);
  ASSERT_TRUE(reply.has_value());
  ASSERT_EQ(reply->header.status_code(), 0) << reply->header.status_message();
  ASSERT_FALSE(reply->header.duplicate());

  // The slot moves to server 1.
  std::unique_ptr<Transport> target_transport =
      cluster.network().NewTransport("server-1");
  std::unique_ptr<Socket> target =
      *target_transport->NewRouter(testing::kMaxBytes);
  ASSERT_TRUE(target->Bind(kServer1Address).ok());
  wire::Header out;
  out.set_type(wire::MIGRATE_OUT);
  out.set_change_id(1);
  out.set_member_id(1);
  out.mutable_endpoint()->set_tcp_address(kServer1Address);
  out.add_slots(slot);
  cluster.SendToServer(out);
  cluster.Run(milliseconds(5));
  int chunks = 0;
  while (std::optional<Got> chunk = testing::Take(*target, /*router=*/true)) {
    EXPECT_EQ(chunk->header.type(), wire::MIGRATE_DATA);
    wire::Header ack;
    ack.set_type(wire::MIGRATE_DATA);
    ack.set_ack(true);
    ack.set_change_id(chunk->header.change_id());
    ack.set_seq(chunk->header.seq());
    OutMessage message;
    message.AddString(chunk->identity);
    message.AddString(ack.SerializeAsString());
    ASSERT_TRUE(target->Send(std::move(message)).ok());
    ++chunks;
  }
  ASSERT_GT(chunks, 0);
  cluster.Run(milliseconds(5));
  std::optional<Got> done = cluster.TakeAtCoordinator(wire::MIGRATE_DONE);
  ASSERT_TRUE(done.has_value());
  ASSERT_EQ(done->header.status_code(), 0) << done->header.status_message();
  std::vector<int32_t> owners = AssignSlotsEvenly(kSlots, {0, 1});
  owners[slot] = 1;
  cluster.SendRouting(/*epoch=*/2, owners);
  std::optional<Got> ack = cluster.TakeAtCoordinator(wire::ROUTING_ACK);
  ASSERT_TRUE(ack.has_value());
  ASSERT_EQ(ack->header.epoch(), 2u);
  // Server 0 has installed the new routing: a pull of the key is answered
  // "moved".
  wire::Header pull = Request(wire::PULL, kTable, 1000, 1);
  pull.set_epoch(0);
  reply = OneReply(cluster, {Serialize(pull), Bytes(std::vector<Key>{key})});
  ASSERT_TRUE(reply.has_value());
  ASSERT_TRUE(reply->header.moved()) << "server 0 did not see the slot move";

  const ServerCounters before = cluster.server().counters();
  reply = OneReply(cluster, frames);  // the resend of seq 70
  ASSERT_TRUE(reply.has_value());
  EXPECT_FALSE(reply->header.moved()) << reply->header.status_message();
  EXPECT_EQ(reply->header.status_code(), 0) << reply->header.status_message();
  EXPECT_TRUE(reply->header.duplicate());
  EXPECT_EQ(cluster.server().counters().duplicates - before.duplicates, 1u);
}

// ---------------------------------------------------------------------------
// Hostile sizes.

// With the default limits (1 GiB messages), a 24-byte pull of one key of
// 2^28 floats on a variable-width table used to make the server allocate
// and initialise 1 GiB, silent for many seconds: the coordinator declared it
// dead. Keys wider than max_key_floats (16M floats) are refused at once.
TEST(ServerLimits, APullOfAKeyWiderThanTheServersLimitIsRefused) {
  ScriptedCluster cluster;
  cluster.Register();
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  constexpr TableId kVariable = 1;
  TableOptions t;
  t.name = "variable";
  t.value_width = 0;
  const Status created = cluster.CreateTable(t, kVariable);
  ASSERT_TRUE(created.ok()) << created;
  const std::vector<Key> key = {7};
  for (uint32_t length : {1u << 28, (1u << 24) + 1}) {
    wire::Header h = Request(wire::PULL, kVariable, length, 1);
    h.set_has_lengths(true);
    std::optional<Got> reply = OneReply(
        cluster,
        {Serialize(h), Bytes(key), Bytes(std::vector<uint32_t>{length})});
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->header.status_code(),
              static_cast<int>(StatusCode::kInvalidArgument));
    EXPECT_THAT(reply->header.status_message(),
                HasSubstr("wider than this server's limit of 16777216"));
  }
  EXPECT_EQ(cluster.server().counters().keys_stored, 0u);
  EXPECT_EQ(cluster.server().counters().refused_limits, 2u);
  EXPECT_EQ(cluster.server().counters().refused_permission, 0u);
  // Nor can a fixed-width table be wider: the server refuses to create it.
  TableOptions wide;
  wide.name = "wide";
  wide.value_width = (1u << 24) + 1;
  const Status refused = cluster.CreateTable(wide, 2);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("--max_key_floats"));
  // A pull within the limit reads the initial value and stores nothing.
  std::vector<float> out;
  const Status pulled = Pull(cluster, kVariable, 1, key, &out, {1024});
  ASSERT_TRUE(pulled.ok()) << pulled;
  EXPECT_EQ(out, std::vector<float>(1024, 0.0f));
  EXPECT_EQ(cluster.server().counters().keys_stored, 0u);
}

// Pulls of keys never pushed store nothing: a peer pulling new keys cannot
// grow a server (each such pull once stored its key).
TEST(ServerLimits, PullsOfKeysNeverPushedStoreNothing) {
  ScriptedCluster cluster;
  cluster.Register();
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  constexpr TableId kNormal = 1;
  TableOptions t;
  t.name = "normal";
  t.value_width = 16;
  t.init.kind = InitKind::kNormal;
  t.init.stddev = 1.0f;
  const Status created = cluster.CreateTable(t, kNormal);
  ASSERT_TRUE(created.ok()) << created;
  std::vector<Key> keys(1000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 1000003;
  std::vector<float> first, again;
  ASSERT_TRUE(Pull(cluster, kNormal, 1, keys, &first).ok());
  ASSERT_EQ(first.size(), keys.size() * 16);
  EXPECT_EQ(cluster.server().counters().keys_stored, 0u);
  // The same initial values every time, and once a key is pushed, its
  // update applies to that value.
  ASSERT_TRUE(Pull(cluster, kNormal, 2, keys, &again).ok());
  EXPECT_EQ(first, again);
  const std::vector<Key> one = {keys[5]};
  ASSERT_TRUE(
      Push(cluster, kNormal, 3, one, std::vector<float>(16, 1.0f)).ok());
  std::vector<float> pushed;
  ASSERT_TRUE(Pull(cluster, kNormal, 4, one, &pushed).ok());
  ASSERT_EQ(pushed.size(), 16u);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(pushed[i], first[5 * 16 + i] + 1.0f);
  EXPECT_EQ(cluster.server().counters().keys_stored, 1u);
}

// --max_stored_mb: a push that would store new keys past the server's
// limit is refused whole; keys already held still take pushes.
TEST(ServerLimits, APushOfNewKeysPastTheStoredLimitIsRefusedWhole) {
  ServerOptions options;
  options.max_stored_mb = 1;  // 262144 floats
  ScriptedCluster cluster(options);
  cluster.Register();
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  constexpr TableId kMomentum = 1;
  TableOptions t;
  t.name = "momentum";
  t.value_width = 1024;
  t.rule = UpdateRule::kMomentum;  // one float of state per value: 2048/key
  const Status created = cluster.CreateTable(t, kMomentum);
  ASSERT_TRUE(created.ok()) << created;
  std::vector<Key> first(100), more(40);
  for (size_t i = 0; i < first.size(); ++i) first[i] = i;
  for (size_t i = 0; i < more.size(); ++i) more[i] = 1000 + i;
  ASSERT_TRUE(
      Push(cluster, kMomentum, 1, first, std::vector<float>(100 * 1024, 1.0f))
          .ok());
  // 100 keys hold 204800 floats; 40 more would make 286720.
  Status refused =
      Push(cluster, kMomentum, 2, more, std::vector<float>(40 * 1024, 1.0f));
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("--max_stored_mb"));
  EXPECT_EQ(cluster.server().counters().keys_stored, 100u);
  EXPECT_EQ(cluster.server().counters().refused_limits, 1u);
  // Keys held still take pushes, and new keys within the limit too.
  ASSERT_TRUE(
      Push(cluster, kMomentum, 3, first, std::vector<float>(100 * 1024, 1.0f))
          .ok());
  more.resize(20);
  ASSERT_TRUE(
      Push(cluster, kMomentum, 4, more, std::vector<float>(20 * 1024, 1.0f))
          .ok());
  EXPECT_EQ(cluster.server().counters().keys_stored, 120u);
}

// A client that never lets its done-below mark move (a lying one) holds
// at most max_window_per_client applied sequence numbers in a server's
// exactly-once window: its next push is refused, and taken again once its
// mark moves up.
TEST(ServerLimits, AClientsExactlyOnceWindowIsBounded) {
  ServerOptions options;
  options.max_window_per_client = 4;
  ScriptedCluster cluster(options);
  cluster.Register();
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  const std::vector<Key> key = {1};
  const std::vector<float> one(kWidth, 1.0f);
  auto push = [&](uint64_t seq, uint64_t done_below) {
    wire::Header h = Request(wire::PUSH, kTable, seq, 1);
    h.set_done_below(done_below);
    return OneReply(cluster, {Serialize(h), Bytes(key), Bytes(one)});
  };
  for (uint64_t seq = 100; seq < 104; ++seq) {
    std::optional<Got> reply = push(seq, 0);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->header.status_code(), 0) << reply->header.status_message();
  }
  const uint64_t limits_before = cluster.server().counters().refused_limits;
  std::optional<Got> refused = push(104, 0);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->header.status_code(),
            static_cast<int>(StatusCode::kResourceExhausted));
  EXPECT_THAT(refused->header.status_message(),
              HasSubstr("--max_window_per_client"));
  EXPECT_EQ(cluster.server().counters().refused_limits, limits_before + 1);
  // A resend of one applied is still recognised, not refused.
  std::optional<Got> resent = push(102, 0);
  ASSERT_TRUE(resent.has_value());
  EXPECT_EQ(resent->header.status_code(), 0) << resent->header.status_message();
  EXPECT_TRUE(resent->header.duplicate());
  // Its mark moves past the first two: room again.
  std::optional<Got> taken = push(104, 102);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->header.status_code(), 0) << taken->header.status_message();
  EXPECT_EQ(cluster.Pull(1, key), std::vector<float>(kWidth, 5.0f));
}

}  // namespace
}  // namespace ductile
