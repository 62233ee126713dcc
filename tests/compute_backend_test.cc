#include "models/compute_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace ductile::models {
namespace {

std::vector<float> RandomVector(size_t size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> v(size);
  for (float& x : v) x = uniform(rng);
  return v;
}

// The operations are checked on every backend this machine has: "cpu"
// always, "cuda" where a GPU is present (skipped otherwise).
class BackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<ComputeBackend>> backend =
        MakeComputeBackend(GetParam());
    if (!backend.ok()) {
      ASSERT_EQ(GetParam(), "cuda") << backend.status();
      GTEST_SKIP() << "no usable CUDA backend here: " << backend.status();
    }
    backend_ = std::move(*backend);
  }

  DeviceBuffer Put(const std::vector<float>& host) {
    Result<DeviceBuffer> buffer = backend_->Allocate(host.size());
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_TRUE(backend_->Upload(host, *buffer).ok());
    return std::move(*buffer);
  }

  std::vector<float> Get(DeviceBuffer& buffer) {
    std::vector<float> host(buffer.size());
    Status status = backend_->Download(buffer, host);
    EXPECT_TRUE(status.ok()) << status;
    return host;
  }

  std::unique_ptr<ComputeBackend> backend_;
};

INSTANTIATE_TEST_SUITE_P(Devices, BackendTest, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST_P(BackendTest, AllocatedBuffersAreZeroAndRoundTripThroughUpload) {
  Result<DeviceBuffer> buffer = backend_->Allocate(1000);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(buffer->size(), 1000u);
  EXPECT_EQ(Get(*buffer), std::vector<float>(1000, 0.0f));

  const std::vector<float> values = RandomVector(1000, 1);
  ASSERT_TRUE(backend_->Upload(values, *buffer).ok());
  EXPECT_EQ(Get(*buffer), values);

  // A prefix, into the middle of the buffer, and back.
  const std::vector<float> part = {1.5f, -2.5f, 3.5f};
  ASSERT_TRUE(backend_->Upload(part, buffer->Subspan(10, 3)).ok());
  std::vector<float> back(3);
  ASSERT_TRUE(backend_->Download(buffer->Subspan(10, 5), back).ok());
  EXPECT_EQ(back, part);
}

TEST_P(BackendTest, ManyUploadsBeforeADownloadAllArrive) {
  // Exercises the CUDA backend's staging memory filling up and growing.
  std::vector<DeviceBuffer> buffers;
  std::vector<std::vector<float>> values;
  for (size_t i = 0; i < 20; ++i) {
    values.push_back(RandomVector(100 + 500 * i, 100 + i));
    Result<DeviceBuffer> buffer = backend_->Allocate(values.back().size());
    ASSERT_TRUE(buffer.ok());
    ASSERT_TRUE(backend_->Upload(values.back(), *buffer).ok());
    buffers.push_back(std::move(*buffer));
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_EQ(Get(buffers[i]), values[i]) << "buffer " << i;
  }
}

TEST_P(BackendTest, HostBuffersAreZeroAndCarryDataBothWays) {
  Result<HostBuffer> host = backend_->AllocateHost(5000);
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_EQ(host->size(), 5000u);
  EXPECT_EQ(std::vector<float>(host->data(), host->data() + 5000),
            std::vector<float>(5000, 0.0f));

  // Up from a host buffer, and rewritten at once: the device keeps what
  // was there at the call, as with ordinary memory. 4M floats too, whose
  // copy to a GPU takes long enough for a rewrite to overtake it.
  for (size_t n : {size_t{5000}, size_t{1} << 22}) {
    Result<HostBuffer> big = backend_->AllocateHost(n);
    ASSERT_TRUE(big.ok()) << big.status();
    const std::vector<float> before = RandomVector(n, 5);
    std::copy(before.begin(), before.end(), big->data());
    Result<DeviceBuffer> target = backend_->Allocate(n);
    ASSERT_TRUE(target.ok());
    ASSERT_TRUE(backend_->Upload(*big, *target).ok());
    std::fill(big->data(), big->data() + n, -1.0f);
    EXPECT_TRUE(Get(*target) == before) << n << " floats";
  }
  const std::vector<float> first = RandomVector(5000, 3);
  const std::vector<float> second = RandomVector(5000, 4);
  std::copy(first.begin(), first.end(), host->data());
  Result<DeviceBuffer> device = backend_->Allocate(5000);
  ASSERT_TRUE(device.ok());
  ASSERT_TRUE(backend_->Upload(*host, *device).ok());
  std::copy(second.begin(), second.end(), host->data());
  EXPECT_EQ(Get(*device), first);

  // Part of a host buffer both ways, and down into the middle of one: the
  // floats around the range stay as they were.
  ASSERT_TRUE(
      backend_->Upload(host->span().subspan(100, 50), device->Subspan(0, 50))
          .ok());
  Result<HostBuffer> back = backend_->AllocateHost(300);
  ASSERT_TRUE(back.ok());
  std::fill(back->data(), back->data() + 300, -7.0f);
  ASSERT_TRUE(
      backend_->Download(device->Subspan(0, 50), back->span().subspan(200, 50))
          .ok());
  for (size_t i = 0; i < 300; ++i) {
    const float want = i >= 200 && i < 250 ? second[100 + i - 200] : -7.0f;
    ASSERT_EQ((*back)[i], want) << "float " << i;
  }

  // Moved, the buffer's memory goes with it; the empty one is harmless.
  HostBuffer moved = std::move(*back);
  EXPECT_EQ(moved.size(), 300u);
  EXPECT_EQ(back->size(), 0u);
  EXPECT_EQ(moved[205], second[105]);
  Result<HostBuffer> none = backend_->AllocateHost(0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->size(), 0u);
}

// A backend that only records its host allocations (every other
// operation is unused here).
class HostRecordingBackend final : public ComputeBackend {
 public:
  std::string name() const override { return "recording"; }
  std::vector<float*> allocated, freed;

 protected:
  Status DoAllocateHost(size_t count, float** data) override {
    DUCTILE_RETURN_IF_ERROR(ComputeBackend::DoAllocateHost(count, data));
    allocated.push_back(*data);
    return Status::Ok();
  }
  void DoFreeHost(float* data) override {
    freed.push_back(data);
    ComputeBackend::DoFreeHost(data);
  }
  Status DoAllocate(size_t, float**) override { return Unused(); }
  void DoFree(float*) override {}
  Status DoUpload(const float*, size_t, float*) override { return Unused(); }
  Status DoDownload(const float*, size_t, float*) override { return Unused(); }
  Status DoGemm(Transpose, Transpose, int, int, int, float, const float*,
                const float*, float, float*) override {
    return Unused();
  }
  Status DoAddRowVector(size_t, size_t, const float*, float*) override {
    return Unused();
  }
  Status DoRelu(size_t, float*) override { return Unused(); }
  Status DoReluBackward(size_t, const float*, float*) override {
    return Unused();
  }
  Status DoSoftmaxCrossEntropy(size_t, size_t, const float*, const float*,
                               float, float*, float*) override {
    return Unused();
  }
  Status DoColumnSums(size_t, size_t, const float*, float*) override {
    return Unused();
  }
  Status DoAxpy(size_t, float, const float*, float*) override {
    return Unused();
  }

 private:
  static Status Unused() { return InternalError("not used by this test"); }
};

TEST(HostBuffer, ABackendsBuffersGoBackToItOnceAndPlainOnesNever) {
  HostRecordingBackend backend;
  {
    Result<HostBuffer> a = backend.AllocateHost(100);
    Result<HostBuffer> b = backend.AllocateHost(200);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(backend.allocated.size(), 2u);
    EXPECT_EQ(a->data(), backend.allocated[0]);
    HostBuffer plain = HostBuffer::Plain(50);
    HostBuffer moved = std::move(*a);  // a is empty now
    std::swap(moved, *b);              // b holds a's memory, moved b's
    EXPECT_TRUE(backend.freed.empty());
    *b = HostBuffer::Plain(10);  // a's memory goes back now
    ASSERT_EQ(backend.freed.size(), 1u);
    EXPECT_EQ(backend.freed[0], backend.allocated[0]);
  }
  // b's memory (held by `moved`) went back at the end of the scope; the
  // plain buffers and the empty ones never reached the backend.
  ASSERT_EQ(backend.freed.size(), 2u);
  EXPECT_EQ(backend.freed[1], backend.allocated[1]);
}

TEST(HostBuffer, PlainMemoryIsZeroedAndOwnedByNoBackend) {
  HostBuffer plain = HostBuffer::Plain(1000);
  ASSERT_EQ(plain.size(), 1000u);
  for (size_t i = 0; i < plain.size(); ++i) ASSERT_EQ(plain[i], 0.0f);
  plain[999] = 2.0f;
  HostBuffer other = HostBuffer::Plain(10);
  std::swap(plain, other);
  EXPECT_EQ(plain.size(), 10u);
  EXPECT_EQ(other[999], 2.0f);
  EXPECT_EQ(HostBuffer::Plain(0).size(), 0u);
}

// C = alpha * op(A) op(B) + beta * C, all row-major, in double.
std::vector<float> NaiveGemm(bool ta, bool tb, size_t m, size_t n, size_t k,
                             float alpha, const std::vector<float>& a,
                             const std::vector<float>& b, float beta,
                             std::vector<float> c) {
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (size_t p = 0; p < k; ++p) {
        const double a_ip = ta ? a[p * m + i] : a[i * k + p];
        const double b_pj = tb ? b[j * k + p] : b[p * n + j];
        sum += a_ip * b_pj;
      }
      c[i * n + j] = static_cast<float>(alpha * sum + beta * c[i * n + j]);
    }
  }
  return c;
}

