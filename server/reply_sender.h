// A server's answers to data requests: every reply names the request's
// sequence number and carries the server's routing epoch (a client behind
// it fetches the newer table); errors and "moved" answers are counted.
//
// Not thread-safe: used by the request thread.
#ifndef DUCTILE_SERVER_REPLY_SENDER_H_
#define DUCTILE_SERVER_REPLY_SENDER_H_

#include <cstdint>
#include <vector>

#include "ductile/status.h"
#include "proto/ductile.pb.h"
#include "routing/routing_table.h"
#include "server/live_counters.h"
#include "transport/message.h"
#include "transport/socket.h"

namespace ductile {

class ReplySender {
 public:
  // `routing` is the server's table, read at each reply; all must outlive
  // the sender.
  ReplySender(const RoutingTable* routing, LiveCounters* counters)
      : routing_(routing), counters_(counters) {}

  void set_router(Socket* router) { router_ = router; }
  void set_server_id(int32_t id) { server_id_ = id; }

  // To the sender named by `identity` (frame 0 of its request); sets the
  // header's epoch; `values` (a pull's) is taken.
  void Reply(ByteSpan identity, wire::Header& header,
             std::vector<float>* values);
  // `applied`: the request's pushed values were applied before the
  // refusal (a push-pull refused at its pull): the reply says so
  // (`duplicate`), so that the client never pushes them again.
  void Error(ByteSpan identity, uint64_t seq, const Status& s,
             bool applied = false);
  // "Routing changed": nothing was applied; the reply carries the table.
  void Moved(ByteSpan identity, uint64_t seq, bool duplicate);
  // Answers every request in `requests` (whole messages, as received)
  // with `s`.
  void FailAll(std::vector<InMessage> requests, const Status& s,
               bool applied = false);

 private:
  const RoutingTable* const routing_;
  LiveCounters* const counters_;
  Socket* router_ = nullptr;
  int32_t server_id_ = -1;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_REPLY_SENDER_H_
