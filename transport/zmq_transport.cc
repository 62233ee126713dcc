#include "transport/zmq_transport.h"

#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "ductile/security.h"
#include "glog/logging.h"
#include "transport/connection_guard.h"
#include "transport/endpoint.h"
#include "transport/queued_bytes.h"
#include "transport/zap_handler.h"
#include "util/malloc_policy.h"

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

// A frame's holder with its share of the bytes charged to its peer
// (QueuedBytesPerPeer), given back with it.
struct MeteredHolder final : OutMessage::Holder {
  std::unique_ptr<OutMessage::Holder> inner;
  std::shared_ptr<QueuedBytesPerPeer::Ticket> ticket;
};

OutMessage::Holder* WithTicket(
    std::unique_ptr<OutMessage::Holder> holder,
    const std::shared_ptr<QueuedBytesPerPeer::Ticket>& ticket) {
  if (!ticket) return holder.release();
  auto* metered = new MeteredHolder;
  metered->inner = std::move(holder);
  metered->ticket = ticket;
  return metered;
}

// `ticket` (may be null): what the message's bytes were charged, held
// until ZeroMQ releases the frame.
zmq::message_t ToZmq(
    OutMessage::Frame& f,
    const std::shared_ptr<QueuedBytesPerPeer::Ticket>& ticket) {
  if (!f.holder) {
    if (f.inline_bytes.size() <= kInlineFrameBytes) {
      return zmq::message_t(f.inline_bytes.data(), f.inline_bytes.size());
    }
    auto owned = std::make_unique<InlineString>(std::move(f.inline_bytes));
    const std::string& bytes = owned->bytes;
    return zmq::message_t(const_cast<char*>(bytes.data()), bytes.size(),
                          &ReleaseHolder, WithTicket(std::move(owned), ticket));
  }
  if (f.size == 0) {
    f.holder.reset();  // nothing to read: release at once
    return zmq::message_t();
  }
  return zmq::message_t(const_cast<void*>(f.data), f.size, &ReleaseHolder,
                        WithTicket(std::move(f.holder), ticket));
}

// Logs once per process that a plain socket is bound.
void NotePlainMode(const std::string& address) {
  static std::once_flag noted;
  std::call_once(noted, [&] {
    LOG(WARNING) << "plain mode on " << address
                 << ": no authentication or encryption; anyone who reaches "
                    "this host's loopback or ipc:// sockets can act as any "
                    "member (use --keys; docs/security.md)";
  });
}

class ZmqSocket final : public Socket {
 public:
  // `security` outlives the socket (the transport's). A router's `guard`
  // watches its connections (null for a dealer), and `queued` counts the
  // bytes it queues for each peer (null: not counted, a dealer's).
  ZmqSocket(zmq::socket_t socket, const Security& security, bool router,
            std::unique_ptr<ConnectionGuard> guard = nullptr,
            std::unique_ptr<QueuedBytesPerPeer> queued = nullptr)
      : socket_(std::move(socket)),
        security_(security),
        router_(router),
        guard_(std::move(guard)),
        queued_(std::move(queued)) {}

  uint64_t queued_bytes() const override {
    return queued_ ? queued_->total() : 0;
  }

  RouterRefusals refusals() const override {
    RouterRefusals r;
    if (guard_) {
      const ConnectionRefusals c = guard_->counts();
      r.connections = c.descriptors + c.per_source;
      r.failed_accepts = c.accept_failed;
      r.failed_handshakes = c.handshakes_failed;
    }
    if (queued_) r.refused_replies = queued_->refused();
    r.dropped_replies = dropped_;
    return r;
  }

