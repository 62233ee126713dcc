// row_policy_bench: what admission and eviction (TableOptions::rows) cost a
// server's apply, and what they keep. One table of rows by id on one
// server's request thread, without the transport: batches of Zipf ids
// (deduplicated and sorted, as workers send them) pushed with AdaGrad, one
// server clock per batch. For each policy it prints the time per pushed
// row (median of --repeats runs), the rows stored at the end, and the rows
// admitted, pushes not admitted and rows evicted.
//
//   row_policy_bench                           # 10^6 ids, 500 batches
//   row_policy_bench --vocabulary=10000000 --batches=200
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gflags/gflags.h"
#include "proto/codec.h"
#include "server/parameter_table.h"

DEFINE_uint64(vocabulary, 1000000, "Distinct ids (1000 to 2^32).");
DEFINE_uint32(batch, 4096, "Ids drawn per batch, before deduplication.");
DEFINE_uint32(batches, 500, "Batches (server clocks) per run.");
DEFINE_uint32(width, 16, "Floats per row.");
DEFINE_double(zipf, 1.05, "Zipf exponent of the ids' popularity.");
DEFINE_int32(repeats, 3, "Runs per policy; the median time is shown.");
DEFINE_int32(num_slots, 4096,
             "Slots the table's ids map to (the admission filter keeps its "
             "counts per slot): the coordinator's default, 1 - 2^20.");

namespace ductile::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct Policy {
  const char* name;
  RowPolicy rows;
};

// The batches' unique ids, ascending, drawn once for every policy.
std::vector<std::vector<Key>> DrawBatches() {
  std::vector<double> cdf(FLAGS_vocabulary);
  double sum = 0;
  for (uint64_t i = 0; i < FLAGS_vocabulary; ++i) {
    sum += 1.0 / std::pow(static_cast<double>(i + 1), FLAGS_zipf);
    cdf[i] = sum;
  }
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(0.0, sum);
  std::vector<std::vector<Key>> batches(FLAGS_batches);
  for (std::vector<Key>& ids : batches) {
    for (uint32_t i = 0; i < FLAGS_batch; ++i) {
      const uint64_t rank = static_cast<uint64_t>(
          std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
      // Hashed ids: spread over 64 bits, as hashed features are.
      ids.push_back((rank + 1) * 0x9e3779b97f4a7c15ULL);
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  }
  return batches;
}

struct Run {
  double ns_per_row = 0;
  size_t rows = 0;
  ParameterTable::RowCounts counts;
};

Run RunOnce(const Policy& policy,
            const std::vector<std::vector<Key>>& batches) {
  TableOptions o;
  o.name = "emb";
  o.value_width = FLAGS_width;
  o.rule = UpdateRule::kAdaGrad;
  o.init.kind = InitKind::kUniform;
  o.rows = policy.rows;
  ParameterTable table(1, o, nullptr);
  table.set_num_slots(FLAGS_num_slots);
  std::vector<float> values;
  uint64_t pushed = 0;
  double seconds = 0;
  int64_t clock = 0;
  for (const std::vector<Key>& ids : batches) {
    values.assign(ids.size() * FLAGS_width, 0.01f);
    wire::Header h;
    h.set_type(wire::PUSH);
    h.set_num_keys(ids.size());
    h.set_values_frames(1);
    const ByteSpan frames[2] = {
        {reinterpret_cast<const uint8_t*>(ids.data()), ids.size() * 8},
        {reinterpret_cast<const uint8_t*>(values.data()), values.size() * 4}};
    DataFrames request;
    if (!request.Parse(h, frames, FLAGS_width, true).ok()) std::abort();
    const auto start = SteadyClock::now();
    table.ApplyPush(request, clock);
    table.SetClock(++clock);
    seconds +=
        std::chrono::duration<double>(SteadyClock::now() - start).count();
    pushed += ids.size();
  }
  return Run{1e9 * seconds / static_cast<double>(pushed), table.size(),
             table.row_counts()};
}

int Main() {
  if (FLAGS_vocabulary < 1000 || FLAGS_vocabulary > (uint64_t{1} << 32) ||
      FLAGS_batch < 1 || FLAGS_batches < 1 || FLAGS_width < 1 ||
      FLAGS_width > 4096 || FLAGS_repeats < 1 || !(FLAGS_zipf > 0) ||
      FLAGS_num_slots < 1 || FLAGS_num_slots > (1 << 20)) {
    std::fprintf(stderr,
                 "--vocabulary in [1000, 2^32], --batch, --batches >= 1, "
                 "--width in [1, 4096], --repeats >= 1, --zipf > 0, "
                 "--num_slots in [1, 2^20]\n");
    return 1;
  }
  const std::vector<std::vector<Key>> batches = DrawBatches();
  uint64_t rows_pushed = 0;
  for (const auto& b : batches) rows_pushed += b.size();
  std::printf(
      "%llu ids, %u batches of %u draws (%.0f unique rows each on "
      "average), width %u, Zipf %.2f\n",
      static_cast<unsigned long long>(FLAGS_vocabulary), FLAGS_batches,
      FLAGS_batch, static_cast<double>(rows_pushed) / FLAGS_batches,
      FLAGS_width, FLAGS_zipf);
  std::vector<Policy> policies(5);
  policies[0].name = "none";
  policies[1].name = "admit after 2";
  policies[1].rows.admit_after_pushes = 2;
  policies[2].name = "idle 50 clocks";
  policies[2].rows.evict_idle_clocks = 50;
  policies[3].name = "budget 10% ids";
  policies[3].rows.max_rows = std::max<uint64_t>(1, FLAGS_vocabulary / 10);
  policies[4].name = "all three";
  policies[4].rows = policies[1].rows;
  policies[4].rows.evict_idle_clocks = 50;
  policies[4].rows.max_rows = policies[3].rows.max_rows;
  std::printf("%-16s %10s %10s %10s %12s %10s %10s\n", "policy", "ns/row",
              "rows", "admitted", "not_admitted", "ev_idle", "ev_budget");
  for (const Policy& p : policies) {
    std::vector<Run> runs;
    for (int r = 0; r < FLAGS_repeats; ++r) runs.push_back(RunOnce(p, batches));
    std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) {
      return a.ns_per_row < b.ns_per_row;
    });
    const Run& m = runs[runs.size() / 2];
    std::printf("%-16s %10.1f %10zu %10llu %12llu %10llu %10llu\n", p.name,
                m.ns_per_row, m.rows,
                static_cast<unsigned long long>(m.counts.admitted),
                static_cast<unsigned long long>(m.counts.dropped_pushes),
                static_cast<unsigned long long>(m.counts.evicted_idle),
                static_cast<unsigned long long>(m.counts.evicted_budget));
  }
  return 0;
}

}  // namespace
}  // namespace ductile::bench

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return ductile::bench::Main();
}
