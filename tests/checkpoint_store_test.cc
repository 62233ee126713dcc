// CheckpointStore: durable, incremental, verified checkpoints of a server.
#include "storage/checkpoint_store.h"

#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "storage/checkpoint_format.h"

namespace ductile {
namespace {

namespace fs = std::filesystem;

using ::testing::HasSubstr;

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "ckpt_test_XXXXXX");
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

float FloatFromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Deterministic floats, with the values that a non-bitwise round trip would
// lose: NaN payloads, a signalling NaN, -0, infinities, subnormals.
std::vector<float> Floats(uint64_t seed, size_t n) {
  static const uint32_t kSpecial[] = {0x7fc12345u, 0x7f800001u, 0x80000000u,
                                      0x7f800000u, 0xff800000u, 0x00000001u};
  std::vector<float> out(n);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = (i % 7 == 3) ? FloatFromBits(kSpecial[(x >> 8) % 6])
                          : FloatFromBits(static_cast<uint32_t>(x >> 11));
  }
  return out;
}

EntryRecord Entry(TableId table, Key key, uint64_t version, size_t width,
                  size_t state_width) {
  EntryRecord e;
  e.table = table;
  e.key = key;
  e.value = Floats(key * 31 + table * 7 + version, width);
  e.state = Floats(key * 17 + table * 3 + version + 1000, state_width);
  e.steps = static_cast<int64_t>(key * 1000 + version) - 5;
  return e;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

// What a table should hold: (table, key) -> entry.
using State = std::map<std::pair<TableId, Key>, EntryRecord>;

void Apply(State* state, const std::vector<EntryRecord>& changed,
           const std::vector<std::pair<TableId, Key>>& deleted = {}) {
  for (const EntryRecord& e : changed) (*state)[{e.table, e.key}] = e;
  for (const auto& k : deleted) state->erase(k);
}

void ExpectHolds(const LoadedCheckpoint& loaded, const State& expected) {
  ASSERT_EQ(loaded.entries.size(), expected.size());
  auto it = expected.begin();
  for (const EntryRecord& got : loaded.entries) {
    const EntryRecord& want = it->second;
    ++it;
    ASSERT_EQ(got.table, want.table);
    ASSERT_EQ(got.key, want.key);
    EXPECT_TRUE(SameBits(got.value, want.value))
        << "value of (" << got.table << ", " << got.key << ")";
    EXPECT_TRUE(SameBits(got.state, want.state))
        << "state of (" << got.table << ", " << got.key << ")";
    EXPECT_EQ(got.steps, want.steps);
  }
}

std::vector<TableRecord> TwoTables() {
  return {TableRecord{1, "adam lr=0.001"},
          TableRecord{7, std::string("\0binary\xff", 8)}};
}

std::unique_ptr<CheckpointStore> OpenStore(const fs::path& dir,
                                           int keep_last = 3,
                                           uint64_t min_free_bytes = 0) {
  CheckpointStoreOptions options;
  options.dir = dir.string();
  options.keep_last = keep_last;
  options.min_free_bytes = min_free_bytes;
  Result<std::unique_ptr<CheckpointStore>> store =
      CheckpointStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(store).value() : nullptr;
}

// Writes a full first checkpoint at `clock` (100 keys in table 1, 50 in 7).
State WriteInitial(CheckpointStore* store, int64_t clock) {
  std::vector<EntryRecord> entries;
  for (Key k = 0; k < 100; ++k) entries.push_back(Entry(1, k * 3, 0, 8, 16));
  for (Key k = 0; k < 50; ++k) entries.push_back(Entry(7, k, 0, 33, 0));
  EXPECT_TRUE(
      store->WriteCheckpoint(clock, 1, TwoTables(), entries, {}, "b0").ok());
  State state;
  Apply(&state, entries);
  return state;
}

// Writes checkpoint `clock` changing keys [first, first + n) of table 1 to
// `version` (new keys included).
void WriteChange(CheckpointStore* store, State* state, int64_t clock, Key first,
                 Key n, uint64_t version) {
  std::vector<EntryRecord> changed;
  for (Key k = first; k < first + n; ++k) {
    changed.push_back(Entry(1, k, version, 8, 16));
  }
  Status s = store->WriteCheckpoint(clock, 1, {}, changed, {},
                                    "b" + std::to_string(clock));
  ASSERT_TRUE(s.ok()) << s;
  Apply(state, changed);
}

fs::path VersionDir(const fs::path& dir, int64_t clock) {
  return dir / "checkpoints" / std::to_string(clock);
}

// Replaces a file by a new one (never writing through a hard link, which
// other versions and live/ share).
void ReplaceFile(const fs::path& path, const std::string& content) {
  fs::remove(path);
  std::ofstream(path, std::ios::binary) << content;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The version's newest SST file: the one written by its own checkpoint.
fs::path NewestSst(const fs::path& version) {
  std::vector<fs::path> ssts;
  for (const auto& f : fs::directory_iterator(version)) {
    if (f.path().extension() == ".sst") ssts.push_back(f.path());
  }
  EXPECT_FALSE(ssts.empty());
  std::sort(ssts.begin(), ssts.end());
  return ssts.empty() ? fs::path() : ssts.back();
}

fs::path Manifest(const fs::path& version) {
  for (const auto& f : fs::directory_iterator(version)) {
    if (f.path().filename().string().starts_with("MANIFEST-")) return f.path();
  }
  ADD_FAILURE() << "no MANIFEST in " << version;
  return fs::path();
}

enum class Damage {
  kCurrentGarbage,
  kManifestGarbage,
  kSstTruncated,
  kSstBytesOverwritten,
  kSstMissing,
};

void DamageVersion(const fs::path& version, Damage damage) {
  switch (damage) {
    case Damage::kCurrentGarbage:
      ReplaceFile(version / "CURRENT", "garbage\n");
      break;
    case Damage::kManifestGarbage: {
      const fs::path manifest = Manifest(version);
      ReplaceFile(manifest, std::string(fs::file_size(manifest), '\x5a'));
      break;
    }
    case Damage::kSstTruncated: {
      const fs::path sst = NewestSst(version);
      std::string bytes = ReadFile(sst);
      ReplaceFile(sst, bytes.substr(0, bytes.size() / 2));
      break;
    }
    case Damage::kSstBytesOverwritten: {
      // Same size, garbage inside the first data block.
      const fs::path sst = NewestSst(version);
      std::string bytes = ReadFile(sst);
      ASSERT_GT(bytes.size(), 600u);
      for (size_t i = 100; i < 600; ++i) bytes[i] = static_cast<char>(i * 37);
      ReplaceFile(sst, bytes);
      break;
    }
    case Damage::kSstMissing:
      fs::remove(NewestSst(version));
      break;
  }
}

TEST(CheckpointStore, SaveThenLoadIsBitwiseIdenticalAcrossTables) {
  TempDir tmp;
  auto store = OpenStore(tmp.path());
  ASSERT_NE(store, nullptr);
  std::vector<EntryRecord> entries;
  for (Key k = 0; k < 200; ++k) entries.push_back(Entry(1, k * 977, 0, 8, 16));
  for (Key k = 0; k < 30; ++k) entries.push_back(Entry(7, ~k, 0, 129, 3));
  entries.push_back(Entry(7, 5, 0, 0, 0));  // empty value and state
  const std::string blob("worker clocks\0cursors\x80", 23);
  ASSERT_TRUE(
      store->WriteCheckpoint(10, 42, TwoTables(), entries, {}, blob).ok());
  State expected;
  Apply(&expected, entries);

  Result<LoadedCheckpoint> loaded = store->Load(10);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->clock, 10);
  EXPECT_EQ(loaded->epoch, 42u);
  EXPECT_EQ(loaded->blob, blob);
  ASSERT_EQ(loaded->tables.size(), 2u);
  EXPECT_EQ(loaded->tables[0].id, 1u);
  EXPECT_EQ(loaded->tables[0].config, "adam lr=0.001");
  EXPECT_EQ(loaded->tables[1].id, 7u);
  EXPECT_EQ(loaded->tables[1].config, std::string("\0binary\xff", 8));
  EXPECT_TRUE(loaded->warnings.empty());
  ExpectHolds(*loaded, expected);

  Result<LoadedCheckpoint> latest = store->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->clock, 10);
  ExpectHolds(*latest, expected);
}

