// Pushes of BSP clocks that are not complete yet, combined per key.
//
// Under BSP a push of timestamp t must not be visible before every worker
// has finished clock t. The server adds it here; once the server clock
// passes t, TakeBefore hands out one combined vector per key (the sum of the
// clock's pushes, each weighted by its worker batches for a mean, or the
// last one for assign tables) with the number of pushes and of batches
// combined, and the table applies its rule once per key.
//
// Invariant: every key's vector in a clock has one width.
// Not thread-safe: owned by a server's request thread.
#ifndef DUCTILE_CONSISTENCY_BSP_BUFFER_H_
#define DUCTILE_CONSISTENCY_BSP_BUFFER_H_

#include <cstdint>
#include <iterator>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

#include "ductile/status.h"
#include "ductile/table.h"

namespace ductile {

class BspBuffer {
 public:
  struct Combined {
    std::vector<float> values;
    int32_t pushes = 0;
    // The worker batches those pushes stand for (each push's
    // Header::batch_weight, 1 unless a worker trains several batches a
    // step); 0 reads as `pushes`.
    int32_t batches = 0;
    // Sum of each push's learning-rate factor (Header::rate_factor) times
    // its batches (as counted in `batches`): their weighted mean is
    // rate_sum / batches. 0 reads as a factor of 1.
    float rate_sum = 0.0f;
  };
  using Clock = std::unordered_map<Key, Combined>;

  // Checks that `key` may take `width` floats at `clock` (no other push of
  // the clock gave it another width).
  Status Check(int64_t clock, Key key, size_t width) const;
  // Adds one push's vector for `key` at `clock` (sum, or replace if
  // `replace`), standing for `batches` worker batches. With `weigh` (a
  // clock combined by the mean) the vector is added `batches` times over:
  // the clock's mean is then its sum over its batches, each sample of the
  // global batch counting alike whatever the batches of its worker's step.
  // Check() first.
  // `rate_factor`: the push's learning-rate factor (Client::SetRateFactor).
  void Add(int64_t clock, Key key, std::span<const float> values, bool replace,
           int32_t batches = 1, bool weigh = false, float rate_factor = 1.0f);
  // Removes and returns the clocks below `server_clock`, oldest first.
  std::vector<std::pair<int64_t, Clock>> TakeBefore(int64_t server_clock);

  // Live migration: one key's pushes of one clock, combined so far.
  struct Entry {
    int64_t clock = 0;
    Key key = 0;
    Combined combined;
  };
  // Removes and returns the entries whose key `pred` holds for.
  template <typename Pred>
  std::vector<Entry> TakeKeys(Pred&& pred) {
    std::vector<Entry> out;
    for (auto c = clocks_.begin(); c != clocks_.end();) {
      for (auto k = c->second.begin(); k != c->second.end();) {
        if (pred(k->first)) {
          out.push_back({c->first, k->first, std::move(k->second)});
          k = c->second.erase(k);
        } else {
          ++k;
        }
      }
      c = c->second.empty() ? clocks_.erase(c) : std::next(c);
    }
    return out;
  }
  // Puts an entry taken elsewhere in (the key has none at that clock
  // here yet: its pushes went to one server until it moved).
  void PutEntry(Entry entry) {
    clocks_[entry.clock][entry.key] = std::move(entry.combined);
  }

  // Calls f(clock, key) for every key's pushes of every clock.
  template <typename F>
  void ForEach(F&& f) const {
    for (const auto& [clock, keys] : clocks_) {
      for (const auto& [key, c] : keys) f(clock, key);
    }
  }
  // `key`'s pushes of `clock` combined so far; null if none.
  const Combined* Find(int64_t clock, Key key) const {
    auto c = clocks_.find(clock);
    if (c == clocks_.end()) return nullptr;
    auto k = c->second.find(key);
    return k == c->second.end() ? nullptr : &k->second;
  }

  bool empty() const { return clocks_.empty(); }
  size_t pending_clocks() const { return clocks_.size(); }

 private:
  std::map<int64_t, Clock> clocks_;
};

}  // namespace ductile

#endif  // DUCTILE_CONSISTENCY_BSP_BUFFER_H_
