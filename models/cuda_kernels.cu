#include <algorithm>

#include "models/cuda_kernels.h"

namespace ductile::models::cuda_kernels {
namespace {

constexpr int kThreadsPerBlock = 256;
// Grid-stride loops cover any count with at most this many blocks.
constexpr size_t kMaxBlocks = 4096;

unsigned int BlocksFor(size_t count) {
  const size_t blocks = (count + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned int>(std::min(blocks, kMaxBlocks));
}

__device__ size_t FirstIndex() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ size_t Stride() {
  return static_cast<size_t>(gridDim.x) * blockDim.x;
}

__global__ void AddRowVectorKernel(size_t count, size_t cols, const float* bias,
                                   float* x) {
  for (size_t i = FirstIndex(); i < count; i += Stride())
    x[i] += bias[i % cols];
}

__global__ void ReluKernel(size_t count, float* x) {
  for (size_t i = FirstIndex(); i < count; i += Stride()) {
    x[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }
}

__global__ void ReluBackwardKernel(size_t count, const float* activation,
                                   float* grad) {
  for (size_t i = FirstIndex(); i < count; i += Stride()) {
    if (!(activation[i] > 0.0f)) grad[i] = 0.0f;
  }
}

// One thread per row: the models have few classes (10), so a row is a
// short serial loop. `grad` may alias `logits` (each thread reads its row's
// logit before writing the same element).
__global__ void SoftmaxCrossEntropyKernel(size_t rows, size_t cols,
                                          const float* logits,
                                          const float* targets,
                                          float grad_scale, float* row_loss,
                                          float* grad) {
  for (size_t i = FirstIndex(); i < rows; i += Stride()) {
    const float* z = logits + i * cols;
    const float* t = targets + i * cols;
    float* g = grad + i * cols;
    float max_z = z[0];
    for (size_t j = 1; j < cols; ++j) max_z = fmaxf(max_z, z[j]);
    double sum_exp = 0.0;
    double target_sum = 0.0;
    double target_dot_shifted = 0.0;
    for (size_t j = 0; j < cols; ++j) {
      const double shifted = static_cast<double>(z[j]) - max_z;
      sum_exp += exp(shifted);
      target_sum += t[j];
      target_dot_shifted += t[j] * shifted;
    }
    const double log_sum_exp = log(sum_exp);
    row_loss[i] =
        static_cast<float>(target_sum * log_sum_exp - target_dot_shifted);
    for (size_t j = 0; j < cols; ++j) {
      const double p = exp(static_cast<double>(z[j]) - max_z - log_sum_exp);
      g[j] = static_cast<float>(grad_scale * (p * target_sum - t[j]));
    }
  }
}

// One thread per column; consecutive threads read consecutive floats of a
// row. The sum runs in a fixed order, so results are reproducible.
__global__ void ColumnSumsKernel(size_t rows, size_t cols, const float* x,
                                 float* out) {
  for (size_t j = FirstIndex(); j < cols; j += Stride()) {
    float sum = 0.0f;
    for (size_t i = 0; i < rows; ++i) sum += x[i * cols + j];
    out[j] = sum;
  }
}

__global__ void AxpyKernel(size_t count, float alpha, const float* x,
                           float* y) {
  for (size_t i = FirstIndex(); i < count; i += Stride()) y[i] += alpha * x[i];
}

}  // namespace

cudaError_t AddRowVector(cudaStream_t stream, size_t rows, size_t cols,
                         const float* bias, float* x) {
  const size_t count = rows * cols;
  AddRowVectorKernel<<<BlocksFor(count), kThreadsPerBlock, 0, stream>>>(
      count, cols, bias, x);
  return cudaGetLastError();
}

cudaError_t Relu(cudaStream_t stream, size_t count, float* x) {
  ReluKernel<<<BlocksFor(count), kThreadsPerBlock, 0, stream>>>(count, x);
  return cudaGetLastError();
}

cudaError_t ReluBackward(cudaStream_t stream, size_t count,
                         const float* activation, float* grad) {
  ReluBackwardKernel<<<BlocksFor(count), kThreadsPerBlock, 0, stream>>>(
      count, activation, grad);
  return cudaGetLastError();
}

cudaError_t SoftmaxCrossEntropy(cudaStream_t stream, size_t rows, size_t cols,
                                const float* logits, const float* targets,
                                float grad_scale, float* row_loss,
                                float* grad) {
  SoftmaxCrossEntropyKernel<<<BlocksFor(rows), kThreadsPerBlock, 0, stream>>>(
      rows, cols, logits, targets, grad_scale, row_loss, grad);
  return cudaGetLastError();
}

cudaError_t ColumnSums(cudaStream_t stream, size_t rows, size_t cols,
                       const float* x, float* out) {
  ColumnSumsKernel<<<BlocksFor(cols), kThreadsPerBlock, 0, stream>>>(rows, cols,
                                                                     x, out);
  return cudaGetLastError();
}

cudaError_t Axpy(cudaStream_t stream, size_t count, float alpha, const float* x,
                 float* y) {
  AxpyKernel<<<BlocksFor(count), kThreadsPerBlock, 0, stream>>>(count, alpha, x,
                                                                y);
  return cudaGetLastError();
}

}  // namespace ductile::models::cuda_kernels