// Filter records (a table's admission counts by slot) are written with
// the checkpoint, kept by later ones until deleted (empty counts), and
// checked like entries.
TEST(CheckpointStore, FilterRecordsAreKeptUntilDeletedAndChecked) {
  TempDir dir;
  auto store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  WriteInitial(store.get(), 10);
  const std::vector<FilterRecord> first = {
      {1, 3, std::string("abc\0d", 5)}, {1, 0, "x"}, {7, 3, "seven"}};
  ASSERT_TRUE(store->WriteCheckpoint(20, 1, {}, {}, {}, first, "b").ok());
  Status s = store->WriteCheckpoint(30, 1, {}, {}, {},
                                    {{1, 3, "new"}, {7, 3, ""}}, "b");
  ASSERT_TRUE(s.ok()) << s;
  auto slots = [](const LoadedCheckpoint& c) {
    std::vector<std::string> out;
    for (const FilterRecord& f : c.filters) {
      out.push_back(std::to_string(f.table) + "/" + std::to_string(f.slot) +
                    "=" + f.counts);
    }
    return out;
  };
  Result<LoadedCheckpoint> ten = store->Load(10);
  ASSERT_TRUE(ten.ok()) << ten.status();
  EXPECT_TRUE(ten->filters.empty());
  Result<LoadedCheckpoint> twenty = store->Load(20);
  ASSERT_TRUE(twenty.ok()) << twenty.status();
  EXPECT_EQ(slots(*twenty),
            (std::vector<std::string>{"1/0=x", std::string("1/3=abc\0d", 9),
                                      "7/3=seven"}));
  EXPECT_EQ(twenty->entries.size(), 150u);
  Result<LoadedCheckpoint> thirty = store->Load(30);
  ASSERT_TRUE(thirty.ok()) << thirty.status();
  EXPECT_EQ(slots(*thirty), (std::vector<std::string>{"1/0=x", "1/3=new"}));
  // A rollback's copy of a version keeps them.
  ASSERT_TRUE(store->RollBackTo(20).ok());
  ASSERT_TRUE(store->WriteCheckpoint(40, 1, {}, {}, {}, {}, "b").ok());
  Result<LoadedCheckpoint> forty = store->Load(40);
  ASSERT_TRUE(forty.ok()) << forty.status();
  EXPECT_EQ(slots(*forty), slots(*twenty));
  // Refused, nothing written: a slot twice, a table with no record, a
  // negative slot.
  for (const std::vector<FilterRecord>& bad :
       std::vector<std::vector<FilterRecord>>{
           {{1, 2, "a"}, {1, 2, ""}}, {{9, 0, "a"}}, {{1, -1, "a"}}}) {
    s = store->WriteCheckpoint(50, 1, {}, {}, {}, bad, "b");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  }
  EXPECT_EQ(store->Load(50).status().code(), StatusCode::kNotFound);
}

