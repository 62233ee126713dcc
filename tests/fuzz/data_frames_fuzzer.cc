// Fuzzes the validation of a data request's frames (DataFrames::Parse):
// whatever the frames, the parse is refused cleanly or every view it
// returns lies within the frames and agrees with the request-shape check
// the client runs before sending.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "proto/codec.h"
#include "proto/ductile.pb.h"
#include "tests/fuzz/data_frames_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ductile;
  const fuzz::DataFramesInput in = fuzz::DecodeDataFramesInput(data, size);
  wire::Header header;
  header.set_type(in.push ? wire::PUSH : wire::PULL);
  header.set_num_keys(in.num_keys);
  header.set_has_lengths(in.has_lengths);
  if (in.push) header.set_values_frames(in.frame_per_key ? in.num_keys : 1);
  std::vector<ByteSpan> frames;
  for (const std::string& f : in.frames) {
    frames.emplace_back(reinterpret_cast<const uint8_t*>(f.data()), f.size());
  }
  DataFrames parsed;
  if (!parsed.Parse(header, frames, in.value_width, in.push).ok()) return 0;

  if (parsed.keys().size() != in.num_keys) std::abort();
  uint64_t total = 0;
  volatile float sink = 0;
  for (size_t i = 0; i < parsed.keys().size(); ++i) {
    total += parsed.length(i);
    if (in.push) {
      std::span<const float> v = parsed.value(i);
      if (v.size() != parsed.length(i)) std::abort();
      for (float f : v) sink = sink + f;  // reads every float (ASan)
    }
  }
  if (total != parsed.total_floats()) std::abort();
  // The shape the server accepted is one the client accepts too (but for
  // an empty request, which the client refuses to build when it names no
  // lengths for a variable-width table: nothing to check there).
  if (!parsed.keys().empty() &&
      !CheckRequestShape(parsed.keys(), parsed.lengths(), in.value_width, total,
                         "values")
           .ok()) {
    std::abort();
  }
  return 0;
}
