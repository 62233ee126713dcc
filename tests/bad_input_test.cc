// A server fed hand-built messages on a raw DEALER socket: malformed
// requests get an error reply and are counted, never crash the server or
// change a table; resent requests are applied once; keys of another
// server's slot get a "moved" reply with the routing table.
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "client/shm_value_area.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/codec.h"
#include "proto/ductile.pb.h"
#include "routing/slot_map.h"
#include "server/request_admission.h"
#include "tests/test_cluster.h"

namespace ductile {
namespace {

using ::testing::HasSubstr;
using testing::TestCluster;
using testing::TestClusterOptions;

constexpr uint32_t kWidth = 4;
constexpr uint64_t kEpoch = 1;  // a fresh cluster's routing epoch
constexpr int64_t kRawClientId = 4242;
constexpr auto kReplyTimeout = std::chrono::seconds(10);

template <typename T>
std::string Bytes(const std::vector<T>& items) {
  return std::string(reinterpret_cast<const char*>(items.data()),
                     items.size() * sizeof(T));
}

// A DEALER socket of its own, speaking the wire format by hand.
class RawPeer {
 public:
  // `receive_queue`: messages its own queue takes before it stops reading
  // the connection (ZMQ_RCVHWM).
  explicit RawPeer(const std::string& address, int receive_queue = 1000)
      : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::rcvhwm, receive_queue);
    socket_.connect(address);
  }

  void Send(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      const auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore
                                               : zmq::send_flags::none;
      ASSERT_TRUE(socket_.send(zmq::buffer(frames[i]), flags).has_value());
    }
  }

  // The next reply's frames, or nullopt (and a test failure) when none
  // comes within kReplyTimeout.
  std::optional<std::vector<zmq::message_t>> Receive() {
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, 1, kReplyTimeout);
    if (!(items[0].revents & ZMQ_POLLIN)) {
      ADD_FAILURE() << "no reply within " << kReplyTimeout.count() << " s";
      return std::nullopt;
    }
    std::vector<zmq::message_t> frames;
    do {
      zmq::message_t frame;
      if (!socket_.recv(frame, zmq::recv_flags::none)) break;
      frames.push_back(std::move(frame));
    } while (frames.back().more());
    return frames;
  }

  // Reads and drops replies until none comes for `quiet`; returns how
  // many it read.
  int DrainReplies(std::chrono::milliseconds quiet) {
    int n = 0;
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}};
    while (zmq::poll(items, 1, quiet) > 0) {
      zmq::message_t frame;
      do {
        if (!socket_.recv(frame, zmq::recv_flags::none)) return n;
      } while (frame.more());
      ++n;
    }
    return n;
  }

  // The next reply's header (frame 0), or nullopt with a test failure.
  std::optional<wire::Header> ReceiveHeader(
      std::vector<zmq::message_t>* frames_out = nullptr) {
    auto frames = Receive();
    if (!frames) return std::nullopt;
    wire::Header header;
    if (frames->empty() ||
        !header.ParseFromArray((*frames)[0].data(),
                               static_cast<int>((*frames)[0].size()))) {
      ADD_FAILURE() << "reply has no readable header";
      return std::nullopt;
    }
    if (frames_out != nullptr) *frames_out = std::move(*frames);
    return header;
  }

 private:
  zmq::context_t context_{1};
  zmq::socket_t socket_;
};

wire::Header Request(wire::MessageType type, TableId table, uint64_t seq,
                     uint32_t num_keys) {
  wire::Header h;
  h.set_type(type);
  h.set_seq(seq);
  h.set_client_id(kRawClientId);
  h.set_table_id(table);
  h.set_epoch(kEpoch);
  h.set_num_keys(num_keys);
  if (type != wire::PULL) h.set_values_frames(1);
  return h;
}

std::string Serialize(const wire::Header& h) { return h.SerializeAsString(); }

TableOptions AddTable() {
  TableOptions t;
  t.name = "raw";
  t.value_width = kWidth;
  t.rule = UpdateRule::kAdd;
  return t;
}

