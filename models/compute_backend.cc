#include "models/compute_backend.h"

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <utility>

#include "models/cpu_backend.h"
#if DUCTILE_WITH_CUDA
#include "models/cuda_backend.h"
#endif

namespace ductile::models {
namespace {

// a * b, or false if it does not fit in size_t.
bool Multiply(size_t a, size_t b, size_t* product) {
  if (a != 0 && b > SIZE_MAX / a) return false;
  *product = a * b;
  return true;
}

Status TooLarge(size_t rows, size_t cols) {
  return InvalidArgumentError("a " + std::to_string(rows) + " x " +
                              std::to_string(cols) +
                              " matrix is too large to address");
}

}  // namespace

DeviceSpan DeviceSpan::Subspan(size_t offset, size_t count) const {
  if (offset > size_ || count > size_ - offset) {
    return DeviceSpan(nullptr, 0, owner_);
  }
  return DeviceSpan(data_ + offset, count, owner_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      owner_(std::exchange(other.owner_, nullptr)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owner_ = std::exchange(other.owner_, nullptr);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { Reset(); }

void DeviceBuffer::Reset() {
  if (data_ != nullptr) owner_->DoFree(data_);
  data_ = nullptr;
  size_ = 0;
  owner_ = nullptr;
}

namespace {

// Zeroed plain host memory for `count` floats (count > 0), or null.
float* AllocatePlain(size_t count) {
  return static_cast<float*>(std::calloc(count, sizeof(float)));
}

}  // namespace

HostBuffer HostBuffer::Plain(size_t count) {
  if (count == 0) return HostBuffer();
  float* data = AllocatePlain(count);
  if (data == nullptr) throw std::bad_alloc();
  return HostBuffer(data, count, nullptr);
}

void HostBufferRelease::operator()(float* data) const {
  if (owner != nullptr) {
    owner->DoFreeHost(data);
  } else {
    std::free(data);
  }
}

Status ComputeBackend::DoAllocateHost(size_t count, float** data) {
  *data = AllocatePlain(count);
  if (*data == nullptr) {
    return ResourceExhaustedError("cannot allocate " + std::to_string(count) +
                                  " floats of host memory");
  }
  return Status::Ok();
}

void ComputeBackend::DoFreeHost(float* data) { std::free(data); }

Result<HostBuffer> ComputeBackend::AllocateHost(size_t count) {
  if (count == 0) return HostBuffer();
  if (count > SIZE_MAX / sizeof(float)) {
    return InvalidArgumentError("cannot allocate " + std::to_string(count) +
                                " floats");
  }
  float* data = nullptr;
  DUCTILE_RETURN_IF_ERROR(DoAllocateHost(count, &data));
  return HostBuffer(data, count, this);
}

Status ComputeBackend::CheckSpan(DeviceSpan span, size_t needed,
                                 std::string_view what) const {
  if (needed == 0) return Status::Ok();
  if (span.owner_ != this) {
    return InvalidArgumentError(std::string(what) + " is not memory of the " +
                                name() + " backend");
  }
  if (span.size_ < needed) {
    return InvalidArgumentError(
        std::string(what) + " holds " + std::to_string(span.size_) +
        " floats, the operation needs " + std::to_string(needed));
  }
  return Status::Ok();
}

Result<DeviceBuffer> ComputeBackend::Allocate(size_t count) {
  if (count == 0) return DeviceBuffer(nullptr, 0, this);
  if (count > SIZE_MAX / sizeof(float)) {
    return InvalidArgumentError("cannot allocate " + std::to_string(count) +
                                " floats");
  }
  float* data = nullptr;
  DUCTILE_RETURN_IF_ERROR(DoAllocate(count, &data));
  return DeviceBuffer(data, count, this);
}

Status ComputeBackend::Upload(std::span<const float> src, DeviceSpan dst) {
  DUCTILE_RETURN_IF_ERROR(CheckSpan(dst, src.size(), "Upload destination"));
  if (src.empty()) return Status::Ok();
  return DoUpload(src.data(), src.size(), dst.data_);
}

Status ComputeBackend::Download(DeviceSpan src, std::span<float> dst) {
  DUCTILE_RETURN_IF_ERROR(CheckSpan(src, dst.size(), "Download source"));
  if (dst.empty()) return Status::Ok();
  return DoDownload(src.data_, dst.size(), dst.data());
}

Status ComputeBackend::Gemm(Transpose trans_a, Transpose trans_b, size_t m,
                            size_t n, size_t k, float alpha, DeviceSpan a,
                            DeviceSpan b, float beta, DeviceSpan c) {
  constexpr size_t kIntMax = INT_MAX;
  if (m > kIntMax || n > kIntMax || k > kIntMax) {
    return InvalidArgumentError("Gemm sizes m=" + std::to_string(m) +
                                " n=" + std::to_string(n) +
                                " k=" + std::to_string(k) + " exceed INT_MAX");
  }
  size_t a_size = 0, b_size = 0, c_size = 0;
  if (!Multiply(m, k, &a_size)) return TooLarge(m, k);
  if (!Multiply(k, n, &b_size)) return TooLarge(k, n);
  if (!Multiply(m, n, &c_size)) return TooLarge(m, n);
  DUCTILE_RETURN_IF_ERROR(CheckSpan(a, a_size, "Gemm A"));
  DUCTILE_RETURN_IF_ERROR(CheckSpan(b, b_size, "Gemm B"));
  DUCTILE_RETURN_IF_ERROR(CheckSpan(c, c_size, "Gemm C"));
  if (c_size == 0) return Status::Ok();
  auto overlaps = [](const float* x, size_t x_size, const float* y,
                     size_t y_size) {
    const auto x0 = reinterpret_cast<uintptr_t>(x);
    const auto y0 = reinterpret_cast<uintptr_t>(y);
    return x_size != 0 && y_size != 0 && x0 < y0 + y_size * sizeof(float) &&
           y0 < x0 + x_size * sizeof(float);
  };
  if (overlaps(c.data_, c_size, a.data_, a_size) ||
      overlaps(c.data_, c_size, b.data_, b_size)) {
    return InvalidArgumentError("Gemm output C overlaps an input");
  }
  return DoGemm(trans_a, trans_b, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a.data_, b.data_, beta, c.data_);
}

Status ComputeBackend::AddRowVector(size_t rows, size_t cols, DeviceSpan bias,
                                    DeviceSpan x) {
  size_t x_size = 0;
  if (!Multiply(rows, cols, &x_size)) return TooLarge(rows, cols);
  if (x_size == 0) return Status::Ok();
  DUCTILE_RETURN_IF_ERROR(CheckSpan(bias, cols, "AddRowVector bias"));
  DUCTILE_RETURN_IF_ERROR(CheckSpan(x, x_size, "AddRowVector x"));
  return DoAddRowVector(rows, cols, bias.data_, x.data_);
}

Status ComputeBackend::Relu(size_t count, DeviceSpan x) {
  DUCTILE_RETURN_IF_ERROR(CheckSpan(x, count, "Relu x"));
  if (count == 0) return Status::Ok();
  return DoRelu(count, x.data_);
}

Status ComputeBackend::ReluBackward(size_t count, DeviceSpan activation,
                                    DeviceSpan grad) {
  DUCTILE_RETURN_IF_ERROR(
      CheckSpan(activation, count, "ReluBackward activation"));
  DUCTILE_RETURN_IF_ERROR(CheckSpan(grad, count, "ReluBackward grad"));
  if (count == 0) return Status::Ok();
  return DoReluBackward(count, activation.data_, grad.data_);
}

Status ComputeBackend::SoftmaxCrossEntropy(size_t rows, size_t cols,
                                           DeviceSpan logits,
                                           DeviceSpan targets, float grad_scale,
                                           DeviceSpan row_loss,
                                           DeviceSpan grad) {
  size_t size = 0;
  if (!Multiply(rows, cols, &size)) return TooLarge(rows, cols);
  if (size == 0) return Status::Ok();
  DUCTILE_RETURN_IF_ERROR(
      CheckSpan(logits, size, "SoftmaxCrossEntropy logits"));
  DUCTILE_RETURN_IF_ERROR(
      CheckSpan(targets, size, "SoftmaxCrossEntropy targets"));
  DUCTILE_RETURN_IF_ERROR(
      CheckSpan(row_loss, rows, "SoftmaxCrossEntropy row_loss"));
  DUCTILE_RETURN_IF_ERROR(CheckSpan(grad, size, "SoftmaxCrossEntropy grad"));
  return DoSoftmaxCrossEntropy(rows, cols, logits.data_, targets.data_,
                               grad_scale, row_loss.data_, grad.data_);
}

Status ComputeBackend::ColumnSums(size_t rows, size_t cols, DeviceSpan x,
                                  DeviceSpan out) {
  size_t size = 0;
  if (!Multiply(rows, cols, &size)) return TooLarge(rows, cols);
  DUCTILE_RETURN_IF_ERROR(CheckSpan(x, size, "ColumnSums x"));
  DUCTILE_RETURN_IF_ERROR(CheckSpan(out, cols, "ColumnSums out"));
  if (cols == 0) return Status::Ok();
  return DoColumnSums(rows, cols, x.data_, out.data_);
}

Status ComputeBackend::Axpy(size_t count, float alpha, DeviceSpan x,
                            DeviceSpan y) {
  DUCTILE_RETURN_IF_ERROR(CheckSpan(x, count, "Axpy x"));
  DUCTILE_RETURN_IF_ERROR(CheckSpan(y, count, "Axpy y"));
  if (count == 0) return Status::Ok();
  return DoAxpy(count, alpha, x.data_, y.data_);
}

bool BuiltWithCuda() {
#if DUCTILE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

Result<std::unique_ptr<ComputeBackend>> MakeComputeBackend(
    const ComputeBackendOptions& options) {
  const std::string& device = options.device;
  if (device != "cpu" && device != "cuda" && device != "auto") {
    return InvalidArgumentError("unknown compute device '" + device +
                                "'; expected cpu, cuda or auto");
  }
  if (options.cpu_threads < 1) {
    return InvalidArgumentError("cpu_threads must be >= 1, is " +
                                std::to_string(options.cpu_threads));
  }
  if (options.cuda_device < 0) {
    return InvalidArgumentError("cuda_device must be >= 0, is " +
                                std::to_string(options.cuda_device));
  }
  if (device == "cpu") return MakeCpuBackend(options.cpu_threads);
#if DUCTILE_WITH_CUDA
  Result<std::unique_ptr<ComputeBackend>> cuda =
      MakeCudaBackend(options.cuda_device);
  // "auto" takes the CPU whenever CUDA cannot be used, whatever the reason;
  // the backend's name() says which one it got.
  if (cuda.ok() || device == "cuda") return cuda;
  return MakeCpuBackend(options.cpu_threads);
#else
  if (device == "cuda") {
    return FailedPreconditionError(
        "compute device 'cuda' requested, but this build of ductile has no "
        "CUDA support (configure with nvcc available and DUCTILE_WITH_CUDA "
        "not OFF)");
  }
  return MakeCpuBackend(options.cpu_threads);
#endif
}

Result<std::unique_ptr<ComputeBackend>> MakeComputeBackend(
    const std::string& device) {
  ComputeBackendOptions options;
  options.device = device;
  return MakeComputeBackend(options);
}

}  // namespace ductile::models
