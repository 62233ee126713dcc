#include "sim/sim_network.h"

#include <algorithm>
#include <utility>

namespace ductile::sim {

struct SimNetwork::SocketState {
  int64_t id = 0;
  std::string node;
  bool router = false;
  bool closed = false;                 // its node crashed
  std::string identity;                // dealers
  std::string connected;               // dealers: the router address
  std::vector<std::string> addresses;  // routers: bound
  std::deque<std::vector<std::string>> inbox;
  // Dealers: sent while no router was bound at `connected` (ZeroMQ keeps
  // them until the connection is made).
  std::deque<std::vector<std::string>> unconnected;
};

namespace {

class SimSocket final : public Socket {
 public:
  SimSocket(SimNetwork* net, SimNetwork::SocketState* state)
      : net_(net), state_(state) {}
  ~SimSocket() override { net_->CloseSocket(state_); }

  Result<std::string> Bind(const std::string& address) override {
    return net_->Bind(state_, address);
  }
  Status Connect(const std::string& address) override {
    return net_->Connect(state_, address);
  }
  Status Send(OutMessage&& message) override {
    return net_->Send(state_, std::move(message));
  }
  Status Receive(InMessage* message, bool* got) override {
    return net_->Receive(state_, message, got);
  }

 private:
  SimNetwork* const net_;
  SimNetwork::SocketState* const state_;
};

class SimTransport final : public Transport {
 public:
  SimTransport(SimNetwork* net, std::string node)
      : net_(net), node_(std::move(node)) {}

  Result<std::unique_ptr<Socket>> NewRouter(int64_t, int64_t, int64_t,
                                            int64_t) override {
    return std::unique_ptr<Socket>(
        new SimSocket(net_, net_->NewSocket(node_, /*router=*/true, "")));
  }
  Result<std::unique_ptr<Socket>> NewDealer(const std::string& identity,
                                            int64_t) override {
    return std::unique_ptr<Socket>(new SimSocket(
        net_, net_->NewSocket(node_, /*router=*/false, identity)));
  }
  // The simulation steps nodes itself; nobody waits.
  Status Wait(std::span<Socket* const>, int, TimePoint) override {
    return Status::Ok();
  }

