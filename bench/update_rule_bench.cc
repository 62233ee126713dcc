// update_rule_bench: how fast a server applies each update rule to a large
// value, at 1..N threads, next to memcpy on the same threads in the same
// run. A server cuts a large push into pieces that its apply threads run
// at once (ServerOptions::apply_threads); this runs those same kernels and
// pieces without the transport.
//
// GB/s counts the bytes a rule must move through memory once: the gradient
// read, the value read and written, and each optimizer-state float read
// and written (SGD 12 bytes per float, momentum and AdaGrad 20, Adam 28);
// memcpy counts its read and its write (8 bytes per float).
//
//   update_rule_bench                      # 16M floats, 1, 2, 4, 8 threads
//   update_rule_bench --floats=67108864 --threads=1,4,16
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "gflags/gflags.h"
#include "util/parallel_runner.h"
#include "util/update_rule.h"

DEFINE_uint64(floats, uint64_t{1} << 24, "Floats per value (1024 to 2^30).");
DEFINE_string(threads, "1,2,4,8", "Thread counts, comma-separated (1-256).");
DEFINE_int32(repeats, 7, "Timed applies per point; the median is shown.");

namespace ductile::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Rule {
  const char* name;
  UpdateRule rule;  // kCustom stands for memcpy here
  int bytes_per_float;
};

int Main() {
  const uint64_t n = FLAGS_floats;
  if (n < 1024 || n > (uint64_t{1} << 30) || FLAGS_repeats < 1) {
    std::fprintf(stderr, "--floats must be in [1024, 2^30], --repeats >= 1\n");
    return 1;
  }
  std::vector<int> counts;
  std::stringstream ts(FLAGS_threads);
  for (std::string t; std::getline(ts, t, ',');) {
    const int c = std::atoi(t.c_str());
    if (c < 1 || c > 256) {
      std::fprintf(stderr, "--threads: '%s' is not in [1, 256]\n", t.c_str());
      return 1;
    }
    counts.push_back(c);
  }
  const Rule rules[] = {{"memcpy", UpdateRule::kCustom, 8},
                        {"add", UpdateRule::kAdd, 12},
                        {"sgd", UpdateRule::kSgd, 12},
                        {"momentum", UpdateRule::kMomentum, 20},
                        {"adagrad", UpdateRule::kAdaGrad, 20},
                        {"adam", UpdateRule::kAdam, 28}};
  // Values that keep every rule finite: w in [-1, 1], g small.
  std::vector<float> w(n), g(n),
      state(2 * n + UpdateRuleKernel::AdamGap(n), 0.0f);
  for (uint64_t i = 0; i < n; ++i) {
    w[i] = static_cast<float>(static_cast<int64_t>(i % 2001) - 1000) / 1000;
    g[i] = static_cast<float>(static_cast<int64_t>(i % 7) - 3) * 1e-3f;
  }
  std::printf("%llu floats (%.0f MB per array)\n",
              static_cast<unsigned long long>(n), n * 4 / 1e6);
  std::printf("%-9s %7s %9s %8s %11s\n", "rule", "threads", "ms", "GB/s",
              "of memcpy");
  for (int threads : counts) {
    ParallelRunner runner(threads);
    const size_t pieces = static_cast<size_t>(threads) * 4;
    const size_t piece = (n + pieces - 1) / pieces;
    double memcpy_gbs = 0;
    for (const Rule& r : rules) {
      TableOptions o;
      o.name = r.name;
      o.rule = r.rule == UpdateRule::kCustom ? UpdateRule::kAssign : r.rule;
      o.learning_rate = 1e-3f;
      UpdateRuleKernel kernel(o, nullptr);
      std::vector<float> copy(r.rule == UpdateRule::kCustom ? n : 0);
      std::span<float> st(state.data(), kernel.state_floats(n));
      int64_t steps = 0;
      std::vector<double> ms;
      for (int rep = 0; rep < FLAGS_repeats + 1; ++rep) {
        ++steps;
        const auto start = SteadyClock::now();
        runner.Run(pieces, [&](size_t p) {
          const size_t b = std::min<size_t>(n, p * piece);
          const size_t e = std::min<size_t>(n, b + piece);
          if (r.rule == UpdateRule::kCustom) {
            std::memcpy(copy.data() + b, w.data() + b, (e - b) * 4);
          } else {
            kernel.ApplyRange(w, g, st, steps, 1.0f, b, e);
          }
        });
        const double t = std::chrono::duration<double, std::milli>(
                             SteadyClock::now() - start)
                             .count();
        if (rep > 0) ms.push_back(t);  // the first touches the pages
      }
      const double m = Median(ms);
      const double gbs = static_cast<double>(n) * r.bytes_per_float / m / 1e6;
      if (r.rule == UpdateRule::kCustom) memcpy_gbs = gbs;
      std::printf("%-9s %7d %9.2f %8.1f %10.0f%%\n", r.name, threads, m, gbs,
                  100 * gbs / memcpy_gbs);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace ductile::bench

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "update rules' GB/s at 1..N threads against memcpy in the same run");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return ductile::bench::Main();
}