TEST_P(BackendTest, GemmMatchesANaiveLoopForEveryTransposeCombination) {
  const size_t m = 5, n = 7, k = 3;
  const float alpha = 0.75f, beta = -1.25f;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string("trans_a=") + (ta ? "yes" : "no") +
                   " trans_b=" + (tb ? "yes" : "no"));
      const std::vector<float> a = RandomVector(m * k, 1);
      const std::vector<float> b = RandomVector(k * n, 2);
      const std::vector<float> c = RandomVector(m * n, 3);
      DeviceBuffer a_dev = Put(a), b_dev = Put(b), c_dev = Put(c);
      ASSERT_TRUE(backend_
                      ->Gemm(ta ? Transpose::kYes : Transpose::kNo,
                             tb ? Transpose::kYes : Transpose::kNo, m, n, k,
                             alpha, a_dev, b_dev, beta, c_dev)
                      .ok());
      const std::vector<float> expected =
          NaiveGemm(ta, tb, m, n, k, alpha, a, b, beta, c);
      const std::vector<float> got = Get(c_dev);
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_NEAR(got[i], expected[i], 1e-5) << "element " << i;
      }
    }
  }
}

TEST_P(BackendTest, GemmWithZeroBetaIgnoresWhatCHeld) {
  const std::vector<float> a = RandomVector(4 * 3, 4);
  const std::vector<float> b = RandomVector(3 * 2, 5);
  DeviceBuffer a_dev = Put(a), b_dev = Put(b);
  DeviceBuffer c_dev = Put(std::vector<float>(4 * 2, std::nanf("")));
  ASSERT_TRUE(backend_
                  ->Gemm(Transpose::kNo, Transpose::kNo, 4, 2, 3, 1.0f, a_dev,
                         b_dev, 0.0f, c_dev)
                  .ok());
  const std::vector<float> expected = NaiveGemm(
      false, false, 4, 2, 3, 1.0f, a, b, 0.0f, std::vector<float>(8, 0.0f));
  const std::vector<float> got = Get(c_dev);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(got[i], expected[i], 1e-5);
  }
}

