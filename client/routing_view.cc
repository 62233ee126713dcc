#include "client/routing_view.h"

#include <set>
#include <utility>

#include "glog/logging.h"
#include "transport/endpoint.h"

namespace ductile {

bool RoutingView::Install(const wire::RoutingTable& wire) {
  if (wire.epoch() <= table_.epoch()) return false;
  Result<RoutingTable> table = RoutingTable::FromWire(wire);
  if (!table.ok() || table->empty()) {
    LOG(WARNING) << "client: ignoring a malformed routing table: "
                 << table.status();
    return false;
  }
  table_ = std::move(*table);
  anew_.clear();
  std::set<int32_t> listed;
  for (const auto& server : table_.servers()) {
    listed.insert(server.id());
    const std::string address =
        ChooseAddress(server.tcp_address(), server.ipc_address(),
                      server.host_id(), prefer_ipc_);
    auto it = connections_.find(server.id());
    if (it != connections_.end() && it->second.address == address) continue;
    Result<std::unique_ptr<Socket>> socket =
        transport_->NewDealer(identity_, max_message_bytes_);
    Status s = socket.ok() ? (*socket)->Connect(address) : socket.status();
    if (!s.ok()) {
      LOG(WARNING) << "client: cannot connect to server " << server.id()
                   << " at " << address << ": " << s;
      connections_.erase(server.id());
      continue;
    }
    connections_.insert_or_assign(server.id(),
                                  Connection{address, std::move(*socket)});
    anew_.push_back(server.id());
  }
  for (auto it = connections_.begin(); it != connections_.end();) {
    it = listed.count(it->first) ? std::next(it) : connections_.erase(it);
  }
  servers_.clear();
  sockets_.clear();
  for (auto& [id, c] : connections_) {
    servers_.push_back(id);
    sockets_.push_back(c.socket.get());
  }
  return true;
}

Socket* RoutingView::SocketOf(int32_t server) const {
  auto it = connections_.find(server);
  return it == connections_.end() ? nullptr : it->second.socket.get();
}

bool RoutingView::IsLocal(int32_t server) const {
  auto it = connections_.find(server);
  return it != connections_.end() && it->second.address.starts_with("ipc://");
}

bool RoutingView::Lists(int32_t server) const {
  for (const auto& s : table_.servers()) {
    if (s.id() == server) return true;
  }
  return false;
}

std::string RoutingView::Describe(int32_t server) const {
  std::string out = "server " + std::to_string(server);
  auto it = connections_.find(server);
  if (it != connections_.end()) out += " (" + it->second.address + ")";
  return out;
}

void RoutingView::Clear() {
  connections_.clear();
  servers_.clear();
  sockets_.clear();
}

}  // namespace ductile
