// Addresses: which transport to use between two processes.
#ifndef DUCTILE_TRANSPORT_ENDPOINT_H_
#define DUCTILE_TRANSPORT_ENDPOINT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "ductile/status.h"

namespace ductile {

// Identifies this host (host name, boot id and mount namespace): processes
// with equal ids can reach each other's ipc:// sockets.
const std::string& HostId();

// A fresh ipc:// endpoint path for a listener in `dir`, unique on this host.
std::string MakeIpcAddress(const std::string& dir, const std::string& role);

// Removes the socket file of an ipc:// address (no-op for others).
void RemoveIpcFile(const std::string& address);

// Removes the socket files MakeIpcAddress made in `dir` for processes that
// are gone (killed before they could remove theirs): the pid in the name is
// no running process and nothing accepts a connection on the file.
// Returns how many it removed.
int RemoveStaleIpcFiles(const std::string& dir);

// For a tcp:// address, checks that it ends in ":PORT" with PORT "*" or a
// number in [0, 65535] (libzmq would take 70000 as port 4464). Other
// transports are not checked.
Status CheckTcpPort(const std::string& address);

// Whether only this host can reach `address`: ipc://, inproc://, or tcp://
// on a loopback address (127.0.0.0/8, localhost, [::1]). Anything else,
// "*" and 0.0.0.0 included, is on the network.
bool IsLocalOnlyAddress(const std::string& address);

// A routing identity for a member's dealers: "ROLE-PID-" and 128 random
// bits in hex. It stays the same over reconnections, so a router knows the
// member again, and cannot be guessed (with CURVE nobody else sees it).
std::string NewMemberIdentity(const std::string& role);

// The process id in ZeroMQ's "Peer-Address" of a message that came over
// ipc:// ("localhost:UID:GID:PID", from the socket's peer credentials), or
// 0 for any other form (a tcp:// peer's numeric address, none at all).
int32_t IpcPeerPid(std::string_view peer_address);

// The address a client should use to reach a server: its ipc address when
// both are on this host and ipc is preferred, else its tcp address.
std::string ChooseAddress(const std::string& tcp_address,
                          const std::string& ipc_address,
                          const std::string& host_id, bool prefer_ipc);

}  // namespace ductile

#endif  // DUCTILE_TRANSPORT_ENDPOINT_H_
