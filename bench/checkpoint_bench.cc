// checkpoint_bench: how fast a CheckpointStore writes and loads checkpoints.
//
// For each size (MB of float payload: values plus optimizer state), keys of
// --width value floats and 2 x --width state floats (Adam's m and v) are
// written to a fresh store under --dir. Measured, each --repeats times
// (medians shown), as payload MB/s and seconds:
//   full        the first checkpoint: every key new
//   rewrite     a second checkpoint changing every key (each key exists)
//   10%         a third checkpoint changing one key in ten
//   load        LoadLatest of the result (open, verify, decode everything)
// With --sync (the default) every write is on stable storage when it
// returns. Compare with the disk's raw speed, e.g.
//   dd if=/dev/zero of=/tmp/dd.out bs=1M count=100 conv=fdatasync
//
//   checkpoint_bench                       # 10 and 100 MB, about a minute
//   checkpoint_bench --sizes_mb=10 --sync=false
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "gflags/gflags.h"
#include "storage/checkpoint_store.h"

DEFINE_string(sizes_mb, "10,100", "Payload sizes to write, in MB (1e6 B).");
DEFINE_int32(width, 64, "Value floats per key; the state has twice as many.");
DEFINE_int32(repeats, 3, "Runs of each measurement; the median is shown.");
DEFINE_bool(sync, true, "CheckpointStoreOptions::sync.");
DEFINE_string(dir, "/tmp", "Where the benchmark's store directories go.");

namespace ductile {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Fill(std::vector<float>* v, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (float& f : *v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    f = static_cast<float>(static_cast<int64_t>(x >> 40)) * 1e-7f;
  }
}

std::vector<EntryRecord> MakeEntries(size_t keys, size_t width,
                                     uint64_t version, size_t every) {
  std::vector<EntryRecord> entries;
  for (size_t k = 0; k < keys; k += every) {
    EntryRecord& e = entries.emplace_back();
    e.table = 1;
    e.key = k * 2654435761u;  // spread over the key space
    e.value.resize(width);
    e.state.resize(2 * width);
    Fill(&e.value, k * 3 + version);
    Fill(&e.state, k * 5 + version + 7);
    e.steps = static_cast<int64_t>(version);
  }
  return entries;
}

struct Times {
  std::vector<double> full, rewrite, tenth, load;
};

bool RunOnce(double mb, Times* times) {
  const size_t width = static_cast<size_t>(FLAGS_width);
  const size_t bytes_per_key = 3 * width * sizeof(float);
  const size_t keys = static_cast<size_t>(mb * 1e6) / bytes_per_key;

  std::string dir = (fs::path(FLAGS_dir) / "ckpt_bench_XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    std::perror("mkdtemp");
    return false;
  }
  CheckpointStoreOptions options;
  options.dir = dir;
  options.sync = FLAGS_sync;
  Result<std::unique_ptr<CheckpointStore>> store =
      CheckpointStore::Open(options);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return false;
  }
  const std::vector<TableRecord> tables = {{1, "adam"}};
  const auto write = [&](int64_t clock, const std::vector<EntryRecord>& e,
                         std::vector<double>* out) {
    const Clock::time_point start = Clock::now();
    Status s = (*store)->WriteCheckpoint(clock, 1, tables, e, {}, "blob");
    out->push_back(Seconds(start));
    if (!s.ok()) std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return s.ok();
  };
  bool ok = write(1, MakeEntries(keys, width, 0, 1), &times->full) &&
            write(2, MakeEntries(keys, width, 1, 1), &times->rewrite) &&
            write(3, MakeEntries(keys, width, 2, 10), &times->tenth);
  if (ok) {
    const Clock::time_point start = Clock::now();
    Result<LoadedCheckpoint> loaded = (*store)->LoadLatest();
    times->load.push_back(Seconds(start));
    ok = loaded.ok() && loaded->entries.size() == keys;
    if (!ok)
      std::fprintf(stderr, "load failed: %s\n",
                   loaded.status().ToString().c_str());
  }
  store->reset();
  std::error_code ec;
  fs::remove_all(dir, ec);
  return ok;
}

int Main() {
  std::printf("width %d (+%d state floats per key), sync %s, dir %s\n",
              FLAGS_width, 2 * FLAGS_width, FLAGS_sync ? "on" : "off",
              FLAGS_dir.c_str());
  std::printf("%8s  %18s  %18s  %18s  %18s\n", "MB", "full", "rewrite",
              "10% changed", "load");
  std::stringstream sizes(FLAGS_sizes_mb);
  std::string item;
  while (std::getline(sizes, item, ',')) {
    const double mb = std::stod(item);
    Times times;
    for (int r = 0; r < FLAGS_repeats; ++r) {
      if (!RunOnce(mb, &times)) return 1;
    }
    const auto cell = [&](const std::vector<double>& t, double payload_mb) {
      const double s = Median(t);
      char buf[64];
      std::snprintf(buf, sizeof buf, "%6.3f s %6.0f MB/s", s, payload_mb / s);
      return std::string(buf);
    };
    std::printf("%8.0f  %18s  %18s  %18s  %18s\n", mb,
                cell(times.full, mb).c_str(), cell(times.rewrite, mb).c_str(),
                cell(times.tenth, mb / 10).c_str(),
                cell(times.load, mb).c_str());
  }
  return 0;
}

}  // namespace
}  // namespace ductile

int main(int argc, char** argv) {
  gflags::SetUsageMessage("checkpoint_bench: CheckpointStore write and load");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return ductile::Main();
}
