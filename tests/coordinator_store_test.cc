// The coordinator's state on a small volume: its store takes a few MiB, so
// a coordinator on a volume of 96 MiB (a Kubernetes claim of 100Mi, a
// tmpfs) starts and admits workers; one on a volume that cannot keep its
// state does not start, and says why; and while a running coordinator
// cannot save its state, a registering worker is told why instead of
// waiting out its connect timeout.
//
// The volumes are tmpfs mounts (they need CAP_SYS_ADMIN; the tests skip
// without it). The refusal of a registering worker runs on the simulated
// network against a full in-memory disk.
#include "storage/coordinator_store.h"

#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "client/client_impl.h"
#include "coordinator/coordinator_node.h"
#include "ductile/coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/mem_stores.h"
#include "sim/sim_env.h"
#include "sim/sim_network.h"
#include "tests/test_cluster.h"

namespace ductile {
namespace {

namespace fs = std::filesystem;

using std::chrono::milliseconds;
using ::testing::HasSubstr;

// A tmpfs of `size` ("96m") mounted on a fresh directory under /tmp for
// the test's life.
class SmallVolume {
 public:
  explicit SmallVolume(const std::string& size) {
    std::string pattern = fs::temp_directory_path() / "coord_volume_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      error_ = errno;
      return;
    }
    path_ = pattern;
    mounted_ = ::mount("tmpfs", path_.c_str(), "tmpfs", 0,
                       ("size=" + size).c_str()) == 0;
    if (!mounted_) error_ = errno;
  }
  ~SmallVolume() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  bool mounted() const { return mounted_; }
  std::string why_not() const { return std::strerror(error_); }
  const fs::path& path() const { return path_; }
  // Bytes in use on the volume.
  uint64_t used_bytes() const {
    struct statvfs st;
    if (::statvfs(path_.c_str(), &st) != 0) return 0;
    return static_cast<uint64_t>(st.f_blocks - st.f_bfree) * st.f_frsize;
  }

 private:
  fs::path path_;
  bool mounted_ = false;
  int error_ = 0;
};

TEST(CoordinatorStore, ANewStoreWithItsStateTakesAFewMegabytes) {
  SmallVolume volume("96m");
  if (!volume.mounted()) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << volume.why_not();
  }
  const uint64_t before = volume.used_bytes();
  auto store =
      CoordinatorStore::Open({.dir = (volume.path() / "coordinator").string()});
  ASSERT_TRUE(store.ok()) << store.status();
  wire::CoordinatorState state;
  state.set_generation(1);
  ASSERT_TRUE((*store)->Save(state).ok());
  // RocksDB preallocates its write-ahead log from the write buffer: with
  // its defaults this store took 75 MiB.
  EXPECT_LE(volume.used_bytes() - before, CoordinatorStore::kOpenBytes);
}

TEST(CoordinatorOnASmallVolume, StartsAndAdmitsAWorker) {
  SmallVolume volume("96m");
  if (!volume.mounted()) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << volume.why_not();
  }
  testing::TestClusterOptions options;
  options.num_servers = 1;
  options.coordinator_state_dir = (volume.path() / "coordinator").string();
  testing::TestCluster cluster(options);
  std::unique_ptr<Client> worker = cluster.Connect();
  EXPECT_NE(worker, nullptr);
}

// A volume with less free than the reserve the store keeps: the
// coordinator does not start, and its error names the directory, the
// space needed and free, and the flag that sets the reserve. A smaller
// reserve lets it start there.
TEST(CoordinatorOnASmallVolume, ItDoesNotStartBelowItsReserveAndSaysWhy) {
  SmallVolume volume("16m");
  if (!volume.mounted()) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << volume.why_not();
  }
  CoordinatorOptions options;
  options.bind_address = "tcp://127.0.0.1:0";
  options.state_dir = (volume.path() / "coordinator").string();
  auto refused = Coordinator::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted)
      << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr(options.state_dir));
  EXPECT_THAT(refused.status().message(), HasSubstr("MiB free"));
  EXPECT_THAT(refused.status().message(), HasSubstr("64.0 MiB are kept free"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--disk_reserve_mb"));

  options.disk_reserve_mb = 4;
  auto started = Coordinator::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  (*started)->Stop();
  EXPECT_TRUE((*started)->Wait().ok());
}

TEST(CoordinatorOptions, ADiskReserveOutOfRangeIsRefused) {
  CoordinatorOptions options;
  options.disk_reserve_mb = -1;
  EXPECT_EQ(Validate(options).code(), StatusCode::kInvalidArgument);
  options.disk_reserve_mb = (1 << 20) + 1;
  EXPECT_EQ(Validate(options).code(), StatusCode::kInvalidArgument);
  options.disk_reserve_mb = 0;
  EXPECT_TRUE(Validate(options).ok());
}

// The coordinator's disk fills after it started: the registration it takes
// cannot be saved, so its answer is held, and the worker, asking again,
// gets the coordinator's reason rather than a timeout.
TEST(CoordinatorThatCannotSaveItsState, TellsARegisteringWorkerWhy) {
  constexpr char kAddress[] = "tcp://coordinator:1";
  constexpr char kStateDir[] = "/sim/coordinator";
  sim::NetworkFaults faults;
  faults.min_latency_us = faults.max_latency_us = 100;
  sim::SimNetwork net(/*seed=*/1, faults);
  sim::MemDisk disk;
  sim::SimEnv coordinator_env(&net, &disk, "coordinator");
  CoordinatorOptions c;
  c.bind_address = kAddress;
  c.num_servers = 1;
  c.num_slots = 16;
  c.state_dir = kStateDir;
  CoordinatorNode coordinator(c, &coordinator_env);
  ASSERT_TRUE(coordinator.Start().ok());
  disk.SetFault(kStateDir, sim::DiskFault::kFull);

  sim::SimEnv worker_env(&net, &disk, "worker");
  ClientOptions w;
  w.coordinator_address = kAddress;
  w.prefer_ipc = false;
  w.connect_timeout_ms = 60000;
  ClientImpl worker(w, &worker_env, /*own_thread=*/false);
  ASSERT_TRUE(worker.Start().ok());
  std::shared_ptr<ControlOperation> registration = worker.StartRegister();
  // Well short of the worker's connect timeout: its second ask (2 s after
  // the first) is answered.
  const auto end = net.now() + milliseconds(w.connect_timeout_ms / 2);
  while (!registration->done() && net.now() < end) {
    net.DeliverDue();
    coordinator.Step();
    worker.Step();
    auto next = std::min(coordinator.NextWakeup(), worker.NextWakeup());
    if (auto due = net.NextDelivery(); due) next = std::min(next, *due);
    net.AdvanceTo(std::max(next, net.now() + std::chrono::microseconds(1)));
  }
  ASSERT_TRUE(registration->done());
  const Status s = registration->Wait();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("cannot save its state"));
  EXPECT_THAT(s.message(), HasSubstr("No space left"));
}

}  // namespace
}  // namespace ductile
