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
//
// --workload=mlp or sparse measures instead a server's checkpoint cuts,
// through its Checkpointer (as the request thread drives it, with no
// transport), on one table trained clock by clock:
//   mlp     the MLP of fmnist-mlp (235,146 floats, Adam: 2 state floats per
//           value) in keys of --mlp_key_floats floats, every key pushed
//           every clock;
//   sparse  rows by id of --row_width floats (AdaGrad), --sparse_draws
//           Zipf(--zipf) draws over --vocabulary ids per clock (deduplicated),
//           with every id stored before the first cut (--prefill).
// A round (prepare, commit, write) every --clocks_per_cut clocks, --cuts of
// them measured (the first, where every row is new, is not). Per cut: the
// request thread's pause (the Checkpointer's Write: the copy of the rows
// changed since the last cut, and the write itself where it runs in line)
// and the CPU time the thread spent in it,
// how long the cut waited for the write before it (the server holds the
// pushes beyond the cut meanwhile; the bench's clocks last only their apply
// unless --clock_ms says more), the payload handed to the store (values and
// state of the rows changed since the last cut), and the bytes the process
// wrote (/proc/self/io wchar: the store's writes, flushes and compactions)
// over the cuts.
// --full marks every stored row changed before each cut: what writing the
// whole state every cut would cost.
//
//   checkpoint_bench --workload=sparse --cuts=20
//   checkpoint_bench --workload=sparse --cuts=20 --full
//   checkpoint_bench --workload=mlp --cuts=50
#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "env/env.h"
#include "gflags/gflags.h"
#include "proto/codec.h"
#include "proto/table_config.h"
#include "server/checkpointer.h"
#include "server/coordinator_link.h"
#include "server/live_counters.h"
#include "server/table_set.h"
#include "storage/checkpoint_store.h"

DEFINE_string(sizes_mb, "10,100", "Payload sizes to write, in MB (1e6 B).");
DEFINE_int32(width, 64, "Value floats per key; the state has twice as many.");
DEFINE_int32(repeats, 3, "Runs of each measurement; the median is shown.");
DEFINE_bool(sync, true, "CheckpointStoreOptions::sync.");
DEFINE_string(dir, "/tmp", "Where the benchmark's store directories go.");
DEFINE_string(workload, "",
              "\"\": the store alone at --sizes_mb; mlp or sparse: a "
              "server's checkpoint cuts on that workload.");
DEFINE_bool(full, false, "Cuts: every stored row is written at each cut.");
DEFINE_int32(cuts, 20, "Cuts measured (after a first one, not measured).");
DEFINE_int32(clocks_per_cut, 5, "Cuts: clocks between two cuts.");
DEFINE_uint64(vocabulary, 1000000, "sparse: distinct ids (1000 to 2^32).");
DEFINE_uint32(sparse_draws, 16384, "sparse: Zipf draws per clock.");
DEFINE_double(zipf, 1.05, "sparse: Zipf exponent of the ids' popularity.");
DEFINE_uint32(row_width, 16, "sparse: floats per row.");
DEFINE_bool(prefill, true, "sparse: every id stored before the first cut.");
DEFINE_double(clock_ms, 0,
              "Cuts: a clock lasts at least this long (a training step's "
              "compute; 0: only the apply).");
DEFINE_uint32(mlp_key_floats, 3136,
              "mlp: floats per key (fmnist-mlp's first layer's chunk).");

namespace ductile {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU time of the calling thread, in ms.
double ThreadCpuMs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) +
         1e-6 * static_cast<double>(t.tv_nsec);
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

// ---- Cuts of a server's tables (--workload=mlp or sparse).

// Stands for the coordinator: takes the checkpoints' reports.
class ReportLink final : public CoordinatorLink {
 public:
  void Send(const wire::Header& header) override {
    if (header.type() != wire::CHECKPOINT_DONE) return;
    ++reports;
    if (header.status_code() != 0) {
      failures.push_back("checkpoint at clock " +
                         std::to_string(header.clock()) + ": " +
                         header.status_message());
    }
  }
  void Heartbeat(int64_t) override {}
  int reports = 0;
  std::vector<std::string> failures;
};

