// How a process's allocator treats large blocks once they are freed.
//
// glibc hands blocks of 128 KB and more (adaptively up to 32 MB) straight
// back to the operating system when they are freed, and maps fresh pages
// for the next one: each large message then takes a page fault, and the
// kernel zeroes a page, every 4 KB it touches. For values of many MB that
// cost more than moving them did (bench/model_bench: a 40 MB round trip of
// raw ZeroMQ took about 20x longer on the 2-core development VM). The ductile
// programs call KeepFreedMemory() at start unless --keep_freed_memory=false;
// a program that embeds the library decides for itself.
#ifndef DUCTILE_UTIL_MALLOC_POLICY_H_
#define DUCTILE_UTIL_MALLOC_POLICY_H_

#include <climits>  // defines __GLIBC__ where the C library is glibc

// 1 where the process allocates with glibc's malloc, whose tunables these
// functions set: not under a sanitizer, whose allocator replaces glibc's
// (glibc's malloc_trim there even sets up an arena of glibc's own, which
// glibc's thread-exit cleanup later trips on).
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer) || __has_feature(hwaddress_sanitizer)
#define DUCTILE_SANITIZER_ALLOCATOR 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || \
    defined(__SANITIZE_HWADDRESS__)
#define DUCTILE_SANITIZER_ALLOCATOR 1
#endif
#if defined(__GLIBC__) && !defined(DUCTILE_SANITIZER_ALLOCATOR)
#define DUCTILE_GLIBC_ALLOCATOR 1
#else
#define DUCTILE_GLIBC_ALLOCATOR 0
#endif

namespace ductile {

// From now on freed memory stays in the process for reuse: large blocks
// come from the heap rather than from their own mappings, the heap is not
// trimmed, and every thread allocates from that one heap (glibc's arenas
// of other threads unmap a heap once it is free). The process's memory
// then stays at its peak. Call it before starting threads. No effect with
// an allocator other than glibc's.
void KeepFreedMemory();

// Gives the free memory kept so far back to the system (glibc's
// malloc_trim): a server calls it when it has handed slots to another
// server or cleared its tables for a rollback, so that scaling in frees
// memory.
void ReleaseFreedMemory();

}  // namespace ductile

#endif  // DUCTILE_UTIL_MALLOC_POLICY_H_
