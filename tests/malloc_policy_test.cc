// KeepFreedMemory: a large block freed stays in the process, and the next
// one of its size reuses it rather than mapping fresh pages. The policy
// changes the whole process for good, so each check runs in a child
// process of its own (EXPECT_EXIT), whatever order the tests run in.
#include "util/malloc_policy.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "gtest/gtest.h"

#if DUCTILE_GLIBC_ALLOCATOR
#include <malloc.h>
#endif

namespace ductile {
namespace {

#if DUCTILE_GLIBC_ALLOCATOR

constexpr size_t kLarge = size_t{40} << 20;  // a 10M-float value

// Keeps the compiler from leaving out a malloc whose block is only freed.
void Use(void* p) { asm volatile("" : : "r"(p) : "memory"); }

void* Touched(size_t bytes) {
  void* p = std::malloc(bytes);
  std::memset(p, 1, bytes);
  Use(p);
  return p;
}

// Runs `check` (an error message, or "" when it holds) in the child and
// exits with its outcome.
[[noreturn]] void Child(std::string (*check)()) {
  const std::string error = check();
  if (!error.empty()) std::fprintf(stderr, "%s\n", error.c_str());
  std::_Exit(error.empty() ? 0 : 1);
}

std::string ByDefault() {
  const size_t before = mallinfo2().hblkhd;
  void* p = Touched(kLarge);
  const size_t mapped = mallinfo2().hblkhd - before;
  std::free(p);
  if (mapped < kLarge) return "the block got no mapping of its own";
  if (mallinfo2().hblkhd != before) return "its mapping outlived the block";
  return "";
}

std::string Kept() {
  KeepFreedMemory();
  const size_t before = mallinfo2().hblkhd;
  void* first = Touched(kLarge);
  std::thread([first] { std::free(first); }).join();
  if (mallinfo2().hblkhd != before) return "the block got a mapping";
  if (mallinfo2().fordblks < kLarge) return "the freed block was not kept";
  void* second = std::malloc(kLarge);
  Use(second);
  const bool same = second == first;
  std::free(second);
  return same ? "" : "the next block did not reuse the kept one";
}

// A server's request thread makes a reply that ZeroMQ's thread frees; the
// memory stays free in the process for the request thread's next reply (a
// thread's own arena unmaps a heap of its own once it is all free).
std::string KeptAcrossThreads() {
  KeepFreedMemory();
  size_t kept = 0;
  std::thread request_thread([&] {
    // What the thread holds already (its tables): the reply no longer fits
    // beside it in the first 64 MB heap of a thread's own arena.
    void* resident = Touched(kLarge);
    void* reply = Touched(kLarge);
    std::thread([reply] { std::free(reply); }).join();
    kept = mallinfo2().fordblks;
    std::free(resident);
  });
  request_thread.join();
  return kept >= kLarge ? "" : "the reply's memory was given back";
}
#endif

TEST(MallocPolicy, ByDefaultALargeBlockGetsAMappingOfItsOwn) {
#if DUCTILE_GLIBC_ALLOCATOR
  EXPECT_EXIT(Child(ByDefault), ::testing::ExitedWithCode(0), "");
#else
  GTEST_SKIP() << "not glibc's allocator";
#endif
}

TEST(MallocPolicy, KeptMemoryIsReusedForTheNextLargeBlock) {
#if DUCTILE_GLIBC_ALLOCATOR
  EXPECT_EXIT(Child(Kept), ::testing::ExitedWithCode(0), "");
#else
  GTEST_SKIP() << "not glibc's allocator";
#endif
}

TEST(MallocPolicy, ABlockMadeOnOneThreadAndFreedOnAnotherStaysKept) {
#if DUCTILE_GLIBC_ALLOCATOR
  EXPECT_EXIT(Child(KeptAcrossThreads), ::testing::ExitedWithCode(0), "");
#else
  GTEST_SKIP() << "not glibc's allocator";
#endif
}

}  // namespace
}  // namespace ductile
