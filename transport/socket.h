// Sockets and the transport that makes them, as interfaces: ZeroMQ in a
// process (ZmqTransport), a simulated network in tests (sim/).
//
// Two kinds of socket, with ZeroMQ's semantics:
//   router  binds; every received message starts with a frame naming its
//           sender, and a message sent starts with the frame naming its
//           destination (unknown destinations are dropped silently).
//   dealer  connects to one router; messages carry no such frame.
// Messages between one dealer and its router arrive whole, once, and in
// the order sent, as long as both ends live.
//
// Not thread-safe: a socket belongs to one thread.
#ifndef DUCTILE_TRANSPORT_SOCKET_H_
#define DUCTILE_TRANSPORT_SOCKET_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "ductile/status.h"
#include "transport/message.h"

namespace ductile {

// What a router refused or dropped, since it was made, to bound what its
// peers cost (0 where the transport does not count them).
struct RouterRefusals {
  // Connections closed as soon as accepted: too few descriptors left, or
  // too many from one address (transport/connection_ledger.h).
  uint64_t connections = 0;
  // Accepts that found no descriptor to take the connection with.
  uint64_t failed_accepts = 0;
  // Connections closed before their handshake was done: it timed out, the
  // peer's key was not admitted, or the peer went.
  uint64_t failed_handshakes = 0;
  // Messages refused with kResourceExhausted: their peer's queue held too
  // many bytes (`max_queued_bytes`).
  uint64_t refused_replies = 0;
  // Messages dropped: their peer's queue held `max_queued` messages.
  uint64_t dropped_replies = 0;
};

class Socket {
 public:
  virtual ~Socket() = default;

  // Binds and returns the bound endpoint (with the real port for tcp "*").
  virtual Result<std::string> Bind(const std::string& address) = 0;
  virtual Status Connect(const std::string& address) = 0;
  // Queues every frame; kUnavailable if the socket cannot take it now.
  virtual Status Send(OutMessage&& message) = 0;
  // Receives one whole message without blocking; *got = false when none is
  // waiting.
  virtual Status Receive(InMessage* message, bool* got) = 0;
  // A router's bytes of messages queued for its peers and not yet handed
  // to the connections (0 where the transport does not count them).
  virtual uint64_t queued_bytes() const { return 0; }
  // A router's refusals so far (a dealer's are all 0).
  virtual RouterRefusals refusals() const { return {}; }
};

// The largest message to or from the coordinator (registrations,
// routing, status, acknowledgements).
inline constexpr int64_t kControlMessageBytes = int64_t{64} << 20;

class Transport {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  virtual ~Transport() = default;

  // A router taking requests of up to about `max_message_bytes` (0: any
  // size); far larger ones may be dropped and their connection reset. At
  // most `max_queued` messages (0: any number) wait to go out to one peer
  // that does not read them; more are dropped. At most about
  // `max_queued_bytes` of them (0: any size; transport/queued_bytes.h):
  // Send() refuses a message of more than 4 KiB that would queue more for
  // its peer with kResourceExhausted. Once such a peer has gone, the
  // memory its messages took goes back to the system. At most
  // `max_unread` messages from one peer (0: any number) wait to be read;
  // while they do, the transport reads no more from that peer's
  // connection, so that a peer sending faster than this process reads
  // holds the rest itself.
  virtual Result<std::unique_ptr<Socket>> NewRouter(
      int64_t max_message_bytes, int64_t max_queued = 0,
      int64_t max_queued_bytes = 0, int64_t max_unread = 0) = 0;
  // A dealer; `identity` names it to routers ("" = chosen by the
  // transport). A message from a router of far more than
  // `max_message_bytes` (over 2x, and over 2x kControlMessageBytes; 0: any
  // size) closes the connection before it is read into memory: a peer that
  // lies cannot make this process take a reply as large as its memory.
  virtual Result<std::unique_ptr<Socket>> NewDealer(
      const std::string& identity, int64_t max_message_bytes) = 0;
  // Blocks until one of `sockets` has a message, the file descriptor
  // `wakeup_fd` (-1: none) is readable, or `deadline` passes.
  virtual Status Wait(std::span<Socket* const> sockets, int wakeup_fd,
                      TimePoint deadline) = 0;
};

}  // namespace ductile

#endif  // DUCTILE_TRANSPORT_SOCKET_H_