// One server (so it owns every slot), a kAdd table of width 4 holding
// known values at keys 1, 2, 3, a Client and a raw peer.
class OneServerTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kMaxMessageBytes = 1 << 20;

  void SetUp() override {
    TestClusterOptions options;
    options.num_servers = 1;
    options.server.max_message_bytes = kMaxMessageBytes;
    cluster_ = std::make_unique<TestCluster>(options);
    client_ = cluster_->Connect();
    ASSERT_NE(client_, nullptr);
    Result<TableId> table = client_->CreateTable(AddTable());
    ASSERT_TRUE(table.ok()) << table.status();
    table_ = *table;
    initial_.resize(keys_.size() * kWidth);
    std::iota(initial_.begin(), initial_.end(), 1.0f);
    ASSERT_TRUE(client_->Push(table_, keys_, initial_).ok());
    ExpectTableHolds(keys_, initial_);
    errors_before_ = server().counters().errors;
    peer_ = std::make_unique<RawPeer>(server().address());
  }

  Server& server() { return cluster_->server(0); }

  void ExpectTableHolds(const std::vector<Key>& keys,
                        const std::vector<float>& expected) {
    std::vector<float> out(keys.size() * kWidth, -1.0f);
    Status s = client_->Pull(table_, keys, out);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(out, expected);
  }

  // Sends `frames` and expects an error reply naming the problem.
  void ExpectRefused(const std::vector<std::string>& frames, StatusCode code,
                     const std::string& fragment,
                     std::optional<uint64_t> seq = std::nullopt) {
    peer_->Send(frames);
    ++bad_messages_;
    std::optional<wire::Header> reply = peer_->ReceiveHeader();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->type(), wire::DATA_REPLY);
    EXPECT_EQ(reply->status_code(), static_cast<int>(code))
        << reply->status_message();
    EXPECT_THAT(reply->status_message(), HasSubstr(fragment));
    EXPECT_FALSE(reply->moved());
    EXPECT_FALSE(reply->duplicate());
    if (seq) {
      EXPECT_EQ(reply->seq(), *seq);
    }
  }

  // A normal Client still pushes and pulls correctly, and every bad
  // message was counted as one error.
  void ExpectStillServing() {
    const std::vector<Key> keys = {2, 500};
    const std::vector<float> delta(keys.size() * kWidth, 0.5f);
    ASSERT_TRUE(client_->Push(table_, keys, delta).ok());
    std::vector<float> expected(initial_.begin() + kWidth,
                                initial_.begin() + 2 * kWidth);
    for (float& x : expected) x += 0.5f;
    expected.insert(expected.end(), kWidth, 0.5f);
    ExpectTableHolds(keys, expected);
    EXPECT_EQ(server().counters().errors - errors_before_, bad_messages_);
  }

  // A well-formed push of `values` to keys_ (frames after the header).
  std::vector<std::string> PushFrames(const wire::Header& h,
                                      const std::vector<float>& values) {
    return {Serialize(h), Bytes(keys_), Bytes(values)};
  }

  std::unique_ptr<TestCluster> cluster_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<RawPeer> peer_;
  TableId table_ = 0;
  const std::vector<Key> keys_ = {1, 2, 3};
  std::vector<float> initial_;
  uint64_t errors_before_ = 0;
  uint64_t bad_messages_ = 0;
};

// ---------------------------------------------------------------------------
// Malformed requests.

using ServerBadInput = OneServerTest;

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

// Pushed values in a worker's shared memory (docs/wire.md): this process
// is the worker, with a segment of its own.
TEST_F(ServerBadInput, PushedValuesInSharedMemoryAreCheckedLikeAFramesValues) {
  auto area = ShmValueArea::Create(1 << 20);
  ASSERT_TRUE(area.ok()) << area.status();
  // Shared memory is named over ipc:// (this process holds the segment).
  ASSERT_FALSE(server().ipc_address().empty());
  RawPeer tcp_peer(server().address());
  peer_ = std::make_unique<RawPeer>(server().ipc_address());
  auto push = [&](uint64_t seq, const std::vector<float>& values) {
    wire::Header h = Request(wire::PUSH, table_, seq, 3);
    h.set_values_frames(0);
    const uint64_t bytes = values.size() * sizeof(float);
    EXPECT_TRUE((*area)->Lend(seq, 0, bytes, 60000, h.mutable_push_shm()));
    std::memcpy((*area)->Data(seq, 0, bytes), values.data(), bytes);
    return h;
  };
  // Applied as if the values had come in a frame.
  std::vector<float> one(12, 1.0f);
  peer_->Send({Serialize(push(40, one)), Bytes(keys_)});
  std::optional<wire::Header> reply = peer_->ReceiveHeader();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status_code(), 0) << reply->status_message();
  std::vector<float> expected = initial_;
  for (float& x : expected) x += 1.0f;
  ExpectTableHolds(keys_, expected);
  EXPECT_EQ(server().counters().shm_pushes, 1u);

  // A NaN there is refused like one in a frame, and so is a region that
  // does not hold the request's values.
  std::vector<float> bad(12, 2.0f);
  bad[5] = std::numeric_limits<float>::quiet_NaN();
  ExpectRefused({Serialize(push(41, bad)), Bytes(keys_)},
                StatusCode::kInvalidArgument, "non-finite value", 41);
  ExpectRefused(
      {Serialize(push(42, std::vector<float>(8, 1.0f))), Bytes(keys_)},
      StatusCode::kInvalidArgument, "values frame has 32 bytes", 42);
  // Values both in shared memory and in a frame.
  wire::Header both = push(43, one);
  both.set_values_frames(1);
  ExpectRefused({Serialize(both), Bytes(keys_), Bytes(one)},
                StatusCode::kInvalidArgument, "without values frames", 43);
  ExpectTableHolds(keys_, expected);

  // A segment that is not there: refused as unusable, nothing applied,
  // and the reply says so (the worker then sends values in frames).
  wire::Header nowhere = push(44, one);
  nowhere.mutable_push_shm()->set_fd(1 << 20);
  peer_->Send({Serialize(nowhere), Bytes(keys_)});
  ++bad_messages_;
  reply = peer_->ReceiveHeader();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status_code(), static_cast<int>(StatusCode::kUnavailable));
  EXPECT_THAT(reply->status_message(),
              HasSubstr("cannot read the pushed values"));
  EXPECT_TRUE(reply->shm_refused());
  // One sent longer ago than its timeout: refused, but not as unusable.
  wire::Header late = push(45, one);
  late.set_timeout_ms(1000);
  late.mutable_push_shm()->set_sent_ns(late.push_shm().sent_ns() -
                                       int64_t{5} * 1000 * 1000 * 1000);
  peer_->Send({Serialize(late), Bytes(keys_)});
  ++bad_messages_;
  reply = peer_->ReceiveHeader();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status_code(), static_cast<int>(StatusCode::kUnavailable));
  EXPECT_FALSE(reply->shm_refused());
  // A good region named over tcp://, where the kernel does not say which
  // process sent it: refused as unusable before any segment is opened.
  tcp_peer.Send({Serialize(push(46, one)), Bytes(keys_)});
  ++bad_messages_;
  reply = tcp_peer.ReceiveHeader();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status_code(), static_cast<int>(StatusCode::kUnavailable));
  EXPECT_THAT(reply->status_message(), HasSubstr("did not come over ipc://"));
  EXPECT_TRUE(reply->shm_refused());
  ExpectTableHolds(keys_, expected);
  initial_ = expected;  // for ExpectStillServing
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

