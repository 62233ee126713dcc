// What the example scripts and `ductile local` print, as the end-to-end
// tests of the examples read it.
#ifndef DUCTILE_TESTS_EXAMPLE_OUTPUT_H_
#define DUCTILE_TESTS_EXAMPLE_OUTPUT_H_

#include <iterator>
#include <regex>
#include <string>

#include "gtest/gtest.h"

namespace ductile::testing {

// The batches the workers trained that the job kept, as they printed them
// ("worker R trained N batches"), summed.
inline int BatchesTrained(const std::string& output) {
  int sum = 0;
  const std::regex line("worker [0-9]+ trained ([0-9]+) batches");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line);
       it != std::sregex_iterator(); ++it) {
    sum += std::stoi((*it)[1].str());
  }
  return sum;
}

// A resize of the workers 2 -> 3 -> 1 as `ductile local` and the workers
// print it: a third worker started, the shrink, two workers that left the
// job when asked, and the job done.
inline void ExpectResized2To3To1(const std::string& output) {
  for (const char* line : {"workers 2 -> 3 at clock", "started worker 2;",
                           "workers 3 -> 1 at clock", "ductile local: done"}) {
    EXPECT_NE(output.find(line), std::string::npos) << line << "\n" << output;
  }
  const std::regex left("worker [0-9]+ left the job at clock [0-9]+");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(output.begin(), output.end(), left),
                    std::sregex_iterator()),
      2)
      << output;
}

}  // namespace ductile::testing

#endif  // DUCTILE_TESTS_EXAMPLE_OUTPUT_H_