// The metadata of format versions 1 and 2 (checkpoints written before
// filter records existed, then before the metadata counted them) is read;
// a version newer than this build's is refused by its number.
TEST(CheckpointFormat, OlderMetadataIsReadAndNewerVersionsRefused) {
  namespace cf = checkpoint_format;
  cf::Metadata meta;
  meta.clock = 4;
  meta.epoch = 2;
  meta.entry_count = 3;
  meta.table_count = 1;
  meta.blob = "blob";
  meta.filter_count = 5;
  const std::map<TableId, std::string> tables = {{1, "config"}};
  auto record = [&](uint32_t version) {
    std::string r = cf::EncodeMetadata(meta, tables);
    std::string head;
    cf::PutFixed32(&head, version);
    r.replace(0, 4, head);
    r.resize(r.size() - cf::kCrcSize);
    // Versions 1 and 2 end with the blob.
    if (version < 3) r.resize(r.size() - cf::kFilterCountSize);
    cf::PutFixed32(&r,
                   cf::ExtendCrcWithTable(cf::Crc32cExtend(0, r), 1, "config"));
    return r;
  };
  EXPECT_EQ(record(cf::kFormatVersion), cf::EncodeMetadata(meta, tables));
  for (uint32_t version : {1u, 2u, 3u}) {
    cf::Metadata got;
    uint32_t stored_crc = 0, crc = 0;
    Status s =
        cf::DecodeMetadata(record(version), "v", &got, &stored_crc, &crc);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(cf::ExtendCrcWithTable(crc, 1, "config"), stored_crc);
    EXPECT_EQ(got.clock, 4);
    EXPECT_EQ(got.entry_count, 3u);
    EXPECT_EQ(got.blob, "blob");
    EXPECT_EQ(got.filter_count,
              version < 3 ? std::nullopt : std::optional<uint32_t>(5));
  }
  // A version 3 record cut to version 2's length, or the reverse, is
  // corrupt.
  std::string two_as_three = record(2);
  two_as_three.replace(0, 4, record(3).substr(0, 4));
  cf::Metadata got;
  uint32_t stored_crc = 0, crc = 0;
  Status s = cf::DecodeMetadata(two_as_three, "v", &got, &stored_crc, &crc);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("wrong size"));
  s = cf::DecodeMetadata(record(4), "checkpoint at clock 4", &got, &stored_crc,
                         &crc);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("format version 4"));
  EXPECT_THAT(s.message(), HasSubstr("reads 1 to 3"));
}