// ---------------------------------------------------------------------------
// Exactly-once application of resent requests.

class ServerResend : public OneServerTest {
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
    peer_->Send({Serialize(h), Bytes(std::vector<Key>{key}), Bytes(values)});
  }
  // Expects an OK reply to `seq`, flagged duplicate or not.
  void ExpectOk(uint64_t seq, bool duplicate,
                std::vector<zmq::message_t>* frames = nullptr) {
    std::optional<wire::Header> reply = peer_->ReceiveHeader(frames);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->type(), wire::DATA_REPLY);
    EXPECT_EQ(reply->status_code(), 0) << reply->status_message();
    EXPECT_EQ(reply->seq(), seq);
    EXPECT_EQ(reply->duplicate(), duplicate) << "seq " << seq;
  }
};

TEST_F(ServerResend, ThePushSentThreeTimesIsAppliedOnce) {
  const ServerCounters before = server().counters();
  const std::vector<float> values = {1, 2, 3, 4};
  for (int i = 0; i < 3; ++i) SendPush(10, 100, 0, values);
  ExpectOk(100, false);
  ExpectOk(100, true);
  ExpectOk(100, true);
  ExpectTableHolds({10}, values);
  const ServerCounters after = server().counters();
  EXPECT_EQ(after.duplicates - before.duplicates, 2u);
  EXPECT_EQ(after.pushes - before.pushes, 1u);
  EXPECT_EQ(after.errors - before.errors, 0u);
}

TEST_F(ServerResend, AResendBelowTheDoneBelowMarkIsADuplicate) {
  const ServerCounters before = server().counters();
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
  const ServerCounters after = server().counters();
  EXPECT_EQ(after.duplicates - before.duplicates, 3u);
  EXPECT_EQ(after.pushes - before.pushes, 3u);
}

