// A server over real ZeroMQ sockets fed hand-built messages on a raw
// DEALER socket, for what only real sockets show: pushed values in a
// worker's shared memory (named over ipc://, where the kernel says which
// process sent them) are checked like a frame's, and a peer that does not
// read its replies (ZeroMQ's high-water mark, the bytes queued for it)
// cannot make the server queue without bound. Everything else a server
// does with bad, resent or misrouted requests, and its other limits, is
// tested on the simulated network: server_bad_input_sim_test.cc.
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/codec.h"
#include "proto/ductile.pb.h"
#include "tests/test_cluster.h"
#include "transport/shm_value_area.h"

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
  std::optional<wire::Header> ReceiveHeader() {
    auto frames = Receive();
    if (!frames) return std::nullopt;
    wire::Header header;
    if (frames->empty() ||
        !header.ParseFromArray((*frames)[0].data(),
                               static_cast<int>((*frames)[0].size()))) {
      ADD_FAILURE() << "reply has no readable header";
      return std::nullopt;
    }
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
// Values in shared memory.

using ServerBadInput = OneServerTest;

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

// ---------------------------------------------------------------------------
// Peers that do not read their replies.

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

}  // namespace
}  // namespace ductile
