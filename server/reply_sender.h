// A server's answers to data requests: every reply names the request's
// sequence number and carries the server's routing epoch (a client behind
// it fetches the newer table); errors and "moved" answers are counted.
//
// Not thread-safe: used by the request thread.
#ifndef DUCTILE_SERVER_REPLY_SENDER_H_
#define DUCTILE_SERVER_REPLY_SENDER_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "ductile/status.h"
#include "proto/ductile.pb.h"
#include "routing/routing_table.h"
#include "server/live_counters.h"
#include "transport/message.h"
#include "transport/socket.h"

namespace ductile {

// What a reply must wait for before it goes (Replicator: its backups'
// acknowledgements).
class ReplyGate {
 public:
  virtual ~ReplyGate() = default;
  // A reply is about to go: sends what it depends on, and returns what it
  // must wait for (0: nothing).
  virtual uint64_t Ticket() = 0;
  // Whether a reply holding `ticket` may go now.
  virtual bool Passed(uint64_t ticket) const = 0;
};

class ReplySender {
 public:
  // `routing` is the server's table, read at each reply; all must outlive
  // the sender.
  ReplySender(const RoutingTable* routing, LiveCounters* counters)
      : routing_(routing), counters_(counters) {}

  void set_router(Socket* router) { router_ = router; }
  // Replies wait, in order, for `gate` (null: none) while it is active.
  void set_gate(ReplyGate* gate) { gate_ = gate; }
  // Sends the replies the gate lets go now; call when it may have opened.
  void SendHeld();
  // Drops the replies waiting (the gate will never open: this server was
  // fenced, or the job rolled back); returns how many.
  size_t DropHeld();
  size_t held() const { return held_.size(); }
  void set_server_id(int32_t id) { server_id_ = id; }

  // To the sender named by `identity` (frame 0 of its request); sets the
  // header's epoch; `values` (a pull's) is taken.
  void Reply(ByteSpan identity, wire::Header& header,
             std::vector<float>* values);
  // The same, not waiting for the gate: answers to other servers (a
  // backup's acknowledgement never waits for its own backups).
  void ReplyNow(ByteSpan identity, wire::Header& header) {
    Send(identity, header, nullptr, /*gated=*/false);
  }
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
  struct Held {
    OutMessage out;
    std::string identity;
    wire::Header header;
    uint64_t ticket = 0;
  };
  void Send(ByteSpan identity, wire::Header& header, std::vector<float>* values,
            bool gated);
  // Sends `out`; on a full queue, answers with the refusal instead.
  void Transmit(OutMessage out, ByteSpan identity, const wire::Header& header);

  const RoutingTable* const routing_;
  LiveCounters* const counters_;
  ReplyGate* gate_ = nullptr;
  std::deque<Held> held_;
  Socket* router_ = nullptr;
  int32_t server_id_ = -1;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_REPLY_SENDER_H_
