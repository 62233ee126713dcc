// The bytes a router queues for each peer: the count on its own (no
// socket), then a ZeroMQ router and a dealer that never reads: messages
// past the limit are refused, and their bytes are given back once the
// dealer goes. And the other way: a router that does not read holds at
// most its limit of a peer's messages; the rest wait at the peer, and
// none is lost.
#include "transport/queued_bytes.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ductile/security.h"
#include "transport/zmq_transport.h"
#include "zmq.hpp"

namespace ductile {
namespace {

using std::chrono::steady_clock;

constexpr uint64_t kLimit = 1 << 20;
constexpr uint64_t kLarge = 300 << 10;  // over kSmallBytes

TEST(QueuedBytesPerPeer, APeersQueueIsRefusedPastItsLimitAndFreedAsSent) {
  QueuedBytesPerPeer queued(kLimit);
  std::vector<QueuedBytesPerPeer::Ticket> held;
  for (int i = 0; i < 3; ++i) {
    Result<QueuedBytesPerPeer::Ticket> t = queued.Charge("slow", kLarge);
    ASSERT_TRUE(t.ok()) << t.status();
    held.push_back(std::move(*t));
  }
  EXPECT_EQ(queued.of("slow"), 3 * kLarge);
  // A fourth would pass 1 MiB: refused, naming the flag, nothing charged.
  Result<QueuedBytesPerPeer::Ticket> refused = queued.Charge("slow", kLarge);
  ASSERT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("--max_queued_reply_mb"),
            std::string::npos);
  EXPECT_EQ(queued.of("slow"), 3 * kLarge);
  EXPECT_EQ(queued.refused(), 1u);
  // Other peers are not held up by it.
  Result<QueuedBytesPerPeer::Ticket> other = queued.Charge("other", kLarge);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(queued.total(), 4 * kLarge);
  // Small messages (error replies) always go.
  Result<QueuedBytesPerPeer::Ticket> small = queued.Charge("slow", 100);
  EXPECT_TRUE(small.ok());
  // Sent (the transport destroys the frames): the bytes come back.
  held.clear();
  *small = QueuedBytesPerPeer::Ticket();
  EXPECT_EQ(queued.of("slow"), 0u);
  EXPECT_EQ(queued.total(), kLarge);
  EXPECT_TRUE(queued.Charge("slow", kLarge).ok());
}

TEST(QueuedBytesPerPeer, OneMessageLargerThanTheLimitGoesToAnIdlePeer) {
  QueuedBytesPerPeer queued(kLimit);
  Result<QueuedBytesPerPeer::Ticket> big = queued.Charge("peer", 4 * kLimit);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(queued.Charge("peer", kLarge).status().code(),
            StatusCode::kResourceExhausted);
}

TEST(QueuedBytesPerPeer, MemoryIsToBeTrimmedOnceARefusedPeersBytesAreGone) {
  QueuedBytesPerPeer queued(kLimit);
  Result<QueuedBytesPerPeer::Ticket> a = queued.Charge("slow", kLimit);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(queued.TakeTrimDue());  // nothing refused
  ASSERT_FALSE(queued.Charge("slow", kLarge).ok());
  EXPECT_FALSE(queued.TakeTrimDue());  // still held
  *a = QueuedBytesPerPeer::Ticket();
  EXPECT_TRUE(queued.TakeTrimDue());
  EXPECT_FALSE(queued.TakeTrimDue());  // once
}

// Replies dropped past the count limit (under the byte limit): once what
// the peer held is gone, the memory is due back, and not before.
TEST(QueuedBytesPerPeer, MemoryIsToBeTrimmedOnceADroppedPeersBytesAreGone) {
  QueuedBytesPerPeer queued(kLimit);
  std::vector<QueuedBytesPerPeer::Ticket> held;
  for (int i = 0; i < 3; ++i) {
    Result<QueuedBytesPerPeer::Ticket> t = queued.Charge("slow", kLarge);
    ASSERT_TRUE(t.ok());
    held.push_back(std::move(*t));
  }
  EXPECT_FALSE(queued.TakeTrimDue());  // nothing dropped
  queued.NoteDropped();
  EXPECT_FALSE(queued.TakeTrimDue());  // still held
  held.pop_back();
  EXPECT_FALSE(queued.TakeTrimDue());  // two thirds still held
  held.pop_back();
  EXPECT_TRUE(queued.TakeTrimDue());   // more than half gone
  EXPECT_FALSE(queued.TakeTrimDue());  // once
  held.clear();
  EXPECT_FALSE(queued.TakeTrimDue());  // nothing dropped since
}

TEST(QueuedBytesPerPeer, PeersWithNothingQueuedAreForgotten) {
  QueuedBytesPerPeer queued(kLimit);
  for (int i = 0; i < 10000; ++i) {
    ASSERT_TRUE(queued.Charge("peer-" + std::to_string(i), kLarge).ok());
  }
  EXPECT_EQ(queued.total(), 0u);
  EXPECT_LE(queued.peers(), 128u);
}

// Waits (up to 10 s) for `router`'s first message and gives its sender's
// routing id.
void FirstPeerOf(Transport& side, Socket* router, std::string* identity) {
  const auto deadline = steady_clock::now() + std::chrono::seconds(10);
  InMessage m;
  bool got = false;
  Socket* const at_router[] = {router};
  while (!got && steady_clock::now() < deadline) {
    ASSERT_TRUE(side.Wait(at_router, -1, deadline).ok());
    ASSERT_TRUE(router->Receive(&m, &got).ok());
  }
  ASSERT_TRUE(got) << "the router heard nothing";
  *identity = std::string(m.frame_view(0));
}

// A real router and a peer that connects, says hello and never reads. The
// peer is a bare ZeroMQ dealer that holds one message and a small kernel
// buffer (ZMQ_RCVHWM 1, ZMQ_RCVBUF 64 KiB): once those are full its
// connection stops taking bytes, whatever the threads' speeds. (Our own
// dealer takes every message its I/O thread can read: whether the router
// then held any would be a race between the test's sends and that thread.)
TEST(RouterQueuedBytes, ARouterRefusesPastTheLimitAndFreesWhenThePeerGoes) {
  std::unique_ptr<Transport> router_side = NewZmqTransport(Security());
  constexpr int64_t kRouterLimit = int64_t{8} << 20;
  auto router = router_side->NewRouter(0, /*max_queued=*/100000, kRouterLimit);
  ASSERT_TRUE(router.ok()) << router.status();
  auto bound = (*router)->Bind("tcp://127.0.0.1:*");
  ASSERT_TRUE(bound.ok()) << bound.status();
  zmq::context_t peer_context;
  auto dealer =
      std::make_unique<zmq::socket_t>(peer_context, zmq::socket_type::dealer);
  dealer->set(zmq::sockopt::rcvhwm, 1);
  dealer->set(zmq::sockopt::rcvbuf, 64 << 10);
  dealer->set(zmq::sockopt::linger, 0);
  dealer->set(zmq::sockopt::routing_id, "slow");
  dealer->connect(*bound);
  ASSERT_TRUE(dealer->send(zmq::str_buffer("hello"), zmq::send_flags::none));
  std::string identity;
  ASSERT_NO_FATAL_FAILURE(FirstPeerOf(*router_side, router->get(), &identity));
  // 1 GiB offered in 1 MiB messages: far more than the kernel's buffers
  // take, so most would wait in the router.
  int sent = 0;
  Status refused;
  for (int i = 0; i < 1024 && refused.ok(); ++i) {
    OutMessage out;
    out.AddString(identity);
    out.AddOwned(std::vector<char>(size_t{1} << 20, 'x'));
    refused = (*router)->Send(std::move(out));
    if (refused.ok()) ++sent;
  }
  ASSERT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("--max_queued_reply_mb"), std::string::npos);
  EXPECT_EQ((*router)->refusals().refused_replies, 1u);
  EXPECT_EQ((*router)->refusals().dropped_replies, 0u);
  EXPECT_LE((*router)->queued_bytes(), uint64_t{kRouterLimit});
  EXPECT_LT(sent, 1024);
  // The peer goes: ZeroMQ drops what it held for it, and the count
  // comes back to nothing.
  dealer.reset();
  const auto gone = steady_clock::now() + std::chrono::seconds(20);
  InMessage m;
  bool got = false;
  while ((*router)->queued_bytes() > 0 && steady_clock::now() < gone) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    got = false;
    ASSERT_TRUE((*router)->Receive(&m, &got).ok());
  }
  EXPECT_EQ((*router)->queued_bytes(), 0u);
}