// The metadata counts the filter records: a version that lost one is
// corrupt (rather than read as a slot with no counts), and the count
// follows puts and deletes across versions, a reopening and a rollback.
TEST(CheckpointStore, AVersionMissingAFilterRecordIsCorrupt) {
  TempDir dir;
  {
    auto store = OpenStore(dir.path());
    ASSERT_NE(store, nullptr);
    WriteInitial(store.get(), 10);
    ASSERT_TRUE(store
                    ->WriteCheckpoint(20, 1, {}, {}, {},
                                      {{1, 0, "a"}, {1, 3, "b"}, {7, 1, "c"}},
                                      "b")
                    .ok());
    // One deleted, one replaced, one new, one absent deleted.
    ASSERT_TRUE(store
                    ->WriteCheckpoint(
                        30, 1, {}, {}, {},
                        {{1, 0, ""}, {1, 3, "B"}, {7, 2, "d"}, {7, 9, ""}}, "b")
                    .ok());
  }
  auto store = OpenStore(dir.path());  // counts live/'s records again
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(
      store->WriteCheckpoint(40, 1, {}, {}, {}, {{7, 5, "e"}}, "b").ok());
  auto expect_filters = [&](int64_t clock, size_t count) {
    Result<LoadedCheckpoint> loaded = store->Load(clock);
    ASSERT_TRUE(loaded.ok()) << clock << ": " << loaded.status();
    EXPECT_EQ(loaded->filters.size(), count) << clock;
  };
  expect_filters(20, 3);
  expect_filters(30, 3);
  expect_filters(40, 4);
  ASSERT_TRUE(store->RollBackTo(20).ok());
  ASSERT_TRUE(
      store->WriteCheckpoint(50, 1, {}, {}, {}, {{1, 3, ""}}, "b").ok());
  expect_filters(50, 2);

  // A copy of version 50 with one filter record deleted.
  TempDir copy;
  fs::create_directories(copy.path() / "checkpoints");
  fs::copy(VersionDir(dir.path(), 50), VersionDir(copy.path(), 50),
           fs::copy_options::recursive);
  {
    rocksdb::DB* raw = nullptr;
    rocksdb::Options options;
    rocksdb::Status rs =
        rocksdb::DB::Open(options, VersionDir(copy.path(), 50).string(), &raw);
    ASSERT_TRUE(rs.ok()) << rs.ToString();
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(
        db->Delete(rocksdb::WriteOptions(), checkpoint_format::FilterKey(7, 1))
            .ok());
    ASSERT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
    ASSERT_TRUE(db->Close().ok());
  }
  Result<LoadedCheckpoint> damaged = LoadCheckpointFrom(copy.path(), 50);
  EXPECT_EQ(damaged.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(damaged.status().message(),
              HasSubstr("holds 1 filter records, its metadata says 2"));
}

TEST(CheckpointStore, AnIncrementalCheckpointStillLoadsTheFullState) {
  TempDir tmp;
  auto store = OpenStore(tmp.path());
  ASSERT_NE(store, nullptr);
  State at10 = WriteInitial(store.get(), 10);
  State at20 = at10;
  // Keys 0..299 of table 1: a third existed (multiples of 3), the rest new.
  WriteChange(store.get(), &at20, 20, 0, 300, 1);
  // A config change of one table, no entries.
  ASSERT_TRUE(
      store->WriteCheckpoint(30, 2, {TableRecord{7, "sgd"}}, {}, {}, "b30")
          .ok());

  Result<LoadedCheckpoint> loaded = store->Load(20);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->blob, "b20");
  ExpectHolds(*loaded, at20);
  // Unchanged keys came along, table 7 entirely.
  EXPECT_EQ(at20.size(), 300u + 50u);

  Result<LoadedCheckpoint> latest = store->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->clock, 30);
  EXPECT_EQ(latest->epoch, 2u);
  ASSERT_EQ(latest->tables.size(), 2u);
  EXPECT_EQ(latest->tables[0].config, "adam lr=0.001");
  EXPECT_EQ(latest->tables[1].config, "sgd");
  ExpectHolds(*latest, at20);

  // Frozen versions do not change when later ones are written.
  Result<LoadedCheckpoint> first = store->Load(10);
  ASSERT_TRUE(first.ok()) << first.status();
  ExpectHolds(*first, at10);
}

TEST(CheckpointStore, DeletedKeysAreGoneFromLaterCheckpointsOnly) {
  TempDir tmp;
  auto store = OpenStore(tmp.path());
  ASSERT_NE(store, nullptr);
  State at10 = WriteInitial(store.get(), 10);
  State at20 = at10;
  const std::vector<std::pair<TableId, Key>> deleted = {
      {1, 0}, {1, 3}, {7, 49}, {7, 1000} /* absent: ignored */};
  const std::vector<EntryRecord> changed = {Entry(1, 6, 5, 8, 16)};
  ASSERT_TRUE(store->WriteCheckpoint(20, 1, {}, changed, deleted, "").ok());
  Apply(&at20, changed, deleted);

  Result<LoadedCheckpoint> latest = store->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ExpectHolds(*latest, at20);
  EXPECT_EQ(latest->entries.size(), at10.size() - 3);
  Result<LoadedCheckpoint> first = store->Load(10);
  ASSERT_TRUE(first.ok()) << first.status();
  ExpectHolds(*first, at10);
}

