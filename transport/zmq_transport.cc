#include "transport/zmq_transport.h"

#include <sys/resource.h>

#include <cerrno>
#include <mutex>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "glog/logging.h"
#include "transport/endpoint.h"

namespace ductile {
namespace {

// ZeroMQ errors as Status, in one place.
Status ZmqError(const std::string& what, const zmq::error_t& e) {
  const int code = e.num();
  std::string message = what + ": " + e.what();
  if (code == EINVAL || code == EPROTONOSUPPORT || code == ENOCOMPATPROTO) {
    return InvalidArgumentError(message);
  }
  if (code == ETERM) return CancelledError(message);
  return UnavailableError(message);
}

// Received ZeroMQ messages, read in place by InMessage's views.
struct ZmqFrames final : FrameStorage {
  std::vector<zmq::message_t> messages;
};

// Destroys the holder of a zero-copy frame once ZeroMQ is done with it.
void ReleaseHolder(void* /*data*/, void* hint) {
  delete static_cast<OutMessage::Holder*>(hint);
}

// Frames up to this size are copied into ZeroMQ's message itself (no
// allocation); larger ones are handed over without a copy.
constexpr size_t kInlineFrameBytes = 32;

struct InlineString final : OutMessage::Holder {
  explicit InlineString(std::string s) : bytes(std::move(s)) {}
  std::string bytes;
};

zmq::message_t ToZmq(OutMessage::Frame& f) {
  if (!f.holder) {
    if (f.inline_bytes.size() <= kInlineFrameBytes) {
      return zmq::message_t(f.inline_bytes.data(), f.inline_bytes.size());
    }
    auto* holder = new InlineString(std::move(f.inline_bytes));
    return zmq::message_t(holder->bytes.data(), holder->bytes.size(),
                          &ReleaseHolder, holder);
  }
  if (f.size == 0) {
    f.holder.reset();  // nothing to read: release at once
    return zmq::message_t();
  }
  OutMessage::Holder* holder = f.holder.release();
  return zmq::message_t(const_cast<void*>(f.data), f.size, &ReleaseHolder,
                        holder);
}

class ZmqSocket final : public Socket {
 public:
  explicit ZmqSocket(zmq::socket_t socket) : socket_(std::move(socket)) {}

  Result<std::string> Bind(const std::string& address) override {
    DUCTILE_RETURN_IF_ERROR(CheckTcpPort(address));
    try {
      socket_.bind(address);
      return socket_.get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      return ZmqError("bind to '" + address + "'", e);
    }
  }

  Status Connect(const std::string& address) override {
    DUCTILE_RETURN_IF_ERROR(CheckTcpPort(address));
    try {
      socket_.connect(address);
    } catch (const zmq::error_t& e) {
      return ZmqError("connect to '" + address + "'", e);
    }
    return Status::Ok();
  }

  Status Send(OutMessage&& message) override {
    auto& frames = message.mutable_frames();
    const size_t n = frames.size();
    try {
      for (size_t i = 0; i < n; ++i) {
        auto flags =
            i + 1 < n ? zmq::send_flags::sndmore : zmq::send_flags::none;
        auto sent =
            socket_.send(ToZmq(frames[i]), flags | zmq::send_flags::dontwait);
        if (!sent) {
          return UnavailableError("send would block (peer not connected?)");
        }
      }
    } catch (const zmq::error_t& e) {
      return ZmqError("send", e);
    }
    return Status::Ok();
  }

  Status Receive(InMessage* message, bool* got) override {
    *got = false;
    std::vector<ByteSpan> views = std::move(message->mutable_frames());
    views.clear();
    auto storage = std::make_unique<ZmqFrames>();
    try {
      while (true) {
        zmq::message_t frame;
        auto size = socket_.recv(frame, storage->messages.empty()
                                            ? zmq::recv_flags::dontwait
                                            : zmq::recv_flags::none);
        if (!size) {  // EAGAIN: nothing waiting
          message->Reset(nullptr, std::move(views));
          return Status::Ok();
        }
        const bool more = frame.more();
        storage->messages.push_back(std::move(frame));
        if (!more) break;
      }
    } catch (const zmq::error_t& e) {
      return ZmqError("receive", e);
    }
    for (const zmq::message_t& m : storage->messages) {
      views.emplace_back(static_cast<const uint8_t*>(m.data()), m.size());
    }
    message->Reset(std::move(storage), std::move(views));
    *got = true;
    return Status::Ok();
  }

