// One round of "send a message to each member of a set and wait for every
// one's acknowledgement": who is still awaited, until when, and the message
// to send again to a member that reconnects. Table creation, consistency
// changes, checkpoint rounds, rollbacks and routing changes are each built
// on it.
//
// Invariant: awaiting() shrinks by Ack and Forget, and grows only by Await
// (a member whose new process must answer again); complete() is
// awaiting().empty().
// Not thread-safe: owned by the coordinator's loop.
#ifndef DUCTILE_COORDINATOR_ACK_ROUND_H_
#define DUCTILE_COORDINATOR_ACK_ROUND_H_

#include <chrono>
#include <cstdint>
#include <set>
#include <string>

#include "proto/ductile.pb.h"

namespace ductile {

class AckRound {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  AckRound() = default;
  AckRound(wire::Header message, std::set<int32_t> awaiting, TimePoint deadline)
      : message_(std::move(message)),
        awaiting_(std::move(awaiting)),
        deadline_(deadline) {}

  const wire::Header& message() const { return message_; }
  const std::set<int32_t>& awaiting() const { return awaiting_; }
  bool Awaits(int32_t member) const { return awaiting_.count(member) > 0; }
  // Records `member`'s acknowledgement; false if it was not awaited.
  bool Ack(int32_t member) { return awaiting_.erase(member) > 0; }
  // Stops waiting for a member that is gone.
  void Forget(int32_t member) { awaiting_.erase(member); }
  // Waits for `member` (again): a restarted process has nothing of what
  // the one before it acknowledged.
  void Await(int32_t member) { awaiting_.insert(member); }
  bool complete() const { return awaiting_.empty(); }
  bool expired(TimePoint now) const { return now >= deadline_; }
  TimePoint deadline() const { return deadline_; }
  void set_deadline(TimePoint deadline) { deadline_ = deadline; }
  // Later by `by` (a pause of the coordinator's own).
  void Postpone(TimePoint::duration by) { deadline_ += by; }
  // "1, 3": the members still awaited.
  std::string Missing() const;

 private:
  wire::Header message_;
  std::set<int32_t> awaiting_;
  TimePoint deadline_{};
};

}  // namespace ductile

#endif  // DUCTILE_COORDINATOR_ACK_ROUND_H_
