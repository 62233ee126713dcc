// The ZAP handler (ZeroMQ's authentication protocol, RFC 27) of a
// transport with CURVE keys: which keys a router admits, and under which
// user id each admitted peer's messages then arrive.
//
// Runs on a thread of the transport's own (ServeZap), answering the
// handshakes of every router of its context.
#ifndef DUCTILE_TRANSPORT_ZAP_HANDLER_H_
#define DUCTILE_TRANSPORT_ZAP_HANDLER_H_

#include <cstddef>
#include <string_view>
#include <zmq.hpp>

#include "ductile/security.h"

namespace ductile {

// ZAP user ids: what a router's peer proved it holds. A member with a key
// of its own is named by the prefix and its key.
inline constexpr char kMemberUser[] = "member";
inline constexpr char kAdminUser[] = "admin";
inline constexpr std::string_view kOwnKeyUser = "key:";
inline constexpr size_t kZ85KeyChars = 40;

// Answers the ZAP requests of a context's CURVE routers on `socket`
// (bound to inproc://zeromq.zap.01): admits the cluster's key as a member,
// the admin's key as the admin, and the keys of members with keys of their
// own (Security::members_dir) under their names; nobody else. Runs until
// the context is shut down.
void ServeZap(const Security& security, zmq::socket_t& socket);

}  // namespace ductile

#endif  // DUCTILE_TRANSPORT_ZAP_HANDLER_H_
