#include "models/fmnist_data.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <system_error>
#include <vector>

namespace ductile::models {
namespace {

// A fresh directory under the system temp dir, removed with its contents
// when the object goes out of scope.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "fmnist_data_test.XXXXXX")
            .string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~ScopedTempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  // Empty if mkdtemp failed.
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }

 private:
  std::string path_;
};

// An IDX file: big-endian magic, big-endian dimensions, then the body.
std::string Idx(uint32_t magic, const std::vector<uint32_t>& dims,
                const std::string& body) {
  std::string bytes;
  auto put32 = [&bytes](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      bytes.push_back(static_cast<char>((v >> shift) & 0xff));
    }
  };
  put32(magic);
  for (uint32_t d : dims) put32(d);
  return bytes + body;
}

// Pixels of `n` 28x28 images: image i has every pixel equal to i * 10.
std::string Pixels(uint32_t n) {
  std::string body;
  for (uint32_t i = 0; i < n; ++i) {
    body.append(28 * 28, static_cast<char>(i * 10));
  }
  return body;
}

std::string Labels(uint32_t n) {
  std::string body;
  for (uint32_t i = 0; i < n; ++i) body.push_back(static_cast<char>(i % 10));
  return body;
}

std::string ImagesFile(uint32_t n) { return Idx(2051, {n, 28, 28}, Pixels(n)); }
std::string LabelsFile(uint32_t n) { return Idx(2049, {n}, Labels(n)); }

bool WriteGz(const std::string& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  if (file == nullptr) return false;
  const int written =
      bytes.empty()
          ? 0
          : gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
  const bool closed = gzclose(file) == Z_OK;
  return written == static_cast<int>(bytes.size()) && closed;
}

bool WriteRaw(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

std::string ReadRaw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Writes a training pair into `dir` and loads it.
Result<Dataset> LoadPair(const ScopedTempDir& dir, const std::string& images,
                         const std::string& labels) {
  EXPECT_TRUE(WriteGz(dir.File("train-images-idx3-ubyte.gz"), images));
  EXPECT_TRUE(WriteGz(dir.File("train-labels-idx1-ubyte.gz"), labels));
  return LoadFashionMnist(dir.path(), /*train=*/true);
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

void ExpectRealDataset(const Result<Dataset>& data, size_t num_samples) {
  ASSERT_TRUE(data.ok()) << data.status().message();
  EXPECT_EQ(data->num_samples, num_samples);
  EXPECT_EQ(data->num_features, 784u);
  EXPECT_EQ(data->num_classes, 10);
  ASSERT_EQ(data->images.size(), num_samples * 784);
  ASSERT_EQ(data->labels.size(), num_samples);
  // Fashion-MNIST is balanced: every class has a tenth of the samples.
  std::vector<size_t> per_class(10, 0);
  for (uint8_t label : data->labels) {
    ASSERT_LT(label, 10);
    ++per_class[label];
  }
  for (size_t count : per_class) EXPECT_EQ(count, num_samples / 10);
  const auto [lo, hi] =
      std::minmax_element(data->images.begin(), data->images.end());
  EXPECT_EQ(*lo, 0.0f);
  EXPECT_EQ(*hi, 1.0f);
}

TEST(LoadFashionMnist, ReadsTheTrainingSet) {
  ExpectRealDataset(LoadFashionMnist(kFashionMnistDefaultDir, /*train=*/true),
                    60000);
}

TEST(LoadFashionMnist, ReadsTheTestSet) {
  ExpectRealDataset(LoadFashionMnist(kFashionMnistDefaultDir, /*train=*/false),
                    10000);
}

TEST(LoadFashionMnist, MissingDirectoryIsNotFoundAndNamesThePackage) {
  const std::string dir = "/nonexistent/fashion-mnist-for-test";
  Result<Dataset> data = LoadFashionMnist(dir, /*train=*/true);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(data.status().message(), dir))
      << data.status().message();
  EXPECT_TRUE(Contains(data.status().message(),
                       "apt-get install dataset-fashion-mnist"))
      << data.status().message();
}

TEST(LoadFashionMnist, MissingFileIsNotFoundAndNamesItsPathAndThePackage) {
  ScopedTempDir dir;
  ASSERT_FALSE(dir.path().empty());
  ASSERT_TRUE(WriteGz(dir.File("t10k-images-idx3-ubyte.gz"), ImagesFile(2)));
  Result<Dataset> data = LoadFashionMnist(dir.path(), /*train=*/false);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(
      Contains(data.status().message(), dir.File("t10k-labels-idx1-ubyte.gz")))
      << data.status().message();
  EXPECT_TRUE(Contains(data.status().message(), "dataset-fashion-mnist"))
      << data.status().message();
}

TEST(LoadFashionMnist, ReadsAWellFormedSmallPair) {
  ScopedTempDir dir;
  ASSERT_FALSE(dir.path().empty());
  Result<Dataset> data = LoadPair(dir, ImagesFile(3), LabelsFile(3));
  ASSERT_TRUE(data.ok()) << data.status().message();
  EXPECT_EQ(data->num_samples, 3u);
  EXPECT_EQ(data->labels, (std::vector<uint8_t>{0, 1, 2}));
  EXPECT_EQ(data->images[0], 0.0f);
  EXPECT_FLOAT_EQ(data->images[784], 10.0f / 255.0f);
  EXPECT_FLOAT_EQ(data->images[2 * 784 + 783], 20.0f / 255.0f);
}

TEST(LoadFashionMnist, WrongImageMagicIsReportedWithTheFile) {
  ScopedTempDir dir;
  ASSERT_FALSE(dir.path().empty());
  Result<Dataset> data =
      LoadPair(dir, Idx(2052, {3, 28, 28}, Pixels(3)), LabelsFile(3));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      Contains(data.status().message(), dir.File("train-images-idx3-ubyte.gz")))
      << data.status().message();
  EXPECT_TRUE(Contains(data.status().message(), "magic number is 2052"))
      << data.status().message();
}