TEST_P(BackendTest, GemmOnSubspansUsesOnlyThoseRanges) {
  // A and B packed in one buffer, as the MLP keeps its parameters.
  const std::vector<float> a = RandomVector(2 * 3, 6);
  const std::vector<float> b = RandomVector(3 * 4, 7);
  std::vector<float> packed = {9.0f};
  packed.insert(packed.end(), a.begin(), a.end());
  packed.insert(packed.end(), b.begin(), b.end());
  DeviceBuffer packed_dev = Put(packed);
  DeviceBuffer c_dev = Put(std::vector<float>(2 * 4, 0.0f));
  ASSERT_TRUE(backend_
                  ->Gemm(Transpose::kNo, Transpose::kNo, 2, 4, 3, 1.0f,
                         packed_dev.Subspan(1, 6), packed_dev.Subspan(7, 12),
                         0.0f, c_dev)
                  .ok());
  const std::vector<float> expected = NaiveGemm(
      false, false, 2, 4, 3, 1.0f, a, b, 0.0f, std::vector<float>(8, 0.0f));
  const std::vector<float> got = Get(c_dev);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(got[i], expected[i], 1e-5);
  }
}

TEST_P(BackendTest, ElementwiseOperationsMatchTheirDefinitions) {
  const size_t rows = 3, cols = 4;
  const std::vector<float> x = RandomVector(rows * cols, 8);
  const std::vector<float> bias = RandomVector(cols, 9);

  DeviceBuffer x_dev = Put(x), bias_dev = Put(bias);
  ASSERT_TRUE(backend_->AddRowVector(rows, cols, bias_dev, x_dev).ok());
  std::vector<float> expected = x;
  for (size_t i = 0; i < rows; ++i) {
    for (size_t j = 0; j < cols; ++j) expected[i * cols + j] += bias[j];
  }
  EXPECT_EQ(Get(x_dev), expected);

  ASSERT_TRUE(backend_->Relu(rows * cols, x_dev).ok());
  for (float& e : expected) e = std::max(e, 0.0f);
  EXPECT_EQ(Get(x_dev), expected);

  const std::vector<float> upstream = RandomVector(rows * cols, 10);
  DeviceBuffer grad_dev = Put(upstream);
  ASSERT_TRUE(backend_->ReluBackward(rows * cols, x_dev, grad_dev).ok());
  std::vector<float> expected_grad = upstream;
  for (size_t i = 0; i < expected_grad.size(); ++i) {
    if (!(expected[i] > 0.0f)) expected_grad[i] = 0.0f;
  }
  EXPECT_EQ(Get(grad_dev), expected_grad);

  DeviceBuffer sums_dev = Put(std::vector<float>(cols, 7.0f));
  ASSERT_TRUE(backend_->ColumnSums(rows, cols, grad_dev, sums_dev).ok());
  const std::vector<float> sums = Get(sums_dev);
  for (size_t j = 0; j < cols; ++j) {
    double sum = 0.0;
    for (size_t i = 0; i < rows; ++i) sum += expected_grad[i * cols + j];
    EXPECT_NEAR(sums[j], sum, 1e-6);
  }

  DeviceBuffer y_dev = Put(upstream);
  ASSERT_TRUE(backend_->Axpy(rows * cols, -0.5f, x_dev, y_dev).ok());
  const std::vector<float> y = Get(y_dev);
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_NEAR(y[i], upstream[i] - 0.5f * expected[i], 1e-6);
  }
}

