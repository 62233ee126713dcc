// Fuzzes the decoding of a checkpoint store's records, as read back from
// disk after a crash or a bad write: an entry's value and a version's
// metadata. Any bytes are refused with a reason or decode to a record that
// encodes back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "storage/checkpoint_format.h"
#include "storage/checkpoint_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ductile;
  using namespace ductile::checkpoint_format;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  EntryRecord entry;
  if (DecodeEntryValue(bytes, &entry).empty()) {
    std::string again;
    EncodeEntryValue(entry, &again);
    if (again != bytes) std::abort();
  }

  Metadata meta;
  uint32_t stored_crc = 0;
  uint32_t crc = 0;
  DecodeMetadata(bytes, "fuzzed version", &meta, &stored_crc, &crc)
      .IgnoreError();
  return 0;
}