TEST(LoadFashionMnist, LittleEndianLabelMagicIsRejected) {
  ScopedTempDir dir;
  ASSERT_FALSE(dir.path().empty());
  // 2049 written little-endian reads as 0x01080000 big-endian.
  Result<Dataset> data =
      LoadPair(dir, ImagesFile(3), Idx(0x01080000, {3}, Labels(3)));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      Contains(data.status().message(), dir.File("train-labels-idx1-ubyte.gz")))
      << data.status().message();
  EXPECT_TRUE(Contains(data.status().message(), "magic"))
      << data.status().message();
}

TEST(LoadFashionMnist, TruncatedImageDataIsReported) {
  ScopedTempDir dir;
  ASSERT_FALSE(dir.path().empty());
  // The header promises 5 images; the body holds 3.
  Result<Dataset> data =
      LoadPair(dir, Idx(2051, {5, 28, 28}, Pixels(3)), LabelsFile(5));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      Contains(data.status().message(), dir.File("train-images-idx3-ubyte.gz")))
      << data.status().message();
  EXPECT_TRUE(Contains(data.status().message(), "truncated"))
      << data.status().message();
}

TEST(LoadFashionMnist, TruncatedGzipStreamIsReported) {
  ScopedTempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string images = dir.File("train-images-idx3-ubyte.gz");
  ASSERT_TRUE(WriteGz(images, ImagesFile(4)));
  ASSERT_TRUE(WriteGz(dir.File("train-labels-idx1-ubyte.gz"), LabelsFile(4)));
  const std::string compressed = ReadRaw(images);
  ASSERT_GT(compressed.size(), 20u);
  ASSERT_TRUE(WriteRaw(images, compressed.substr(0, compressed.size() / 2)));
  Result<Dataset> data = LoadFashionMnist(dir.path(), /*train=*/true);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(data.status().message(), images))
      << data.status().message();
  EXPECT_TRUE(Contains(data.status().message(), "truncated"))
      << data.status().message();
}

