#include "transport/message.h"

#include <cerrno>
#include <utility>

namespace ductile {
namespace {

Status ZmqError(const char* what, const zmq::error_t& e) {
  const int code = e.num();
  std::string message = std::string(what) + ": " + e.what();
  if (code == EINVAL || code == EPROTONOSUPPORT || code == ENOCOMPATPROTO) {
    return InvalidArgumentError(message);
  }
  if (code == ETERM) return CancelledError(message);
  return UnavailableError(message);
}

// Owns the release callback of a borrowed frame until ZeroMQ frees it.
void ReleaseBorrowed(void* /*data*/, void* hint) {
  auto* on_release = static_cast<std::function<void()>*>(hint);
  if (*on_release) (*on_release)();
  delete on_release;
}

void ReleaseOwnedFloats(void* /*data*/, void* hint) {
  delete static_cast<std::vector<float>*>(hint);
}

}  // namespace

void OutMessage::AddCopy(const void* data, size_t size) {
  frames_.emplace_back(data, size);
  bytes_ += size;
}

void OutMessage::AddOwned(std::vector<float>&& floats) {
  auto* owned = new std::vector<float>(std::move(floats));
  const size_t size = owned->size() * sizeof(float);
  bytes_ += size;
  if (size == 0) {
    delete owned;
    frames_.emplace_back();
    return;
  }
  frames_.emplace_back(owned->data(), size, &ReleaseOwnedFloats, owned);
}

void OutMessage::AddBorrowed(const void* data, size_t size,
                             std::function<void()> on_release) {
  bytes_ += size;
  if (size == 0) {
    frames_.emplace_back();
    if (on_release) on_release();
    return;
  }
  auto* hint = new std::function<void()>(std::move(on_release));
  frames_.emplace_back(const_cast<void*>(data), size, &ReleaseBorrowed, hint);
}

uint64_t InMessage::bytes() const {
  uint64_t total = 0;
  for (const auto& f : frames) total += f.size();
  return total;
}

Status SendMessage(zmq::socket_t& socket, OutMessage&& message) {
  const size_t n = message.frames_.size();
  try {
    for (size_t i = 0; i < n; ++i) {
      auto flags = i + 1 < n ? zmq::send_flags::sndmore : zmq::send_flags::none;
      auto sent =
          socket.send(message.frames_[i], flags | zmq::send_flags::dontwait);
      if (!sent) {
        return UnavailableError("send would block (peer not connected?)");
      }
    }
  } catch (const zmq::error_t& e) {
    return ZmqError("send", e);
  }
  return Status::Ok();
}

Status ReceiveMessage(zmq::socket_t& socket, InMessage* message, bool* got) {
  message->frames.clear();
  *got = false;
  try {
    while (true) {
      zmq::message_t frame;
      auto size =
          socket.recv(frame, message->frames.empty() ? zmq::recv_flags::dontwait
                                                     : zmq::recv_flags::none);
      if (!size) return Status::Ok();  // EAGAIN: nothing waiting
      const bool more = frame.more();
      message->frames.push_back(std::move(frame));
      if (!more) break;
    }
  } catch (const zmq::error_t& e) {
    return ZmqError("receive", e);
  }
  *got = true;
  return Status::Ok();
}

zmq::socket_t MakeDealer(zmq::context_t& context, const std::string& identity) {
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::sndhwm, 0);
  socket.set(zmq::sockopt::rcvhwm, 0);
  if (!identity.empty()) socket.set(zmq::sockopt::routing_id, identity);
  return socket;
}

zmq::socket_t MakeRouter(zmq::context_t& context, int64_t max_message_bytes) {
  zmq::socket_t socket(context, zmq::socket_type::router);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::sndhwm, 0);
  socket.set(zmq::sockopt::rcvhwm, 0);
  // Replies to a peer that has gone are dropped, not an error.
  socket.set(zmq::sockopt::router_mandatory, 0);
  if (max_message_bytes > 0) {
    // The hard transport limit is per frame and generous (2x + 1 MiB), so
    // requests just over the limit still get a clear error reply from the
    // server's own check.
    socket.set(zmq::sockopt::maxmsgsize,
               max_message_bytes * 2 + (int64_t{1} << 20));
  }
  return socket;
}

Status Connect(zmq::socket_t& socket, const std::string& address) {
  try {
    socket.connect(address);
  } catch (const zmq::error_t& e) {
    return ZmqError(("connect to '" + address + "'").c_str(), e);
  }
  return Status::Ok();
}

Result<std::string> Bind(zmq::socket_t& socket, const std::string& address) {
  try {
    socket.bind(address);
    return socket.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return ZmqError(("bind to '" + address + "'").c_str(), e);
  }
}

Status Poll(std::span<zmq::pollitem_t> items, int64_t timeout_ms) {
  try {
    zmq::poll(items.data(), items.size(),
              std::chrono::milliseconds(timeout_ms));
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return Status::Ok();
    return ZmqError("poll", e);
  }
  return Status::Ok();
}

}  // namespace ductile
