// KeepFreedMemory: a large block freed stays in the process, and the next
// one of its size reuses it rather than mapping fresh pages. Each test runs
// in a process of its own (one ctest entry per test), so changing the
// allocator's settings here touches no other test.
#include "util/malloc_policy.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "gtest/gtest.h"

namespace ductile {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizer = true;  // their allocators ignore mallopt
#else
constexpr bool kSanitizer = false;
#endif

constexpr size_t kLarge = size_t{40} << 20;  // a 10M-float value

// Keeps the compiler from leaving out a malloc whose block is only freed.
void Use(void* p) { asm volatile("" : : "r"(p) : "memory"); }

// Allocates, touches and frees a large block on another thread, as a
// ZeroMQ I/O thread does with a received message.
void* LargeBlockFreedElsewhere() {
  void* p = std::malloc(kLarge);
  std::memset(p, 1, kLarge);
  Use(p);
  std::thread([p] { std::free(p); }).join();
  return p;
}

TEST(MallocPolicy, ByDefaultALargeBlockGetsAMappingOfItsOwn) {
  if (kSanitizer) GTEST_SKIP() << "the sanitizer's allocator";
  void* p = std::malloc(kLarge);
  Use(p);
  EXPECT_GE(mallinfo2().hblkhd, kLarge);  // mapped for itself
  std::free(p);
  EXPECT_LT(mallinfo2().hblkhd, kLarge);  // and unmapped when freed
}

TEST(MallocPolicy, KeptMemoryIsReusedForTheNextLargeBlock) {
  if (kSanitizer) GTEST_SKIP() << "the sanitizer's allocator";
  KeepFreedMemory();
  void* first = LargeBlockFreedElsewhere();
  const struct mallinfo2 after_free = mallinfo2();
  EXPECT_EQ(after_free.hblkhd, 0u);        // no mapping of its own
  EXPECT_GE(after_free.fordblks, kLarge);  // kept, free, in the heap
  void* second = std::malloc(kLarge);
  Use(second);
  EXPECT_EQ(second, first);  // the same memory again
  std::free(second);
}

// A server's request thread makes a reply that ZeroMQ's thread frees; the
// memory stays free in the process for the request thread's next reply
// (a thread's own arena would give its heap back once it is all free).
TEST(MallocPolicy, ABlockMadeOnOneThreadAndFreedOnAnotherStaysKept) {
  if (kSanitizer) GTEST_SKIP() << "the sanitizer's allocator";
  KeepFreedMemory();
  size_t kept = 0;
  std::thread request_thread([&] {
    // What the thread holds already (its tables): the reply no longer fits
    // beside it in the first 64 MB heap of a thread's own arena.
    void* resident = std::malloc(kLarge);
    std::memset(resident, 1, kLarge);
    Use(resident);
    void* reply = std::malloc(kLarge);
    std::memset(reply, 1, kLarge);
    Use(reply);
    std::thread([reply] { std::free(reply); }).join();
    kept = mallinfo2().fordblks;
    std::free(resident);
  });
  request_thread.join();
  EXPECT_GE(kept, kLarge);
  EXPECT_EQ(mallinfo2().hblkhd, 0u);
}

}  // namespace
}  // namespace ductile