TEST(CheckpointStore, KeepLastPrunesTheOldestVersions) {
  TempDir tmp;
  auto store = OpenStore(tmp.path(), /*keep_last=*/2);
  ASSERT_NE(store, nullptr);
  State state = WriteInitial(store.get(), 10);
  WriteChange(store.get(), &state, 20, 0, 10, 1);
  WriteChange(store.get(), &state, 30, 5, 10, 2);
  WriteChange(store.get(), &state, 40, 50, 10, 3);

  Result<std::vector<int64_t>> clocks = store->ListCheckpoints();
  ASSERT_TRUE(clocks.ok()) << clocks.status();
  EXPECT_EQ(*clocks, (std::vector<int64_t>{30, 40}));
  EXPECT_FALSE(fs::exists(VersionDir(tmp.path(), 10)));
  EXPECT_FALSE(fs::exists(VersionDir(tmp.path(), 20)));
  EXPECT_EQ(store->Load(10).status().code(), StatusCode::kNotFound);
  // What remains is complete: pruning removed links, not shared data.
  Result<LoadedCheckpoint> latest = store->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ExpectHolds(*latest, state);
}

// A version of a checkpoint that never completed elsewhere is dropped: the
// ones kept stay complete and count towards keep_last without it.
TEST(CheckpointStore, ADroppedVersionIsGoneAndTheOthersStayWhole) {
  TempDir tmp;
  auto store = OpenStore(tmp.path(), /*keep_last=*/2);
  ASSERT_NE(store, nullptr);
  State state = WriteInitial(store.get(), 10);
  WriteChange(store.get(), &state, 20, 0, 10, 1);
  ASSERT_TRUE(store->DropCheckpoint(20).ok());
  ASSERT_TRUE(store->DropCheckpoint(25).ok());  // none there: fine
  Result<std::vector<int64_t>> clocks = store->ListCheckpoints();
  ASSERT_TRUE(clocks.ok()) << clocks.status();
  EXPECT_EQ(*clocks, (std::vector<int64_t>{10}));
  WriteChange(store.get(), &state, 30, 5, 10, 2);
  clocks = store->ListCheckpoints();
  ASSERT_TRUE(clocks.ok());
  EXPECT_EQ(*clocks, (std::vector<int64_t>{10, 30}));
  // live/ kept the dropped version's changes: the next version has them.
  Result<LoadedCheckpoint> latest = store->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ExpectHolds(*latest, state);
}

class CheckpointStoreDamage : public ::testing::TestWithParam<Damage> {};

TEST_P(CheckpointStoreDamage, ADamagedNewestVersionFallsBackToTheOneBefore) {
  TempDir tmp;
  auto store = OpenStore(tmp.path());
  ASSERT_NE(store, nullptr);
  State state = WriteInitial(store.get(), 10);
  WriteChange(store.get(), &state, 30, 0, 20, 1);
  const State at30 = state;
  WriteChange(store.get(), &state, 40, 0, 20, 2);
  DamageVersion(VersionDir(tmp.path(), 40), GetParam());

  Result<LoadedCheckpoint> loaded = store->LoadLatest();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->clock, 30);
  EXPECT_EQ(loaded->blob, "b30");
  ExpectHolds(*loaded, at30);
  ASSERT_EQ(loaded->warnings.size(), 1u);
  EXPECT_THAT(loaded->warnings[0], HasSubstr("using clock 30"));
  // RocksDB reports a missing SST file as corruption too.
  EXPECT_THAT(loaded->warnings[0],
              HasSubstr("checkpoint at clock 40 is corrupt ("));
  EXPECT_EQ(store->Load(40).status().code(), StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(AllKinds, CheckpointStoreDamage,
                         ::testing::Values(Damage::kCurrentGarbage,
                                           Damage::kManifestGarbage,
                                           Damage::kSstTruncated,
                                           Damage::kSstBytesOverwritten,
                                           Damage::kSstMissing),
                         [](const ::testing::TestParamInfo<Damage>& info) {
                           switch (info.param) {
                             case Damage::kCurrentGarbage:
                               return "CurrentGarbage";
                             case Damage::kManifestGarbage:
                               return "ManifestGarbage";
                             case Damage::kSstTruncated:
                               return "SstTruncated";
                             case Damage::kSstBytesOverwritten:
                               return "SstBytesOverwritten";
                             case Damage::kSstMissing:
                               return "SstMissing";
                           }
                           return "Unknown";
                         });

TEST(CheckpointStore, WhenEveryVersionIsDamagedLoadingIsAClearError) {
  TempDir tmp;
  auto store = OpenStore(tmp.path());
  ASSERT_NE(store, nullptr);
  State state = WriteInitial(store.get(), 10);
  WriteChange(store.get(), &state, 20, 0, 20, 1);
  DamageVersion(VersionDir(tmp.path(), 10), Damage::kCurrentGarbage);
  DamageVersion(VersionDir(tmp.path(), 20), Damage::kManifestGarbage);

  Result<LoadedCheckpoint> loaded = store->LoadLatest();
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(loaded.status().message(), HasSubstr("no usable checkpoint"));
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("checkpoint at clock 20 is corrupt"));
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("checkpoint at clock 10 is corrupt"));
}