TEST_F(ServerResend, AResentPushPullIsNotReappliedButStillReturnsTheValue) {
  const std::vector<float> values = {1, 1, 1, 1};
  for (int i = 0; i < 2; ++i) {
    SendPush(20, 300, 0, values, wire::PUSH_PULL);
    std::vector<zmq::message_t> frames;
    ExpectOk(300, i > 0, &frames);
    ASSERT_EQ(frames.size(), 2u);
    ASSERT_EQ(frames[1].size(), kWidth * sizeof(float));
    std::vector<float> got(kWidth);
    std::memcpy(got.data(), frames[1].data(), frames[1].size());
    EXPECT_EQ(got, values);
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

// ---------------------------------------------------------------------------
// Routing: a key of a slot the server does not own.

TEST(ServerRouting, AKeyOfAnotherServersSlotIsAnsweredMovedWithTheRouting) {
  constexpr int32_t kSlots = 8;
  TestClusterOptions options;
  options.num_servers = 2;
  options.num_slots = kSlots;
  TestCluster cluster(options);
  ASSERT_EQ(cluster.num_servers(), 2);
  // Server ids are 0 and 1; slots 0-3 go to server 0, 4-7 to server 1.
  Server* by_id[2] = {nullptr, nullptr};
  for (int i = 0; i < 2; ++i) {
    const int32_t id = cluster.server(i).id();
    ASSERT_TRUE(id == 0 || id == 1) << id;
    by_id[id] = &cluster.server(i);
  }
  ASSERT_NE(by_id[0], nullptr);
  ASSERT_NE(by_id[1], nullptr);
  const std::vector<int32_t> owner = AssignSlotsEvenly(kSlots, {0, 1});

  auto client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  Result<TableId> table = client->CreateTable(AddTable());
  ASSERT_TRUE(table.ok()) << table.status();
  // A key on each server.
  Key on_0 = 0, on_1 = 0;
  while (owner[SlotOf(*table, on_0, kSlots)] != 0) ++on_0;
  while (owner[SlotOf(*table, on_1, kSlots)] != 1) ++on_1;
  std::vector<Key> both = {std::min(on_0, on_1), std::max(on_0, on_1)};
  // Both servers have their routing table once they answered a pull.
  std::vector<float> out(2 * kWidth, -1.0f);
  ASSERT_TRUE(client->Pull(*table, both, out).ok());

  const ServerCounters before = by_id[1]->counters();
  RawPeer peer(by_id[1]->address());
  const std::vector<float> values(kWidth, 1.0f);
  wire::Header h = Request(wire::PUSH, *table, 50, 1);
  peer.Send({Serialize(h), Bytes(std::vector<Key>{on_0}), Bytes(values)});
  std::optional<wire::Header> reply = peer.ReceiveHeader();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->type(), wire::DATA_REPLY);
  EXPECT_EQ(reply->seq(), 50u);
  EXPECT_TRUE(reply->moved());
  EXPECT_EQ(reply->status_code(), static_cast<int>(StatusCode::kUnavailable));
  ASSERT_TRUE(reply->has_routing());
  const wire::RoutingTable& routing = reply->routing();
  EXPECT_GE(routing.epoch(), 1u);
  ASSERT_EQ(routing.num_slots(), kSlots);
  ASSERT_EQ(routing.slot_owner_size(), kSlots);
  EXPECT_EQ(routing.slot_owner(SlotOf(*table, on_0, kSlots)), 0);
  bool names_server_0 = false;
  for (const wire::ServerEndpoint& e : routing.servers()) {
    if (e.id() == 0) {
      names_server_0 = true;
      EXPECT_EQ(e.tcp_address(), by_id[0]->address());
    }
  }
  EXPECT_TRUE(names_server_0) << routing.DebugString();

  // A push mixing an owned key with a foreign one is refused as a whole.
  h.set_seq(51);
  h.set_num_keys(2);
  peer.Send(
      {Serialize(h), Bytes(both), Bytes(std::vector<float>(2 * kWidth, 1.0f))});
  reply = peer.ReceiveHeader();
  ASSERT_TRUE(reply.has_value());
  EXPECT_TRUE(reply->moved());
  EXPECT_EQ(reply->seq(), 51u);

  const ServerCounters after = by_id[1]->counters();
  EXPECT_EQ(after.redirects - before.redirects, 2u);
  EXPECT_EQ(after.pushes - before.pushes, 0u);
  EXPECT_EQ(after.errors - before.errors, 0u);
  // Nothing was applied anywhere.
  std::fill(out.begin(), out.end(), -1.0f);
  ASSERT_TRUE(client->Pull(*table, both, out).ok());
  EXPECT_EQ(out, std::vector<float>(2 * kWidth, 0.0f));
}

// A push that server A applied, resent with the same (client_id, seq) after
// its slot moved to server B (the client resends on a reply timeout), must
// be answered "duplicate", not "moved": a "moved" reply tells the client the
// request was not applied, and B would apply it a second time. (The server
// checks for duplicates before slot ownership.)
TEST(ServerRouting, AResendOfAnAppliedPushAfterItsSlotMovedIsADuplicate) {
  constexpr int32_t kSlots = 8;
  TestClusterOptions options;
  options.num_servers = 2;
  options.num_slots = kSlots;
  TestCluster cluster(options);
  Server* by_id[2] = {nullptr, nullptr};
  for (int i = 0; i < cluster.num_servers(); ++i) {
    const int32_t id = cluster.server(i).id();
    ASSERT_TRUE(id == 0 || id == 1) << id;
    by_id[id] = &cluster.server(i);
  }
  ASSERT_NE(by_id[0], nullptr);
  ASSERT_NE(by_id[1], nullptr);
  const std::vector<int32_t> owner = AssignSlotsEvenly(kSlots, {0, 1});
  auto client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  Result<TableId> table = client->CreateTable(AddTable());
  ASSERT_TRUE(table.ok()) << table.status();
  Key key = 0;
  while (owner[SlotOf(*table, key, kSlots)] != 0) ++key;
  const int32_t slot = SlotOf(*table, key, kSlots);
  std::vector<float> out(kWidth);
  ASSERT_TRUE(client->Pull(*table, {&key, 1}, out).ok());

  RawPeer peer(by_id[0]->address());
  wire::Header push = Request(wire::PUSH, *table, 70, 1);
  const std::vector<std::string> frames = {
      Serialize(push), Bytes(std::vector<Key>{key}),
      Bytes(std::vector<float>(kWidth, 1.0f))};
  peer.Send(frames);
  std::optional<wire::Header> reply = peer.ReceiveHeader();
  ASSERT_TRUE(reply.has_value());
  ASSERT_EQ(reply->status_code(), 0) << reply->status_message();
  ASSERT_FALSE(reply->duplicate());

  ASSERT_TRUE(cluster.coordinator().MoveSlot(slot, 1).ok());
  // Wait (bounded) until server 0 has installed the new routing: a pull of
  // the key is then answered "moved".
  bool moved = false;
  for (int attempt = 0; attempt < 1000 && !moved; ++attempt) {
    wire::Header pull = Request(wire::PULL, *table, 1000 + attempt, 1);
    pull.set_epoch(0);
    peer.Send({Serialize(pull), Bytes(std::vector<Key>{key})});
    std::optional<wire::Header> r = peer.ReceiveHeader();
    ASSERT_TRUE(r.has_value());
    moved = r->moved();
    if (!moved) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(moved) << "server 0 never learned that the slot moved";

  const ServerCounters before = by_id[0]->counters();
  peer.Send(frames);  // the resend of seq 70
  reply = peer.ReceiveHeader();
  ASSERT_TRUE(reply.has_value());
  EXPECT_FALSE(reply->moved()) << reply->status_message();
  EXPECT_EQ(reply->status_code(), 0) << reply->status_message();
  EXPECT_TRUE(reply->duplicate());
  EXPECT_EQ(by_id[0]->counters().duplicates - before.duplicates, 1u);
}

// ---------------------------------------------------------------------------
// Hostile sizes.

// A pull on a variable-width table creates missing keys with the widths the
// request names. Those widths are bounded (kMaxValueFloats per key, and the
// server's message limit for the reply) so that one small request cannot
// make the server allocate gigabytes and die: it gets an error reply.
TEST_F(ServerBadInput, APullOfAHugeNewVariableWidthKeyIsRefused) {
  TableOptions t;
  t.name = "variable";
  t.value_width = 0;
  Result<TableId> table = client_->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  // Over the per-key limit.
  wire::Header h = Request(wire::PULL, *table, 90, 1);
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
  std::vector<float> out(2, -1.0f);
  const std::vector<Key> key = {7};
  const std::vector<uint32_t> two = {2};
  ASSERT_TRUE(client_->Pull(*table, key, out, two).ok());
  EXPECT_EQ(out, std::vector<float>(2, 0.0f));
  ExpectStillServing();
}

// With the default limits (1 GiB messages), a 24-byte pull of one key of
// 2^28 floats on a variable-width table used to make the server allocate
// and initialise 1 GiB, silent for many seconds: the coordinator declared it
// dead. Keys wider than max_key_floats (16M floats) are refused at once.
TEST(ServerLimits, APullOfAKeyWiderThanTheServersLimitIsRefused) {
  TestClusterOptions options;
  options.num_servers = 1;
  TestCluster cluster(options);
  std::unique_ptr<Client> client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  TableOptions t;
  t.name = "variable";
  t.value_width = 0;
  Result<TableId> table = client->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  RawPeer peer(cluster.server(0).address());
  const std::vector<Key> key = {7};
  for (uint32_t length : {1u << 28, (1u << 24) + 1}) {
    wire::Header h = Request(wire::PULL, *table, length, 1);
    h.set_has_lengths(true);
    peer.Send({Serialize(h), Bytes(key), Bytes(std::vector<uint32_t>{length})});
    std::optional<wire::Header> reply = peer.ReceiveHeader();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->status_code(),
              static_cast<int>(StatusCode::kInvalidArgument));
    EXPECT_THAT(reply->status_message(),
                HasSubstr("wider than this server's limit of 16777216"));
  }
  EXPECT_EQ(cluster.server(0).counters().keys_stored, 0u);
  EXPECT_EQ(cluster.server(0).counters().refused_limits, 2u);
  EXPECT_EQ(cluster.server(0).counters().refused_permission, 0u);
  // Nor can a fixed-width table be wider.
  TableOptions wide;
  wide.name = "wide";
  wide.value_width = (1u << 24) + 1;
  Result<TableId> refused = client->CreateTable(wide);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("--max_key_floats"));
  // A pull within the limit reads the initial value and stores nothing.
  std::vector<float> out(1024, -1.0f);
  const std::vector<uint32_t> length = {1024};
  ASSERT_TRUE(client->Pull(*table, key, out, length).ok());
  EXPECT_EQ(out, std::vector<float>(1024, 0.0f));
  EXPECT_EQ(cluster.server(0).counters().keys_stored, 0u);
}

