// Multipart messages over ZeroMQ, with zero-copy frames.
//
// OutMessage collects frames to send. Large frames can be borrowed
// (AddBorrowed): ZeroMQ reads them in place and calls `on_release` once it
// no longer needs the bytes, possibly on one of its own I/O threads. InMessage
// keeps the received zmq messages alive so that readers can view frames in
// place. Send/Receive translate ZeroMQ errors to Status in one place; EAGAIN
// is "no message", not an error.
//
// Not thread-safe: a socket, and the messages in flight on it, belong to one
// thread.
#ifndef DUCTILE_TRANSPORT_MESSAGE_H_
#define DUCTILE_TRANSPORT_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "ductile/status.h"

namespace ductile {

class OutMessage {
 public:
  OutMessage() = default;
  OutMessage(OutMessage&&) = default;
  OutMessage& operator=(OutMessage&&) = default;

  // Copies `size` bytes.
  void AddCopy(const void* data, size_t size);
  void AddString(const std::string& s) { AddCopy(s.data(), s.size()); }
  // Takes ownership of a buffer (no copy).
  void AddOwned(std::vector<float>&& floats);
  // Sends `data` in place; `on_release` runs (on any thread) once ZeroMQ is
  // done with it. The bytes must stay valid and unchanged until then.
  void AddBorrowed(const void* data, size_t size,
                   std::function<void()> on_release);

  size_t frames() const { return frames_.size(); }
  uint64_t bytes() const { return bytes_; }

 private:
  friend Status SendMessage(zmq::socket_t& socket, OutMessage&& message);
  std::vector<zmq::message_t> frames_;
  uint64_t bytes_ = 0;
};

struct InMessage {
  std::vector<zmq::message_t> frames;
  std::span<const uint8_t> frame(size_t i) const {
    return {static_cast<const uint8_t*>(frames[i].data()), frames[i].size()};
  }
  uint64_t bytes() const;
};

// Sends every frame. kUnavailable if the socket cannot take it now.
Status SendMessage(zmq::socket_t& socket, OutMessage&& message);

// Receives one whole multipart message without blocking. Returns false in
// *got when none is waiting.
Status ReceiveMessage(zmq::socket_t& socket, InMessage* message, bool* got);

// Socket factories with ductile's settings (linger 0, unlimited high water
// marks so the library does its own flow control, optional size limit).
zmq::socket_t MakeDealer(zmq::context_t& context, const std::string& identity);
zmq::socket_t MakeRouter(zmq::context_t& context, int64_t max_message_bytes);

// Connects, translating errors ("invalid address", ...) to Status.
Status Connect(zmq::socket_t& socket, const std::string& address);
// Binds and returns the bound endpoint (with the real port for tcp "*").
Result<std::string> Bind(zmq::socket_t& socket, const std::string& address);

// Waits up to `timeout_ms` (-1: forever) for input on any item.
Status Poll(std::span<zmq::pollitem_t> items, int64_t timeout_ms);

}  // namespace ductile

#endif  // DUCTILE_TRANSPORT_MESSAGE_H_