TEST(CheckpointStore, WithNoCheckpointLoadingIsNotFound) {
  TempDir tmp;
  auto store = OpenStore(tmp.path());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->LoadLatest().status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->Load(10).status().code(), StatusCode::kNotFound);
  Result<std::vector<int64_t>> clocks = store->ListCheckpoints();
  ASSERT_TRUE(clocks.ok());
  EXPECT_TRUE(clocks->empty());
}

TEST(CheckpointStore, ADirectoryThatCannotBeCreatedIsFailedPrecondition) {
  TempDir tmp;
  // A path under a regular file: ENOTDIR, for root too (chmod would not
  // stop root).
  std::ofstream(tmp.path() / "afile") << "x";
  CheckpointStoreOptions options;
  options.dir = (tmp.path() / "afile" / "sub").string();
  Result<std::unique_ptr<CheckpointStore>> store =
      CheckpointStore::Open(options);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr(options.dir));
  EXPECT_THAT(store.status().message(), HasSubstr("Not a directory"));
}

TEST(CheckpointStore, BadOptionsAreInvalidArgument) {
  TempDir tmp;
  CheckpointStoreOptions options;
  EXPECT_EQ(CheckpointStore::Open(options).status().code(),
            StatusCode::kInvalidArgument);
  options.dir = tmp.path().string();
  options.keep_last = 0;
  EXPECT_EQ(CheckpointStore::Open(options).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(CheckpointStore, ASecondStoreOnTheSameDirectoryIsRefused) {
  TempDir tmp;
  auto store = OpenStore(tmp.path());
  ASSERT_NE(store, nullptr);
  CheckpointStoreOptions options;
  options.dir = tmp.path().string();
  Result<std::unique_ptr<CheckpointStore>> second =
      CheckpointStore::Open(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
}

TEST(CheckpointStore, AReopenedStoreSeesEarlierCheckpointsAndBuildsOnThem) {
  TempDir tmp;
  State state;
  {
    auto store = OpenStore(tmp.path());
    ASSERT_NE(store, nullptr);
    state = WriteInitial(store.get(), 10);
    WriteChange(store.get(), &state, 20, 0, 20, 1);
  }
  auto store = OpenStore(tmp.path());
  ASSERT_NE(store, nullptr);
  Result<std::vector<int64_t>> clocks = store->ListCheckpoints();
  ASSERT_TRUE(clocks.ok());
  EXPECT_EQ(*clocks, (std::vector<int64_t>{10, 20}));
  Result<LoadedCheckpoint> loaded = store->LoadLatest();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectHolds(*loaded, state);
  // The usual restart: live/ is the newest version, so this costs nothing.
  ASSERT_TRUE(store->RollBackTo(20).ok());
  WriteChange(store.get(), &state, 30, 10, 20, 2);
  Result<LoadedCheckpoint> latest = store->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->clock, 30);
  ExpectHolds(*latest, state);
}

TEST(CheckpointStore, ClocksMustIncrease) {
  TempDir tmp;
  auto store = OpenStore(tmp.path());
  ASSERT_NE(store, nullptr);
  WriteInitial(store.get(), 10);
  EXPECT_EQ(store->WriteCheckpoint(10, 1, {}, {}, {}, "").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store->WriteCheckpoint(5, 1, {}, {}, {}, "").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store->WriteCheckpoint(-1, 1, {}, {}, {}, "").code(),
            StatusCode::kInvalidArgument);
}

TEST(CheckpointStore, MalformedChangesAreRefusedAndChangeNothing) {
  TempDir tmp;
  auto store = OpenStore(tmp.path());
  ASSERT_NE(store, nullptr);
  State state = WriteInitial(store.get(), 10);
  // A key twice.
  Status twice = store->WriteCheckpoint(
      20, 1, {}, {Entry(1, 4, 1, 8, 16), Entry(1, 4, 2, 8, 16)}, {}, "");
  EXPECT_EQ(twice.code(), StatusCode::kInvalidArgument);
  // Changed and deleted.
  Status both =
      store->WriteCheckpoint(20, 1, {}, {Entry(1, 4, 1, 8, 16)}, {{1, 4}}, "");
  EXPECT_EQ(both.code(), StatusCode::kInvalidArgument);
  // A table with no TableRecord.
  Status unknown =
      store->WriteCheckpoint(20, 1, {}, {Entry(99, 1, 1, 8, 16)}, {}, "");
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.message(), HasSubstr("table 99"));

  Result<std::vector<int64_t>> clocks = store->ListCheckpoints();
  ASSERT_TRUE(clocks.ok());
  EXPECT_EQ(*clocks, (std::vector<int64_t>{10}));
  WriteChange(store.get(), &state, 20, 0, 5, 1);
  Result<LoadedCheckpoint> latest = store->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ExpectHolds(*latest, state);
}

TEST(CheckpointStore, RollingBackDropsNewerVersionsAndTheNextWriteBuildsOnIt) {
  TempDir tmp;
  auto store = OpenStore(tmp.path());
  ASSERT_NE(store, nullptr);
  State state = WriteInitial(store.get(), 10);
  WriteChange(store.get(), &state, 20, 0, 10, 1);
  State at20 = state;
  WriteChange(store.get(), &state, 30, 100, 50, 2);  // 30's changes: lost

  ASSERT_TRUE(store->RollBackTo(20).ok());
  Result<std::vector<int64_t>> clocks = store->ListCheckpoints();
  ASSERT_TRUE(clocks.ok());
  EXPECT_EQ(*clocks, (std::vector<int64_t>{10, 20}));
  // Clock 25 with only the keys changed since the restored state at 20.
  WriteChange(store.get(), &at20, 25, 5, 10, 3);
  Result<LoadedCheckpoint> latest = store->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->clock, 25);
  ExpectHolds(*latest, at20);
  EXPECT_EQ(store->RollBackTo(30).code(), StatusCode::kNotFound);
}