// Pulls of keys never pushed store nothing: a peer pulling new keys cannot
// grow a server (each such pull once stored its key).
TEST(ServerLimits, PullsOfKeysNeverPushedStoreNothing) {
  TestClusterOptions options;
  options.num_servers = 1;
  TestCluster cluster(options);
  std::unique_ptr<Client> client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  TableOptions t;
  t.name = "normal";
  t.value_width = 16;
  t.init.kind = InitKind::kNormal;
  t.init.stddev = 1.0f;
  Result<TableId> table = client->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<Key> keys(1000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 1000003;
  std::vector<float> first(keys.size() * 16), again(keys.size() * 16);
  ASSERT_TRUE(client->Pull(*table, keys, first).ok());
  EXPECT_EQ(cluster.server(0).counters().keys_stored, 0u);
  // The same initial values every time, and once a key is pushed, its
  // update applies to that value.
  ASSERT_TRUE(client->Pull(*table, keys, again).ok());
  EXPECT_EQ(first, again);
  const std::vector<Key> one = {keys[5]};
  ASSERT_TRUE(client->Push(*table, one, std::vector<float>(16, 1.0f)).ok());
  std::vector<float> pushed(16);
  ASSERT_TRUE(client->Pull(*table, one, pushed).ok());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(pushed[i], first[5 * 16 + i] + 1.0f);
  EXPECT_EQ(cluster.server(0).counters().keys_stored, 1u);
}

// --max_stored_mb: a push that would store new keys past the server's
// limit is refused whole; keys already held still take pushes.
TEST(ServerLimits, APushOfNewKeysPastTheStoredLimitIsRefusedWhole) {
  TestClusterOptions options;
  options.num_servers = 1;
  options.server.max_stored_mb = 1;  // 262144 floats
  TestCluster cluster(options);
  std::unique_ptr<Client> client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  TableOptions t;
  t.name = "momentum";
  t.value_width = 1024;
  t.rule = UpdateRule::kMomentum;  // one float of state per value: 2048/key
  Result<TableId> table = client->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<Key> first(100), more(40);
  for (size_t i = 0; i < first.size(); ++i) first[i] = i;
  for (size_t i = 0; i < more.size(); ++i) more[i] = 1000 + i;
  ASSERT_TRUE(
      client->Push(*table, first, std::vector<float>(100 * 1024, 1.0f)).ok());
  // 100 keys hold 204800 floats; 40 more would make 286720.
  Status refused =
      client->Push(*table, more, std::vector<float>(40 * 1024, 1.0f));
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("--max_stored_mb"));
  EXPECT_EQ(cluster.server(0).counters().keys_stored, 100u);
  EXPECT_EQ(cluster.server(0).counters().refused_limits, 1u);
  // Keys held still take pushes, and new keys within the limit too.
  ASSERT_TRUE(
      client->Push(*table, first, std::vector<float>(100 * 1024, 1.0f)).ok());
  more.resize(20);
  ASSERT_TRUE(
      client->Push(*table, more, std::vector<float>(20 * 1024, 1.0f)).ok());
  EXPECT_EQ(cluster.server(0).counters().keys_stored, 120u);
}