// Bytes this process has written with write(2) and the like, RocksDB's
// background flushes and compactions included (/proc/self/io's wchar).
uint64_t BytesWrittenByProcess() {
  std::ifstream io("/proc/self/io");
  std::string name;
  uint64_t value = 0;
  while (io >> name >> value) {
    if (name == "wchar:") return value;
  }
  return 0;
}

// One clock's pushes: keys ascending, values key after key.
struct Push {
  std::vector<Key> keys;
  std::vector<float> values;
};

// Keys of the MLP of fmnist-mlp (784-256-128-10, 235,146 floats) as one
// table of --mlp_key_floats floats per key; every clock pushes every key.
std::vector<Push> MlpPushes(size_t clocks, uint32_t width) {
  const size_t floats = 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10;
  const size_t keys = (floats + width - 1) / width;
  std::vector<Push> pushes(clocks);
  for (size_t c = 0; c < clocks; ++c) {
    pushes[c].keys.resize(keys);
    for (size_t k = 0; k < keys; ++k) pushes[c].keys[k] = k;
    pushes[c].values.resize(keys * width);
    Fill(&pushes[c].values, c + 11);
  }
  return pushes;
}

// Rows by id: each clock, --sparse_draws Zipf(--zipf) draws over
// --vocabulary ids, deduplicated and sorted as workers send them.
std::vector<Push> SparsePushes(size_t clocks, uint32_t width) {
  std::vector<double> cdf(FLAGS_vocabulary);
  double sum = 0;
  for (uint64_t i = 0; i < FLAGS_vocabulary; ++i) {
    sum += 1.0 / std::pow(static_cast<double>(i + 1), FLAGS_zipf);
    cdf[i] = sum;
  }
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(0.0, sum);
  std::vector<Push> pushes(clocks);
  for (Push& p : pushes) {
    for (uint32_t i = 0; i < FLAGS_sparse_draws; ++i) {
      const uint64_t rank = static_cast<uint64_t>(
          std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
      p.keys.push_back((rank + 1) * 0x9e3779b97f4a7c15ULL);
    }
    std::sort(p.keys.begin(), p.keys.end());
    p.keys.erase(std::unique(p.keys.begin(), p.keys.end()), p.keys.end());
    p.values.assign(p.keys.size() * width, 0.01f);
  }
  return pushes;
}

bool Apply(ParameterTable& table, const Push& push, uint32_t width,
           int64_t clock) {
  wire::Header h;
  h.set_type(wire::PUSH);
  h.set_num_keys(push.keys.size());
  h.set_values_frames(1);
  const ByteSpan frames[2] = {
      {reinterpret_cast<const uint8_t*>(push.keys.data()),
       push.keys.size() * sizeof(Key)},
      {reinterpret_cast<const uint8_t*>(push.values.data()),
       push.values.size() * sizeof(float)}};
  DataFrames request;
  Status s = request.Parse(h, frames, width, true);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return false;
  }
  table.ApplyPush(request, clock);
  table.SetClock(clock + 1);
  return true;
}

struct CutStats {
  std::vector<double> pause_ms;  // the request thread's, per cut
  // Of it, the CPU time the request thread spent (the rest it waited for
  // a core: other threads and processes ran).
  std::vector<double> pause_cpu_ms;
  // Per cut, the wait for the previous cut's write (pushes beyond the cut
  // stay held meanwhile; the request thread itself goes on).
  std::vector<double> held_ms;
  std::vector<double> payload_mb;  // values and state handed to the store
  double written_mb = 0;           // the process's writes over the cuts
  size_t rows = 0;                 // rows stored at the end
};