// A peer that says hello and reads nothing: past `max_queued` messages
// queued for it (and what the kernel's buffers hold) the router drops its
// messages, counting each; Send() still succeeds, as it does for a peer
// that is not there at all (not counted: nothing was queued for anyone).
TEST(RouterQueuedMessages, MessagesPastAPeersQueueAreDroppedAndCounted) {
  std::unique_ptr<Transport> router_side = NewZmqTransport(Security());
  auto router = router_side->NewRouter(0, /*max_queued=*/10, 0);
  ASSERT_TRUE(router.ok()) << router.status();
  auto bound = (*router)->Bind("tcp://127.0.0.1:*");
  ASSERT_TRUE(bound.ok()) << bound.status();
  zmq::context_t context(1);
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::rcvhwm, 1);
  dealer.set(zmq::sockopt::routing_id, "slow");
  dealer.connect(*bound);
  ASSERT_TRUE(dealer.send(zmq::str_buffer("hello"), zmq::send_flags::none));
  std::string identity;
  ASSERT_NO_FATAL_FAILURE(FirstPeerOf(*router_side, router->get(), &identity));
  EXPECT_EQ((*router)->refusals().dropped_replies, 0u);
  // 256 MiB in 1 KiB messages (each under the byte limit's 4 KiB): far
  // more than the kernel's buffers take.
  constexpr int kMessages = 256 * 1024;
  for (int i = 0; i < kMessages; ++i) {
    OutMessage out;
    out.AddString(identity);
    out.AddString(std::string(1024, 'x'));
    ASSERT_TRUE((*router)->Send(std::move(out)).ok());
  }
  const uint64_t dropped = (*router)->refusals().dropped_replies;
  EXPECT_GT(dropped, 0u);
  EXPECT_LT(dropped, uint64_t{kMessages});
  OutMessage nobody;
  nobody.AddString("nobody");
  nobody.AddString("x");
  EXPECT_TRUE((*router)->Send(std::move(nobody)).ok());
  EXPECT_EQ((*router)->refusals().dropped_replies, dropped);
}

