// The regions of workers' shared memory a server reads pushed values from
// and writes pulled values into, and of a primary's that a backup reads
// its records from (wire::ShmRef, docs/wire.md "Values in shared
// memory"): the senders' segments, opened once and kept mapped.
//
// A region is refused when the request did not come over ipc:// from the
// process that holds the segment (as the kernel tells), the segment cannot
// be opened (another user or pid namespace), it is not a sealed ductile
// segment, the region does not lie in it or is not the values' size, or
// the request was sent more than its timeout ago (the sender may have
// given the region out again). A pull's reply then carries its values in
// a frame; a push is refused, nothing applied, and its worker sends the
// values in frames; a primary's records are refused, and it sends them in
// frames. A segment that is not what the request names, or that this
// server may not open, is not tried again (until 1024 others have been);
// one refused for want of descriptors or memory is. Refusals are logged
// sparingly.
//
// Not thread-safe: used by the request thread.
#ifndef DUCTILE_SERVER_SHM_VALUE_REGIONS_H_
#define DUCTILE_SERVER_SHM_VALUE_REGIONS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "ductile/status.h"
#include "proto/ductile.pb.h"
#include "transport/shm_segment.h"

namespace ductile {

class ShmValueRegions {
 public:
  // `enabled` false: every region is refused (ServerOptions::shm_values).
  explicit ShmValueRegions(bool enabled) : enabled_(enabled) {}

  // The region `ref` names, holding `bytes` of values, for a request with
  // `timeout_ms` (0: 60 s) that came from process `peer_pid`
  // (InMessage::peer_pid(): 0 unless over ipc://). kDeadlineExceeded if the
  // request was sent more than its timeout ago; kFailedPrecondition when
  // disabled; kInvalidArgument if `ref` names another process's segment;
  // else an error if the region cannot be used.
  Result<float*> Region(const wire::ShmRef& ref, uint64_t bytes,
                        int64_t timeout_ms, int32_t peer_pid);

  // Unmaps the segments their workers no longer hold (closed, or the
  // process exited): their memory is freed once no server maps it.
  void ForgetExited();

  // Segments mapped now, and refused segments remembered.
  size_t mapped() const { return segments_.size(); }
  size_t remembered_refusals() const { return refused_.size(); }

 private:
  // The workers' segments mapped at once; the one used longest ago is
  // unmapped for a new one.
  static constexpr size_t kMaxSegments = 64;
  // Refused segments remembered (then forgotten all at once).
  static constexpr size_t kMaxRefused = 1024;

  using SegmentKey = std::tuple<int32_t, int32_t, std::string>;
  struct Mapped {
    std::unique_ptr<ShmSegment> segment;
    uint64_t last_use = 0;
  };

  ShmSegment* Find(const SegmentKey& key);

  const bool enabled_;
  std::map<SegmentKey, Mapped> segments_;
  std::set<SegmentKey> refused_;
  uint64_t uses_ = 0;
  uint64_t refusals_ = 0;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_SHM_VALUE_REGIONS_H_