  Result<std::string> Bind(const std::string& address) override {
    DUCTILE_RETURN_IF_ERROR(CheckTcpPort(address));
    if (!security_.curve()) {
      if (!IsLocalOnlyAddress(address) && !security_.allow_plain_network) {
        return PermissionDeniedError(
            "refusing to listen on '" + address +
            "' in plain mode: anyone on the network could act as any member. "
            "Give the cluster's keys (--keys, from `ductile keygen`), or "
            "--insecure to accept that");
      }
      NotePlainMode(address);
    }
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
    // A router's message starts with its peer's identity.
    std::shared_ptr<QueuedBytesPerPeer::Ticket> ticket;
    if (queued_ && n > 0) {
      const ByteSpan peer = frames[0].bytes();
      Result<QueuedBytesPerPeer::Ticket> charged = queued_->Charge(
          {reinterpret_cast<const char*>(peer.data()), peer.size()},
          message.bytes());
      if (!charged.ok()) {
        if (queued_->refused() <= 10 || queued_->refused() % 1000 == 0) {
          LOG(WARNING) << "refused a message to a peer that does not read ("
                       << queued_->refused()
                       << " so far): " << charged.status().message();
        }
        return charged.status();
      }
      ticket =
          std::make_shared<QueuedBytesPerPeer::Ticket>(std::move(*charged));
    }
    try {
      for (size_t i = 0; i < n; ++i) {
        auto flags =
            i + 1 < n ? zmq::send_flags::sndmore : zmq::send_flags::none;
        auto sent = socket_.send(ToZmq(frames[i], ticket),
                                 flags | zmq::send_flags::dontwait);
        if (!sent && router_) {
          // The peer's queue holds max_queued messages: dropped, as
          // ZeroMQ drops them without ZMQ_ROUTER_MANDATORY, but counted.
          ++dropped_;
          if (queued_) queued_->NoteDropped();
          return Status::Ok();
        }
        if (!sent) {
          return UnavailableError("send would block (peer not connected?)");
        }
      }
    } catch (const zmq::error_t& e) {
      // A router's peer that has gone (or never was): dropped silently.
      if (router_ && e.num() == EHOSTUNREACH) return Status::Ok();
      return ZmqError("send", e);
    }
    return Status::Ok();
  }

  Status Receive(InMessage* message, bool* got) override {
    *got = false;
    // A peer that did not read made this process hold its messages; now
    // that they are gone, so is the memory (not kept for reuse as
    // KeepFreedMemory() keeps freed values).
    if (queued_ && queued_->TakeTrimDue()) ReleaseFreedMemory();
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
    // A router's peers proved a key to the ZAP handler, which named them;
    // a dealer's one peer is a router holding the cluster's key.
    bool from_admin = true;
    std::string_view member_key;
    std::string_view member_key_name;
    if (security_.curve()) {
      from_admin = false;
      if (router_) {
        try {
          const char* user = storage->messages.back().gets("User-Id");
          from_admin = user != nullptr && std::strcmp(user, kAdminUser) == 0;
          const std::string_view name = user != nullptr ? user : "";
          if (name.starts_with(kOwnKeyUser) &&
              name.size() >= kOwnKeyUser.size() + kZ85KeyChars) {
            member_key = name.substr(kOwnKeyUser.size(), kZ85KeyChars);
            member_key_name = name.substr(kOwnKeyUser.size() + kZ85KeyChars);
          }
        } catch (const zmq::error_t&) {
          // No user id: not admitted by our handler, so no rights.
        }
      }
    }
    int32_t peer_pid = 0;
    if (router_) {
      try {
        const char* peer = storage->messages.back().gets("Peer-Address");
        if (peer != nullptr) peer_pid = IpcPeerPid(peer);
      } catch (const zmq::error_t&) {
        // No address known: not an ipc:// peer as far as anyone can tell.
      }
    }
    message->set_member_key(member_key, member_key_name);  // before `storage`
    message->Reset(std::move(storage), std::move(views));
    message->set_from_admin(from_admin);
    message->set_peer_pid(peer_pid);
    *got = true;
    return Status::Ok();
  }

  void* handle() { return socket_.handle(); }

 private:
  zmq::socket_t socket_;
  const Security& security_;
  const bool router_;
  // Stopped (destroyed) before socket_ closes.
  std::unique_ptr<ConnectionGuard> guard_;
  // Frames ZeroMQ still holds share the counts they give back to, so
  // either may go first.
  std::unique_ptr<QueuedBytesPerPeer> queued_;
  uint64_t dropped_ = 0;  // messages dropped for a full peer queue
};