// Runs the workload on one server's tables (no transport) and takes a
// checkpoint round every --clocks_per_cut clocks, as the coordinator
// would: prepare, commit, the cut written once the server clock reaches
// it. --full marks every stored row changed before each cut (what
// writing the whole state each time costs). The first cut (every row
// new) is left out of the statistics.
bool RunCuts(const std::vector<Push>& pushes, const TableOptions& options,
             CutStats* stats) {
  std::string dir = (fs::path(FLAGS_dir) / "ckpt_cut_bench_XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    std::perror("mkdtemp");
    return false;
  }
  ReportLink link;
  LiveCounters counters;
  Checkpointer checkpointer(SystemEnv(), &link, &counters);
  Status s = checkpointer.Open(dir, 0, /*keep_checkpoints=*/3);
  TableSet tables(nullptr, 0);
  tables.set_keeps_evicted(true);
  if (s.ok()) s = tables.Create(ToWire(options, 1));
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return false;
  }
  ParameterTable& table = *tables.Find(1);
  const uint32_t width = options.value_width;
  const int64_t every = FLAGS_clocks_per_cut;
  uint64_t written_at_first = 0;
  int64_t last_cut = 0;
  for (int64_t clock = 0; clock < static_cast<int64_t>(pushes.size());
       ++clock) {
    const Clock::time_point clock_start = Clock::now();
    if (!Apply(table, pushes[clock], width, clock)) return false;
    // A clock lasts at least --clock_ms (a training step), as the server
    // does, taking the writes done meanwhile.
    while (true) {
      checkpointer.Poll(tables);
      const double left_ms = FLAGS_clock_ms - 1e3 * Seconds(clock_start);
      if (left_ms <= 0) break;
      std::this_thread::sleep_for(std::chrono::microseconds(
          static_cast<int64_t>(std::min(left_ms, 1.0) * 1e3)));
    }
    if ((clock + 1) % every != 0) continue;
    const int64_t cut = clock + 1;
    const bool first = cut == every;
    if (FLAGS_full) {
      std::vector<Key> keys;
      table.ForEachKey([&](Key k) { keys.push_back(k); });
      for (Key k : keys) table.MarkChanged(k);
    }
    const double payload = static_cast<double>(table.changed_bytes()) / 1e6;
    wire::Header prepare;
    prepare.set_change_id(static_cast<uint64_t>(cut));
    prepare.set_generation(1);
    prepare.set_timeout_ms(60000);
    checkpointer.Prepare(prepare, 1);
    wire::Header commit = prepare;
    commit.set_clock(cut);
    commit.set_data_clock(last_cut);
    checkpointer.Commit(commit, 1);
    // The server clock is `cut`: the cut is due, once the write before it
    // is done.
    const Clock::time_point held = Clock::now();
    checkpointer.FinishWrite(tables).IgnoreError();  // reported to `link`
    const double held_ms = 1e3 * Seconds(held);
    const Clock::time_point start = Clock::now();
    const double cpu_start = ThreadCpuMs();
    std::optional<int64_t> due = checkpointer.TakeDue(cut, true);
    if (due) checkpointer.Write(*due, tables, 1, 1);
    const double ms = 1e3 * Seconds(start);
    const double cpu_ms = ThreadCpuMs() - cpu_start;
    if (!due) {
      std::fprintf(stderr, "the cut at clock %lld is not due\n",
                   static_cast<long long>(cut));
      return false;
    }
    last_cut = cut;
    if (first) {
      written_at_first = BytesWrittenByProcess();
      continue;
    }
    stats->pause_ms.push_back(ms);
    stats->pause_cpu_ms.push_back(cpu_ms);
    stats->held_ms.push_back(held_ms);
    stats->payload_mb.push_back(payload);
  }
  checkpointer.FinishWrite(tables).IgnoreError();
  for (const std::string& failure : link.failures) {
    std::fprintf(stderr, "%s\n", failure.c_str());
  }
  stats->written_mb =
      static_cast<double>(BytesWrittenByProcess() - written_at_first) / 1e6;
  stats->rows = table.size();
  std::error_code ec;
  fs::remove_all(dir, ec);
  return link.failures.empty() &&
         link.reports == static_cast<int>(pushes.size() / every);
}

