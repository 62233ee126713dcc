// How a server's components speak to the coordinator: messages, and the
// heartbeat that announces a long silence (a checkpoint write or restore)
// so that the server is not taken for dead meanwhile.
#ifndef DUCTILE_SERVER_COORDINATOR_LINK_H_
#define DUCTILE_SERVER_COORDINATOR_LINK_H_

#include <cstdint>

#include "proto/ductile.pb.h"

namespace ductile {

class CoordinatorLink {
 public:
  virtual ~CoordinatorLink() = default;
  // Best effort: a message lost with a coordinator that restarts is sent
  // again by the protocol, not by the link.
  virtual void Send(const wire::Header& header) = 0;
  // A heartbeat now. `busy_ms` > 0: the server may be silent that long;
  // -1: up to the coordinator's checkpoint timeout; 0: an ordinary one
  // (silence means death again).
  virtual void Heartbeat(int64_t busy_ms) = 0;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_COORDINATOR_LINK_H_
