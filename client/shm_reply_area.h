// A worker's shared memory for pull replies from servers on its host
// (docs/wire.md, "Values in shared memory"): one segment, cut into
// regions lent to requests. A server writes a reply's values into the
// request's region, and the worker copies them out when the reply comes.
//
// Invariant: a region is lent to one request (seq) at a time and goes out
// again only once that request's server has answered it, or 2 x its
// timeout after it was sent: a server writes into a region only within the
// timeout (ShmReplyRegions), so a late write never lands in a region lent
// to another request. A request is sent once under its seq (pulls are not
// resent on silence; a re-routed part gets a new seq and a new region).
//
// Not thread-safe: used by the client's I/O thread.
#ifndef DUCTILE_CLIENT_SHM_REPLY_AREA_H_
#define DUCTILE_CLIENT_SHM_REPLY_AREA_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>

#include "ductile/status.h"
#include "proto/ductile.pb.h"
#include "transport/shm_segment.h"

namespace ductile {

class ShmReplyArea {
 public:
  // A segment of `bytes`; kUnavailable if the system has no memfd.
  static Result<std::unique_ptr<ShmReplyArea>> Create(uint64_t bytes);

  // Lends a region of `bytes` to request `seq` sent to `server` with
  // `timeout_ms`, and names it in `ref`; false (ref untouched) when no
  // free region is large enough.
  bool Lend(uint64_t seq, int32_t server, uint64_t bytes, int64_t timeout_ms,
            wire::ShmRef* ref);
  // The values `server` put in the region of `seq`, if one of exactly
  // `bytes` is lent to that request there; else null.
  const float* Values(uint64_t seq, int32_t server, uint64_t bytes) const;
  // `server` answered `seq`: its region (if any) may be lent again.
  void Return(uint64_t seq, int32_t server);
  // Takes back the regions whose time is up at `now` (2 x their timeout
  // after they were lent).
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
  };

  explicit ShmReplyArea(std::unique_ptr<ShmSegment> segment);
  void Free(uint64_t offset, uint64_t bytes);

  const std::unique_ptr<ShmSegment> segment_;
  std::map<uint64_t, uint64_t> free_;          // offset -> bytes, coalesced
  std::unordered_map<uint64_t, Region> lent_;  // by seq
};

}  // namespace ductile

#endif  // DUCTILE_CLIENT_SHM_REPLY_AREA_H_