TEST_P(BackendTest, SoftmaxCrossEntropyGivesLossAndScaledGradient) {
  const size_t rows = 3, cols = 5;
  std::vector<float> logits = RandomVector(rows * cols, 11);
  logits[0] = 80.0f;  // large logits must not overflow
  // One-hot rows, and one soft target row.
  std::vector<float> targets(rows * cols, 0.0f);
  targets[0 * cols + 2] = 1.0f;
  targets[1 * cols + 0] = 1.0f;
  targets[2 * cols + 1] = 0.25f;
  targets[2 * cols + 4] = 0.75f;
  const float scale = 0.5f;

  DeviceBuffer logits_dev = Put(logits), targets_dev = Put(targets);
  DeviceBuffer loss_dev = Put(std::vector<float>(rows, 0.0f));
  DeviceBuffer grad_dev = Put(std::vector<float>(rows * cols, 0.0f));
  ASSERT_TRUE(backend_
                  ->SoftmaxCrossEntropy(rows, cols, logits_dev, targets_dev,
                                        scale, loss_dev, grad_dev)
                  .ok());
  const std::vector<float> loss = Get(loss_dev);
  const std::vector<float> grad = Get(grad_dev);
  for (size_t i = 0; i < rows; ++i) {
    const float* z = &logits[i * cols];
    double max_z = z[0];
    for (size_t j = 1; j < cols; ++j) max_z = std::max<double>(max_z, z[j]);
    double sum_exp = 0.0;
    for (size_t j = 0; j < cols; ++j) sum_exp += std::exp(z[j] - max_z);
    double expected_loss = 0.0;
    for (size_t j = 0; j < cols; ++j) {
      const double log_p = z[j] - max_z - std::log(sum_exp);
      expected_loss -= targets[i * cols + j] * log_p;
      EXPECT_NEAR(grad[i * cols + j],
                  scale * (std::exp(log_p) - targets[i * cols + j]), 1e-6)
          << "row " << i << " col " << j;
    }
    EXPECT_NEAR(loss[i], expected_loss, 1e-5) << "row " << i;
  }

  // In place: the gradient replaces the logits.
  ASSERT_TRUE(backend_
                  ->SoftmaxCrossEntropy(rows, cols, logits_dev, targets_dev,
                                        scale, loss_dev, logits_dev)
                  .ok());
  EXPECT_EQ(Get(logits_dev), grad);
}

