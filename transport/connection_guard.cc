#include "transport/connection_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "glog/logging.h"
#include "transport/connection_ledger.h"

namespace ductile {
namespace {

std::atomic<uint64_t> refused_descriptors{0};
std::atomic<uint64_t> refused_per_source{0};
std::atomic<uint64_t> accept_failures{0};
std::atomic<uint64_t> handshakes_failed{0};
std::atomic<uint64_t> monitors_made{0};

// The first ten, then every thousandth: a flood cannot flood the log.
bool Worth(uint64_t nth) { return nth <= 10 || nth % 1000 == 0; }

int64_t SoftFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 ||
      limit.rlim_cur == RLIM_INFINITY) {
    return int64_t{1} << 30;
  }
  return static_cast<int64_t>(limit.rlim_cur);
}

// The address (no port) of the tcp peer on `fd`; "" if `fd` is no
// connected IP socket now (the connection already went).
std::string PeerAddress(int fd) {
  sockaddr_storage peer{};
  socklen_t size = sizeof(peer);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &size) != 0) {
    return "";
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&peer);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) == nullptr) {
      return "";
    }
  } else if (peer.ss_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(&peer);
    if (inet_ntop(AF_INET6, &in->sin6_addr, text, sizeof(text)) == nullptr) {
      return "";
    }
  } else {
    return "";
  }
  return text;
}

// Whether `fd` is a unix-domain socket now.
bool IsLocalSocket(int fd) {
  sockaddr_storage self{};
  socklen_t size = sizeof(self);
  return getsockname(fd, reinterpret_cast<sockaddr*>(&self), &size) == 0 &&
         self.ss_family == AF_UNIX;
}

constexpr int kHandshakeFailed = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
constexpr int kEvents = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
                        ZMQ_EVENT_ACCEPT_FAILED | ZMQ_EVENT_MONITOR_STOPPED |
                        kHandshakeFailed;

}  // namespace

ConnectionRefusals ConnectionRefusalCounts() {
  ConnectionRefusals r;
  r.descriptors = refused_descriptors.load();
  r.per_source = refused_per_source.load();
  r.accept_failed = accept_failures.load();
  r.handshakes_failed = handshakes_failed.load();
  return r;
}

ConnectionRefusals ConnectionGuard::counts() const {
  ConnectionRefusals r;
  r.descriptors = refused_descriptors_.load(std::memory_order_relaxed);
  r.per_source = refused_per_source_.load(std::memory_order_relaxed);
  r.accept_failed = accept_failures_.load(std::memory_order_relaxed);
  r.handshakes_failed = handshakes_failed_.load(std::memory_order_relaxed);
  return r;
}

Result<std::unique_ptr<ConnectionGuard>> ConnectionGuard::Start(
    zmq::context_t& context, void* router, const Security& security) {
  const std::string endpoint =
      "inproc://ductile.connections." + std::to_string(++monitors_made);
  if (zmq_socket_monitor(router, endpoint.c_str(), kEvents) != 0) {
    return UnavailableError(std::string("connection monitor: ") +
                            zmq_strerror(zmq_errno()));
  }
  try {
    zmq::socket_t events(context, zmq::socket_type::pair);
    events.set(zmq::sockopt::linger, 0);
    events.connect(endpoint);
    return std::unique_ptr<ConnectionGuard>(
        new ConnectionGuard(router, std::move(events), security));
  } catch (const zmq::error_t& e) {
    zmq_socket_monitor(router, nullptr, 0);
    return UnavailableError(std::string("connection monitor: ") + e.what());
  }
}

ConnectionGuard::ConnectionGuard(void* router, zmq::socket_t events,
                                 const Security& security)
    : router_(router),
      events_(std::move(events)),
      reserved_descriptors_(security.reserved_descriptors),
      max_per_source_(security.max_connections_per_source) {
  thread_ = std::thread([this] { Run(); });
}