 private:
  SimNetwork* const net_;
  const std::string node_;
};

}  // namespace

SimNetwork::SimNetwork(uint64_t seed, const NetworkFaults& faults)
    : rng_(seed), faults_(faults), now_(TimePoint{} + std::chrono::hours(1)) {}

SimNetwork::~SimNetwork() = default;

void SimNetwork::AdvanceTo(TimePoint t) {
  if (t > now_) now_ = t;
}

std::unique_ptr<Transport> SimNetwork::NewTransport(const std::string& node) {
  return std::make_unique<SimTransport>(this, node);
}

SimNetwork::SocketState* SimNetwork::NewSocket(const std::string& node,
                                               bool router,
                                               const std::string& identity) {
  auto s = std::make_unique<SocketState>();
  s->id = next_socket_++;
  s->node = node;
  s->router = router;
  if (!router) {
    // Unique over the whole run: a restarted node is a new peer. Dealers
    // given the same identity share one, numbered by first use so that
    // a run does not depend on the (random) names chosen.
    std::string* named = identity.empty() ? nullptr : &named_[identity];
    if (named == nullptr || named->empty()) {
      s->identity = node + "#" + std::to_string(next_identity_++);
      if (named != nullptr) *named = s->identity;
    } else {
      s->identity = *named;
    }
    by_identity_[s->identity].push_back(s->id);
  }
  SocketState* raw = s.get();
  sockets_[s->id] = std::move(s);
  return raw;
}

void SimNetwork::CloseSocket(SocketState* s) {
  for (const std::string& a : s->addresses) {
    auto it = bound_.find(a);
    if (it != bound_.end() && it->second == s->id) bound_.erase(it);
  }
  ForgetIdentity(*s);
  sockets_.erase(s->id);
}

void SimNetwork::Crash(const std::string& node) {
  for (auto& [id, s] : sockets_) {
    if (s->node != node || s->closed) continue;
    s->closed = true;
    s->inbox.clear();
    s->unconnected.clear();
    for (const std::string& a : s->addresses) {
      auto it = bound_.find(a);
      if (it != bound_.end() && it->second == s->id) bound_.erase(it);
    }
    ForgetIdentity(*s);
  }
}

void SimNetwork::ForgetIdentity(const SocketState& dealer) {
  auto it = by_identity_.find(dealer.identity);
  if (it == by_identity_.end()) return;
  std::erase(it->second, dealer.id);
  if (it->second.empty()) by_identity_.erase(it);
}

Result<std::string> SimNetwork::Bind(SocketState* s,
                                     const std::string& address) {
  if (!s->router) return InvalidArgumentError("bind on a dealer");
  std::string bound = address;
  const size_t colon = address.rfind(':');
  if (colon != std::string::npos &&
      (address.substr(colon + 1) == "*" || address.substr(colon + 1) == "0")) {
    bound = address.substr(0, colon + 1) + std::to_string(10000 + s->id);
  }
  if (bound_.count(bound)) {
    return UnavailableError("bind to '" + address + "': address in use");
  }
  bound_[bound] = s->id;
  s->addresses.push_back(bound);
  // Dealers that connected before the router was there get connected now.
  for (auto& [id, d] : sockets_) {
    if (d->router || d->closed || d->connected != bound) continue;
    while (!d->unconnected.empty()) {
      std::vector<std::string> frames = std::move(d->unconnected.front());
      d->unconnected.pop_front();
      frames.insert(frames.begin(), d->identity);
      Enqueue(d->id, s->id, std::move(frames));
    }
  }
  return bound;
}

Status SimNetwork::Connect(SocketState* s, const std::string& address) {
  if (s->router) return InvalidArgumentError("connect on a router");
  s->connected = address;
  return Status::Ok();
}

Status SimNetwork::Send(SocketState* s, OutMessage&& message) {
  if (s->closed) return UnavailableError("socket of a crashed node");
  std::vector<std::string> frames;
  for (OutMessage::Frame& f : message.mutable_frames()) {
    const ByteSpan bytes = f.bytes();
    frames.emplace_back(reinterpret_cast<const char*>(bytes.data()),
                        bytes.size());
    f.holder.reset();  // the transport is done with the caller's bytes
  }
  if (s->router) {
    if (frames.empty()) return Status::Ok();
    auto it = by_identity_.find(frames.front());
    if (it == by_identity_.end()) return Status::Ok();  // peer gone
    // The dealer of that identity connected to this router.
    for (int64_t dealer : it->second) {
      auto bound = bound_.find(sockets_.at(dealer)->connected);
      if (bound != bound_.end() && bound->second == s->id) {
        frames.erase(frames.begin());
        Enqueue(s->id, dealer, std::move(frames));
        break;
      }
    }
    return Status::Ok();
  }
  auto it = bound_.find(s->connected);
  if (it == bound_.end()) {
    s->unconnected.push_back(std::move(frames));
    return Status::Ok();
  }
  frames.insert(frames.begin(), s->identity);
  Enqueue(s->id, it->second, std::move(frames));
  return Status::Ok();
}

void SimNetwork::Enqueue(int64_t from, int64_t to,
                         std::vector<std::string> frames) {
  ++sent_;
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  const bool to_router = sockets_.count(to) && sockets_.at(to)->router;
  if (coin(rng_) < faults_.drop &&
      (!droppable_ || droppable_(frames, to_router))) {
    ++dropped_;
    return;
  }
  std::uniform_int_distribution<int64_t> latency(faults_.min_latency_us,
                                                 faults_.max_latency_us);
  int64_t us = latency(rng_);
  if (coin(rng_) < faults_.delay) us += faults_.delay_us;
  TimePoint due = now_ + std::chrono::microseconds(us);
  // Messages of one link keep their order.
  TimePoint& last = link_last_[{from, to}];
  due = std::max(due, last);
  last = due;
  const bool twice = coin(rng_) < faults_.duplicate;
  InFlight m{due, next_order_++, to, std::move(frames)};
  if (twice) {
    ++duplicated_;
    InFlight copy = m;
    copy.order = next_order_++;
    in_flight_.emplace(std::make_pair(due, m.order), std::move(m));
    in_flight_.emplace(std::make_pair(due, copy.order), std::move(copy));
    return;
  }
  in_flight_.emplace(std::make_pair(due, m.order), std::move(m));
}

void SimNetwork::Mix(uint64_t x) {
  trace_ ^= x;
  trace_ *= 1099511628211ull;  // FNV-1a prime
}

int SimNetwork::DeliverDue() {
  int moved = 0;
  while (!in_flight_.empty() && in_flight_.begin()->first.first <= now_) {
    InFlight m = std::move(in_flight_.begin()->second);
    in_flight_.erase(in_flight_.begin());
    auto it = sockets_.find(m.to);
    if (it == sockets_.end() || it->second->closed) continue;
    Mix(m.due.time_since_epoch().count());
    Mix(m.to);
    for (const std::string& f : m.frames) {
      for (unsigned char c : f) Mix(c);
      Mix(0x100);
    }
    if (observer_) observer_(it->second->node, m.frames, it->second->router);
    it->second->inbox.push_back(std::move(m.frames));
    ++moved;
  }
  return moved;
}

std::optional<SimNetwork::TimePoint> SimNetwork::NextDelivery() const {
  if (in_flight_.empty()) return std::nullopt;
  return in_flight_.begin()->first.first;
}

Status SimNetwork::Receive(SocketState* s, InMessage* message, bool* got) {
  *got = false;
  if (s->closed || s->inbox.empty()) return Status::Ok();
  *message = InMessage::Copy(s->inbox.front());
  s->inbox.pop_front();
  *got = true;
  return Status::Ok();
}

}  // namespace ductile::sim
