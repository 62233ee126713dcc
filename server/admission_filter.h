// The push counts of ids not yet stored in a table, for admission
// (RowPolicy::admit_after_pushes): a count-min sketch whose memory is fixed
// by RowPolicy::admission_counters, whatever the number of ids.
//
// Invariants:
//   - Count(key) >= min(pushes of key recorded since the last Clear or
//     aging, threshold): the sketch never under-counts within a window. It
//     may over-count when other ids share all of key's counters, so an id
//     may be admitted before its threshold-th push ("false admission").
//   - Counters saturate at the threshold: counting further adds nothing.
//   - Aging (TinyLFU's reset, Einziger et al. 2017): after as many Adds as
//     there are counters, every counter is halved. Counts of ids pushed
//     long ago, and those left by ids admitted since, fade, so the sketch
//     never fills up and admits everything; an id pushed threshold times
//     across an aging may need a few pushes more.
//   - Deterministic: the counters hit by a key depend on the key only, so
//     the same pushes in the same order give the same admissions.
//
// Conservative update (Estan & Varghese, 2002): an Add raises only the
// counters below the new estimate, which keeps over-counting lower than
// raising all of them.
//
// Not thread-safe: owned by a table, on the server's request thread. The
// counters are allocated at the first Add, so a table that never sees an
// unadmitted id pays nothing.
#ifndef DUCTILE_SERVER_ADMISSION_FILTER_H_
#define DUCTILE_SERVER_ADMISSION_FILTER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ductile/status.h"
#include "ductile/table.h"

namespace ductile {

class AdmissionFilter {
 public:
  // Rows of the sketch: a key hits one counter in each.
  static constexpr uint32_t kDepth = 4;

  // `threshold`: pushes that admit an id (<= 1: every push admits, and the
  // filter holds nothing). `counters`: counters in all (rounded down to a
  // multiple of kDepth, at least kDepth), 2 bytes each.
  AdmissionFilter(uint32_t threshold, uint64_t counters);

  // True when no id needs counting (threshold <= 1).
  bool admits_all() const { return threshold_ <= 1; }
  uint32_t threshold() const { return threshold_; }
  // The pushes recorded for `key` (an upper bound, saturated at the
  // threshold).
  uint32_t Count(Key key) const;
  // Records `pushes` pushes of `key`; true if it is admitted now (its count
  // reached the threshold).
  bool Add(Key key, uint32_t pushes);
  // Forgets every count (a rollback); frees the counters.
  void Clear() {
    counts_ = std::vector<uint16_t>();
    adds_ = 0;
  }
  // The counts as bytes, for a checkpoint or a slot move: empty when no
  // counter is allocated, else adds_since_aging u64 LE | counters u32 LE |
  // counters x u16 LE. Part of the persistent format (checkpoints).
  std::string Encode() const;
  // Replaces the counts by `bytes`, Encode's output of a filter of the
  // same threshold and size (empty: none). InvalidArgument, and nothing
  // changed, if they are not.
  Status Decode(std::string_view bytes);
  // Bytes of counters held now, and once allocated.
  uint64_t bytes() const { return counts_.size() * sizeof(uint16_t); }
  uint64_t full_bytes() const {
    return admits_all() ? 0 : kDepth * width_ * sizeof(uint16_t);
  }

 private:
  size_t Index(Key key, uint32_t row) const;

  const uint32_t threshold_;
  const uint64_t width_;          // counters per row
  std::vector<uint16_t> counts_;  // kDepth rows of width_, or empty
  uint64_t adds_ = 0;             // Adds since the last aging
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_ADMISSION_FILTER_H_
