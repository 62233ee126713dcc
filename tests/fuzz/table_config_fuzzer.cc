// Fuzzes a table's configuration as it arrives in CREATE_TABLE: any bytes
// are refused cleanly or give options that validate the same way twice
// and survive a round trip through the wire form, with a learning-rate
// schedule whose factor stays in [0, 1].
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "proto/ductile.pb.h"
#include "proto/table_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ductile;
  wire::TableConfig config;
  if (!config.ParseFromArray(data, static_cast<int>(size))) return 0;
  const TableOptions options = FromWire(config);
  const Status valid = ValidateTableOptions(options);
  if (!valid.ok()) return 0;
  if (!ValidateConsistency(options.consistency).ok()) std::abort();
  // Valid options keep their meaning through the wire form.
  const TableOptions again = FromWire(ToWire(options, config.id()));
  if (!ValidateTableOptions(again).ok() ||
      !SameTable(ToWire(options, 0), ToWire(again, 0))) {
    std::abort();
  }
  // A valid schedule's factor is a number in [0, 1] at every clock.
  const LearningRateSchedule& s = options.lr_schedule;
  for (int64_t clock : {int64_t{0}, s.warmup_clocks - 1, s.warmup_clocks,
                        s.warmup_clocks + s.step_clocks, s.total_clocks,
                        s.total_clocks / 2, int64_t{1} << 40}) {
    const float f = LearningRateFactor(s, clock);
    if (!(f >= 0.0f && f <= 1.0f)) std::abort();
  }
  return 0;
}