// A BSP push is checked when it arrives and applied at its clock's end. A
// push of the same absent key with another width from a peer that is no
// worker, in between, creates the key with its width: the buffered push
// no longer fits. It is dropped with an error, never written past the
// key's value. (A pull in between once created the key too; it now stores
// nothing.)
TEST_F(ServerBadInput, ABufferedBspPushThatNoLongerFitsItsKeyIsDropped) {
  TableOptions t;
  t.name = "bsp-variable";
  t.value_width = 0;
  t.rule = UpdateRule::kAssign;
  t.consistency = {ConsistencyMode::kBsp, 0};
  Result<TableId> table = client_->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<Key> key = {77};
  const std::vector<float> wide(4096, 5.0f);
  const std::vector<uint32_t> wide_length = {4096};
  ASSERT_TRUE(client_->Push(*table, key, wide, wide_length).ok());
  // A pull of another width stores nothing (it once created the key).
  wire::Header h = Request(wire::PULL, *table, 95, 1);
  h.set_has_lengths(true);
  peer_->Send({Serialize(h), Bytes(key), Bytes(std::vector<uint32_t>{1})});
  std::optional<wire::Header> reply = peer_->ReceiveHeader();
  ASSERT_TRUE(reply.has_value());
  ASSERT_EQ(reply->status_code(), 0) << reply->status_message();
  // Another peer pushes key 77 with width 1 (no worker: not held by BSP).
  wire::Header push = Request(wire::PUSH, *table, 96, 1);
  push.set_has_lengths(true);
  peer_->Send({Serialize(push), Bytes(key), Bytes(std::vector<float>{3.0f}),
               Bytes(std::vector<uint32_t>{1})});
  reply = peer_->ReceiveHeader();
  ASSERT_TRUE(reply.has_value());
  ASSERT_EQ(reply->status_code(), 0) << reply->status_message();
  // The clock ends: the 4096 floats do not fit the 1-float key.
  client_->Clock();
  ++bad_messages_;
  std::vector<float> out(1, -1.0f);
  const std::vector<uint32_t> one = {1};
  ASSERT_TRUE(client_->Pull(*table, key, out, one).ok());
  EXPECT_EQ(out, std::vector<float>{3.0f});
  ExpectStillServing();
}