int MainCuts() {
  TableOptions options;
  options.init.kind = InitKind::kUniform;
  std::vector<Push> pushes;
  const size_t clocks =
      static_cast<size_t>(FLAGS_cuts + 1) * FLAGS_clocks_per_cut;
  if (FLAGS_workload == "mlp") {
    options.name = "mlp";
    options.rule = UpdateRule::kAdam;
    options.value_width = FLAGS_mlp_key_floats;
    pushes = MlpPushes(clocks, options.value_width);
  } else {
    options.name = "emb";
    options.rule = UpdateRule::kAdaGrad;
    options.value_width = FLAGS_row_width;
    pushes = SparsePushes(clocks, options.value_width);
    if (FLAGS_prefill) {
      // Every id stored before the first cut: a table trained a while.
      Push all;
      for (uint64_t i = 0; i < FLAGS_vocabulary; ++i) {
        all.keys.push_back((i + 1) * 0x9e3779b97f4a7c15ULL);
      }
      std::sort(all.keys.begin(), all.keys.end());
      all.values.assign(all.keys.size() * options.value_width, 0.01f);
      pushes.insert(pushes.begin(), std::move(all));
      pushes.pop_back();
    }
  }
  // Keys per clock (the median; a prefill's clock aside).
  std::vector<double> per_clock;
  for (size_t c = FLAGS_workload == "sparse" && FLAGS_prefill ? 1 : 0;
       c < pushes.size(); ++c) {
    per_clock.push_back(static_cast<double>(pushes[c].keys.size()));
  }
  std::printf(
      "workload %s (%s), width %u, %zu clocks, a cut every %d (%d measured), "
      "%.0f keys pushed per clock (median), %s, sync %s\n",
      FLAGS_workload.c_str(),
      FLAGS_full ? "full: every row each cut" : "incremental",
      options.value_width, clocks, FLAGS_clocks_per_cut, FLAGS_cuts,
      Median(per_clock), options.rule == UpdateRule::kAdam ? "Adam" : "AdaGrad",
      FLAGS_sync ? "on" : "off");
  std::printf("%6s %10s %12s %12s %12s %12s %12s %14s %10s\n", "repeat", "rows",
              "pause p50", "pause max", "cpu p50", "held p50", "payload p50",
              "payload/cut", "disk/cut");
  std::vector<double> p50s, maxes, cpus, helds, payloads, payload_means, disks;
  for (int r = 0; r < FLAGS_repeats; ++r) {
    CutStats stats;
    if (!RunCuts(pushes, options, &stats)) return 1;
    const double cuts = static_cast<double>(stats.payload_mb.size());
    double payload_sum = 0;
    for (double mb : stats.payload_mb) payload_sum += mb;
    p50s.push_back(Median(stats.pause_ms));
    maxes.push_back(
        *std::max_element(stats.pause_ms.begin(), stats.pause_ms.end()));
    cpus.push_back(Median(stats.pause_cpu_ms));
    helds.push_back(Median(stats.held_ms));
    payloads.push_back(Median(stats.payload_mb));
    payload_means.push_back(payload_sum / cuts);
    disks.push_back(stats.written_mb / cuts);
    std::printf(
        "%6d %10zu %9.2f ms %9.2f ms %9.2f ms %9.2f ms %9.3f MB %11.3f MB "
        "%7.3f MB\n",
        r, stats.rows, p50s.back(), maxes.back(), cpus.back(), helds.back(),
        payloads.back(), payload_means.back(), disks.back());
  }
  std::printf(
      "%6s %10s %9.2f ms %9.2f ms %9.2f ms %9.2f ms %9.3f MB %11.3f MB "
      "%7.3f MB\n",
      "median", "", Median(p50s), Median(maxes), Median(cpus), Median(helds),
      Median(payloads), Median(payload_means), Median(disks));
  return 0;
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
  if (!FLAGS_workload.empty()) {
    if ((FLAGS_workload != "mlp" && FLAGS_workload != "sparse") ||
        FLAGS_cuts < 1 || FLAGS_clocks_per_cut < 1 || FLAGS_repeats < 1 ||
        FLAGS_vocabulary < 1000 || FLAGS_vocabulary > (uint64_t{1} << 32) ||
        FLAGS_sparse_draws < 1 || FLAGS_row_width < 1 ||
        FLAGS_row_width > 4096 || FLAGS_mlp_key_floats < 1 ||
        !(FLAGS_zipf > 0)) {
      std::fprintf(stderr,
                   "--workload is mlp or sparse; --cuts, --clocks_per_cut, "
                   "--repeats, --sparse_draws, --mlp_key_floats >= 1; "
                   "--vocabulary in [1000, 2^32]; --row_width in [1, 4096]; "
                   "--zipf > 0\n");
      return 1;
    }
    return ductile::MainCuts();
  }
  return ductile::Main();
}
