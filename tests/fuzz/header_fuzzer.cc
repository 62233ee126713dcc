// Fuzzes the parse of a message's header (frame 0 of every message): any
// bytes are refused cleanly or parse into a header whose clocks and
// timeouts are in range and which survives a round trip.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "proto/codec.h"
#include "proto/ductile.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ductile;
  wire::Header header;
  if (!ParseHeader(ByteSpan(data, size), &header).ok()) return 0;
  if (header.clock() < -1 || header.clock() > kMaxClock) std::abort();
  if (header.timeout_ms() < 0 || header.timeout_ms() > kMaxTimeoutMs) {
    std::abort();
  }
  // What a peer would send back parses again, to the same header.
  const std::string again = header.SerializeAsString();
  wire::Header reparsed;
  if (!ParseHeader(ByteSpan(reinterpret_cast<const uint8_t*>(again.data()),
                            again.size()),
                   &reparsed)
           .ok() ||
      reparsed.SerializeAsString() != again) {
    std::abort();
  }
  // A status carried by it reads without trouble.
  StatusFromWire(header).IgnoreError();
  return 0;
}
