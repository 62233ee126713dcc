// Keeps a router's accepted connections within the process's file
// descriptors (transport/connection_ledger.h has the rule).
//
// libzmq accepts connections on its own I/O threads and tells of each
// through a socket monitor (ZMQ_EVENT_ACCEPTED, with the descriptor); the
// guard reads those events on a thread of its own, and closes a connection
// the ledger refuses by shutting its socket down (shutdown(2), which
// leaves the descriptor to libzmq: its engine reads the end of the stream
// and closes it as any broken connection). Refusals are counted
// (ConnectionRefusalCounts) and logged, the first ten of each kind, then
// every thousandth.
//
// Between an accept and the guard's reading of it libzmq may accept more;
// the reserve must cover that lag (docs/security.md, "Connections").
//
// Thread-safety: Start and Stop on the router's thread; the guard's own
// thread touches neither the router nor anything of its owner's.
#ifndef DUCTILE_TRANSPORT_CONNECTION_GUARD_H_
#define DUCTILE_TRANSPORT_CONNECTION_GUARD_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <zmq.hpp>

#include "ductile/security.h"
#include "ductile/status.h"

namespace ductile {

// Connections refused so far by every guard of the process.
struct ConnectionRefusals {
  uint64_t descriptors = 0;    // too few descriptors left (ledger rules 1, 2)
  uint64_t per_source = 0;     // one source address over its cap (rule 3)
  uint64_t accept_failed = 0;  // libzmq found no descriptor to accept with
  // Connections closed before their handshake was done (timed out, key
  // not admitted, peer gone); not refusals of the guard's own.
  uint64_t handshakes_failed = 0;
};
ConnectionRefusals ConnectionRefusalCounts();

class ConnectionGuard {
 public:
  // Starts watching `router` (a ZeroMQ socket's handle), which must not be
  // bound yet (so no accept goes unseen), under `security`'s limits.
  // `context` is the router's.
  static Result<std::unique_ptr<ConnectionGuard>> Start(
      zmq::context_t& context, void* router, const Security& security);

  // Stops the monitor and the thread. Before `router` is closed.
  ~ConnectionGuard();

  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

  // This router's refusals so far (any thread).
  ConnectionRefusals counts() const;

 private:
  ConnectionGuard(void* router, zmq::socket_t events, const Security& security);
  void Run();

  void* const router_;
  zmq::socket_t events_;  // the monitor's other end; the thread's alone
  const int64_t reserved_descriptors_;
  const int64_t max_per_source_;
  std::atomic<bool> stop_{false};
  // This router's share of the process's counts (ConnectionRefusals).
  std::atomic<uint64_t> refused_descriptors_{0};
  std::atomic<uint64_t> refused_per_source_{0};
  std::atomic<uint64_t> accept_failures_{0};
  std::atomic<uint64_t> handshakes_failed_{0};
  std::thread thread_;
};

}  // namespace ductile

#endif  // DUCTILE_TRANSPORT_CONNECTION_GUARD_H_
