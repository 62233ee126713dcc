#include "models/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "models/cuda_kernels.h"

namespace ductile::models {
namespace {

Status FromCuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::Ok();
  std::string message = std::string(what) + ": " + cudaGetErrorName(error) +
                        " (" + cudaGetErrorString(error) + ")";
  switch (error) {
    case cudaErrorMemoryAllocation:
      return ResourceExhaustedError(std::move(message));
    case cudaErrorInsufficientDriver:
      return FailedPreconditionError(std::move(message) +
                                     "; is an NVIDIA driver installed?");
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
      return FailedPreconditionError(std::move(message));
    case cudaErrorDevicesUnavailable:
      return UnavailableError(std::move(message));
    default:
      return InternalError(std::move(message));
  }
}

Status FromCublas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  std::string message =
      std::string(what) + ": " + cublasGetStatusString(status);
  if (status == CUBLAS_STATUS_ALLOC_FAILED) {
    return ResourceExhaustedError(std::move(message));
  }
  return InternalError(std::move(message));
}

// Pinned host memory grows to the largest transfer seen, at least doubling,
// so that a training loop stops allocating after its first steps.
size_t GrownCapacity(size_t old_capacity, size_t needed) {
  return std::max(needed, 2 * old_capacity);
}

class CudaBackend final : public ComputeBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {}

  ~CudaBackend() override {
    // HostBuffers must go before their backend (compute_backend.h); one
    // still here would later free through a destroyed backend.
    if (!pinned_.empty()) {
      std::fprintf(stderr,
                   "CudaBackend destroyed with %zu of its HostBuffers alive\n",
                   pinned_.size());
      std::abort();
    }
    // Errors are ignored: there is nothing to do about them here.
    cudaSetDevice(device_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (upload_done_ != nullptr) cudaEventDestroy(upload_done_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (upload_staging_ != nullptr) cudaFreeHost(upload_staging_);
    if (download_staging_ != nullptr) cudaFreeHost(download_staging_);
  }

  // Everything that can fail, after the device has been checked.
  Status Init() {
    DUCTILE_RETURN_IF_ERROR(FromCuda(cudaSetDevice(device_), "cudaSetDevice"));
    cudaDeviceProp properties;
    DUCTILE_RETURN_IF_ERROR(
        FromCuda(cudaGetDeviceProperties(&properties, device_),
                 "cudaGetDeviceProperties"));
    device_name_ = properties.name;
    DUCTILE_RETURN_IF_ERROR(
        FromCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                 "cudaStreamCreate"));
    DUCTILE_RETURN_IF_ERROR(FromCuda(
        cudaEventCreateWithFlags(&upload_done_, cudaEventDisableTiming),
        "cudaEventCreate"));
    DUCTILE_RETURN_IF_ERROR(FromCublas(cublasCreate(&cublas_), "cublasCreate"));
    return FromCublas(cublasSetStream(cublas_, stream_), "cublasSetStream");
  }

  std::string name() const override { return "cuda (" + device_name_ + ")"; }

 protected:
  Status DoAllocate(size_t count, float** data) override {
    DUCTILE_RETURN_IF_ERROR(Activate());
    void* memory = nullptr;
    DUCTILE_RETURN_IF_ERROR(
        FromCuda(cudaMalloc(&memory, count * sizeof(float)), "cudaMalloc"));
    // Queued on the stream, so it is ordered before any later use.
    Status zeroed =
        FromCuda(cudaMemsetAsync(memory, 0, count * sizeof(float), stream_),
                 "cudaMemsetAsync");
    if (!zeroed.ok()) {
      cudaFree(memory);
      return zeroed;
    }
    *data = static_cast<float*>(memory);
    return Status::Ok();
  }

  void DoFree(float* data) override {
    // Queued work may still use the memory: let it finish first.
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    cudaFree(data);
  }

  // The source is first copied into pinned staging memory (so that `src`
  // can be reused at once and the transfer runs at full speed), at the next
  // free offset: uploads queued since the staging memory was last drained
  // need not wait for each other. When it is full, wait for the copies out
  // of it (upload_done_ follows the latest) and start over at offset 0.
  // From page-locked memory of this backend's (AllocateHost), the copy
  // goes straight to the GPU; it is waited for, so that `src` may be
  // reused at once as from staging.
  Status DoUpload(const float* src, size_t count, float* dst) override {
    DUCTILE_RETURN_IF_ERROR(Activate());
    if (IsPinned(src, count)) {
      return CopyAndWait(dst, src, count, cudaMemcpyHostToDevice);
    }
    if (count > upload_capacity_ - upload_used_) {
      DUCTILE_RETURN_IF_ERROR(
          FromCuda(cudaEventSynchronize(upload_done_), "cudaEventSynchronize"));
      upload_used_ = 0;
      if (count > upload_capacity_) {
        DUCTILE_RETURN_IF_ERROR(
            GrowPinned(&upload_staging_, &upload_capacity_,
                       GrownCapacity(upload_capacity_, count)));
      }
    }
    float* staging = upload_staging_ + upload_used_;
    upload_used_ += count;
    std::memcpy(staging, src, count * sizeof(float));
    DUCTILE_RETURN_IF_ERROR(
        FromCuda(cudaMemcpyAsync(dst, staging, count * sizeof(float),
                                 cudaMemcpyHostToDevice, stream_),
                 "cudaMemcpyAsync to the device"));
    return FromCuda(cudaEventRecord(upload_done_, stream_), "cudaEventRecord");
  }

  Status DoDownload(const float* src, size_t count, float* dst) override {
    DUCTILE_RETURN_IF_ERROR(Activate());
    if (IsPinned(dst, count)) {
      return CopyAndWait(dst, src, count, cudaMemcpyDeviceToHost);
    }
    if (count > download_capacity_) {
      // No copy into the staging memory is in flight: each Download waits.
      DUCTILE_RETURN_IF_ERROR(
          GrowPinned(&download_staging_, &download_capacity_,
                     GrownCapacity(download_capacity_, count)));
    }
    DUCTILE_RETURN_IF_ERROR(
        FromCuda(cudaMemcpyAsync(download_staging_, src, count * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream_),
                 "cudaMemcpyAsync to the host"));
    DUCTILE_RETURN_IF_ERROR(
        FromCuda(cudaStreamSynchronize(stream_), "queued CUDA work"));
    upload_used_ = 0;  // the stream is idle: no upload reads the staging
    std::memcpy(dst, download_staging_, count * sizeof(float));
    return Status::Ok();
  }

  Status DoAllocateHost(size_t count, float** data) override {
    DUCTILE_RETURN_IF_ERROR(Activate());
    void* memory = nullptr;
    const cudaError_t error = cudaMallocHost(&memory, count * sizeof(float));
    if (error != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it
      return ResourceExhaustedError(
          "cannot allocate " + std::to_string(count) +
          " floats of page-locked host memory: " + cudaGetErrorString(error));
    }
    std::memset(memory, 0, count * sizeof(float));
    try {
      pinned_[static_cast<const float*>(memory)] = count;
    } catch (...) {  // no memory for the map's node
      cudaFreeHost(memory);
      throw;
    }
    *data = static_cast<float*>(memory);
    return Status::Ok();
  }

  void DoFreeHost(float* data) override {
    // Queued copies may still read or write the memory: let them finish.
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    pinned_.erase(data);
    cudaFreeHost(data);
  }

  // Copies `count` floats straight between a HostBuffer and the GPU, after
  // the work queued before, and waits for it.
  Status CopyAndWait(float* dst, const float* src, size_t count,
                     cudaMemcpyKind kind) {
    DUCTILE_RETURN_IF_ERROR(FromCuda(
        cudaMemcpyAsync(dst, src, count * sizeof(float), kind, stream_),
        "cudaMemcpyAsync"));
    DUCTILE_RETURN_IF_ERROR(
        FromCuda(cudaStreamSynchronize(stream_), "queued CUDA work"));
    upload_used_ = 0;  // the stream is idle: no upload reads the staging
    return Status::Ok();
  }

  // Whether [p, p + count) lies within one HostBuffer of this backend.
  bool IsPinned(const float* p, size_t count) const {
    auto it = pinned_.upper_bound(p);
    if (it == pinned_.begin()) return false;
    --it;
    // As integers: p may lie outside the buffer found.
    const uintptr_t begin = reinterpret_cast<uintptr_t>(it->first);
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    const uintptr_t bytes = it->second * sizeof(float);
    return at - begin <= bytes && count * sizeof(float) <= bytes - (at - begin);
  }

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: a
  // row-major matrix read as column-major is its transpose. So cuBLAS gets
  // B before A and n before m, with the same transpose flags and leading
  // dimensions (the row lengths of the matrices as stored).
  Status DoGemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
                float alpha, const float* a, const float* b, float beta,
                float* c) override {
    DUCTILE_RETURN_IF_ERROR(Activate());
    const bool ta = trans_a == Transpose::kYes;
    const bool tb = trans_b == Transpose::kYes;
    const int lda = std::max(1, ta ? m : k);
    const int ldb = std::max(1, tb ? k : n);
    const int ldc = std::max(1, n);
    return FromCublas(cublasSgemm(cublas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                                  &alpha, b, ldb, a, lda, &beta, c, ldc),
                      "cublasSgemm");
  }

  Status DoAddRowVector(size_t rows, size_t cols, const float* bias,
                        float* x) override {
    DUCTILE_RETURN_IF_ERROR(Activate());
    return FromCuda(cuda_kernels::AddRowVector(stream_, rows, cols, bias, x),
                    "AddRowVector kernel");
  }

  Status DoRelu(size_t count, float* x) override {
    DUCTILE_RETURN_IF_ERROR(Activate());
    return FromCuda(cuda_kernels::Relu(stream_, count, x), "Relu kernel");
  }

  Status DoReluBackward(size_t count, const float* activation,
                        float* grad) override {
    DUCTILE_RETURN_IF_ERROR(Activate());
    return FromCuda(
        cuda_kernels::ReluBackward(stream_, count, activation, grad),
        "ReluBackward kernel");
  }

  Status DoSoftmaxCrossEntropy(size_t rows, size_t cols, const float* logits,
                               const float* targets, float grad_scale,
                               float* row_loss, float* grad) override {
    DUCTILE_RETURN_IF_ERROR(Activate());
    return FromCuda(
        cuda_kernels::SoftmaxCrossEntropy(stream_, rows, cols, logits, targets,
                                          grad_scale, row_loss, grad),
        "SoftmaxCrossEntropy kernel");
  }

  Status DoColumnSums(size_t rows, size_t cols, const float* x,
                      float* out) override {
    DUCTILE_RETURN_IF_ERROR(Activate());
    return FromCuda(cuda_kernels::ColumnSums(stream_, rows, cols, x, out),
                    "ColumnSums kernel");
  }

  Status DoAxpy(size_t count, float alpha, const float* x, float* y) override {
    DUCTILE_RETURN_IF_ERROR(Activate());
    return FromCuda(cuda_kernels::Axpy(stream_, count, alpha, x, y),
                    "Axpy kernel");
  }

 private:
  // The current device is per host thread: make it this backend's, so that
  // the backend may move between threads (one at a time).
  Status Activate() {
    return FromCuda(cudaSetDevice(device_), "cudaSetDevice");
  }

  // Replaces *staging by pinned memory of `capacity` floats. The old memory
  // must not be in use by a queued copy.
  static Status GrowPinned(float** staging, size_t* old_capacity,
                           size_t capacity) {
    if (*staging != nullptr) cudaFreeHost(*staging);
    *staging = nullptr;
    *old_capacity = 0;
    void* memory = nullptr;
    DUCTILE_RETURN_IF_ERROR(FromCuda(
        cudaMallocHost(&memory, capacity * sizeof(float)), "cudaMallocHost"));
    *staging = static_cast<float*>(memory);
    *old_capacity = capacity;
    return Status::Ok();
  }

  // Constant after Init().
  const int device_;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;

  // This backend's HostBuffers: start -> floats.
  std::map<const float*, size_t> pinned_;

  // Upload staging: floats [0, upload_used_) of upload_staging_ may still
  // be read by queued copies, the last of which upload_done_ follows.
  float* upload_staging_ = nullptr;
  size_t upload_capacity_ = 0;
  size_t upload_used_ = 0;
  cudaEvent_t upload_done_ = nullptr;

  // Download staging: never in use between calls.
  float* download_staging_ = nullptr;
  size_t download_capacity_ = 0;
};

}  // namespace

Result<std::unique_ptr<ComputeBackend>> MakeCudaBackend(int device_ordinal) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear it, so that later calls do not see it
    Status status = FromCuda(error, "no usable CUDA device");
    if (status.code() == StatusCode::kInternal) {
      // Whatever else keeps the runtime from starting: do not retry.
      return FailedPreconditionError(status.message());
    }
    return status;
  }
  if (count == 0) {
    return FailedPreconditionError("no CUDA device present");
  }
  if (device_ordinal < 0 || device_ordinal >= count) {
    return FailedPreconditionError(
        "CUDA device " + std::to_string(device_ordinal) + " requested, but " +
        std::to_string(count) + " device(s) present");
  }
  auto backend = std::make_unique<CudaBackend>(device_ordinal);
  DUCTILE_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<ComputeBackend>(std::move(backend));
}

}  // namespace ductile::models
