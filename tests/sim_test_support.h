// What the simulation tests share: quiet logs (thousands of clusters start
// and stop; DUCTILE_SIM_LOGS=1 keeps them, with --v=1 for the nodes'
// details) and the seed counts of the slowest sweeps.
#ifndef DUCTILE_TESTS_SIM_TEST_SUPPORT_H_
#define DUCTILE_TESTS_SIM_TEST_SUPPORT_H_

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "glog/logging.h"
#include "gtest/gtest.h"

namespace ductile::sim::testing {

class QuietLogs : public ::testing::Environment {
 public:
  void SetUp() override {
    if (std::getenv("DUCTILE_SIM_LOGS") == nullptr) {
      FLAGS_minloglevel = google::GLOG_ERROR;
    }
  }
};
inline const auto* const kQuietLogs =
    ::testing::AddGlobalTestEnvironment(new QuietLogs);

// The seeds 1..`n` of one of the slowest tests, or the first n / D of them
// (at least 1) with DUCTILE_SIM_SEED_DIVISOR=D: the sanitizer run of CI
// takes a twelfth, since its slowdown makes these tests minutes long, and
// the uninstrumented run takes every seed.
inline uint64_t SlowTestSeeds(uint64_t n) {
  const char* v = std::getenv("DUCTILE_SIM_SEED_DIVISOR");
  const uint64_t divisor =
      v != nullptr ? std::max<uint64_t>(1, std::strtoull(v, nullptr, 10)) : 1;
  return std::max<uint64_t>(1, n / divisor);
}

}  // namespace ductile::sim::testing

#endif  // DUCTILE_TESTS_SIM_TEST_SUPPORT_H_
