// Fuzzes a table's configuration as it arrives in CREATE_TABLE: any bytes
// are refused cleanly or give options that validate the same way twice
// and survive a round trip through the wire form.
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
  return 0;
}
