// The ZeroMQ transport: the one place ductile uses ZeroMQ.
//
// One ZeroMQ context per ZmqTransport (with its I/O threads); sockets made by
// it belong to it and must be destroyed before it. Sockets have linger 0
// and no high water marks (ductile does its own flow control); routers drop
// messages to peers that are gone.
//
// With CURVE keys (ductile/security.h) every socket authenticates and
// encrypts: the transport runs a ZAP handler thread that admits only the
// cluster's and the admin's keys, and marks each received message with
// whether its sender holds the admin key (InMessage::from_admin). In plain
// mode, binding to an address other than loopback or ipc:// is refused
// (kPermissionDenied) unless the security allows it.
#ifndef DUCTILE_TRANSPORT_ZMQ_TRANSPORT_H_
#define DUCTILE_TRANSPORT_ZMQ_TRANSPORT_H_

#include <memory>

#include "ductile/security.h"
#include "transport/socket.h"

namespace ductile {

// A transport whose ZeroMQ context moves bytes on ZmqIoThreads(io_threads,
// ...) threads. Each connection is served by one of them, so more than
// one can help a member with several busy connections (a client talking
// to several servers, a server to several workers) on a machine with
// cores to spare; ZeroMQ's guide suggests one per GB/s. The first call
// in a process raises its soft limit of open files to the hard limit:
// libzmq aborts the process when accepting a connection on an ipc://
// socket finds no file descriptor left. Every router keeps the
// connections it accepts within `security`'s connection limits
// (transport/connection_guard.h), and every socket closes connections
// whose handshake takes longer than `security.handshake_timeout_ms`.
std::unique_ptr<Transport> NewZmqTransport(const Security& security,
                                           int io_threads = 1);

// The I/O threads for a requested count: 1 - 64 as asked (clamped); 0
// chooses: with CURVE (`encrypted`), where each connection's encryption
// runs on its I/O thread, a quarter of the `cores`, 1 to 4; in plain mode 1
// (more gained nothing measurable on 16 cores: docs/benchmarks.md).
int ZmqIoThreads(int requested, bool encrypted, unsigned cores);

}  // namespace ductile

#endif  // DUCTILE_TRANSPORT_ZMQ_TRANSPORT_H_
