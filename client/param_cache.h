// The worker-side parameter cache (Bösen's process cache) for SSP tables.
//
// A pull at clock c under SSP(s) may be answered from a copy fetched when
// the server clock was d if d >= c - s: that copy already holds every update
// with timestamp <= c - s - 1. The worker's own pushes are applied to cached
// copies (for rules the client can compute: add, assign, SGD) or drop them
// (other rules), so a cached read still shows the worker's own writes.
//
// Invariant (read-my-writes): a fetched value is never installed over a key
// this client wrote after the fetch was issued (the fetch may predate that
// write). Each key remembers the write counter of its last local push;
// each fetch remembers the counter when it was issued.
//
// Thread-safe (one mutex); callers' threads read and write it, the client's
// I/O thread installs fetched values.
#ifndef DUCTILE_CLIENT_PARAM_CACHE_H_
#define DUCTILE_CLIENT_PARAM_CACHE_H_

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "ductile/table.h"
#include "util/mutex.h"
#include "util/update_rule.h"

namespace ductile {

class ParamCache {
 public:
  // Where key i's vector lives in the caller's arrays.
  using Offset = std::function<uint64_t(size_t)>;
  using Length = std::function<uint32_t(size_t)>;

  // Fills `out` and returns true if every key is cached with a data clock
  // >= `min_data_clock`; otherwise leaves `out` alone and returns false.
  bool TryRead(TableId table, std::span<const Key> keys, const Offset& offset,
               const Length& length, int64_t min_data_clock,
               std::span<float> out);
  // Records a local push and applies it to cached copies with the table's
  // rule when the rule is stateless (assign, add, SGD: the servers' own
  // arithmetic, with the push's learning-rate factor); other rules drop the
  // copies.
  void Write(TableId table, std::span<const Key> keys, const Offset& offset,
             const Length& length, std::span<const float> values,
             const UpdateRuleKernel& rule, float lr_factor = 1.0f);
  // The write counter now: give it to Install() for a fetch issued now.
  uint64_t Mark() const;
  // Installs a fetched value, unless the key was written locally after the
  // fetch (issued at `mark`) was issued.
  void Install(TableId table, Key key, std::span<const float> value,
               int64_t data_clock, uint64_t mark);

  // Drops every cached copy (write marks are kept).
  void Clear();
  // Drops the copies of one table.
  void DropTable(TableId table);

  size_t size() const;

 private:
  struct Entry {
    std::vector<float> value;
    int64_t data_clock = 0;
    bool valid = false;
    uint64_t last_write = 0;
  };
  struct Hash {
    size_t operator()(const std::pair<TableId, Key>& k) const;
  };

  mutable Mutex mu_;
  std::unordered_map<std::pair<TableId, Key>, Entry, Hash> entries_
      GUARDED_BY(mu_);
  uint64_t writes_ GUARDED_BY(mu_) = 0;
};

}  // namespace ductile

#endif  // DUCTILE_CLIENT_PARAM_CACHE_H_
