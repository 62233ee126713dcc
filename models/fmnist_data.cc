#include "models/fmnist_data.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string_view>
#include <system_error>
#include <utility>

#include "models/uniform.h"

namespace ductile::models {
namespace {

// IDX magic numbers (big-endian): 0x00 0x00, type 0x08 (unsigned byte), then
// the number of dimensions (3 for images, 1 for labels).
constexpr uint32_t kImagesMagic = 2051;  // 0x00000803
constexpr uint32_t kLabelsMagic = 2049;  // 0x00000801
constexpr uint32_t kImageRows = 28;
constexpr uint32_t kImageCols = 28;

// Appended to every "missing" error.
constexpr std::string_view kInstallHint =
    "install the Debian package dataset-fashion-mnist (apt-get install "
    "dataset-fashion-mnist), which puts the files in "
    "/usr/share/datasets/fashion-mnist";

// Bytes asked of zlib per gzread call. Bodies are read in chunks of this
// size so that a header claiming a huge count cannot make us allocate more
// than the file really holds.
constexpr size_t kReadChunkBytes = size_t{1} << 20;

struct GzCloser {
  void operator()(gzFile_s* file) const { gzclose(file); }
};
using GzFilePtr = std::unique_ptr<gzFile_s, GzCloser>;

uint32_t BigEndian32(const uint8_t* bytes) {
  return (uint32_t{bytes[0]} << 24) | (uint32_t{bytes[1]} << 16) |
         (uint32_t{bytes[2]} << 8) | uint32_t{bytes[3]};
}

// zlib's description of the file's error state, or "" if there is none.
// Z_BUF_ERROR is how zlib reports a gzip stream that ends too early.
std::string GzErrorText(gzFile_s* file, const std::string& path) {
  int code = Z_OK;
  const char* text = gzerror(file, &code);
  if (code == Z_OK) return "";
  if (code == Z_ERRNO) return std::strerror(errno);
  if (text == nullptr) return "unknown zlib error";
  // zlib prefixes its messages with "<path>: "; the caller names the file.
  std::string_view message(text);
  const std::string prefix = path + ": ";
  if (message.substr(0, prefix.size()) == prefix) {
    message.remove_prefix(prefix.size());
  }
  return std::string(message);
}

// Reads up to `size` bytes into `out`, stopping early only at the end of
// the data. Returns the number of bytes read, or an error if zlib reports
// one (corrupt or truncated gzip stream, I/O error).
Result<size_t> ReadUpTo(gzFile_s* file, const std::string& path, uint8_t* out,
                        size_t size) {
  size_t done = 0;
  while (done < size) {
    const unsigned want = static_cast<unsigned>(
        std::min(size - done, static_cast<size_t>(kReadChunkBytes)));
    const int got = gzread(file, out + done, want);
    if (got < 0) {
      return FailedPreconditionError(
          path + " is corrupt or unreadable: " + GzErrorText(file, path));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  // A gzip stream cut short reads as a clean end of data plus an error flag.
  std::string error = GzErrorText(file, path);
  if (!error.empty()) {
    return FailedPreconditionError(path + " is corrupt or truncated: " + error);
  }
  return done;
}

// Reads the whole body of `expected` bytes, growing `out` as data arrives.
Status ReadBody(gzFile_s* file, const std::string& path, size_t expected,
                std::string_view what, std::vector<uint8_t>* out) {
  out->clear();
  while (out->size() < expected) {
    const size_t old_size = out->size();
    const size_t chunk = std::min(expected - old_size, kReadChunkBytes);
    out->resize(old_size + chunk);
    Result<size_t> got = ReadUpTo(file, path, out->data() + old_size, chunk);
    if (!got.ok()) return got.status();
    out->resize(old_size + *got);
    if (*got < chunk) {
      return FailedPreconditionError(
          path + " is truncated: the header declares " +
          std::to_string(expected) + " bytes of " + std::string(what) +
          " but the file holds only " + std::to_string(out->size()));
    }
  }
  // Nothing may follow the declared data. Reading past it also makes zlib
  // check the gzip trailer (CRC and length).
  uint8_t extra = 0;
  Result<size_t> got = ReadUpTo(file, path, &extra, 1);
  if (!got.ok()) return got.status();
  if (*got != 0) {
    return FailedPreconditionError(
        path + " has data after the " + std::to_string(expected) +
        " bytes of " + std::string(what) +
        " its header declares; the file is corrupt or not a Fashion-MNIST "
        "file");
  }
  return Status::Ok();
}

Result<GzFilePtr> OpenGz(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec) {
    return NotFoundError("Fashion-MNIST file " + path + " does not exist; " +
                         std::string(kInstallHint));
  }
  errno = 0;
  GzFilePtr file(gzopen(path.c_str(), "rb"));
  if (file == nullptr) {
    const std::string reason =
        errno != 0 ? std::strerror(errno) : "zlib could not open it";
    return FailedPreconditionError("cannot open Fashion-MNIST file " + path +
                                   ": " + reason);
  }
  gzbuffer(file.get(), 1 << 17);
  return file;
}

// Reads and checks a header of `size` bytes (a multiple of 4) and returns
// its big-endian 32-bit fields.
Result<std::vector<uint32_t>> ReadHeader(gzFile_s* file,
                                         const std::string& path, size_t size,
                                         uint32_t magic,
                                         std::string_view kind) {
  uint8_t bytes[16] = {};
  Result<size_t> got = ReadUpTo(file, path, bytes, size);
  if (!got.ok()) return got.status();
  if (*got < size) {
    return FailedPreconditionError(
        path + " is truncated: it holds " + std::to_string(*got) +
        " bytes, less than the " + std::to_string(size) + "-byte IDX " +
        std::string(kind) + " header");
  }
  std::vector<uint32_t> fields;
  for (size_t i = 0; i < size; i += 4) {
    fields.push_back(BigEndian32(bytes + i));
  }
  if (fields[0] != magic) {
    return FailedPreconditionError(
        path + " is not an IDX " + std::string(kind) +
        " file: its magic number is " + std::to_string(fields[0]) +
        ", expected " + std::to_string(magic) + " (big-endian)");
  }
  return fields;
}

Result<std::vector<uint8_t>> ReadLabels(const std::string& path) {
  Result<GzFilePtr> file = OpenGz(path);
  if (!file.ok()) return file.status();
  Result<std::vector<uint32_t>> header =
      ReadHeader(file->get(), path, 8, kLabelsMagic, "label");
  if (!header.ok()) return header.status();
  const size_t count = (*header)[1];
  std::vector<uint8_t> labels;
  DUCTILE_RETURN_IF_ERROR(
      ReadBody(file->get(), path, count, "labels", &labels));
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= kFashionMnistClasses) {
      return FailedPreconditionError(
          path + " is corrupt: label " + std::to_string(labels[i]) +
          " of sample " + std::to_string(i) + " is not in [0, " +
          std::to_string(kFashionMnistClasses) + ")");
    }
  }
  return labels;
}

// Returns the raw pixels, count * 784 bytes.
Result<std::vector<uint8_t>> ReadImages(const std::string& path) {
  Result<GzFilePtr> file = OpenGz(path);
  if (!file.ok()) return file.status();
  Result<std::vector<uint32_t>> header =
      ReadHeader(file->get(), path, 16, kImagesMagic, "image");
  if (!header.ok()) return header.status();
  const uint32_t count = (*header)[1];
  const uint32_t rows = (*header)[2];
  const uint32_t cols = (*header)[3];
  if (rows != kImageRows || cols != kImageCols) {
    return FailedPreconditionError(
        path + " holds images of " + std::to_string(rows) + "x" +
        std::to_string(cols) + " pixels; Fashion-MNIST images are " +
        std::to_string(kImageRows) + "x" + std::to_string(kImageCols));
  }
  std::vector<uint8_t> pixels;
  DUCTILE_RETURN_IF_ERROR(ReadBody(file->get(), path,
                                   size_t{count} * kFashionMnistFeatures,
                                   "pixels", &pixels));
  return pixels;
}

// A uniform integer in [0, bound), bound >= 1, without modulo bias: draws
// below 2^64 mod bound are rejected so every residue is equally likely.
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;
  while (true) {
    const uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

}  // namespace

Status CheckFashionMnistFiles(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return NotFoundError("Fashion-MNIST directory '" + dir +
                         "' does not exist or is not a directory; " +
                         std::string(kInstallHint));
  }
  for (const char* name :
       {"train-labels-idx1-ubyte.gz", "train-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz"}) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    if (!std::filesystem::exists(path, ec)) {
      return NotFoundError("Fashion-MNIST file " + path + " does not exist; " +
                           std::string(kInstallHint));
    }
  }
  return Status::Ok();
}

