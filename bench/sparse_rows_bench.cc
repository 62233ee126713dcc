// sparse_rows_bench: what rows by id (Client::PullRows / PushRows) cost a
// worker over the plain calls on the same batch's unique sorted ids, on an
// in-process cluster (2 servers, 1 worker, loopback).
//
// A batch is --ids ids drawn from a Zipf(--zipf) distribution over
// --vocab ids (hashed: scattered over the 64-bit key space), so that it
// repeats ids as a recommendation batch does. For each of --batches
// batches it times, one call at a time:
//   pull_rows   PullRows(raw ids)         (dedup, pull, re-expand)
//   pull        Pull(unique sorted ids)    (the floor: what is sent)
//   push_rows   PushRows(raw ids, grads)   (dedup, sum, push)
//   push        Push(unique sorted ids, summed grads)
//   dedup       RowBatch alone: sort + unique + the map back
// and prints one CSV line each:
//   op,ids,unique_mean,width,calls,mean_us,p50_us,p99_us,cpu_us
// where cpu_us is the calling thread's CPU time per call (what the caller
// spends apart from waiting; the client's I/O thread is not in it), the
// steadier number on a shared machine.
//
//   sparse_rows_bench --ids=4096 --vocab=1000000 --width=16 --batches=300
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench/in_process_cluster.h"
#include "client/row_batch.h"
#include "ductile/client.h"
#include "gflags/gflags.h"

DEFINE_int32(ids, 4096, "ids per batch");
DEFINE_int64(vocab, 1000000, "distinct ids the batches draw from");
DEFINE_double(zipf, 1.05, "Zipf exponent of the ids' distribution");
DEFINE_int32(width, 16, "floats per row");
DEFINE_int32(batches, 300, "timed batches");
DEFINE_int32(warmup, 20, "untimed batches first");

namespace {

using ductile::Key;
using Clock = std::chrono::steady_clock;

// Zipf sampling by inverse CDF over a table of `n` ranks.
class Zipf {
 public:
  Zipf(int64_t n, double s) : cdf_(n) {
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      sum += 1.0 / std::pow(static_cast<double>(k + 1), s);
      cdf_[k] = sum;
    }
    for (double& c : cdf_) c /= sum;
  }
  int64_t operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
  }

 private:
  std::vector<double> cdf_;
};

Key Hashed(int64_t rank) {  // splitmix64: ranks scattered over the keys
  uint64_t z = static_cast<uint64_t>(rank) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double ThreadCpuUs() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

struct Timings {
  std::vector<double> us;
  double cpu_us = 0;
  void Add(Clock::time_point start, double cpu_start) {
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start)
                     .count());
    cpu_us += ThreadCpuUs() - cpu_start;
  }
};

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  ductile::bench::InProcessClusterOptions options;
  options.servers = 2;
  options.workers = 1;
  auto cluster = ductile::bench::InProcessCluster::Start(options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "%s\n", cluster.status().ToString().c_str());
    return 1;
  }
  ductile::Client& client = (*cluster)->client(0);
  ductile::TableOptions t;
  t.name = "rows";
  t.value_width = static_cast<uint32_t>(FLAGS_width);
  t.rule = ductile::UpdateRule::kSgd;
  t.learning_rate = 0.01f;
  auto table = client.CreateTable(t);
  if (!table.ok()) {
    std::fprintf(stderr, "%s\n", table.status().ToString().c_str());
    return 1;
  }
  const size_t w = static_cast<size_t>(FLAGS_width);
  const Zipf zipf(FLAGS_vocab, FLAGS_zipf);
  std::mt19937_64 rng(1);
  std::map<std::string, Timings> timings;
  uint64_t unique_total = 0;
  std::vector<Key> ids(FLAGS_ids);
  std::vector<float> rows(ids.size() * w), grads(ids.size() * w, 0.001f);
  for (int b = 0; b < FLAGS_warmup + FLAGS_batches; ++b) {
    for (Key& id : ids) id = Hashed(zipf(rng));
    const bool timed = b >= FLAGS_warmup;
    auto run = [&](const char* op, const std::function<bool()>& call) {
      const double cpu_start = ThreadCpuUs();
      const auto start = Clock::now();
      if (!call()) {
        std::fprintf(stderr, "%s failed\n", op);
        std::exit(1);
      }
      if (timed) timings[op].Add(start, cpu_start);
    };
    ductile::RowBatch batch;
    run("dedup", [&] {
      batch = ductile::RowBatch(ids);
      return true;
    });
    const std::vector<Key> keys(batch.keys().begin(), batch.keys().end());
    if (timed) unique_total += keys.size();
    std::vector<float> unique_rows(keys.size() * w), sums(keys.size() * w);
    batch.Sum(grads, FLAGS_width, sums);
    run("pull_rows", [&] { return client.PullRows(*table, ids, rows).ok(); });
    run("pull", [&] { return client.Pull(*table, keys, unique_rows).ok(); });
    run("push_rows", [&] { return client.PushRows(*table, ids, grads).ok(); });
    run("push", [&] { return client.Push(*table, keys, sums).ok(); });
  }
  std::printf("op,ids,unique_mean,width,calls,mean_us,p50_us,p99_us,cpu_us\n");
  for (const char* op : {"pull_rows", "pull", "push_rows", "push", "dedup"}) {
    const Timings& timing = timings[op];
    std::vector<double> us = timing.us;
    std::sort(us.begin(), us.end());
    double sum = 0;
    for (double u : us) sum += u;
    std::printf("%s,%d,%.0f,%d,%zu,%.1f,%.1f,%.1f,%.1f\n", op, FLAGS_ids,
                static_cast<double>(unique_total) / FLAGS_batches, FLAGS_width,
                us.size(), sum / us.size(), us[us.size() / 2],
                us[std::min(us.size() - 1, us.size() * 99 / 100)],
                timing.cpu_us / us.size());
  }
  return 0;
}
