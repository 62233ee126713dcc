// ComputeBackend: the few dense linear-algebra operations the built-in
// models need, on the CPU (OpenBLAS) or on a CUDA GPU (cuBLAS), behind one
// interface, so that a model is written once and runs on either.
//
// Memory lives in DeviceBuffers that a backend allocates: plain host memory
// on the CPU, GPU memory on CUDA. The host moves data in and out only with
// Upload and Download; every other operation works on backend memory and
// names it through DeviceSpans (non-owning views, like std::span).
// Matrices are row-major and dense: an r x c matrix is r * c consecutive
// floats, element (i, j) at i * c + j.
//
// Example (y = x W^T + b, then ReLU, for a batch of 32 rows):
//   Result<std::unique_ptr<ComputeBackend>> backend =
//       MakeComputeBackend("auto");
//   if (!backend.ok()) return backend.status();
//   ComputeBackend& be = **backend;
//   Result<DeviceBuffer> x = be.Allocate(32 * 784);   // and w, b, y alike
//   DUCTILE_RETURN_IF_ERROR(be.Upload(host_x, *x));
//   DUCTILE_RETURN_IF_ERROR(be.Gemm(Transpose::kNo, Transpose::kYes, 32, 256,
//   784,
//                           1.0f, *x, *w, 0.0f, *y));
//   DUCTILE_RETURN_IF_ERROR(be.AddRowVector(32, 256, *b, *y));
//   DUCTILE_RETURN_IF_ERROR(be.Relu(32 * 256, *y));
//   DUCTILE_RETURN_IF_ERROR(be.Download(*y, host_y));        // waits for the
//   GPU
//
// Errors: every operation checks its arguments before it does anything and
// returns InvalidArgument (nothing changed) if a span is too small, belongs
// to another backend or, for Gemm, overlaps the output. Backend failures
// (out of GPU memory, a failed kernel) come back as ResourceExhausted or
// Internal. On CUDA the operations are queued on one stream and run in
// order; a failure of queued work may surface only at the next Download.
//
// Thread safety: a backend and its buffers are not thread-safe; use each
// backend from one thread at a time. Separate backends are independent,
// except that the CPU backend's thread count is process-wide (OpenBLAS has
// one global setting). A DeviceBuffer must be destroyed before the backend
// that allocated it.
#ifndef DUCTILE_MODELS_COMPUTE_BACKEND_H_
#define DUCTILE_MODELS_COMPUTE_BACKEND_H_

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "ductile/status.h"

namespace ductile::models {

class ComputeBackend;

// A non-owning view of `size()` floats of a backend's memory. Cheap to copy;
// valid while the DeviceBuffer it was taken from lives. A default-built
// span is empty and belongs to no backend.
class DeviceSpan {
 public:
  DeviceSpan() = default;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The floats [offset, offset + count) of this span. If that range does
  // not fit, the result is empty, so that an operation given it fails with
  // InvalidArgument instead of touching memory out of range.
  DeviceSpan Subspan(size_t offset, size_t count) const;

 private:
  friend class ComputeBackend;
  friend class DeviceBuffer;
  DeviceSpan(float* data, size_t size, const ComputeBackend* owner)
      : data_(data), size_(size), owner_(owner) {}

  float* data_ = nullptr;
  size_t size_ = 0;
  const ComputeBackend* owner_ = nullptr;
};

// Owns `size()` floats of a backend's memory (ComputeBackend::Allocate).
// Move-only; frees the memory when destroyed.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  size_t size() const { return size_; }

  // All of the buffer, or part of it (see DeviceSpan::Subspan).
  DeviceSpan span() { return DeviceSpan(data_, size_, owner_); }
  DeviceSpan Subspan(size_t offset, size_t count) {
    return span().Subspan(offset, count);
  }
  operator DeviceSpan() { return span(); }  // NOLINT: like vector -> span

 private:
  friend class ComputeBackend;
  DeviceBuffer(float* data, size_t size, ComputeBackend* owner)
      : data_(data), size_(size), owner_(owner) {}
  void Reset();

  float* data_ = nullptr;
  size_t size_ = 0;
  ComputeBackend* owner_ = nullptr;
};