Result<Dataset> LoadFashionMnist(const std::string& dir, bool train) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return NotFoundError("Fashion-MNIST directory '" + dir +
                         "' does not exist or is not a directory; " +
                         std::string(kInstallHint));
  }
  const std::string prefix = train ? "train" : "t10k";
  const std::filesystem::path base(dir);
  const std::string images_path =
      (base / (prefix + "-images-idx3-ubyte.gz")).string();
  const std::string labels_path =
      (base / (prefix + "-labels-idx1-ubyte.gz")).string();

  // Labels first: the file is small, so a missing or corrupt pair is
  // reported before decompressing the images.
  Result<std::vector<uint8_t>> labels = ReadLabels(labels_path);
  if (!labels.ok()) return labels.status();
  Result<std::vector<uint8_t>> pixels = ReadImages(images_path);
  if (!pixels.ok()) return pixels.status();

  const size_t num_images = pixels->size() / kFashionMnistFeatures;
  if (num_images != labels->size()) {
    return FailedPreconditionError(
        images_path + " holds " + std::to_string(num_images) + " images but " +
        labels_path + " holds " + std::to_string(labels->size()) +
        " labels; the files do not belong together");
  }
  if (num_images == 0) {
    return FailedPreconditionError(images_path + " and " + labels_path +
                                   " hold no samples");
  }

  Dataset data;
  data.num_samples = num_images;
  data.num_features = kFashionMnistFeatures;
  data.num_classes = kFashionMnistClasses;
  data.labels = std::move(*labels);
  data.images.resize(pixels->size());
  const std::vector<uint8_t>& raw = *pixels;
  for (size_t i = 0; i < raw.size(); ++i) {
    data.images[i] = static_cast<float>(raw[i]) / 255.0f;
  }
  return data;
}