// A dealer that sends faster than its router reads is held back: its own
// queue fills (a send that would block), while the router holds at most
// `max_unread` of its messages; read at last, every one arrives, in order.
TEST(RouterUnread,
     APeerSendingFasterThanTheRouterReadsIsHeldBackLosingNothing) {
  std::unique_ptr<Transport> router_side = NewZmqTransport(Security());
  auto router = router_side->NewRouter(0, 0, 0, /*max_unread=*/10);
  ASSERT_TRUE(router.ok()) << router.status();
  auto bound = (*router)->Bind("tcp://127.0.0.1:*");
  ASSERT_TRUE(bound.ok()) << bound.status();
  zmq::context_t context(1);
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::sndhwm, 100);
  dealer.connect(*bound);
  // 1 KiB messages, up to 256 MiB of them; with no bound the router would
  // take them all.
  constexpr int kMost = 256 * 1024;
  const std::string payload(1024, 'x');
  int sent = 0;
  bool held_back = false;
  const auto deadline = steady_clock::now() + std::chrono::seconds(30);
  while (sent < kMost && steady_clock::now() < deadline) {
    std::string m = std::to_string(sent) + ":" + payload;
    if (dealer.send(zmq::buffer(m), zmq::send_flags::dontwait)) {
      ++sent;
      continue;
    }
    // Would block: give the I/O threads a moment, then try once more.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (!dealer.send(zmq::buffer(m), zmq::send_flags::dontwait)) {
      held_back = true;
      break;
    }
    ++sent;
  }
  EXPECT_TRUE(held_back) << "the router took all " << sent << " messages";
  EXPECT_LT(sent, kMost);
  // Read at last: every message, in order.
  int received = 0;
  InMessage m;
  Socket* const at_router[] = {router->get()};
  const auto read_deadline = steady_clock::now() + std::chrono::seconds(60);
  while (received < sent && steady_clock::now() < read_deadline) {
    bool got = false;
    ASSERT_TRUE((*router)->Receive(&m, &got).ok());
    if (!got) {
      ASSERT_TRUE(router_side
                      ->Wait(at_router, -1,
                             steady_clock::now() + std::chrono::seconds(1))
                      .ok());
      continue;
    }
    const std::string_view body = m.frame_view(1);
    ASSERT_EQ(body.substr(0, body.find(':')), std::to_string(received));
    ++received;
  }
  EXPECT_EQ(received, sent);
}

}  // namespace
}  // namespace ductile
