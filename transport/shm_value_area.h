// A process's shared memory for what it sends to processes on its host
// (docs/wire.md, "Values in shared memory"): one segment, cut into
// regions lent to requests. A worker's, for the values it exchanges with
// servers: for a pull, a server writes the reply's values into the
// request's region and the worker copies them out when the reply comes;
// for a push, the worker copies the values in and the server copies them
// out when the request arrives. A primary server's, for the records it
// sends its backups (server/replicator.h): the backup reads them from
// there before it acknowledges them.
//
// Invariant: a region is lent to one ticket (a request's pull or push
// values: ReplyTicket, PushTicket; a replication record) at a time and
// goes out again only once the receiver has answered the one copy of the
// request that named it, or 2 x its timeout + kSlack after it was lent: a
// receiver reads or writes a region only within the request's timeout of
// its sending (ShmValueRegions), so a late access never lands in a region
// lent to another request. A pull is sent once under its seq; a push sent again
// under the same seq goes in frames, and its region is kept until its time
// is up (Keep: an answer may be to either copy, while the other is still
// on its way); a re-routed part gets a new seq and new regions.
//
// Not thread-safe: used by one thread (the client's I/O thread, a
// server's request thread).
#ifndef DUCTILE_TRANSPORT_SHM_VALUE_AREA_H_
#define DUCTILE_TRANSPORT_SHM_VALUE_AREA_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>

#include "ductile/status.h"
#include "proto/ductile.pb.h"
#include "transport/shm_segment.h"

namespace ductile {

class ShmValueArea {
 public:
  // A segment of `bytes`; kUnavailable if the system has no memfd.
  static Result<std::unique_ptr<ShmValueArea>> Create(uint64_t bytes);

  // The tickets of request `seq`'s pulled and pushed values.
  static uint64_t ReplyTicket(uint64_t seq) { return seq << 1; }
  static uint64_t PushTicket(uint64_t seq) { return (seq << 1) | 1; }

  // How long past its request's timeout a region is held when no answer
  // frees it: 2 x the timeout plus this slack (a server may still be
  // writing a large reply it began just within the timeout).
  static constexpr std::chrono::seconds kSlack{10};

  // Lends a region of `bytes` to `ticket`, for a request to `server` with
  // `timeout_ms` sent now, and names it in `ref`; false (ref untouched)
  // when no free region is large enough (after taking back those whose
  // time is up) or the ticket has one.
  bool Lend(uint64_t ticket, int32_t server, uint64_t bytes, int64_t timeout_ms,
            wire::ShmRef* ref);
  // The request of `ticket` is sent again: its region is no longer given
  // back by Return, only when its time is up. False if it has none.
  bool Keep(uint64_t ticket);
  // The region of `ticket`, if one of exactly `bytes` is lent to it for
  // `server`; else null.
  float* Data(uint64_t ticket, int32_t server, uint64_t bytes) const;
  // `server` answered: `ticket`'s region (if any, and not kept) may be
  // lent again.
  void Return(uint64_t ticket, int32_t server);
  // Takes back the regions whose time is up at `now` (2 x their timeout
  // plus kSlack after they were lent).
  void Expire(std::chrono::steady_clock::time_point now =
                  std::chrono::steady_clock::now());

  // Regions lent, and the bytes free, now.
  size_t lent() const { return lent_.size(); }
  uint64_t free_bytes() const;

 private:
  using Clock = std::chrono::steady_clock;
  // Regions start at multiples of this many bytes.
  static constexpr uint64_t kAlignBytes = 64;

  struct Region {
    uint64_t offset = 0;
    uint64_t bytes = 0;        // rounded up to kAlignBytes
    uint64_t value_bytes = 0;  // as lent
    int32_t server = -1;
    Clock::time_point expires;
    bool kept = false;  // Keep(): only Expire frees it
  };

  explicit ShmValueArea(std::unique_ptr<ShmSegment> segment);
  void Free(uint64_t offset, uint64_t bytes);

  const std::unique_ptr<ShmSegment> segment_;
  std::map<uint64_t, uint64_t> free_;          // offset -> bytes, coalesced
  std::unordered_map<uint64_t, Region> lent_;  // by ticket
};

}  // namespace ductile

#endif  // DUCTILE_TRANSPORT_SHM_VALUE_AREA_H_
