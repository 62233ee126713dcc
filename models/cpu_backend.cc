#include "models/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ductile::models {
namespace {

// Buffers are aligned for the widest vector loads OpenBLAS uses.
constexpr size_t kAlignmentBytes = 64;

class CpuBackend final : public ComputeBackend {
 public:
  std::string name() const override { return "cpu (OpenBLAS)"; }

 protected:
  Status DoAllocate(size_t count, float** data) override {
    // aligned_alloc wants a multiple of the alignment.
    const size_t bytes = (count * sizeof(float) + kAlignmentBytes - 1) /
                         kAlignmentBytes * kAlignmentBytes;
    void* memory = std::aligned_alloc(kAlignmentBytes, bytes);
    if (memory == nullptr) {
      return ResourceExhaustedError("cannot allocate " + std::to_string(count) +
                                    " floats of host memory");
    }
    std::memset(memory, 0, bytes);
    *data = static_cast<float*>(memory);
    return Status::Ok();
  }

  void DoFree(float* data) override { std::free(data); }

  Status DoUpload(const float* src, size_t count, float* dst) override {
    std::memcpy(dst, src, count * sizeof(float));
    return Status::Ok();
  }

  Status DoDownload(const float* src, size_t count, float* dst) override {
    std::memcpy(dst, src, count * sizeof(float));
    return Status::Ok();
  }

  Status DoGemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
                float alpha, const float* a, const float* b, float beta,
                float* c) override {
    const bool ta = trans_a == Transpose::kYes;
    const bool tb = trans_b == Transpose::kYes;
    // Leading dimensions of the dense row-major matrices as stored; BLAS
    // wants them >= 1 even when a dimension is 0.
    const int lda = std::max(1, ta ? m : k);
    const int ldb = std::max(1, tb ? k : n);
    const int ldc = std::max(1, n);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
                beta, c, ldc);
    return Status::Ok();
  }

  Status DoAddRowVector(size_t rows, size_t cols, const float* bias,
                        float* x) override {
    for (size_t i = 0; i < rows; ++i) {
      float* row = x + i * cols;
      for (size_t j = 0; j < cols; ++j) row[j] += bias[j];
    }
    return Status::Ok();
  }

  Status DoRelu(size_t count, float* x) override {
    for (size_t i = 0; i < count; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
    return Status::Ok();
  }

  Status DoReluBackward(size_t count, const float* activation,
                        float* grad) override {
    for (size_t i = 0; i < count; ++i) {
      if (!(activation[i] > 0.0f)) grad[i] = 0.0f;
    }
    return Status::Ok();
  }

  Status DoSoftmaxCrossEntropy(size_t rows, size_t cols, const float* logits,
                               const float* targets, float grad_scale,
                               float* row_loss, float* grad) override {
    for (size_t i = 0; i < rows; ++i) {
      const float* z = logits + i * cols;
      const float* t = targets + i * cols;
      float* g = grad + i * cols;
      // Stable: shift by the largest logit so that exp() cannot overflow.
      const float max_z = *std::max_element(z, z + cols);
      double sum_exp = 0.0;
      double target_sum = 0.0;
      double target_dot_shifted = 0.0;
      for (size_t j = 0; j < cols; ++j) {
        sum_exp += std::exp(static_cast<double>(z[j]) - max_z);
        target_sum += t[j];
        target_dot_shifted += t[j] * (static_cast<double>(z[j]) - max_z);
      }
      const double log_sum_exp = std::log(sum_exp);  // of the shifted logits
      row_loss[i] =
          static_cast<float>(target_sum * log_sum_exp - target_dot_shifted);
      // g may alias z: z[j] is read before g[j] is written.
      for (size_t j = 0; j < cols; ++j) {
        const double p =
            std::exp(static_cast<double>(z[j]) - max_z - log_sum_exp);
        g[j] = static_cast<float>(grad_scale * (p * target_sum - t[j]));
      }
    }
    return Status::Ok();
  }

  Status DoColumnSums(size_t rows, size_t cols, const float* x,
                      float* out) override {
    std::fill(out, out + cols, 0.0f);
    for (size_t i = 0; i < rows; ++i) {
      const float* row = x + i * cols;
      for (size_t j = 0; j < cols; ++j) out[j] += row[j];
    }
    return Status::Ok();
  }

  Status DoAxpy(size_t count, float alpha, const float* x, float* y) override {
    for (size_t i = 0; i < count; ++i) y[i] += alpha * x[i];
    return Status::Ok();
  }
};

}  // namespace

Result<std::unique_ptr<ComputeBackend>> MakeCpuBackend(int num_threads) {
  if (num_threads < 1) {
    return InvalidArgumentError("the CPU backend needs >= 1 thread, got " +
                                std::to_string(num_threads));
  }
  openblas_set_num_threads(num_threads);
  return std::unique_ptr<ComputeBackend>(std::make_unique<CpuBackend>());
}

}  // namespace ductile::models