// How a HostBuffer gives its memory back: to its backend (DoFreeHost), or
// with std::free for plain memory (owner null). Also carries its length.
struct HostBufferRelease {
  ComputeBackend* owner = nullptr;
  size_t size = 0;
  void operator()(float* data) const;
};

// Owns `size()` floats of host memory for moving data to and from a
// backend (ComputeBackend::AllocateHost): page-locked on CUDA, so that
// Upload from it and Download into it go straight between it and the GPU,
// without the copy through the backend's staging memory that ordinary
// host memory takes. Plain memory on the CPU, or when built with Plain().
// Move-only; zeroed when made; frees the memory when destroyed, and must
// be destroyed before the backend that made it.
class HostBuffer {
 public:
  HostBuffer() = default;
  // `count` floats of ordinary host memory, owned by no backend.
  static HostBuffer Plain(size_t count);

  size_t size() const { return data_ ? data_.get_deleter().size : 0; }
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  std::span<float> span() { return {data(), size()}; }
  std::span<const float> span() const { return {data(), size()}; }
  operator std::span<float>() { return span(); }  // NOLINT: like vector
  operator std::span<const float>() const { return span(); }  // NOLINT
  float& operator[](size_t i) { return data_[i]; }
  const float& operator[](size_t i) const { return data_[i]; }

 private:
  friend class ComputeBackend;
  HostBuffer(float* data, size_t size, ComputeBackend* owner)
      : data_(data, HostBufferRelease{owner, size}) {}

  std::unique_ptr<float[], HostBufferRelease> data_;
};

// Whether Gemm uses a matrix as stored or its transpose.
enum class Transpose : bool { kNo = false, kYes = true };

class ComputeBackend {
 public:
  virtual ~ComputeBackend() = default;
  ComputeBackend(const ComputeBackend&) = delete;
  ComputeBackend& operator=(const ComputeBackend&) = delete;

  // "cpu (OpenBLAS)" or "cuda (<device name>)", for logs.
  virtual std::string name() const = 0;

  // A buffer of `count` floats, all zero. ResourceExhausted if the memory
  // cannot be had.
  Result<DeviceBuffer> Allocate(size_t count);

  // `count` floats of host memory that this backend moves fastest (see
  // HostBuffer), zeroed. ResourceExhausted if the memory cannot be had.
  Result<HostBuffer> AllocateHost(size_t count);

  // Copies `src` into dst[0, src.size()). Needs dst.size() >= src.size().
  // May return before the copy has happened (CUDA); `src` may be reused at
  // once. From a HostBuffer of this backend, CUDA copies straight from it
  // and returns once that copy is done (after the work queued before it).
  Status Upload(std::span<const float> src, DeviceSpan dst);

  // Copies src[0, dst.size()) into `dst`. Needs src.size() >= dst.size().
  // Waits for all queued work, so the data is there when it returns.
  Status Download(DeviceSpan src, std::span<float> dst);

  // C = alpha * op(A) op(B) + beta * C, with op(A) m x k, op(B) k x n and
  // C m x n, all row-major and dense (A is stored m x k, or k x m if
  // transposed; B k x n, or n x k). With beta == 0, C is not read (NaN in C
  // does not matter). C must not overlap A or B. Sizes must be at most
  // INT_MAX (BLAS takes int).
  Status Gemm(Transpose trans_a, Transpose trans_b, size_t m, size_t n,
              size_t k, float alpha, DeviceSpan a, DeviceSpan b, float beta,
              DeviceSpan c);

  // x[i][j] += bias[j] for the rows x cols matrix x: a bias per column.
  Status AddRowVector(size_t rows, size_t cols, DeviceSpan bias, DeviceSpan x);

  // x[i] = max(x[i], 0) for i < count.
  Status Relu(size_t count, DeviceSpan x);

  // grad[i] = 0 where activation[i] <= 0, for i < count: the backward pass
  // of Relu, given Relu's output and the gradient with respect to it.
  Status ReluBackward(size_t count, DeviceSpan activation, DeviceSpan grad);

