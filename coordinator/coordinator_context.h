// What the coordinator's managers share: options, time, the cluster state
// and the outbox.
//
// The outbox holds every message a manager sends until the coordinator has
// persisted the state that caused it (ClusterState::PersistIfChanged), then
// Flush() sends them in order: nobody hears of a change a crash could
// still undo. While the state cannot be written, they stay held; only
// replies that tell of no change (SendStateless: the status) go out. A
// message equal to one already held (same member, same bytes) is not held
// twice.
//
// Not thread-safe: owned by the coordinator's loop.
#ifndef DUCTILE_COORDINATOR_COORDINATOR_CONTEXT_H_
#define DUCTILE_COORDINATOR_COORDINATOR_CONTEXT_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/ack_round.h"
#include "coordinator/cluster_state.h"
#include "ductile/coordinator.h"
#include "ductile/status.h"
#include "env/env.h"
#include "proto/ductile.pb.h"
#include "transport/socket.h"

namespace ductile {

class Outbox {
 public:
  void Send(const std::string& identity, const wire::Header& header);
  // A CONTROL_REPLY with `status` to request `seq`.
  void Reply(const std::string& identity, uint64_t seq, const Status& status);
  // A message that tells of no change of the durable state (a status
  // reply): sent by FlushStateless too.
  void SendStateless(const std::string& identity, const wire::Header& header);
  // Sends everything queued, in order (a message that cannot be sent is
  // dropped, as a lost message would be).
  void Flush(Socket* socket);
  // Sends only the stateless messages.
  void FlushStateless(Socket* socket);
  bool empty() const { return pending_.empty() && stateless_.empty(); }
  size_t held() const { return pending_.size(); }

 private:
  using Queue = std::vector<std::pair<std::string, std::string>>;
  static void SendAll(Queue* queue, Socket* socket);

  Queue pending_;
  Queue stateless_;
};

// A request answered later: who asked, and the sequence number to answer.
struct Waiter {
  std::string identity;
  uint64_t seq = 0;
  bool operator==(const Waiter&) const = default;
};

// How long to wait after the `failures`-th failure in a row before trying
// again: 1 s, doubling, at most 60 s (failed restores, checkpoint rounds).
inline int64_t BackoffMs(int failures) {
  return std::min<int64_t>(int64_t{1000} << std::clamp(failures - 1, 0, 6),
                           60000);
}

struct CoordinatorContext {
  using TimePoint = std::chrono::steady_clock::time_point;

  const CoordinatorOptions& options;
  Env* env;
  ClusterState& state;
  Outbox& out;
  // The cluster is shutting down: nothing new starts.
  bool shutting_down = false;
  // Slots are moving between servers: no checkpoint round starts.
  bool migrating = false;

  // When the coordinator last found its inbox empty. A member's silence
  // is judged as of then (SilentMs), and so is a round's deadline
  // (RoundExpired): a pause of the coordinator between that read and the
  // judgement (a SIGSTOP, a starved host) leaves the members' heartbeats
  // and answers unread, and is not their silence or lateness.
  TimePoint inbox_read_at{};

  TimePoint Now() const { return env->Now(); }
  int64_t MsSince(TimePoint t) const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Now() - t)
        .count();
  }
  bool RoundExpired(const AckRound& round) const {
    return round.expired(inbox_read_at);
  }
  int64_t SilentMs(TimePoint last_seen) const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(inbox_read_at -
                                                                 last_seen)
        .count();
  }
  // Sends `header` to each of `ids` among `group` (servers or workers).
  void SendTo(const std::map<int32_t, Member>& group,
              const std::set<int32_t>& ids, const wire::Header& header) {
    for (int32_t id : ids) {
      auto it = group.find(id);
      if (it != group.end()) out.Send(it->second.identity, header);
    }
  }
};

}  // namespace ductile

#endif  // DUCTILE_COORDINATOR_COORDINATOR_CONTEXT_H_
