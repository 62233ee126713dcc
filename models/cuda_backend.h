// The CUDA ComputeBackend: buffers are GPU memory (cudaMalloc), Gemm is
// cuBLAS's cublasSgemm and the elementwise operations are small kernels
// (models/cuda_kernels.cu), all queued in order on one CUDA stream. Upload
// and Download go through pinned host staging buffers.
//
// Built only when CMake finds CUDA (DUCTILE_WITH_CUDA); most callers want
// MakeComputeBackend("cuda") from models/compute_backend.h, which also works
// in builds without CUDA. This header is the seam that keeps the CUDA
// headers out of everything else.
#ifndef DUCTILE_MODELS_CUDA_BACKEND_H_
#define DUCTILE_MODELS_CUDA_BACKEND_H_

#include <memory>

#include "ductile/status.h"
#include "models/compute_backend.h"

namespace ductile::models {

// A backend on CUDA device `device_ordinal`. Name: "cuda (<device name>)".
//
// Errors (the message carries the CUDA error text):
//   FailedPrecondition  no CUDA driver or device, or no device with that
//                       ordinal.
//   Unavailable         the device is busy (exclusive compute mode).
//   ResourceExhausted   out of memory while setting up.
//   Internal            any other CUDA or cuBLAS failure.
Result<std::unique_ptr<ComputeBackend>> MakeCudaBackend(int device_ordinal);

}  // namespace ductile::models

#endif  // DUCTILE_MODELS_CUDA_BACKEND_H_