  void* handle() { return socket_.handle(); }

 private:
  zmq::socket_t socket_;
};

class ZmqTransport final : public Transport {
 public:
  Result<std::unique_ptr<Socket>> NewRouter(
      int64_t max_message_bytes) override {
    try {
      zmq::socket_t socket(context_, zmq::socket_type::router);
      socket.set(zmq::sockopt::linger, 0);
      socket.set(zmq::sockopt::sndhwm, 0);
      socket.set(zmq::sockopt::rcvhwm, 0);
      // Replies to a peer that has gone are dropped, not an error.
      socket.set(zmq::sockopt::router_mandatory, 0);
      if (max_message_bytes > 0) {
        // The hard transport limit is per frame and generous (2x + 1 MiB),
        // so requests just over the limit still get a clear error reply
        // from the server's own check.
        socket.set(zmq::sockopt::maxmsgsize,
                   max_message_bytes * 2 + (int64_t{1} << 20));
      }
      return std::unique_ptr<Socket>(new ZmqSocket(std::move(socket)));
    } catch (const zmq::error_t& e) {
      return ZmqError("router socket", e);
    }
  }

  Result<std::unique_ptr<Socket>> NewDealer(
      const std::string& identity) override {
    try {
      zmq::socket_t socket(context_, zmq::socket_type::dealer);
      socket.set(zmq::sockopt::linger, 0);
      socket.set(zmq::sockopt::sndhwm, 0);
      socket.set(zmq::sockopt::rcvhwm, 0);
      if (!identity.empty()) socket.set(zmq::sockopt::routing_id, identity);
      return std::unique_ptr<Socket>(new ZmqSocket(std::move(socket)));
    } catch (const zmq::error_t& e) {
      return ZmqError("dealer socket", e);
    }
  }

  Status Wait(std::span<Socket* const> sockets, int wakeup_fd,
              TimePoint deadline) override {
    items_.clear();
    for (Socket* s : sockets) {
      items_.push_back(
          {static_cast<ZmqSocket*>(s)->handle(), 0, ZMQ_POLLIN, 0});
    }
    if (wakeup_fd >= 0) items_.push_back({nullptr, wakeup_fd, ZMQ_POLLIN, 0});
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    // Round up: waking a little late is better than spinning early.
    const auto timeout =
        std::max<int64_t>(0, left.count() + (left.count() >= 0 ? 1 : 0));
    try {
      zmq::poll(items_.data(), items_.size(),
                std::chrono::milliseconds(timeout));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) return Status::Ok();
      return ZmqError("poll", e);
    }
    return Status::Ok();
  }

 private:
  zmq::context_t context_{1};
  std::vector<zmq::pollitem_t> items_;
};

}  // namespace

namespace {

// The soft RLIMIT_NOFILE up to the hard one.
void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= limit.rlim_max) {
    return;
  }
  const rlim_t before = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) == 0) {
    LOG(INFO) << "raised the open-file limit from " << before << " to "
              << limit.rlim_cur
              << " (each connection to this process takes one)";
  }
}

}  // namespace

std::unique_ptr<Transport> NewZmqTransport() {
  // Once per process: libzmq aborts when accepting on an ipc:// socket
  // finds no file descriptor left (tcp:// only refuses), so idle
  // connections up to the soft limit would let the next one kill the
  // process.
  static std::once_flag raised;
  std::call_once(raised, RaiseOpenFileLimit);
  return std::make_unique<ZmqTransport>();
}

}  // namespace ductile
