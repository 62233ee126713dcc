// Values through a worker's shared memory (docs/wire.md, "Values in
// shared memory"): the segment, the worker's regions, the server's side,
// and whole pulls and pushes with a server on this host.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/shm_value_regions.h"
#include "tests/test_cluster.h"
#include "transport/shm_segment.h"
#include "transport/shm_value_area.h"

namespace ductile {
namespace {

using testing::TestCluster;
using testing::TestClusterOptions;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// ------------------------------------------------------------ the segment

TEST(ShmSegment, APeerMapsTheSameBytes) {
  auto segment = ShmSegment::Create(kMiB);
  ASSERT_TRUE(segment.ok()) << segment.status();
  auto peer = ShmSegment::Open((*segment)->pid(), (*segment)->fd(),
                               (*segment)->token());
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ((*peer)->size(), kMiB);
  EXPECT_NE((*peer)->data(), (*segment)->data());  // a mapping of its own
  std::memcpy((*segment)->data() + 4096, "pulled", 7);
  EXPECT_STREQ(reinterpret_cast<const char*>((*peer)->data() + 4096), "pulled");
  std::memcpy((*peer)->data() + kMiB - 8, "back", 5);
  EXPECT_STREQ(reinterpret_cast<const char*>((*segment)->data() + kMiB - 8),
               "back");
}

TEST(ShmSegment, AnotherTokenIsRefused) {
  auto segment = ShmSegment::Create(kMiB);
  ASSERT_TRUE(segment.ok()) << segment.status();
  std::string token = (*segment)->token();
  token[5] ^= 1;
  auto peer = ShmSegment::Open((*segment)->pid(), (*segment)->fd(), token);
  EXPECT_EQ(peer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(peer.status().message().find("token"), std::string::npos);
  auto short_token =
      ShmSegment::Open((*segment)->pid(), (*segment)->fd(), token.substr(0, 8));
  EXPECT_EQ(short_token.status().code(), StatusCode::kInvalidArgument);
}

TEST(ShmSegment, AFileNotSealedAgainstShrinkingIsRefused) {
  // A segment its creator could cut under a server's mapping (the
  // server's writes would then fault) is not used.
  const int fd = memfd_create("ductile-values", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kMiB), 0);
  auto peer = ShmSegment::Open(getpid(), fd, std::string(16, 'x'));
  EXPECT_EQ(peer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(peer.status().message().find("sealed"), std::string::npos)
      << peer.status();
  close(fd);
}

TEST(ShmSegment, WhatIsNotADuctileSegmentIsNotEvenOpened) {
  // A request may name any descriptor of any process: a pipe's or a
  // device's must not be opened (a read end, a terminal), let alone mapped.
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  auto peer = ShmSegment::Open(getpid(), pipe_fds[0], std::string(16, 'x'));
  EXPECT_EQ(peer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(peer.status().message().find("not a ductile segment"),
            std::string::npos)
      << peer.status();
  const int other = memfd_create("something-else", MFD_CLOEXEC);
  ASSERT_GE(other, 0);
  EXPECT_EQ(
      ShmSegment::Open(getpid(), other, std::string(16, 'x')).status().code(),
      StatusCode::kInvalidArgument);
  for (int fd : {pipe_fds[0], pipe_fds[1], other}) close(fd);
}

TEST(ShmSegment, NoSuchDescriptorOrSizeIsAnError) {
  const std::string token(16, 'x');
  EXPECT_EQ(ShmSegment::Open(getpid(), 1 << 20, token).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(ShmSegment::Open(0, 3, token).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmSegment::Create(0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ShmSegment::Create(ShmSegment::kHeaderBytes).status().code(),
            StatusCode::kInvalidArgument);
}

// ------------------------------------------------------ a worker's regions

TEST(ShmValueArea, RegionsAreLentOnceAndJoinAgainWhenReturned) {
  auto area = ShmValueArea::Create(kMiB);
  ASSERT_TRUE(area.ok()) << area.status();
  ShmValueArea& a = **area;
  const uint64_t all = a.free_bytes();
  EXPECT_EQ(all, kMiB);
  wire::ShmRef r1, r2, r3;
  ASSERT_TRUE(a.Lend(1, 0, 600 * 1024, 1000, &r1));
  EXPECT_FALSE(a.Lend(2, 0, 600 * 1024, 1000, &r2));  // no room left
  EXPECT_TRUE(r2.token().empty());
  EXPECT_FALSE(a.Lend(1, 0, 1024, 1000, &r2));  // seq 1 has one already
  ASSERT_TRUE(a.Lend(3, 1, 100 * 1024, 1000, &r3));
  EXPECT_EQ(r1.pid(), getpid());
  EXPECT_EQ(r1.token().size(), ShmSegment::kTokenBytes);
  EXPECT_EQ(r1.bytes(), 600u * 1024);
  EXPECT_GE(r1.offset(), ShmSegment::kHeaderBytes);
  EXPECT_GE(r3.offset(), r1.offset() + r1.bytes());  // they do not overlap
  EXPECT_GT(r1.sent_ns(), 0);
  EXPECT_EQ(a.lent(), 2u);

  // Seq 1 answered: its region (before seq 3's) goes out again.
  a.Return(1, 0);
  ASSERT_TRUE(a.Lend(2, 0, 600 * 1024, 1000, &r2));
  EXPECT_EQ(r2.offset(), r1.offset());
  a.Return(2, 0);
  a.Return(3, 1);
  EXPECT_EQ(a.lent(), 0u);
  EXPECT_EQ(a.free_bytes(), all);
  wire::ShmRef whole;
  EXPECT_TRUE(a.Lend(4, 0, kMiB, 1000, &whole));  // one free region again
}

TEST(ShmValueArea, OnlyTheServerAskedReadsOrReturnsARegion) {
  auto area = ShmValueArea::Create(kMiB);
  ASSERT_TRUE(area.ok()) << area.status();
  wire::ShmRef ref;
  ASSERT_TRUE((*area)->Lend(7, 2, 4000, 1000, &ref));
  EXPECT_NE((*area)->Data(7, 2, 4000), nullptr);
  EXPECT_EQ((*area)->Data(7, 3, 4000), nullptr);  // another server
  EXPECT_EQ((*area)->Data(7, 2, 3996), nullptr);  // another size
  EXPECT_EQ((*area)->Data(8, 2, 4000), nullptr);  // another request
  (*area)->Return(7, 3);
  EXPECT_EQ((*area)->lent(), 1u);
  (*area)->Return(7, 2);
  EXPECT_EQ((*area)->lent(), 0u);
  EXPECT_EQ((*area)->Data(7, 2, 4000), nullptr);
}

// A push sent again under its seq: an answer may be to either copy, so
// no answer gives its region back; only its time running out does.
TEST(ShmValueArea, APushSentAgainKeepsItsRegionUntilItsTimeIsUp) {
  auto area = ShmValueArea::Create(kMiB);
  ASSERT_TRUE(area.ok()) << area.status();
  EXPECT_NE(ShmValueArea::ReplyTicket(9), ShmValueArea::PushTicket(9));
  const uint64_t ticket = ShmValueArea::PushTicket(9);
  const auto lent_at = std::chrono::steady_clock::now();
  wire::ShmRef ref;
  ASSERT_TRUE((*area)->Lend(ticket, 0, 4096, 1000, &ref));
  EXPECT_FALSE((*area)->Keep(ShmValueArea::ReplyTicket(9)));
  ASSERT_TRUE((*area)->Keep(ticket));
  (*area)->Return(ticket, 0);
  EXPECT_EQ((*area)->lent(), 1u);
  (*area)->Expire(lent_at + std::chrono::milliseconds(1900));
  EXPECT_EQ((*area)->lent(), 1u);
  (*area)->Expire(lent_at + std::chrono::milliseconds(2000) +
                  ShmValueArea::kSlack + std::chrono::milliseconds(100));
  EXPECT_EQ((*area)->lent(), 0u);
}

TEST(ShmValueArea, AnUnansweredRegionIsTakenBackAfterTwiceItsTimeout) {
  auto area = ShmValueArea::Create(kMiB);
  ASSERT_TRUE(area.ok()) << area.status();
  const auto lent_at = std::chrono::steady_clock::now();
  wire::ShmRef ref;
  ASSERT_TRUE((*area)->Lend(1, 0, kMiB, 1000, &ref));
  (*area)->Expire(lent_at + std::chrono::milliseconds(1500));
  EXPECT_EQ((*area)->lent(), 1u);
  (*area)->Expire(lent_at + std::chrono::milliseconds(2000) +
                  ShmValueArea::kSlack + std::chrono::milliseconds(100));
  EXPECT_EQ((*area)->lent(), 0u);
  EXPECT_EQ((*area)->free_bytes(), kMiB);
}

// ------------------------------------------------------ the server's side

// The region, or null where it is refused.
float* RegionOf(ShmValueRegions& regions, const wire::ShmRef& ref,
                uint64_t bytes, int64_t timeout_ms) {
  Result<float*> region = regions.Region(ref, bytes, timeout_ms, ref.pid());
  return region.ok() ? *region : nullptr;
}

float* RegionOfDisabled(const wire::ShmRef& ref, uint64_t bytes,
                        int64_t timeout_ms) {
  ShmValueRegions disabled(false);
  Result<float*> region = disabled.Region(ref, bytes, timeout_ms, ref.pid());
  EXPECT_EQ(region.status().code(), StatusCode::kFailedPrecondition);
  return region.ok() ? *region : nullptr;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TEST(ShmValueRegions, AServerWritesWhereTheWorkerReads) {
  auto area = ShmValueArea::Create(kMiB);
  ASSERT_TRUE(area.ok()) << area.status();
  wire::ShmRef ref;
  ASSERT_TRUE((*area)->Lend(5, 1, 400, 1000, &ref));
  ShmValueRegions regions(/*enabled=*/true);
  float* to = RegionOf(regions, ref, 400, 1000);
  ASSERT_NE(to, nullptr);
  std::iota(to, to + 100, 1.0f);
  const float* from = (*area)->Data(5, 1, 400);
  ASSERT_NE(from, nullptr);
  EXPECT_EQ(from[0], 1.0f);
  EXPECT_EQ(from[99], 100.0f);
  EXPECT_EQ(regions.mapped(), 1u);
  EXPECT_NE(RegionOf(regions, ref, 400, 1000), nullptr);
  EXPECT_EQ(regions.mapped(), 1u);  // mapped once
}

TEST(ShmValueRegions, RegionsThatCannotBeUsedAreRefused) {
  auto area = ShmValueArea::Create(kMiB);
  ASSERT_TRUE(area.ok()) << area.status();
  wire::ShmRef ref;
  ASSERT_TRUE((*area)->Lend(5, 1, 4096, 1000, &ref));
  ShmValueRegions regions(true);
  EXPECT_EQ(RegionOfDisabled(ref, 4096, 1000), nullptr);
  EXPECT_EQ(RegionOf(regions, ref, 4092, 1000),
            nullptr);  // not the reply's size

  wire::ShmRef outside = ref;
  outside.set_offset(kMiB + ShmSegment::kHeaderBytes - 4092);
  outside.set_bytes(4096);
  EXPECT_EQ(RegionOf(regions, outside, 4096, 1000), nullptr);
  outside.set_offset(~uint64_t{0} - 1024);
  EXPECT_EQ(RegionOf(regions, outside, 4096, 1000), nullptr);
  outside.set_offset(2);  // in the header, and unaligned
  EXPECT_EQ(RegionOf(regions, outside, 4096, 1000), nullptr);

  // Sent longer ago than its timeout: the worker may have lent it again.
  wire::ShmRef late = ref;
  late.set_sent_ns(NowNs() - 1500 * 1000000LL);
  EXPECT_EQ(regions.Region(late, 4096, 1000, getpid()).status().code(),
            StatusCode::kDeadlineExceeded);
  EXPECT_NE(RegionOf(regions, late, 4096, 2000), nullptr);
  late.set_sent_ns(0);
  EXPECT_EQ(RegionOf(regions, late, 4096, 1000), nullptr);
  // Lies about the time: sent in the future, or a timeout whose
  // nanoseconds would overflow.
  wire::ShmRef future = ref;
  future.set_sent_ns(NowNs() + int64_t{3600} * 1000000000);
  EXPECT_EQ(regions.Region(future, 4096, 1000, getpid()).status().code(),
            StatusCode::kInvalidArgument);
  // (Read as 30 days, the longest a client takes; UBSan checks the rest.)
  late.set_sent_ns(NowNs() - int64_t{2} * 1000000000);
  EXPECT_NE(RegionOf(regions, late, 4096, std::numeric_limits<int64_t>::max()),
            nullptr);

  wire::ShmRef stranger = ref;
  stranger.set_token(std::string(16, 'z'));
  EXPECT_EQ(RegionOf(regions, stranger, 4096, 1000), nullptr);
  stranger.set_pid(getpid());
  stranger.set_fd(1 << 20);
  EXPECT_EQ(RegionOf(regions, stranger, 4096, 1000), nullptr);
  EXPECT_EQ(regions.mapped(), 1u);  // only the good segment
  EXPECT_NE(RegionOf(regions, ref, 4096, 1000), nullptr);
  // Both strangers named a segment: each is remembered, not opened again.
  EXPECT_EQ(regions.remembered_refusals(), 2u);
}

// A segment that cannot be opened because this process is out of file
// descriptors is refused this time but tried again the next: a passing
// shortage must not send a worker's values through the socket for good.
TEST(ShmValueRegions, ASegmentRefusedForWantOfDescriptorsIsTriedAgain) {
  auto area = ShmValueArea::Create(kMiB);
  ASSERT_TRUE(area.ok()) << area.status();
  wire::ShmRef ref;
  ASSERT_TRUE((*area)->Lend(5, 1, 4096, 1000, &ref));
  ShmValueRegions regions(true);
  // Ten refusals first (segments that do not exist, remembered), so that
  // the one below is past those the server logs: nothing is logged while
  // descriptors are out (UBSan's checks of the logging need one).
  constexpr int kLoggedRefusals = 10;
  for (int i = 0; i < kLoggedRefusals; ++i) {
    wire::ShmRef gone = ref;
    gone.set_fd((1 << 20) + i);
    EXPECT_EQ(regions.Region(gone, 4096, 1000, getpid()).status().code(),
              StatusCode::kUnavailable);
  }
  ASSERT_EQ(regions.remembered_refusals(), size_t{kLoggedRefusals});
  // No descriptor can be made while the soft limit is the lowest free one.
  const int lowest_free = open("/dev/null", O_RDONLY);
  ASSERT_GE(lowest_free, 0);
  close(lowest_free);
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  rlimit low = limit;
  low.rlim_cur = static_cast<rlim_t>(lowest_free);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  const Status starved = regions.Region(ref, 4096, 1000, getpid()).status();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  EXPECT_EQ(starved.code(), StatusCode::kUnavailable) << starved;
  EXPECT_EQ(regions.remembered_refusals(), size_t{kLoggedRefusals});
  EXPECT_EQ(regions.mapped(), 0u);
  EXPECT_NE(RegionOf(regions, ref, 4096, 1000), nullptr);
  EXPECT_EQ(regions.mapped(), 1u);
}

// A request names only the segment of the process that sent it, as the
// kernel tells for an ipc:// connection (InMessage::peer_pid): another
// process's, or any over tcp:// (peer 0), is refused and nothing opened.
TEST(ShmValueRegions, OnlyTheSendersOwnSegmentIsUsed) {
  auto area = ShmValueArea::Create(kMiB);
  ASSERT_TRUE(area.ok()) << area.status();
  wire::ShmRef ref;
  ASSERT_TRUE((*area)->Lend(5, 1, 4096, 1000, &ref));
  ASSERT_EQ(ref.pid(), getpid());
  ShmValueRegions regions(true);
  for (int32_t peer : {0, getpid() + 1, -getpid()}) {
    Result<float*> region = regions.Region(ref, 4096, 1000, peer);
    EXPECT_EQ(region.status().code(), StatusCode::kInvalidArgument) << peer;
  }
  EXPECT_EQ(regions.mapped(), 0u);
  EXPECT_EQ(regions.remembered_refusals(), 0u);
  EXPECT_NE(RegionOf(regions, ref, 4096, 1000), nullptr);
}

// A name no segment can have (a token of the wrong length, which a peer
// may make as long as its message: a cache of them would grow with every
// request) is refused at once and nothing of it is kept.
TEST(ShmValueRegions, AMalformedNameIsRefusedAndNotRemembered) {
  auto area = ShmValueArea::Create(kMiB);
  ASSERT_TRUE(area.ok()) << area.status();
  wire::ShmRef ref;
  ASSERT_TRUE((*area)->Lend(5, 1, 4096, 1000, &ref));
  ShmValueRegions regions(true);
  for (int i = 0; i < 100; ++i) {
    wire::ShmRef bad = ref;
    bad.set_token(std::string(ShmSegment::kTokenBytes + 1 + i, 'x'));
    bad.set_fd(ref.fd() + i);
    EXPECT_EQ(regions.Region(bad, 4096, 1000, getpid()).status().code(),
              StatusCode::kInvalidArgument);
  }
  wire::ShmRef bad = ref;
  bad.set_token("");
  EXPECT_EQ(regions.Region(bad, 4096, 1000, getpid()).status().code(),
            StatusCode::kInvalidArgument);
  bad = ref;
  bad.set_pid(0);
  EXPECT_EQ(regions.Region(bad, 4096, 1000, getpid()).status().code(),
            StatusCode::kInvalidArgument);
  // Pid 0 from a peer of pid 0 (as over tcp://) is no name either.
  EXPECT_EQ(regions.Region(bad, 4096, 1000, 0).status().code(),
            StatusCode::kInvalidArgument);
  bad = ref;
  bad.set_fd(-1);
  EXPECT_EQ(regions.Region(bad, 4096, 1000, getpid()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(regions.remembered_refusals(), 0u);
  EXPECT_EQ(regions.mapped(), 0u);
  EXPECT_NE(RegionOf(regions, ref, 4096, 1000), nullptr);
}

TEST(ShmValueRegions, ASegmentItsWorkerClosedIsUnmapped) {
  auto area = ShmValueArea::Create(kMiB);
  ASSERT_TRUE(area.ok()) << area.status();
  wire::ShmRef ref;
  ASSERT_TRUE((*area)->Lend(1, 0, 4096, 60000, &ref));
  ShmValueRegions regions(true);
  ASSERT_NE(RegionOf(regions, ref, 4096, 60000), nullptr);
  regions.ForgetExited();
  EXPECT_EQ(regions.mapped(), 1u);
  area->reset();  // a client destroyed in a process that goes on
  regions.ForgetExited();
  EXPECT_EQ(regions.mapped(), 0u);
}

TEST(ShmValueRegions, AnExitedWorkersSegmentIsUnmapped) {
  int to_child[2], from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto area = ShmValueArea::Create(kMiB);
    wire::ShmRef ref;
    if (!area.ok() || !(*area)->Lend(1, 0, 4096, 60000, &ref)) _exit(1);
    const std::string bytes = ref.SerializeAsString();
    const uint32_t size = static_cast<uint32_t>(bytes.size());
    if (write(from_child[1], &size, sizeof(size)) != sizeof(size) ||
        write(from_child[1], bytes.data(), size) !=
            static_cast<ssize_t>(size)) {
      _exit(1);
    }
    char done;
    if (read(to_child[0], &done, 1) < 0) _exit(1);
    _exit(0);
  }
  uint32_t size = 0;
  ASSERT_EQ(read(from_child[0], &size, sizeof(size)),
            static_cast<ssize_t>(sizeof(size)));
  std::string bytes(size, '\0');
  ASSERT_EQ(read(from_child[0], bytes.data(), size),
            static_cast<ssize_t>(size));
  wire::ShmRef ref;
  ASSERT_TRUE(ref.ParseFromString(bytes));

  ShmValueRegions regions(true);
  float* to = RegionOf(regions, ref, 4096, 60000);
  ASSERT_NE(to, nullptr);  // another process's segment
  to[0] = 3.0f;
  regions.ForgetExited();
  EXPECT_EQ(regions.mapped(), 1u);  // still running

  ASSERT_EQ(write(to_child[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  regions.ForgetExited();
  EXPECT_EQ(regions.mapped(), 0u);
  for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) {
    close(fd);
  }
}

// ---------------------------------------------------------- whole pulls

// One key holds 512 KiB of floats.
constexpr uint32_t kWidth = 131072;

TableOptions WideTable() {
  TableOptions t;
  t.name = "wide";
  t.value_width = kWidth;
  t.rule = UpdateRule::kAdd;
  return t;
}

// Pushes keys 0..n-1 with distinct values; returns what each holds.
std::vector<float> PushDistinct(Client& client, TableId table, int n) {
  std::vector<Key> keys(n);
  std::iota(keys.begin(), keys.end(), Key{0});
  std::vector<float> values(static_cast<size_t>(n) * kWidth);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<float>(i % 100003) * 0.5f;
  }
  EXPECT_TRUE(client.Push(table, keys, values).ok());
  return values;
}

std::vector<Key> FirstKeys(int n) {
  std::vector<Key> keys(n);
  std::iota(keys.begin(), keys.end(), Key{0});
  return keys;
}

TEST(ShmValues, PullsFromAServerOnThisHostComeThroughSharedMemory) {
  TestCluster cluster(TestClusterOptions{.num_servers = 1});
  auto client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  auto table = client->CreateTable(WideTable());
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<float> pushed = PushDistinct(*client, *table, 3);
  const std::vector<Key> keys = FirstKeys(3);

  std::vector<float> out(pushed.size(), -1.0f);
  ASSERT_TRUE(client->Pull(*table, keys, out).ok());
  EXPECT_EQ(out, pushed);
  EXPECT_EQ(cluster.server(0).counters().shm_replies, 1u);

  // A push-pull's values come the same way.
  std::vector<float> grad(pushed.size(), 1.0f);
  ASSERT_TRUE(client->PushPull(*table, keys, grad, out).ok());
  for (size_t i = 0; i < out.size(); i += 4099) {
    ASSERT_EQ(out[i], pushed[i] + 1.0f) << i;
  }
  EXPECT_EQ(out.back(), pushed.back() + 1.0f);
  EXPECT_EQ(cluster.server(0).counters().shm_replies, 2u);

  // A small pull (4 KiB) comes in the reply.
  TableOptions narrow = WideTable();
  narrow.name = "narrow";
  narrow.value_width = 1024;
  std::vector<float> one(1024);
  auto small = client->CreateTable(narrow);
  ASSERT_TRUE(small.ok()) << small.status();
  ASSERT_TRUE(client->Pull(*small, std::vector<Key>{1}, one).ok());
  EXPECT_EQ(cluster.server(0).counters().shm_replies, 2u);
}

// Pushes, pulls, pushes again and pulls with `client` of `cluster` (one
// server) where either side has shared memory off: every value is exact,
// each push applied once, nothing goes through shared memory and nothing
// is refused.
void ExpectAllInFrames(TestCluster& cluster, Client& client) {
  auto table = client.CreateTable(WideTable());
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<float> pushed = PushDistinct(client, *table, 2);
  std::vector<float> out(pushed.size());
  for (int i = 1; i <= 2; ++i) {  // the second push after a pull
    ASSERT_TRUE(client.Pull(*table, FirstKeys(2), out).ok());
    for (size_t j = 0; j < out.size(); ++j) {
      ASSERT_EQ(out[j], i * pushed[j]) << j;
    }
    if (i == 1) {
      ASSERT_TRUE(client.Push(*table, FirstKeys(2), pushed).ok());
    }
  }
  const ServerCounters c = cluster.server(0).counters();
  EXPECT_EQ(c.shm_replies, 0u);
  EXPECT_EQ(c.shm_pushes, 0u);
  EXPECT_EQ(c.pulls, 2u);
  EXPECT_EQ(c.pushes, 2u);
  EXPECT_EQ(c.errors, 0u);
}

TEST(ShmValues, AClientWithoutSharedMemoryGetsAndSendsValuesInFrames) {
  TestCluster cluster(TestClusterOptions{.num_servers = 1});
  ClientOptions off;
  off.shm_reply_bytes = 0;
  off.request_timeout_ms = 20000;
  auto client = cluster.ConnectWith(off);
  ASSERT_NE(client, nullptr);
  ExpectAllInFrames(cluster, *client);
}

TEST(ShmValues, PullsBeyondTheFreeSharedMemoryComeInFrames) {
  // 1 MiB of shared memory; eight 1 MiB pulls at once: at most one holds a
  // region at a time, the others come in frames, and all are right.
  // (Which ones get the region depends on timing; the first of each
  // round finds it free.)
  TestCluster cluster(TestClusterOptions{.num_servers = 1});
  ClientOptions options;
  options.shm_reply_bytes = kMiB;
  options.request_timeout_ms = 20000;
  auto client = cluster.ConnectWith(options);
  ASSERT_NE(client, nullptr);
  auto table = client->CreateTable(WideTable());
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<float> pushed = PushDistinct(*client, *table, 2);
  const std::vector<Key> keys = FirstKeys(2);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::vector<float>> outs(8, std::vector<float>(pushed.size()));
    std::vector<Handle> pending;
    for (auto& out : outs) {
      pending.push_back(client->PullAsync(*table, keys, out));
    }
    for (auto& h : pending) ASSERT_TRUE(h.Wait().ok());
    for (const auto& out : outs) ASSERT_EQ(out, pushed);
  }
  const ServerCounters c = cluster.server(0).counters();
  EXPECT_GE(c.shm_replies, 3u);  // the first of each round at least

  // A pull larger than the whole area.
  const std::vector<float> bigger = PushDistinct(*client, *table, 3);
  std::vector<float> out(bigger.size());
  const uint64_t before = cluster.server(0).counters().shm_replies;
  ASSERT_TRUE(client->Pull(*table, FirstKeys(3), out).ok());
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i], bigger[i] + (i < pushed.size() ? pushed[i] : 0.0f)) << i;
  }
  EXPECT_EQ(cluster.server(0).counters().shm_replies, before);
}

// Pushes the same way, once a server has shown it can use the worker's
// memory (a pull's values came through it): the worker copies the values
// into a region, the server copies them out on arrival. Two servers, keys
// spread over both by their slots (so a part's keys are not contiguous in
// the caller's arrays), pushed three times: every key holds exactly three
// times its values.
TEST(ShmValues, PushesToServersOnThisHostComeThroughSharedMemory) {
  TestCluster cluster(TestClusterOptions{.num_servers = 2});
  auto client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  auto table = client->CreateTable(WideTable());
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<Key> keys = FirstKeys(8);
  const std::vector<float> once = PushDistinct(*client, *table, 8);
  std::vector<float> out(once.size());
  // Not shown yet: in frames.
  EXPECT_EQ(cluster.server(0).counters().shm_pushes, 0u);
  EXPECT_EQ(cluster.server(1).counters().shm_pushes, 0u);
  ASSERT_TRUE(client->Pull(*table, keys, out).ok());
  EXPECT_EQ(out, once);
  ASSERT_TRUE(client->Push(*table, keys, once).ok());
  ASSERT_TRUE(client->PushPull(*table, keys, once, out).ok());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 3 * once[i]) << i;
  for (int s = 0; s < 2; ++s) {
    const ServerCounters c = cluster.server(s).counters();
    EXPECT_EQ(c.pushes, 3u) << s;
    EXPECT_EQ(c.shm_pushes, 2u) << s;
    EXPECT_EQ(c.errors, 0u) << s;
  }
}

// A server that does not use shared memory gets pulls' values in its
// replies and so never pushed values in shared memory: nothing is refused,
// and each push is applied exactly once.
TEST(ShmValues, AServerThatCannotUseItTakesPushesInFramesExactlyOnce) {
  TestClusterOptions options{.num_servers = 1};
  options.server.shm_values = false;
  TestCluster cluster(options);
  auto client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  ExpectAllInFrames(cluster, *client);
}

// Replicas on one host: a primary's records to its backup.

// Server `i` of `cluster` killed and started again at once under its id
// (a new process to the coordinator, whose backups take its slots over).
void RestartServer(TestCluster& cluster, const TestClusterOptions& options,
                   int i, bool shm_values,
                   std::vector<std::unique_ptr<Server>>* restarted) {
  ServerOptions again = options.server;
  again.coordinator_address = cluster.address();
  again.requested_id = cluster.server(i).id();
  again.shm_values = shm_values;
  cluster.DestroyServer(i);
  Result<std::unique_ptr<Server>> server = Server::Start(again);
  ASSERT_TRUE(server.ok()) << server.status();
  restarted->push_back(std::move(*server));
}

// Waits until no slot moves and every slot's backup holds a whole copy.
void AwaitWholeCopies(TestCluster& cluster) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    Result<ClusterStatus> status = QueryClusterStatus(cluster.address(), 5000);
    ASSERT_TRUE(status.ok()) << status.status();
    if (status->slots_moving == 0 && status->slots_without_copy == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  FAIL() << "the backups' copies were not whole within 30 s";
}

// Each server's records for the other come in its shared memory, and
// what came that way is what the backup takes over with: a server killed
// and started again is taken over with no rollback and every key holds
// exactly its three pushes.
TEST(ShmValues, ABackupOnTheHostReadsItsPrimarysRecordsInSharedMemory) {
  TestClusterOptions options{.num_servers = 2, .num_workers = 1};
  options.replicas = 2;
  TestCluster cluster(options);
  auto client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  auto table = client->CreateTable(WideTable());
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<Key> keys = FirstKeys(64);
  const std::vector<float> once = PushDistinct(*client, *table, 64);
  for (int p = 0; p < 2; ++p) {
    ASSERT_TRUE(client->Push(*table, keys, once).ok());
  }
  for (int s = 0; s < 2; ++s) {
    EXPECT_GT(cluster.server(s).counters().shm_records, 0u) << s;
  }
  std::vector<std::unique_ptr<Server>> restarted;
  RestartServer(cluster, options, 1, /*shm_values=*/true, &restarted);
  std::vector<float> out(once.size());
  ASSERT_TRUE(client->Pull(*table, keys, out).ok());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 3 * once[i]) << i;
  Result<ClusterStatus> status = QueryClusterStatus(cluster.address(), 5000);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->generation, 0u);  // no rollback
  EXPECT_GE(status->takeovers, 1u);
  EXPECT_TRUE(client->Finish().ok());
}

// A backup that does not use shared memory (--shm_values=false) refuses a
// primary's records there; the primary sends them, and all after them, in
// frames: its replies go on, and the copies that came in frames take the
// primary's slots over in turn, exactly.
TEST(ShmValues, ABackupThatCannotUseSharedMemoryGetsTheRecordsInFrames) {
  TestClusterOptions options{.num_servers = 2, .num_workers = 1};
  options.replicas = 2;
  TestCluster cluster(options);
  auto client = cluster.Connect();
  ASSERT_NE(client, nullptr);
  auto table = client->CreateTable(WideTable());
  ASSERT_TRUE(table.ok()) << table.status();
  const std::vector<Key> keys = FirstKeys(64);
  const std::vector<float> once = PushDistinct(*client, *table, 64);
  std::vector<std::unique_ptr<Server>> restarted;
  // Server 0 takes every slot over, and copies them to the new server 1,
  // which refuses them in shared memory.
  RestartServer(cluster, options, 1, /*shm_values=*/false, &restarted);
  for (int p = 0; p < 2; ++p) {
    ASSERT_TRUE(client->Push(*table, keys, once).ok());
  }
  ASSERT_NO_FATAL_FAILURE(AwaitWholeCopies(cluster));
  const ServerCounters backup = restarted[0]->counters();
  EXPECT_EQ(backup.shm_records, 0u);
  EXPECT_GE(backup.errors, 1u) << "it refused the region at least once";
  // Server 1's copies take server 0's slots over.
  RestartServer(cluster, options, 0, /*shm_values=*/true, &restarted);
  std::vector<float> out(once.size());
  ASSERT_TRUE(client->Pull(*table, keys, out).ok());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 3 * once[i]) << i;
  Result<ClusterStatus> status = QueryClusterStatus(cluster.address(), 5000);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->generation, 0u);  // no rollback
  EXPECT_GE(status->takeovers, 2u);
  EXPECT_TRUE(client->Finish().ok());
}

TEST(ShmValues, ABadSizeIsRefusedAtConnect) {
  TestCluster cluster(TestClusterOptions{.num_servers = 1});
  ClientOptions options;
  options.coordinator_address = cluster.address();
  options.shm_reply_bytes = 4096;
  auto client = Client::Connect(options);
  EXPECT_EQ(client.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(client.status().message().find("shm_reply_bytes"),
            std::string::npos);
}

}  // namespace
}  // namespace ductile