// Clocks and timeouts are range-checked where the header is read: sums
// made of them (a parked pull's deadline, an SSP bound, a consistency
// change's first clock) cannot overflow.
TEST_F(ServerBadInput, ClocksAndTimeoutsOutOfRangeAreRefused) {
  TableOptions t;
  t.name = "ssp";
  t.value_width = kWidth;
  t.consistency = {ConsistencyMode::kSsp, 2};
  Result<TableId> table = client_->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<Key> key = {1};
  uint64_t seq = 100;
  for (int64_t clock : {std::numeric_limits<int64_t>::min(), int64_t{-2},
                        kMaxClock + 1, std::numeric_limits<int64_t>::max()}) {
    wire::Header pull = Request(wire::PULL, *table, ++seq, 1);
    pull.set_worker_id(0);
    pull.set_clock(clock);
    ExpectRefused({Serialize(pull), Bytes(key)}, StatusCode::kInvalidArgument,
                  "clock " + std::to_string(clock) + " is out of range", seq);
    wire::Header push = Request(wire::PUSH, *table, ++seq, 1);
    push.set_clock(clock);
    ExpectRefused(
        {Serialize(push), Bytes(key), Bytes(std::vector<float>(kWidth, 1.0f))},
        StatusCode::kInvalidArgument, "is out of range", seq);
  }
  for (int64_t timeout :
       {int64_t{-1}, kMaxTimeoutMs + 1, std::numeric_limits<int64_t>::max()}) {
    wire::Header pull = Request(wire::PULL, *table, ++seq, 1);
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
  TableOptions t;
  t.name = "weighted";
  t.value_width = kWidth;
  Result<TableId> table = client_->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<Key> key = {1};
  wire::Header push = Request(wire::PUSH, *table, 300, 1);
  push.set_batch_weight(70000);
  ExpectRefused(
      {Serialize(push), Bytes(key), Bytes(std::vector<float>(kWidth, 1.0f))},
      StatusCode::kInvalidArgument, "batch weight is 70000", 300);
  std::vector<float> out(kWidth);
  ASSERT_TRUE(client_->Pull(*table, key, out).ok());
  EXPECT_EQ(out, std::vector<float>(kWidth, 0.0f));
  ExpectStillServing();
}

// A peer that sends requests and does not read the replies makes the
// server queue at most max_queued_replies of them (and what the kernel's
// socket buffers take): the rest are dropped, so its memory stays bounded,
// and it goes on serving others.
TEST(ServerLimits, RepliesForAPeerThatDoesNotReadAreBounded) {
  TestClusterOptions options;
  options.num_servers = 1;
  options.server.max_queued_replies = 16;
  TestCluster cluster(options);
  std::unique_ptr<Client> client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  TableOptions t;
  t.name = "wide";
  t.value_width = 16384;  // 64 KiB replies
  Result<TableId> table = client->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<Key> key = {1};
  ASSERT_TRUE(client->Push(*table, key, std::vector<float>(16384, 1.0f)).ok());

  const uint64_t pulls_before = cluster.server(0).counters().pulls;
  RawPeer peer(cluster.server(0).address(), /*receive_queue=*/1);
  constexpr int kPulls = 2000;  // 128 MiB of replies
  for (int i = 0; i < kPulls; ++i) {
    peer.Send(
        {Serialize(Request(wire::PULL, *table, 1000 + i, 1)), Bytes(key)});
  }
  // Every pull is answered (the server never waits for the peer).
  const auto deadline = std::chrono::steady_clock::now() + kReplyTimeout;
  while (cluster.server(0).counters().pulls < pulls_before + kPulls &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(cluster.server(0).counters().pulls, pulls_before + kPulls);
  // Others are served meanwhile.
  std::vector<float> out(16384);
  ASSERT_TRUE(client->Pull(*table, key, out).ok());
  EXPECT_EQ(out[0], 1.0f);
  // The peer gets what was queued, not all.
  const int received = peer.DrainReplies(std::chrono::milliseconds(1000));
  EXPECT_GT(received, 0);
  EXPECT_LT(received, kPulls / 4);
}

// Counted in bytes too: a peer that does not read gets at most about
// max_queued_reply_mb of replies queued; its later pulls are answered
// with a small kResourceExhausted reply that names the limit instead.
TEST(ServerLimits, ReplyBytesForAPeerThatDoesNotReadAreBounded) {
  TestClusterOptions options;
  options.num_servers = 1;
  options.server.max_queued_reply_mb = 1;
  TestCluster cluster(options);
  std::unique_ptr<Client> client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  TableOptions t;
  t.name = "wide";
  t.value_width = 16384;  // 64 KiB replies
  Result<TableId> table = client->CreateTable(t);
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<Key> key = {1};
  ASSERT_TRUE(client->Push(*table, key, std::vector<float>(16384, 1.0f)).ok());

  const uint64_t limits_before = cluster.server(0).counters().refused_limits;
  RawPeer peer(cluster.server(0).address(), /*receive_queue=*/1);
  constexpr int kPulls = 2000;  // 128 MiB of replies
  for (int i = 0; i < kPulls; ++i) {
    peer.Send(
        {Serialize(Request(wire::PULL, *table, 1000 + i, 1)), Bytes(key)});
  }
  const auto deadline = std::chrono::steady_clock::now() + kReplyTimeout;
  while (cluster.server(0).counters().refused_limits == limits_before &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GT(cluster.server(0).counters().refused_limits, limits_before);
  // Others are served meanwhile.
  std::vector<float> out(16384);
  ASSERT_TRUE(client->Pull(*table, key, out).ok());
  EXPECT_EQ(out[0], 1.0f);
  // The peer, reading at last, finds the refusals among its replies.
  int refused = 0;
  for (int i = 0; i < kPulls && refused == 0; ++i) {
    std::optional<wire::Header> reply = peer.ReceiveHeader();
    if (!reply.has_value()) break;
    if (reply->status_code() ==
        static_cast<int>(StatusCode::kResourceExhausted)) {
      ++refused;
      EXPECT_THAT(reply->status_message(), HasSubstr("--max_queued_reply_mb"));
    }
  }
  EXPECT_EQ(refused, 1);
}

// A client that never lets its done-below mark move (a lying one) holds
// at most max_window_per_client applied sequence numbers in a server's
// exactly-once window: its next push is refused, and taken again once its
// mark moves up.
TEST(ServerLimits, AClientsExactlyOnceWindowIsBounded) {
  TestClusterOptions options;
  options.num_servers = 1;
  options.server.max_window_per_client = 4;
  TestCluster cluster(options);
  std::unique_ptr<Client> client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  Result<TableId> table = client->CreateTable(AddTable());
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<Key> key = {1};
  const std::vector<float> one(kWidth, 1.0f);
  RawPeer peer(cluster.server(0).address());
  auto push = [&](uint64_t seq, uint64_t done_below) {
    wire::Header h = Request(wire::PUSH, *table, seq, 1);
    h.set_done_below(done_below);
    peer.Send({Serialize(h), Bytes(key), Bytes(one)});
    return peer.ReceiveHeader();
  };
  for (uint64_t seq = 100; seq < 104; ++seq) {
    std::optional<wire::Header> reply = push(seq, 0);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->status_code(), 0) << reply->status_message();
  }
  const uint64_t limits_before = cluster.server(0).counters().refused_limits;
  std::optional<wire::Header> refused = push(104, 0);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status_code(),
            static_cast<int>(StatusCode::kResourceExhausted));
  EXPECT_THAT(refused->status_message(), HasSubstr("--max_window_per_client"));
  EXPECT_EQ(cluster.server(0).counters().refused_limits, limits_before + 1);
  // A resend of one applied is still recognised, not refused.
  std::optional<wire::Header> resent = push(102, 0);
  ASSERT_TRUE(resent.has_value());
  EXPECT_EQ(resent->status_code(), 0) << resent->status_message();
  EXPECT_TRUE(resent->duplicate());
  // Its mark moves past the first two: room again.
  std::optional<wire::Header> taken = push(104, 102);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->status_code(), 0) << taken->status_message();
  std::vector<float> out(kWidth);
  ASSERT_TRUE(client->Pull(*table, key, out).ok());
  EXPECT_EQ(out, std::vector<float>(kWidth, 5.0f));  // 100..104 once each
}

}  // namespace
}  // namespace ductile
