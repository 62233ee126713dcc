#include "util/malloc_policy.h"

#include <climits>

#if DUCTILE_GLIBC_ALLOCATOR
#include <malloc.h>
#endif

namespace ductile {

void KeepFreedMemory() {
#if DUCTILE_GLIBC_ALLOCATOR
  mallopt(M_MMAP_MAX, 0);  // no block gets a mapping of its own
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  // One arena: a thread's own arena gives a heap back to the system as
  // soon as all of it is free, whatever the trim threshold, and a value
  // freed by another thread (ZeroMQ's, after sending) often empties it.
  mallopt(M_ARENA_MAX, 1);
#endif
}

void ReleaseFreedMemory() {
#if DUCTILE_GLIBC_ALLOCATOR
  malloc_trim(0);
#endif
}

}  // namespace ductile