TEST(LoadFashionMnist, MismatchedImageAndLabelCountsAreReported) {
  ScopedTempDir dir;
  ASSERT_FALSE(dir.path().empty());
  Result<Dataset> data = LoadPair(dir, ImagesFile(3), LabelsFile(4));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(data.status().message(), "3 images"))
      << data.status().message();
  EXPECT_TRUE(Contains(data.status().message(), "4 labels"))
      << data.status().message();
}

TEST(LoadFashionMnist, OutOfRangeLabelIsReported) {
  ScopedTempDir dir;
  ASSERT_FALSE(dir.path().empty());
  std::string labels = Labels(3);
  labels[1] = 10;
  Result<Dataset> data = LoadPair(dir, ImagesFile(3), Idx(2049, {3}, labels));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(data.status().message(), "label 10 of sample 1"))
      << data.status().message();
}

TEST(LoadFashionMnist, WrongImageSizeIsReported) {
  ScopedTempDir dir;
  ASSERT_FALSE(dir.path().empty());
  Result<Dataset> data = LoadPair(
      dir, Idx(2051, {1, 32, 32}, std::string(32 * 32, '\0')), LabelsFile(1));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(data.status().message(), "32x32"))
      << data.status().message();
}

TEST(LoadFashionMnist, TrailingDataIsReported) {
  ScopedTempDir dir;
  ASSERT_FALSE(dir.path().empty());
  Result<Dataset> data =
      LoadPair(dir, ImagesFile(2), LabelsFile(2) + std::string("x"));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      Contains(data.status().message(), dir.File("train-labels-idx1-ubyte.gz")))
      << data.status().message();
}

TEST(LoadFashionMnist, HugeDeclaredCountIsTruncationNotAnAllocation) {
  ScopedTempDir dir;
  ASSERT_FALSE(dir.path().empty());
  // 4 billion images of 784 bytes would be 3 TB; the file holds 2.
  Result<Dataset> data =
      LoadPair(dir, Idx(2051, {0xffffffffu, 28, 28}, Pixels(2)), LabelsFile(2));
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(data.status().message(), "truncated"))
      << data.status().message();
}

TEST(LoadFashionMnist, EveryTruncationOfAValidFileIsAnError) {
  ScopedTempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string labels = dir.File("train-labels-idx1-ubyte.gz");
  ASSERT_TRUE(WriteGz(dir.File("train-images-idx3-ubyte.gz"), ImagesFile(2)));
  ASSERT_TRUE(WriteGz(labels, LabelsFile(2)));
  const std::string compressed = ReadRaw(labels);
  ASSERT_TRUE(LoadFashionMnist(dir.path(), /*train=*/true).ok());
  for (size_t size = 0; size < compressed.size(); ++size) {
    ASSERT_TRUE(WriteRaw(labels, compressed.substr(0, size)));
    Result<Dataset> data = LoadFashionMnist(dir.path(), /*train=*/true);
    EXPECT_FALSE(data.ok()) << "compressed labels cut to " << size << " bytes";
  }
}

TEST(LoadFashionMnist, RandomBytesAreAnErrorNotACrash) {
  ScopedTempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string images = dir.File("train-images-idx3-ubyte.gz");
  ASSERT_TRUE(WriteGz(dir.File("train-labels-idx1-ubyte.gz"), LabelsFile(2)));
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 50; ++trial) {
    std::string bytes(rng() % 3000, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    // Raw garbage, garbage behind a valid gzip header, and garbage inside a
    // valid gzip stream.
    std::string gz_garbage = "\x1f\x8b\x08" + bytes;
    for (const auto& [content, compress] :
         {std::pair{bytes, false}, std::pair{gz_garbage, false},
          std::pair{bytes, true}}) {
      ASSERT_TRUE(compress ? WriteGz(images, content)
                           : WriteRaw(images, content));
      Result<Dataset> data = LoadFashionMnist(dir.path(), /*train=*/true);
      EXPECT_FALSE(data.ok());
      EXPECT_TRUE(Contains(data.status().message(), images))
          << data.status().message();
    }
  }
}

