// The ZeroMQ transport: the one place ductile uses ZeroMQ.
//
// One ZeroMQ context per ZmqTransport (with one I/O thread); sockets made by
// it belong to it and must be destroyed before it. Sockets have linger 0
// and no high water marks (ductile does its own flow control); routers drop
// messages to peers that are gone.
#ifndef DUCTILE_TRANSPORT_ZMQ_TRANSPORT_H_
#define DUCTILE_TRANSPORT_ZMQ_TRANSPORT_H_

#include <memory>

#include "transport/socket.h"

namespace ductile {

// The first call in a process raises its soft limit of open files to the
// hard limit: libzmq aborts the process when accepting a connection on an
// ipc:// socket finds no file descriptor left.
std::unique_ptr<Transport> NewZmqTransport();

}  // namespace ductile

#endif  // DUCTILE_TRANSPORT_ZMQ_TRANSPORT_H_
