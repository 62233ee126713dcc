// A server's counters as its request thread keeps them: one ServerCounters,
// written by that thread only, readable by any thread at any time.
//
// Each field is read and written atomically (relaxed): a reader sees every
// field exact as of some moment, though not all of the same moment.
#ifndef DUCTILE_SERVER_LIVE_COUNTERS_H_
#define DUCTILE_SERVER_LIVE_COUNTERS_H_

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "ductile/server.h"
#include "proto/counters.h"

namespace ductile {

class LiveCounters {
 public:
  // Request thread.
  void Add(uint64_t ServerCounters::*field, uint64_t n = 1) {
    std::atomic_ref<uint64_t>(counters_.*field)
        .fetch_add(n, std::memory_order_relaxed);
  }
  template <typename T>
  void Set(T ServerCounters::*field, std::type_identity_t<T> value) {
    std::atomic_ref<T>(counters_.*field)
        .store(value, std::memory_order_relaxed);
  }

  // Any thread.
  ServerCounters Snapshot() const {
    ServerCounters out;
    ForEachCounter(
        [](const char*, auto& value, auto& live) {
          using T = std::decay_t<decltype(value)>;
          value = std::atomic_ref<T>(live).load(std::memory_order_relaxed);
        },
        out, counters_);
    return out;
  }

 private:
  // Mutable: atomic_ref needs a non-const object even to load.
  mutable ServerCounters counters_;
};

}  // namespace ductile

#endif  // DUCTILE_SERVER_LIVE_COUNTERS_H_