ConnectionGuard::~ConnectionGuard() {
  stop_ = true;
  zmq_socket_monitor(router_, nullptr, 0);
  thread_.join();
}

void ConnectionGuard::Run() {
  ConnectionLedger ledger(reserved_descriptors_, max_per_source_);
  zmq::pollitem_t item{events_.handle(), 0, ZMQ_POLLIN, 0};
  while (!stop_) {
    zmq::message_t head;
    zmq::message_t address;
    try {
      // Polled with a timeout, so a stop is seen even if the monitor's
      // last event never arrives.
      if (zmq::poll(&item, 1, std::chrono::milliseconds(200)) == 0) continue;
      if (!events_.recv(head, zmq::recv_flags::dontwait)) continue;
      if (!head.more() || !events_.recv(address)) continue;
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      break;  // ETERM: the context is going
    }
    uint16_t event = 0;
    uint32_t value = 0;
    if (head.size() < sizeof(event) + sizeof(value)) continue;
    std::memcpy(&event, head.data(), sizeof(event));
    std::memcpy(&value, static_cast<const char*>(head.data()) + sizeof(event),
                sizeof(value));
    const int fd = static_cast<int>(value);
    if (event == ZMQ_EVENT_MONITOR_STOPPED) break;
    if ((event & kHandshakeFailed) != 0) {  // `value` is no descriptor
      ++handshakes_failed;
      handshakes_failed_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (event == ZMQ_EVENT_DISCONNECTED) {
      ledger.Closed(fd);
      continue;
    }
    const std::string_view where = address.to_string_view();
    if (event == ZMQ_EVENT_ACCEPT_FAILED) {
      // tcp:// only refuses; ipc:// would not have come back to tell.
      if (value == EMFILE || value == ENFILE) {
        const uint64_t nth = ++accept_failures;
        accept_failures_.fetch_add(1, std::memory_order_relaxed);
        if (Worth(nth)) {
          LOG(WARNING) << "no file descriptor left to accept a connection on "
                       << where << " (" << nth << " so far)";
        }
      }
      continue;
    }
    if (event != ZMQ_EVENT_ACCEPTED) continue;
    const bool tcp = where.starts_with("tcp://");
    std::string source;
    if (tcp) {
      source = PeerAddress(fd);
      if (source.empty()) continue;  // gone already
    }
    const int64_t limit = SoftFileLimit();
    const ConnectionLedger::Verdict verdict =
        ledger.Accepted(fd, tcp, source, limit);
    if (verdict == ConnectionLedger::Verdict::kKeep) continue;
    // The descriptor is still this connection's: it was checked just now
    // (an ipc:// one is at least still a local socket).
    if (!tcp && !IsLocalSocket(fd)) continue;
    shutdown(fd, SHUT_RDWR);
    const std::string who = tcp ? " from " + source : "";
    if (verdict == ConnectionLedger::Verdict::kRefuseDescriptors) {
      const uint64_t nth = ++refused_descriptors;
      refused_descriptors_.fetch_add(1, std::memory_order_relaxed);
      if (Worth(nth)) {
        LOG(WARNING) << "refused a connection on " << where << who
                     << ": descriptor " << fd << " of a limit of " << limit
                     << " is within the "
                     << (tcp ? reserved_descriptors_
                             : reserved_descriptors_ / 2)
                     << " kept for this process's own files and sockets "
                        "(--reserved_descriptors; "
                     << nth << " refused so far)";
      }
    } else {
      const uint64_t nth = ++refused_per_source;
      refused_per_source_.fetch_add(1, std::memory_order_relaxed);
      if (Worth(nth)) {
        LOG(WARNING) << "refused a connection on " << where << who << ": "
                     << ledger.open_from(source)
                     << " connections from that address already "
                        "(--max_connections_per_source; "
                     << nth << " refused so far)";
      }
    }
  }
}

}  // namespace ductile