TEST(PartitionIndices, CoversEverySampleExactlyOncePerEpoch) {
  for (size_t num_samples : {0u, 1u, 7u, 1001u}) {
    for (int world_size = 1; world_size <= 4; ++world_size) {
      for (uint64_t epoch = 0; epoch < 3; ++epoch) {
        std::vector<int> seen(num_samples, 0);
        size_t smallest = num_samples, largest = 0;
        for (int rank = 0; rank < world_size; ++rank) {
          const std::vector<size_t> mine =
              PartitionIndices(num_samples, rank, world_size, 42, epoch);
          smallest = std::min(smallest, mine.size());
          largest = std::max(largest, mine.size());
          for (size_t index : mine) {
            ASSERT_LT(index, num_samples);
            ++seen[index];
          }
        }
        for (size_t i = 0; i < num_samples; ++i) {
          ASSERT_EQ(seen[i], 1)
              << "sample " << i << " of " << num_samples << ", world size "
              << world_size << ", epoch " << epoch;
        }
        EXPECT_LE(largest - smallest, 1u);
      }
    }
  }
}

TEST(PartitionIndices, DiffersBetweenEpochs) {
  for (int world_size = 1; world_size <= 4; ++world_size) {
    EXPECT_NE(PartitionIndices(1000, 0, world_size, 42, 0),
              PartitionIndices(1000, 0, world_size, 42, 1));
  }
  EXPECT_NE(PartitionIndices(1000, 0, 1, 42, 0),
            PartitionIndices(1000, 0, 1, 43, 0));
}

TEST(PartitionIndices, ShufflesTheSamples) {
  std::vector<size_t> identity(1000);
  for (size_t i = 0; i < identity.size(); ++i) identity[i] = i;
  EXPECT_NE(PartitionIndices(1000, 0, 1, 42, 0), identity);
}

TEST(PartitionIndices, IsTheSameOnEveryPlatform) {
  // Pinned output: a change here changes every run's data order.
  EXPECT_EQ(PartitionIndices(10, 0, 1, 42, 0),
            (std::vector<size_t>{0, 6, 5, 1, 3, 9, 7, 8, 4, 2}));
  // Positions 1, 4 and 7 of that permutation.
  EXPECT_EQ(PartitionIndices(10, 1, 3, 42, 0), (std::vector<size_t>{6, 3, 8}));
}

TEST(PartitionIndices, InvalidRankOrWorldSizeGivesNothing) {
  EXPECT_TRUE(PartitionIndices(10, 0, 0, 42, 0).empty());
  EXPECT_TRUE(PartitionIndices(10, -1, 2, 42, 0).empty());
  EXPECT_TRUE(PartitionIndices(10, 2, 2, 42, 0).empty());
}

TEST(MakeSeparableData, HasTheRequestedShapeAndValidLabels) {
  const Dataset data = MakeSeparableData(500, 7, 4, 3);
  EXPECT_EQ(data.num_samples, 500u);
  EXPECT_EQ(data.num_features, 7u);
  EXPECT_EQ(data.num_classes, 4);
  EXPECT_EQ(data.images.size(), 500u * 7);
  ASSERT_EQ(data.labels.size(), 500u);
  std::vector<size_t> per_class(4, 0);
  for (uint8_t label : data.labels) {
    ASSERT_LT(label, 4);
    ++per_class[label];
  }
  for (size_t count : per_class) EXPECT_GT(count, 0u);
}

TEST(MakeSeparableData, IsDeterministicInTheSeed) {
  const Dataset a = MakeSeparableData(100, 5, 3, 9);
  const Dataset b = MakeSeparableData(100, 5, 3, 9);
  const Dataset c = MakeSeparableData(100, 5, 3, 10);
  EXPECT_EQ(a.images, b.images);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(a.images, c.images);
}

TEST(MakeSeparableData, UnsupportedShapeGivesAnEmptyDataset) {
  EXPECT_EQ(MakeSeparableData(10, 3, 257, 1).num_samples, 0u);
  EXPECT_EQ(MakeSeparableData(10, 0, 2, 1).num_samples, 0u);
  EXPECT_EQ(MakeSeparableData(10, 3, 0, 1).num_samples, 0u);
}

}  // namespace
}  // namespace ductile::models
