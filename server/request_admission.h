// The checks a data request passes before it touches a table, and
// exactly-once (docs/architecture.md, "Errors and bad input" and
// "Exactly-once").
//
// Check() reads a message as the server's router received it (frame 0
// names the sender): a header that parses, a data message type (or a
// CLOCK), the size limit, a routing table at least as new as the sender's,
// a known table, frames that agree with the header and the table's width,
// and, for a worker, the job's generation. Route() then decides, after
// the holds the server applies in between: a push applied before is a
// duplicate (even if its slot has moved since, or it would be applied
// twice by the new owner), and so is one whose earlier sequence numbers
// (`prior_seqs`: sent to a server that left before answering) were
// applied; otherwise every key's slot must be served here,
// and a pull's reply must fit the size limit.
//
// Nothing here changes a table; a refused request changes nothing.
// Not thread-safe: owned by a server's request thread.
#ifndef DUCTILE_SERVER_REQUEST_ADMISSION_H_
#define DUCTILE_SERVER_REQUEST_ADMISSION_H_

#include <cstdint>
#include <map>
#include <string>

#include "ductile/status.h"
#include "proto/codec.h"
#include "proto/ductile.pb.h"
#include "routing/routing_table.h"
#include "server/live_counters.h"
#include "server/request_dedup.h"
#include "server/table_set.h"
#include "transport/message.h"

namespace ductile {

class RequestAdmission {
 public:
  // A message that passed Check().
  struct Request {
    wire::Header header;
    bool is_clock = false;  // a CLOCK: no table, no frames
    bool is_worker = false;
    ParameterTable* table = nullptr;
    DataFrames data;
    bool has_values() const { return header.type() != wire::PULL; }
    bool has_pull() const { return header.type() != wire::PUSH; }
  };
  // What Route() decided.
  enum class Route {
    kServe,      // apply (unless duplicate) and answer
    kDuplicate,  // a push applied before: acknowledge only
    kMoved,      // a key's slot is not served here: answer "moved"
  };

  // Earlier sequence numbers a request may list (clients list at most 8).
  static constexpr int kMaxPriorSeqs = 64;

  // Refusals by a limit or for naming a worker from another connection
  // are counted in `counters` (refused_limits, refused_permission).
  RequestAdmission(uint64_t max_message_bytes, uint64_t max_key_floats,
                   uint64_t max_window_per_client, LiveCounters* counters)
      : max_message_bytes_(max_message_bytes),
        max_key_floats_(max_key_floats),
        max_window_per_client_(max_window_per_client),
        counters_(counters),
        dedup_(max_window_per_client) {}

  // The epoch of a newer routing table a request has named (0: none since
  // the last call): the server should fetch it from the coordinator.
  uint64_t TakeNewerEpoch() {
    const uint64_t e = newer_epoch_;
    newer_epoch_ = 0;
    return e;
  }

  // On failure the status is the error reply's and *seq its sequence
  // number (0 when the header could not be read).
  Status Check(const InMessage& message, const RoutingTable& routing,
               uint64_t generation, int32_t server_id, TableSet& tables,
               Request* out, uint64_t* seq);

  // Exactly-once, slot ownership and the reply's size, for a request that
  // Check() admitted; a push of a client whose window is full is refused
  // (kResourceExhausted). `*duplicate` says whether its values were applied
  // before (push-pulls are then served without applying).
  Result<Route> Decide(const Request& request, const RoutingTable& routing,
                       int32_t server_id, bool* duplicate);
  // Records a request's values as applied.
  void MarkApplied(const Request& request) {
    dedup_.MarkApplied(request.header.client_id(), request.header.seq());
  }
  // Takes the connection or member key each worker is bound to from the
  // coordinator's message (worker_ids, worker_identities, worker_keys);
  // Check() then refuses a request naming a worker that comes from another
  // connection, or from one not proving its key. A worker bound to a key
  // is bound to no connection. A worker with neither known (none sent yet,
  // or "" after a coordinator restart) keeps what was known before, if
  // anything. Without `overwrite`, only workers with nothing known are
  // bound (RECOVER and REJOIN: their list may be older than the last
  // WORKERS_UPDATE's).
  void BindWorkers(const wire::Header& from_coordinator, bool overwrite);
  // Forgets every applied request (a rollback starts a new timeline).
  void Reset() {
    const RequestDedup::TimePoint now = dedup_.now();
    dedup_ = RequestDedup(max_window_per_client_);
    dedup_.SetNow(now);
  }
  // The exactly-once window, which moves with slots.
  RequestDedup& dedup() { return dedup_; }

 private:
  const uint64_t max_message_bytes_;
  const uint64_t max_key_floats_;
  const uint64_t max_window_per_client_;
  LiveCounters* const counters_;
  RequestDedup dedup_;
  // Worker id -> what its requests must come with.
  struct Binding {
    std::string identity;  // the connection's, or ""
    std::string key;       // the member key's, or ""
  };
  std::map<int32_t, Binding> worker_binding_;
  uint64_t newer_epoch_ = 0;
  uint64_t requested_epoch_ = 0;  // the newest epoch fetched so far
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_REQUEST_ADMISSION_H_
