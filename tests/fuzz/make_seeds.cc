// Writes the fuzzers' seed corpus: valid inputs of each kind, made with the
// real encoders so that they stay valid as the formats change.
//
//   make_seeds OUT_DIR   # OUT_DIR/<fuzzer>/seed-N for every fuzzer
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "ductile/table.h"
#include "proto/ductile.pb.h"
#include "proto/table_config.h"
#include "storage/checkpoint_format.h"
#include "storage/checkpoint_store.h"
#include "tests/fuzz/data_frames_input.h"

namespace ductile::fuzz {
namespace {

using namespace ductile::checkpoint_format;

template <typename T>
std::string Bytes(const std::vector<T>& items) {
  return std::string(reinterpret_cast<const char*>(items.data()),
                     items.size() * sizeof(T));
}

std::vector<std::string> HeaderSeeds() {
  std::vector<std::string> seeds;
  wire::Header push;
  push.set_type(wire::PUSH);
  push.set_seq(7);
  push.set_client_id(12345);
  push.set_table_id(1);
  push.set_num_keys(3);
  push.set_values_frames(1);
  push.set_clock(4);
  seeds.push_back(push.SerializeAsString());
  wire::Header pull = push;
  pull.set_type(wire::PULL);
  pull.set_values_frames(0);
  pull.set_has_lengths(true);
  pull.set_timeout_ms(60000);
  seeds.push_back(pull.SerializeAsString());
  wire::Header reg;
  reg.set_type(wire::REGISTER);
  reg.set_role(wire::ROLE_SERVER);
  reg.set_seq(1);
  seeds.push_back(reg.SerializeAsString());
  wire::Header create;
  create.set_type(wire::CREATE_TABLE);
  TableOptions options;
  options.name = "weights";
  options.value_width = 16;
  options.rule = UpdateRule::kAdam;
  *create.mutable_table() = ToWire(options, 3);
  seeds.push_back(create.SerializeAsString());
  wire::Header reply;
  reply.set_type(wire::CONTROL_REPLY);
  reply.set_seq(9);
  reply.set_status_code(5);
  reply.set_status_message("no table 'x'");
  seeds.push_back(reply.SerializeAsString());
  return seeds;
}

std::vector<std::string> DataFramesSeeds() {
  const std::vector<uint64_t> keys = {1, 5, 9};
  std::vector<std::string> seeds;
  DataFramesInput pull;  // fixed width 2, no lengths
  pull.value_width = 2;
  pull.num_keys = 3;
  pull.frames = {Bytes(keys)};
  seeds.push_back(EncodeDataFramesInput(pull));
  DataFramesInput push = pull;  // one value frame for all
  push.push = true;
  push.frames.push_back(Bytes(std::vector<float>(6, 0.5f)));
  seeds.push_back(EncodeDataFramesInput(push));
  DataFramesInput per_key = pull;  // one value frame per key
  per_key.push = true;
  per_key.frame_per_key = true;
  for (int i = 0; i < 3; ++i) {
    per_key.frames.push_back(Bytes(std::vector<float>(2, 1.0f * i)));
  }
  seeds.push_back(EncodeDataFramesInput(per_key));
  DataFramesInput variable;  // variable width: lengths 1, 3, 2
  variable.push = true;
  variable.has_lengths = true;
  variable.num_keys = 3;
  variable.frames = {Bytes(keys), Bytes(std::vector<float>(6, -2.0f)),
                     Bytes(std::vector<uint32_t>{1, 3, 2})};
  seeds.push_back(EncodeDataFramesInput(variable));
  DataFramesInput empty;  // an empty push
  empty.push = true;
  empty.value_width = 4;
  empty.frames = {"", ""};
  seeds.push_back(EncodeDataFramesInput(empty));
  return seeds;
}

std::vector<std::string> TableConfigSeeds() {
  std::vector<std::string> seeds;
  for (UpdateRule rule :
       {UpdateRule::kAdd, UpdateRule::kSgd, UpdateRule::kMomentum,
        UpdateRule::kAdaGrad, UpdateRule::kAdam}) {
    TableOptions options;
    options.name = "t" + std::to_string(static_cast<int>(rule));
    options.value_width = rule == UpdateRule::kAdd ? 0 : 8;
    options.rule = rule;
    options.consistency.mode = rule == UpdateRule::kAdam
                                   ? ConsistencyMode::kSsp
                                   : ConsistencyMode::kBsp;
    options.consistency.staleness = 3;
    seeds.push_back(ToWire(options, 1).SerializeAsString());
  }
  return seeds;
}

std::vector<std::string> CheckpointRecordSeeds() {
  std::vector<std::string> seeds;
  EntryRecord plain;
  plain.value = {1.0f, 2.0f, 3.0f};
  EntryRecord adam;
  adam.value = {0.5f, -0.5f};
  adam.state = {0.1f, 0.2f, 0.3f, 0.4f};
  adam.steps = 17;
  for (const EntryRecord* e : {&plain, &adam}) {
    std::string bytes;
    EncodeEntryValue(*e, &bytes);
    seeds.push_back(bytes);
  }
  Metadata meta;
  meta.clock = 40;
  meta.epoch = 3;
  meta.entry_count = 2;
  meta.table_count = 1;
  TableOptions options;
  options.name = "w";
  seeds.push_back(
      EncodeMetadata(meta, {{1, ToWire(options, 1).SerializeAsString()}}));
  return seeds;
}

bool Write(const std::filesystem::path& dir,
           const std::vector<std::string>& seeds) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return false;
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream out(dir / ("seed-" + std::to_string(i)), std::ios::binary);
    out << seeds[i];
    if (!out) return false;
  }
  return true;
}

}  // namespace
}  // namespace ductile::fuzz

int main(int argc, char** argv) {
  using namespace ductile::fuzz;
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds OUT_DIR\n");
    return 2;
  }
  const std::filesystem::path out = argv[1];
  if (!Write(out / "header_fuzzer", HeaderSeeds()) ||
      !Write(out / "data_frames_fuzzer", DataFramesSeeds()) ||
      !Write(out / "table_config_fuzzer", TableConfigSeeds()) ||
      !Write(out / "checkpoint_record_fuzzer", CheckpointRecordSeeds())) {
    std::fprintf(stderr, "make_seeds: cannot write under %s\n", argv[1]);
    return 1;
  }
  return 0;
}
