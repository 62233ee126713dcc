// client_call_bench: what one blocking PushPull of a dense tensor costs a
// C++ caller, against a running cluster; the reference for the Python
// package's cost (bench/python_call_bench.py runs both against the same
// cluster).
//
// For each size it registers a dense tensor of size / 4 floats (a kAdd
// table, chunks of 32768 floats), runs --warmup calls, then times --iters
// calls one at a time and prints one CSV line per size:
//   impl,size_bytes,iters,mean_us,p50_us,p99_us,cpu_us
// where cpu_us is the calling thread's CPU time per timed call (what the
// caller itself spends, apart from waiting; the client's I/O thread is
// not in it).
//
//   client_call_bench --coordinator=tcp://127.0.0.1:7000
//       --sizes=1024,16777216 --iters=2000,50   (one command line)
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "ductile/client.h"
#include "gflags/gflags.h"

DEFINE_string(coordinator, "tcp://127.0.0.1:7000", "coordinator address");
DEFINE_string(sizes, "1024,16777216", "tensor sizes in bytes");
DEFINE_string(iters, "2000,50", "timed calls per size (one per size)");
DEFINE_int32(warmup, 20, "untimed calls before each size's timed ones");
DEFINE_string(prefix, "cpp", "prefix of the tensors' names");

namespace {

std::vector<uint64_t> ParseList(const std::string& text) {
  std::vector<uint64_t> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) values.push_back(std::stoull(item));
  return values;
}

double ThreadCpuUs() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  const std::vector<uint64_t> sizes = ParseList(FLAGS_sizes);
  const std::vector<uint64_t> iters = ParseList(FLAGS_iters);
  if (sizes.size() != iters.size()) {
    std::fprintf(stderr, "--sizes and --iters must have as many entries\n");
    return 2;
  }
  ductile::ClientOptions options;
  options.coordinator_address = FLAGS_coordinator;
  options.register_as_worker = false;
  auto client = ductile::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.status().ToString().c_str());
    return 1;
  }
  for (size_t s = 0; s < sizes.size(); ++s) {
    const uint64_t floats = sizes[s] / sizeof(float);
    ductile::TableOptions table;
    table.name = FLAGS_prefix + "_" + std::to_string(sizes[s]);
    table.rule = ductile::UpdateRule::kAdd;
    auto tensor = (*client)->RegisterTensor(table, floats);
    if (!tensor.ok()) {
      std::fprintf(stderr, "%s\n", tensor.status().ToString().c_str());
      return 1;
    }
    std::vector<float> values(floats, 0.0f), out(floats);
    std::vector<double> us;
    double cpu_start = 0;
    for (uint64_t i = 0; i < FLAGS_warmup + iters[s]; ++i) {
      if (i == static_cast<uint64_t>(FLAGS_warmup)) cpu_start = ThreadCpuUs();
      const auto start = std::chrono::steady_clock::now();
      ductile::Status status = (*client)
                                   ->PushPullAsync(tensor->table, tensor->keys,
                                                   values, out, tensor->lengths)
                                   .Wait();
      const auto end = std::chrono::steady_clock::now();
      if (!status.ok()) {
        std::fprintf(stderr, "%s\n", status.ToString().c_str());
        return 1;
      }
      if (i >= static_cast<uint64_t>(FLAGS_warmup)) {
        us.push_back(
            std::chrono::duration<double, std::micro>(end - start).count());
      }
    }
    const double cpu_us = (ThreadCpuUs() - cpu_start) / iters[s];
    double sum = 0;
    for (double u : us) sum += u;
    std::sort(us.begin(), us.end());
    std::printf("cpp,%llu,%zu,%.1f,%.1f,%.1f,%.1f\n",
                static_cast<unsigned long long>(sizes[s]), us.size(),
                sum / us.size(), us[us.size() / 2], us[us.size() * 99 / 100],
                cpu_us);
    std::fflush(stdout);
  }
  return 0;
}