class ZmqTransport final : public Transport {
 public:
  ZmqTransport(const Security& security, int io_threads)
      : security_(security), context_(io_threads) {
    if (!security_.curve()) return;
    // Bound before any router exists: a CURVE handshake with no handler
    // bound would admit any client key.
    zap_socket_ = zmq::socket_t(context_, zmq::socket_type::rep);
    zap_socket_.set(zmq::sockopt::linger, 0);
    zap_socket_.bind("inproc://zeromq.zap.01");
    zap_thread_ = std::thread([this] { ServeZap(security_, zap_socket_); });
  }

  ~ZmqTransport() override {
    if (!zap_thread_.joinable()) return;
    context_.shutdown();  // the handler's receive returns ETERM
    zap_thread_.join();
    zap_socket_.close();
  }

  // libzmq's limit is per frame, checked before the frame is allocated;
  // a peer sending more is disconnected. 2x + 1 MiB of `max_message_bytes`
  // (0: none).
  // A dealer's is never below what a control message may take (a "moved"
  // reply carries the routing table). No overflow for huge limits.
  static void SetHardLimit(zmq::socket_t& socket, int64_t max_message_bytes,
                           bool dealer) {
    if (max_message_bytes <= 0) return;
    int64_t limit = std::min(max_message_bytes, int64_t{1} << 40);
    if (dealer) limit = std::max(limit, kControlMessageBytes);
    socket.set(zmq::sockopt::maxmsgsize, limit * 2 + (int64_t{1} << 20));
  }

  Result<std::unique_ptr<Socket>> NewRouter(int64_t max_message_bytes,
                                            int64_t max_queued,
                                            int64_t max_queued_bytes,
                                            int64_t max_unread) override {
    try {
      zmq::socket_t socket(context_, zmq::socket_type::router);
      if (security_.curve()) {
        if (security_.cluster_secret.empty()) {
          return FailedPreconditionError(
              "listening with keys needs the cluster's secret key "
              "(cluster.key); this process has only cluster.pub");
        }
        socket.set(zmq::sockopt::curve_server, 1);
        socket.set(zmq::sockopt::curve_secretkey, security_.cluster_secret);
        socket.set(zmq::sockopt::zap_domain, "ductile");
      }
      socket.set(zmq::sockopt::linger, 0);
      // libzmq counts whole messages; those to a peer whose queue is full
      // are dropped (Send counts them).
      socket.set(zmq::sockopt::sndhwm, static_cast<int>(max_queued));
      // Per peer too (each has its pipe): a full one stops libzmq reading
      // that connection until the socket's reader takes some.
      socket.set(zmq::sockopt::rcvhwm, static_cast<int>(max_unread));
      // Mandatory, so that a send to a full queue says so (EAGAIN) and to
      // a peer that has gone too (EHOSTUNREACH); Send drops both, as
      // ZeroMQ would silently without it, and counts the first.
      socket.set(zmq::sockopt::router_mandatory, 1);
      // A member reconnecting under its fixed identity takes its place at
      // once, even before the router has seen its old connection close.
      socket.set(zmq::sockopt::router_handover, 1);
      // Generous, so requests just over the limit still get a clear error
      // reply from the server's own check.
      SetHardLimit(socket, max_message_bytes, /*dealer=*/false);
      socket.set(zmq::sockopt::handshake_ivl,
                 static_cast<int>(security_.handshake_timeout_ms));
      // Before any bind, so that no accepted connection goes unseen.
      Result<std::unique_ptr<ConnectionGuard>> guard =
          ConnectionGuard::Start(context_, socket.handle(), security_);
      if (!guard.ok()) return guard.status();
      return std::unique_ptr<Socket>(new ZmqSocket(
          std::move(socket), security_, /*router=*/true, std::move(*guard),
          std::make_unique<QueuedBytesPerPeer>(
              static_cast<uint64_t>(std::max<int64_t>(0, max_queued_bytes)))));
    } catch (const zmq::error_t& e) {
      return ZmqError("router socket", e);
    }
  }

