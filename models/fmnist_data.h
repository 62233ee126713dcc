// Training data for the built-in apps: the Fashion-MNIST loader, the
// per-rank partitioning of an epoch, and a synthetic data set for tests.
//
// None of this touches the network: a worker loads its data, takes its share
// of each epoch and computes gradients locally.
//
// Example:
//   ductile::Result<Dataset> train =
//       LoadFashionMnist("/usr/share/datasets/fashion-mnist", /*train=*/true);
//   if (!train.ok()) { std::cerr << train.status().message(); return 1; }
//   for (uint64_t epoch = 0; epoch < num_epochs; ++epoch) {
//     std::vector<size_t> mine = PartitionIndices(
//         train->num_samples, rank, world_size, seed, epoch);
//     // Take minibatches from `mine` in order.
//   }
//
// All functions here are thread-safe (they share no state).
#ifndef DUCTILE_MODELS_FMNIST_DATA_H_
#define DUCTILE_MODELS_FMNIST_DATA_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ductile/status.h"

namespace ductile::models {

// A labelled classification data set held in memory.
//
// Invariants (for every Dataset the functions below return):
//   images.size() == num_samples * num_features
//   labels.size() == num_samples
//   labels[i] < num_classes
struct Dataset {
  // num_samples x num_features, row-major. Fashion-MNIST pixels are scaled
  // to [0, 1]; synthetic data is not bounded.
  std::vector<float> images;
  // One class label per sample, in [0, num_classes).
  std::vector<uint8_t> labels;
  size_t num_samples = 0;
  size_t num_features = 0;
  int num_classes = 0;
};

// Fashion-MNIST geometry: 28x28 grey-scale images in 10 classes.
inline constexpr size_t kFashionMnistFeatures = 28 * 28;
inline constexpr int kFashionMnistClasses = 10;

// Where the Debian package dataset-fashion-mnist installs the files.
inline constexpr char kFashionMnistDefaultDir[] =
    "/usr/share/datasets/fashion-mnist";

// Reads Fashion-MNIST from the gzip-compressed IDX files in `dir`:
// train-{images-idx3,labels-idx1}-ubyte.gz when `train` is true (60000
// samples), t10k-{images-idx3,labels-idx1}-ubyte.gz otherwise (10000).
//
// Errors (the message names the file and what is wrong with it):
//   NotFound            `dir` or a file is missing; the message says to
//                       install the Debian package dataset-fashion-mnist.
//   FailedPrecondition  a file cannot be read or is corrupt: bad gzip data,
//                       wrong IDX magic number, image size other than 28x28,
//                       truncated or trailing data, image and label counts
//                       that disagree, or a label >= 10.
// Never crashes on malformed input, and allocates memory in proportion to
// the data actually present, not to the counts a header claims.
Result<Dataset> LoadFashionMnist(const std::string& dir, bool train);

// Whether `dir` holds the four Fashion-MNIST files, without reading them:
// NotFound, as LoadFashionMnist says it, for a missing directory or file.
// For a launcher that checks a job's data before it starts anything.
Status CheckFashionMnistFiles(const std::string& dir);

// Returns the sample indices that `rank` of `world_size` workers trains on
// in `epoch`.
//
// All num_samples indices are shuffled with a Fisher-Yates shuffle driven by
// std::mt19937_64 seeded from (seed, epoch); rank r takes the indices at
// positions p of that permutation with p % world_size == r, in order. So in
// each epoch every sample belongs to exactly one rank, the ranks' shares
// differ in size by at most one, and each epoch has a different order. The
// result depends only on the arguments and is identical on every platform
// (no implementation-defined std:: distributions are used).
//
// Returns an empty vector if world_size < 1 or rank is not in
// [0, world_size).
std::vector<size_t> PartitionIndices(size_t num_samples, int rank,
                                     int world_size, uint64_t seed,
                                     uint64_t epoch);

// Makes `n` samples of `features` features in `classes` classes that a
// linear classifier can separate exactly, for quick tests.
//
// Each class has a centroid with coordinates uniform in [-1, 1]; a sample is
// its class's centroid plus uniform noise in [-0.1, 0.1] per coordinate,
// and is then labelled with its nearest centroid. Nearest-centroid regions
// are bounded by hyperplanes, so the labels are linearly separable; with
// centroids far apart relative to the noise, relabelling rarely changes a
// sample's class. Deterministic in `seed` on every platform.
//
// Requires features >= 1 and 1 <= classes <= 256 (labels are bytes);
// otherwise returns an empty Dataset.
Dataset MakeSeparableData(size_t n, size_t features, int classes,
                          uint64_t seed);

}  // namespace ductile::models

#endif  // DUCTILE_MODELS_FMNIST_DATA_H_