TEST(CheckpointStore, AFailedFreezeBeforeARestartIsRefusedUntilRollBack) {
  TempDir tmp;
  State state;
  State at20;
  {
    auto store = OpenStore(tmp.path());
    ASSERT_NE(store, nullptr);
    state = WriteInitial(store.get(), 10);
    WriteChange(store.get(), &state, 20, 0, 10, 1);
    at20 = state;
    WriteChange(store.get(), &state, 30, 100, 50, 2);
  }
  // As if the process died after writing 30's batch, before freezing it.
  fs::remove_all(VersionDir(tmp.path(), 30));

  auto store = OpenStore(tmp.path());
  ASSERT_NE(store, nullptr);
  Status refused = store->WriteCheckpoint(40, 1, {}, {}, {}, "");
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("RollBackTo"));

  Result<LoadedCheckpoint> loaded = store->LoadLatest();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->clock, 20);
  ASSERT_TRUE(store->RollBackTo(loaded->clock).ok());
  WriteChange(store.get(), &at20, 40, 0, 3, 4);
  Result<LoadedCheckpoint> latest = store->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ExpectHolds(*latest, at20);  // none of 30's keys
}

TEST(CheckpointStore, ACorruptWorkingDbIsRebuiltFromAVersion) {
  TempDir tmp;
  State state;
  {
    auto store = OpenStore(tmp.path());
    ASSERT_NE(store, nullptr);
    state = WriteInitial(store.get(), 10);
    WriteChange(store.get(), &state, 20, 0, 10, 1);
  }
  ReplaceFile(tmp.path() / "live" / "CURRENT", "garbage\n");

  auto store = OpenStore(tmp.path());
  ASSERT_NE(store, nullptr);
  Status refused = store->WriteCheckpoint(30, 1, {}, {}, {}, "");
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("corrupt"));

  Result<LoadedCheckpoint> loaded = store->LoadLatest();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(store->RollBackTo(loaded->clock).ok());
  WriteChange(store.get(), &state, 30, 5, 10, 2);
  Result<LoadedCheckpoint> latest = store->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ExpectHolds(*latest, state);
  EXPECT_FALSE(fs::exists(tmp.path() / "live.next"));
  EXPECT_FALSE(fs::exists(tmp.path() / "live.old"));
}

TEST(CheckpointStore, DiscardAllStartsOver) {
  TempDir tmp;
  auto store = OpenStore(tmp.path());
  ASSERT_NE(store, nullptr);
  WriteInitial(store.get(), 10);
  ASSERT_TRUE(store->DiscardAll().ok());
  EXPECT_EQ(store->LoadLatest().status().code(), StatusCode::kNotFound);
  // Clocks start over too.
  State state = WriteInitial(store.get(), 1);
  Result<LoadedCheckpoint> latest = store->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->clock, 1);
  ExpectHolds(*latest, state);
}

