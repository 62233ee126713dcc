// SplitMix64 (Steele, Lea and Flood): a well-mixed 64-bit hash of a 64-bit
// value, every input bit moving every output bit. For hashing keys (which
// keys a sample takes, a filter's counters) and seeding per-key draws.
#ifndef DUCTILE_UTIL_SPLIT_MIX_H_
#define DUCTILE_UTIL_SPLIT_MIX_H_

#include <cstdint>

namespace ductile {

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace ductile

#endif  // DUCTILE_UTIL_SPLIT_MIX_H_