std::vector<size_t> PartitionIndices(size_t num_samples, int rank,
                                     int world_size, uint64_t seed,
                                     uint64_t epoch) {
  if (world_size < 1 || rank < 0 || rank >= world_size) return {};

  // std::seed_seq's algorithm is fixed by the standard, so this seeding is
  // the same everywhere; it also mixes seed and epoch so that neighbouring
  // epochs give unrelated permutations.
  std::seed_seq seq{
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
      static_cast<uint32_t>(epoch), static_cast<uint32_t>(epoch >> 32)};
  std::mt19937_64 rng(seq);

  std::vector<size_t> order(num_samples);
  std::iota(order.begin(), order.end(), size_t{0});
  // Fisher-Yates: position i takes a uniform pick of positions [0, i].
  for (size_t i = num_samples; i > 1; --i) {
    const size_t j = static_cast<size_t>(UniformBelow(rng, i));
    std::swap(order[i - 1], order[j]);
  }

  const size_t stride = static_cast<size_t>(world_size);
  std::vector<size_t> mine;
  mine.reserve(num_samples / stride + 1);
  for (size_t p = static_cast<size_t>(rank); p < num_samples; p += stride) {
    mine.push_back(order[p]);
  }
  return mine;
}

Dataset MakeSeparableData(size_t n, size_t features, int classes,
                          uint64_t seed) {
  if (features < 1 || classes < 1 ||
      classes > std::numeric_limits<uint8_t>::max() + 1) {
    return Dataset{};
  }
  constexpr double kNoise = 0.1;
  const size_t num_classes = static_cast<size_t>(classes);
  std::mt19937_64 rng(seed);

  std::vector<float> centroids(num_classes * features);
  for (float& c : centroids) {
    c = static_cast<float>(2.0 * Uniform01(rng) - 1.0);
  }

  Dataset data;
  data.num_samples = n;
  data.num_features = features;
  data.num_classes = classes;
  data.images.resize(n * features);
  data.labels.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t drawn = static_cast<size_t>(UniformBelow(rng, num_classes));
    float* x = &data.images[i * features];
    const float* centroid = &centroids[drawn * features];
    for (size_t f = 0; f < features; ++f) {
      x[f] = static_cast<float>(centroid[f] +
                                kNoise * (2.0 * Uniform01(rng) - 1.0));
    }
    // Label by the nearest centroid (ties to the lower class), computed on
    // the stored floats, so that the labels are exactly linearly separable.
    size_t nearest = 0;
    double nearest_distance = std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < num_classes; ++k) {
      const float* c = &centroids[k * features];
      double distance = 0.0;
      for (size_t f = 0; f < features; ++f) {
        const double d = static_cast<double>(x[f]) - c[f];
        distance += d * d;
      }
      if (distance < nearest_distance) {
        nearest_distance = distance;
        nearest = k;
      }
    }
    data.labels[i] = static_cast<uint8_t>(nearest);
  }
  return data;
}

}  // namespace ductile::models