TEST_P(BackendTest, BadSpansAreRejectedWithoutTouchingMemory) {
  DeviceBuffer small = Put(std::vector<float>(4, 1.0f));
  DeviceBuffer big = Put(std::vector<float>(16, 1.0f));

  // Too small for the operation.
  EXPECT_EQ(backend_
                ->Gemm(Transpose::kNo, Transpose::kNo, 4, 4, 4, 1.0f, small,
                       big, 0.0f, big)
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Relu(5, small).code(), StatusCode::kInvalidArgument);
  std::vector<float> host(5);
  EXPECT_EQ(backend_->Download(small, host).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Upload(host, small).code(), StatusCode::kInvalidArgument);
  // A subspan out of range is empty, so using it fails.
  EXPECT_TRUE(small.Subspan(3, 2).empty());
  EXPECT_EQ(backend_->Relu(2, small.Subspan(3, 2)).code(),
            StatusCode::kInvalidArgument);
  // Gemm's output overlapping an input.
  EXPECT_EQ(
      backend_
          ->Gemm(Transpose::kNo, Transpose::kNo, 2, 2, 2, 1.0f,
                 big.Subspan(0, 4), big.Subspan(4, 4), 0.0f, big.Subspan(2, 4))
          .code(),
      StatusCode::kInvalidArgument);
  // A span of no backend, and one of another backend.
  EXPECT_EQ(backend_->Relu(1, DeviceSpan()).code(),
            StatusCode::kInvalidArgument);
  Result<std::unique_ptr<ComputeBackend>> other = MakeComputeBackend("cpu");
  ASSERT_TRUE(other.ok());
  Result<DeviceBuffer> foreign = (*other)->Allocate(4);
  ASSERT_TRUE(foreign.ok());
  EXPECT_EQ(backend_->Relu(4, *foreign).code(), StatusCode::kInvalidArgument);

  EXPECT_EQ(Get(small), std::vector<float>(4, 1.0f));
  EXPECT_EQ(Get(big), std::vector<float>(16, 1.0f));
}

TEST_P(BackendTest, EmptyOperationsSucceed) {
  EXPECT_TRUE(backend_->Relu(0, DeviceSpan()).ok());
  EXPECT_TRUE(backend_
                  ->Gemm(Transpose::kNo, Transpose::kNo, 0, 0, 0, 1.0f,
                         DeviceSpan(), DeviceSpan(), 0.0f, DeviceSpan())
                  .ok());
  Result<DeviceBuffer> empty = backend_->Allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size(), 0u);
}

TEST(ComputeBackend, CpuBackendIsNamedAfterOpenBlas) {
  Result<std::unique_ptr<ComputeBackend>> backend = MakeComputeBackend("cpu");
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "cpu (OpenBLAS)");
}

TEST(ComputeBackend, CudaIsAnErrorNotACrashWithoutCudaOrADevice) {
  Result<std::unique_ptr<ComputeBackend>> backend = MakeComputeBackend("cuda");
  if (!BuiltWithCuda()) {
    ASSERT_FALSE(backend.ok());
    EXPECT_EQ(backend.status().code(), StatusCode::kFailedPrecondition)
        << backend.status();
    return;
  }
  if (backend.ok()) {
    EXPECT_EQ((*backend)->name().rfind("cuda (", 0), 0u) << (*backend)->name();
    return;
  }
  EXPECT_TRUE(backend.status().code() == StatusCode::kFailedPrecondition ||
              backend.status().code() == StatusCode::kUnavailable)
      << backend.status();
  EXPECT_FALSE(backend.status().message().empty());
}

TEST(ComputeBackend, AutoFallsBackToTheCpuWhenCudaIsUnusable) {
  Result<std::unique_ptr<ComputeBackend>> autodetected =
      MakeComputeBackend("auto");
  ASSERT_TRUE(autodetected.ok()) << autodetected.status();
  const bool cuda_usable = MakeComputeBackend("cuda").ok();
  EXPECT_EQ((*autodetected)->name().rfind(cuda_usable ? "cuda (" : "cpu (", 0),
            0u)
      << (*autodetected)->name();
}

TEST(ComputeBackend, UnknownDevicesAndBadOptionsAreInvalidArguments) {
  EXPECT_EQ(MakeComputeBackend("tpu").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeComputeBackend("").status().code(),
            StatusCode::kInvalidArgument);
  ComputeBackendOptions options;
  options.device = "cpu";
  options.cpu_threads = 0;
  EXPECT_EQ(MakeComputeBackend(options).status().code(),
            StatusCode::kInvalidArgument);
  options.cpu_threads = 1;
  options.cuda_device = -1;
  EXPECT_EQ(MakeComputeBackend(options).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ductile::models