// A server that rejoins the job keeps the versions the coordinator still
// names, drops the others (a timeline the job abandoned), and its next
// write holds only what it lists: nothing of the old working state.
TEST(CheckpointStore, StartingOverKeepsTheNamedVersionsAndEmptiesTheWorkingDb) {
  TempDir tmp;
  auto store = OpenStore(tmp.path(), /*keep_last=*/5);
  ASSERT_NE(store, nullptr);
  State at10 = WriteInitial(store.get(), 10);
  State at20 = at10;
  WriteChange(store.get(), &at20, 20, 0, 30, 1);
  State at30 = at20;
  WriteChange(store.get(), &at30, 30, 0, 30, 2);
  ASSERT_TRUE(store->StartOver({10, 20, 99}).ok());
  Result<std::vector<int64_t>> clocks = store->ListCheckpoints();
  ASSERT_TRUE(clocks.ok());
  EXPECT_EQ(*clocks, (std::vector<int64_t>{10, 20}));
  Result<LoadedCheckpoint> kept = store->Load(20);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ExpectHolds(*kept, at20);
  // The next write builds on nothing (a clock between those kept and the
  // dropped one is fine: the dropped one is gone).
  State fresh;
  std::vector<EntryRecord> mine = {Entry(1, 5000, 3, 8, 16)};
  ASSERT_TRUE(store->WriteCheckpoint(25, 1, TwoTables(), mine, {}, "b25").ok());
  Apply(&fresh, mine);
  Result<LoadedCheckpoint> latest = store->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->clock, 25);
  ExpectHolds(*latest, fresh);
  kept = store->Load(10);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ExpectHolds(*kept, at10);
}

// A small tmpfs mounted for the test; needs CAP_SYS_ADMIN.
class SmallFilesystem {
 public:
  explicit SmallFilesystem(const fs::path& at) : at_(at) {
    fs::create_directories(at_);
    mounted_ = ::mount("tmpfs", at_.c_str(), "tmpfs", 0, "size=2m") == 0;
    error_ = errno;
  }
  ~SmallFilesystem() {
    if (mounted_) ::umount2(at_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  int error() const { return error_; }

 private:
  fs::path at_;
  bool mounted_ = false;
  int error_ = 0;
};

TEST(CheckpointStore, AFullDiskIsResourceExhausted) {
  TempDir tmp;
  SmallFilesystem small(tmp.path() / "small");
  if (!small.mounted()) {
    GTEST_SKIP() << "cannot mount a tmpfs here: "
                 << std::strerror(small.error());
  }
  std::vector<EntryRecord> entries;  // 8 MB of floats
  for (Key k = 0; k < 2048; ++k) entries.push_back(Entry(1, k, 0, 512, 512));
  {
    // With the default reserve, the write is refused before RocksDB sees
    // it.
    auto store = OpenStore(tmp.path() / "small" / "ckpt", 3,
                           CheckpointStoreOptions().min_free_bytes);
    ASSERT_NE(store, nullptr);
    Status s = store->WriteCheckpoint(10, 1, TwoTables(), entries, {}, "");
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(s.message(), HasSubstr("kept free"));
  }
  // With no reserve, RocksDB's own failure is reported as a full disk.
  auto store = OpenStore(tmp.path() / "small" / "ckpt");
  ASSERT_NE(store, nullptr);
  Status s = store->WriteCheckpoint(10, 1, TwoTables(), entries, {}, "");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("disk full"));
  Result<std::vector<int64_t>> clocks = store->ListCheckpoints();
  ASSERT_TRUE(clocks.ok());
  EXPECT_TRUE(clocks->empty());
}

// A checkpoint that would leave less than the reserve free is refused with
// the space needed and free, writes nothing, and the store goes on once
// there is room (here: once the reserve is lowered).
TEST(CheckpointStore, AWriteIntoTheReserveIsRefusedAndLosesNothing) {
  TempDir tmp;
  State at10;
  {
    auto store = OpenStore(tmp.path());
    ASSERT_NE(store, nullptr);
    at10 = WriteInitial(store.get(), 10);
  }
  {
    auto store = OpenStore(tmp.path(), 3, /*min_free_bytes=*/uint64_t{1} << 62);
    ASSERT_NE(store, nullptr);
    std::vector<EntryRecord> changed = {Entry(1, 3, 1, 8, 16)};
    Status s = store->WriteCheckpoint(20, 1, TwoTables(), changed, {}, "b20");
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(s.message(), HasSubstr("the checkpoint at clock 20 needs"));
    EXPECT_THAT(s.message(), HasSubstr("kept free"));
    EXPECT_THAT(s.message(), HasSubstr(tmp.path().string()));
    Result<std::vector<int64_t>> clocks = store->ListCheckpoints();
    ASSERT_TRUE(clocks.ok());
    EXPECT_EQ(*clocks, std::vector<int64_t>{10});
  }
  auto store = OpenStore(tmp.path());
  ASSERT_NE(store, nullptr);
  State at20 = at10;
  WriteChange(store.get(), &at20, 20, 0, 10, 1);
  Result<LoadedCheckpoint> loaded = store->Load(10);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectHolds(*loaded, at10);
  loaded = store->Load(20);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectHolds(*loaded, at20);
}

}  // namespace
}  // namespace ductile
