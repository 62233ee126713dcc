// A client's view of the routing table and its connections to the servers
// the table lists (ipc to servers on this host when preferred, else tcp).
// A server that leaves the table loses its connection; one whose address
// changed (it restarted) gets a new one.
//
// Not thread-safe: owned by the client's I/O thread.
#ifndef DUCTILE_CLIENT_ROUTING_VIEW_H_
#define DUCTILE_CLIENT_ROUTING_VIEW_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "proto/ductile.pb.h"
#include "routing/routing_table.h"
#include "transport/socket.h"

namespace ductile {

class RoutingView {
 public:
  // `identity` names this client to every server (the one its
  // coordinator connection has: servers take a worker's requests only from
  // the connection the coordinator bound it to). A server's reply of far
  // more than `max_message_bytes` resets its connection unread
  // (Transport::NewDealer).
  RoutingView(Transport* transport, bool prefer_ipc, std::string identity,
              int64_t max_message_bytes)
      : transport_(transport),
        prefer_ipc_(prefer_ipc),
        identity_(std::move(identity)),
        max_message_bytes_(max_message_bytes) {}

  const RoutingTable& table() const { return table_; }
  // Installs `wire` if it is newer and well formed; true if installed.
  bool Install(const wire::RoutingTable& wire);
  // The servers the last Install connected to anew: new to the routing, or
  // listed at another address (a new process under the same id: the old
  // one died).
  const std::vector<int32_t>& connected_anew() const { return anew_; }

  // The connection to `server`, null if the table gives no address.
  Socket* SocketOf(int32_t server) const;
  // Whether the table lists `server` (connected to or not): a server not
  // listed has left the job.
  bool Lists(int32_t server) const;
  // Whether the connection to `server` is over ipc:// (on this host).
  bool IsLocal(int32_t server) const;
  // "server 3 (tcp://...)" for messages.
  std::string Describe(int32_t server) const;
  // Every connected server, ascending by id.
  const std::vector<int32_t>& servers() const { return servers_; }
  const std::vector<Socket*>& sockets() const { return sockets_; }
  // Drops every connection.
  void Clear();

 private:
  struct Connection {
    std::string address;
    std::unique_ptr<Socket> socket;
  };

  Transport* const transport_;
  const bool prefer_ipc_;
  const std::string identity_;
  const int64_t max_message_bytes_;
  RoutingTable table_;
  std::map<int32_t, Connection> connections_;
  std::vector<int32_t> anew_;
  std::vector<int32_t> servers_;  // connections_' ids
  std::vector<Socket*> sockets_;  // connections_' sockets, same order
};

}  // namespace ductile

#endif  // DUCTILE_CLIENT_ROUTING_VIEW_H_