  // Softmax cross-entropy of each row of the rows x cols matrix `logits`
  // against the same-shaped `targets` (a probability per class; one-hot
  // for plain labels):
  //   row_loss[i] = sum_j targets[i][j] * (logsumexp(logits[i]) -
  //                                        logits[i][j])
  //   grad[i][j]  = grad_scale * (softmax(logits[i])[j] * sum(targets[i]) -
  //                               targets[i][j])
  // i.e. grad is grad_scale times the gradient of row_loss[i] with respect
  // to logits[i]. `grad` may be `logits` itself (the logits are then
  // overwritten); otherwise the spans must not overlap.
  Status SoftmaxCrossEntropy(size_t rows, size_t cols, DeviceSpan logits,
                             DeviceSpan targets, float grad_scale,
                             DeviceSpan row_loss, DeviceSpan grad);

  // out[j] = sum_i x[i][j] for the rows x cols matrix x (a bias gradient).
  Status ColumnSums(size_t rows, size_t cols, DeviceSpan x, DeviceSpan out);

  // y[i] += alpha * x[i] for i < count. x and y must not overlap.
  Status Axpy(size_t count, float alpha, DeviceSpan x, DeviceSpan y);

 protected:
  ComputeBackend() = default;

  // The operations proper, called after the public methods above have
  // checked every argument: pointers are valid for the sizes given, sizes
  // are non-zero and fit in int where the public method says so.
  virtual Status DoAllocate(size_t count, float** data) = 0;
  // Frees what DoAllocate returned. Must not fail.
  virtual void DoFree(float* data) = 0;
  virtual Status DoUpload(const float* src, size_t count, float* dst) = 0;
  virtual Status DoDownload(const float* src, size_t count, float* dst) = 0;
  virtual Status DoGemm(Transpose trans_a, Transpose trans_b, int m, int n,
                        int k, float alpha, const float* a, const float* b,
                        float beta, float* c) = 0;
  virtual Status DoAddRowVector(size_t rows, size_t cols, const float* bias,
                                float* x) = 0;
  virtual Status DoRelu(size_t count, float* x) = 0;
  virtual Status DoReluBackward(size_t count, const float* activation,
                                float* grad) = 0;
  virtual Status DoSoftmaxCrossEntropy(size_t rows, size_t cols,
                                       const float* logits,
                                       const float* targets, float grad_scale,
                                       float* row_loss, float* grad) = 0;
  virtual Status DoColumnSums(size_t rows, size_t cols, const float* x,
                              float* out) = 0;
  virtual Status DoAxpy(size_t count, float alpha, const float* x,
                        float* y) = 0;
  // Host memory for AllocateHost, zeroed; by default plain memory. Freed by
  // DoFreeHost, which must not fail.
  virtual Status DoAllocateHost(size_t count, float** data);
  virtual void DoFreeHost(float* data);

 private:
  friend class DeviceBuffer;
  friend struct HostBufferRelease;

  // OK if `span` is memory of this backend with at least `needed` floats,
  // or if `needed` is 0. `what` names the argument in the error.
  Status CheckSpan(DeviceSpan span, size_t needed, std::string_view what) const;
};

// Which backend MakeComputeBackend builds, and how.
struct ComputeBackendOptions {
  // "cpu", "cuda", or "auto": CUDA if this build has CUDA support and a
  // CUDA device is present, else the CPU.
  std::string device = "auto";
  // Threads OpenBLAS may use in one CPU Gemm, >= 1. 1 by default because
  // workers are separate processes that already share the machine's cores.
  // OpenBLAS keeps one process-wide setting: the last backend built wins.
  int cpu_threads = 1;
  // Ordinal of the CUDA device to use, >= 0.
  int cuda_device = 0;
};

// Builds the backend `options.device` names.
//
// Errors:
//   InvalidArgument     an unknown device name, cpu_threads < 1 or
//                       cuda_device < 0.
//   FailedPrecondition  "cuda" in a build without CUDA support, no CUDA
//                       device (or driver) present, or cuda_device not among
//                       them.
//   Unavailable         the CUDA device exists but cannot be used now (busy
//                       in exclusive mode).
// Never aborts the process, with or without a GPU.
Result<std::unique_ptr<ComputeBackend>> MakeComputeBackend(
    const ComputeBackendOptions& options);
// The same with default options but for the device name.
Result<std::unique_ptr<ComputeBackend>> MakeComputeBackend(
    const std::string& device);

// Whether this build includes the CUDA backend (whether or not a device is
// present).
bool BuiltWithCuda();

}  // namespace ductile::models

#endif  // DUCTILE_MODELS_COMPUTE_BACKEND_H_