  Result<std::unique_ptr<Socket>> NewDealer(
      const std::string& identity, int64_t max_message_bytes) override {
    try {
      zmq::socket_t socket(context_, zmq::socket_type::dealer);
      if (security_.curve()) {
        // The router must prove it holds the cluster's secret key; this
        // side proves the admin's key if it has it, else its own member
        // key, else the cluster's.
        const bool own = !security_.admin() && security_.own_key();
        const std::string& secret = security_.admin() ? security_.admin_secret
                                    : own             ? security_.member_secret
                                          : security_.cluster_secret;
        if (secret.empty()) {
          return FailedPreconditionError(
              "no key to connect with: give the cluster's secret key "
              "(cluster.key) or a member key of its own (--member_key)");
        }
        if (security_.require_member_keys && !security_.admin() && !own) {
          return FailedPreconditionError(
              "this cluster admits only members with keys of their own "
              "(--require_member_keys): give this one its key "
              "(--member_key=FILE, from `ductile keygen --servers=N "
              "--workers=M`, or --member=worker-ID for one), or run an "
              "administrator's tool with admin.key");
        }
        socket.set(zmq::sockopt::curve_serverkey, security_.cluster_public);
        socket.set(zmq::sockopt::curve_publickey,
                   security_.admin() ? security_.admin_public
                   : own             ? security_.member_public
                                     : security_.cluster_public);
        socket.set(zmq::sockopt::curve_secretkey, secret);
      }
      socket.set(zmq::sockopt::linger, 0);
      socket.set(zmq::sockopt::sndhwm, 0);
      socket.set(zmq::sockopt::rcvhwm, 0);
      SetHardLimit(socket, max_message_bytes, /*dealer=*/true);
      socket.set(zmq::sockopt::handshake_ivl,
                 static_cast<int>(security_.handshake_timeout_ms));
      if (!identity.empty()) socket.set(zmq::sockopt::routing_id, identity);
      return std::unique_ptr<Socket>(
          new ZmqSocket(std::move(socket), security_, /*router=*/false));
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
  const Security security_;
  zmq::context_t context_;
  zmq::socket_t zap_socket_;
  std::thread zap_thread_;
  std::vector<zmq::pollitem_t> items_;
};

}  // namespace

namespace {

// A context never ended (NewZmqTransport).
void* volatile keep_network_up = nullptr;

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

int ZmqIoThreads(int requested, bool encrypted, unsigned cores) {
  if (requested != 0) return std::clamp(requested, 1, 64);
  if (!encrypted) return 1;
  return static_cast<int>(std::clamp(cores / 4, 1u, 4u));
}

std::unique_ptr<Transport> NewZmqTransport(const Security& security,
                                           int io_threads) {
  io_threads = ZmqIoThreads(io_threads, security.curve(),
                            std::thread::hardware_concurrency());
  // Once per process: libzmq aborts when accepting on an ipc:// socket
  // finds no file descriptor left (tcp:// only refuses). The routers'
  // connection guards keep a reserve below the limit; a higher limit
  // leaves more for connections.
  static std::once_flag raised;
  std::call_once(raised, RaiseOpenFileLimit);
  // Debian's libzmq starts libpgm with each context (pgm_init) and stops it
  // with the last one (pgm_shutdown), which destroys libpgm's global
  // mutexes. A context made on one thread while the process's last other
  // one ends on another thread initialises those mutexes while they are
  // being destroyed: ThreadSanitizer saw it in `ductile local`, whose
  // admin requests (a status poll, a drain) each make and end a context
  // of their own, on two threads. One context made before any other and
  // never ended (it starts no thread until it has a socket) keeps libpgm
  // up for the process's life. (Held in a global, where LeakSanitizer
  // finds it.)
  static std::once_flag network;
  std::call_once(network, [] { keep_network_up = zmq_ctx_new(); });
  return std::make_unique<ZmqTransport>(security, io_threads);
}

}  // namespace ductile
