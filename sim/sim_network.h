// A simulated network for deterministic tests: routers and dealers with
// ZeroMQ's semantics (transport/socket.h), a fake clock, and faults drawn
// from one seeded generator, so that a run is a function of its seed.
//
// Every message gets a latency; messages between one pair of sockets keep
// their order (ZeroMQ's guarantee, which the protocol relies on), while
// messages of different pairs interleave in any order. Faults:
//   delay      a message (and those behind it on its link) arrives much
//              later;
//   duplicate  a message arrives twice, the copy right after it;
//   drop       a message is lost; the caller says which messages may be
//              (those whose loss the protocol repairs).
// A node can be crashed: its sockets go, with every message to or from
// them in flight.
//
// Not thread-safe: the simulation runs in one thread.
#ifndef DUCTILE_SIM_SIM_NETWORK_H_
#define DUCTILE_SIM_SIM_NETWORK_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "transport/socket.h"

namespace ductile::sim {

struct NetworkFaults {
  // Latency of each message, uniform in [min, max] microseconds.
  int64_t min_latency_us = 50;
  int64_t max_latency_us = 2000;
  // Probability that a message is held back by `delay_us` more.
  double delay = 0;
  int64_t delay_us = 200000;
  double duplicate = 0;
  // Probability that a message SimNetwork::set_droppable accepts is lost.
  double drop = 0;
};

class SimNetwork {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  SimNetwork(uint64_t seed, const NetworkFaults& faults);
  ~SimNetwork();

  // The fake clock: starts at an arbitrary point, moves only by Advance.
  TimePoint now() const { return now_; }
  void AdvanceTo(TimePoint t);
  std::mt19937_64& rng() { return rng_; }
  // A process id for a node started now (SimEnv::ProcessId): never given
  // twice in a run.
  int32_t NewProcessId() { return next_pid_++; }
  const NetworkFaults& faults() const { return faults_; }
  // Which messages a drop may take (all by default): `frames` as the
  // receiver will see them (a router's with the sender's identity first).
  using Droppable =
      std::function<bool(const std::vector<std::string>& frames, bool router)>;
  void set_droppable(Droppable droppable) { droppable_ = std::move(droppable); }
  void set_faults(const NetworkFaults& faults) { faults_ = faults; }
  // Told of every message as it reaches its socket's inbox (before the
  // node reads it): the node, the frames as it will see them, and whether
  // the socket is a router. It must not change the network.
  using Observer =
      std::function<void(const std::string& node,
                         const std::vector<std::string>& frames, bool router)>;
  void set_observer(Observer observer) { observer_ = std::move(observer); }

  // A transport for `node`; its sockets are the node's.
  std::unique_ptr<Transport> NewTransport(const std::string& node);
  // Removes every socket of `node` and the messages in flight to or from
  // them (a crash). Sockets the node still holds stop working.
  void Crash(const std::string& node);

  // Moves the messages due now into their sockets' inboxes; the number
  // moved.
  int DeliverDue();
  // When the next message in flight is due.
  std::optional<TimePoint> NextDelivery() const;
  // Messages sent so far, and lost or duplicated by faults.
  uint64_t sent() const { return sent_; }
  uint64_t dropped() const { return dropped_; }
  uint64_t duplicated() const { return duplicated_; }
  // A hash of every delivery so far (time, destination, bytes): equal for
  // two runs exactly when they delivered the same messages at the same
  // times.
  uint64_t trace() const { return trace_; }

  // Used by SimSocket.
  struct SocketState;
  SocketState* NewSocket(const std::string& node, bool router,
                         const std::string& identity);
  void CloseSocket(SocketState* s);
  Result<std::string> Bind(SocketState* s, const std::string& address);
  Status Connect(SocketState* s, const std::string& address);
  Status Send(SocketState* s, OutMessage&& message);
  Status Receive(SocketState* s, InMessage* message, bool* got);

 private:
  struct InFlight {
    TimePoint due;
    uint64_t order;  // ties broken by sending order
    int64_t to;      // socket id
    std::vector<std::string> frames;
  };
  void Enqueue(int64_t from, int64_t to, std::vector<std::string> frames);
  void Mix(uint64_t x);

  std::mt19937_64 rng_;
  NetworkFaults faults_;
  Droppable droppable_;
  Observer observer_;
  TimePoint now_;
  int64_t next_socket_ = 1;
  int32_t next_pid_ = 100;
  uint64_t next_order_ = 0;
  uint64_t next_identity_ = 1;
  std::map<int64_t, std::unique_ptr<SocketState>> sockets_;
  std::map<std::string, int64_t> bound_;  // address -> router
  // identity -> its dealers (one per router they connect to)
  std::map<std::string, std::vector<int64_t>> by_identity_;
  // A dealer identity chosen by its owner -> the run's name for it
  std::map<std::string, std::string> named_;
  void ForgetIdentity(const SocketState& dealer);
  std::map<std::pair<int64_t, int64_t>, TimePoint> link_last_;  // FIFO
  std::multimap<std::pair<TimePoint, uint64_t>, InFlight> in_flight_;
  uint64_t sent_ = 0, dropped_ = 0, duplicated_ = 0;
  uint64_t trace_ = 1469598103934665603ull;  // FNV-1a offset basis
};

}  // namespace ductile::sim

#endif  // DUCTILE_SIM_SIM_NETWORK_H_
