// The ZeroMQ transport: the one place ductile uses ZeroMQ.
//
// One ZeroMQ context per ZmqTransport (with one I/O thread); sockets made by
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

// A transport whose ZeroMQ context moves bytes on `io_threads` threads
// (1 - 64; out of range: 1). Each connection is served by one of them, so
// more than one helps a member with several busy connections (a client
// talking to several servers, a server to several workers); ZeroMQ's guide
// suggests one per GB/s. The first call in a process raises its soft limit
// of open files to the hard limit: libzmq aborts the process when
// accepting a connection on an ipc:// socket finds no file descriptor left.
std::unique_ptr<Transport> NewZmqTransport(const Security& security,
                                           int io_threads = 1);

// The I/O threads a member takes when told 0: a quarter of the machine's
// cores, 1 to 4.
int DefaultIoThreads();

// `requested`, or DefaultIoThreads() for 0.
int IoThreadsFor(int requested);

}  // namespace ductile

#endif  // DUCTILE_TRANSPORT_ZMQ_TRANSPORT_H_
