// The input format of data_frames_fuzzer, shared with make_seeds:
//   byte 0   bit 0: a push (values expected); bit 1: the header announces a
//            lengths frame; bit 2: one value frame per key (else one for
//            all); bits 3-7: the table's value width (0: variable)
//   byte 1   num_keys in the header (0-255)
//   then     frames, each a 2-byte little-endian size and that many bytes
//            (a size past the end takes what is left)
// so that random bytes make requests of every shape, right and wrong.
#ifndef DUCTILE_TESTS_FUZZ_DATA_FRAMES_INPUT_H_
#define DUCTILE_TESTS_FUZZ_DATA_FRAMES_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ductile::fuzz {

struct DataFramesInput {
  bool push = false;
  bool has_lengths = false;
  bool frame_per_key = false;
  uint32_t value_width = 0;  // 0-31
  uint32_t num_keys = 0;     // 0-255
  std::vector<std::string> frames;
};

inline DataFramesInput DecodeDataFramesInput(const uint8_t* data, size_t size) {
  DataFramesInput in;
  if (size < 2) return in;
  in.push = data[0] & 1;
  in.has_lengths = data[0] & 2;
  in.frame_per_key = data[0] & 4;
  in.value_width = data[0] >> 3;
  in.num_keys = data[1];
  size_t at = 2;
  while (at + 2 <= size) {
    size_t n = data[at] | (size_t{data[at + 1]} << 8);
    at += 2;
    if (n > size - at) n = size - at;
    in.frames.emplace_back(reinterpret_cast<const char*>(data + at), n);
    at += n;
  }
  return in;
}

inline std::string EncodeDataFramesInput(const DataFramesInput& in) {
  std::string out;
  out.push_back(static_cast<char>((in.push ? 1 : 0) | (in.has_lengths ? 2 : 0) |
                                  (in.frame_per_key ? 4 : 0) |
                                  (in.value_width << 3)));
  out.push_back(static_cast<char>(in.num_keys));
  for (const std::string& f : in.frames) {
    out.push_back(static_cast<char>(f.size() & 0xff));
    out.push_back(static_cast<char>((f.size() >> 8) & 0xff));
    out += f;
  }
  return out;
}

}  // namespace ductile::fuzz

#endif  // DUCTILE_TESTS_FUZZ_DATA_FRAMES_INPUT_H_
