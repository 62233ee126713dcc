// The CUDA kernels behind the CUDA ComputeBackend's elementwise operations
// (models/cuda_backend.cc), one launcher per operation with the semantics of
// the ComputeBackend method of the same name (models/compute_backend.h).
//
// This header and cuda_kernels.cu are the only code nvcc compiles; they
// stay C++17 (CMake 3.25 cannot ask nvcc for C++20), which is why the
// backend class itself lives in a C++20 .cc file compiled by the host
// compiler.
//
// Each launcher queues its kernel on `stream` and returns at once with the
// launch's error (cudaSuccess, or e.g. cudaErrorInvalidConfiguration);
// errors while the kernel runs surface at the next synchronization. The
// pointers are device memory valid for the sizes given; sizes are > 0.
#ifndef DUCTILE_MODELS_CUDA_KERNELS_H_
#define DUCTILE_MODELS_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>

namespace ductile::models::cuda_kernels {

cudaError_t AddRowVector(cudaStream_t stream, size_t rows, size_t cols,
                         const float* bias, float* x);
cudaError_t Relu(cudaStream_t stream, size_t count, float* x);
cudaError_t ReluBackward(cudaStream_t stream, size_t count,
                         const float* activation, float* grad);
cudaError_t SoftmaxCrossEntropy(cudaStream_t stream, size_t rows, size_t cols,
                                const float* logits, const float* targets,
                                float grad_scale, float* row_loss, float* grad);
cudaError_t ColumnSums(cudaStream_t stream, size_t rows, size_t cols,
                       const float* x, float* out);
cudaError_t Axpy(cudaStream_t stream, size_t count, float alpha, const float* x,
                 float* y);

}  // namespace ductile::models::cuda_kernels

#endif  // DUCTILE_MODELS_CUDA_KERNELS_H_
