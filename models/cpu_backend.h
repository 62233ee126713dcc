// The CPU ComputeBackend: buffers are host memory, Gemm is OpenBLAS's
// cblas_sgemm and the elementwise operations are plain loops.
//
// Most callers want MakeComputeBackend("cpu") (models/compute_backend.h); this
// header is the seam that keeps OpenBLAS's headers out of everything else.
#ifndef DUCTILE_MODELS_CPU_BACKEND_H_
#define DUCTILE_MODELS_CPU_BACKEND_H_

#include <memory>

#include "ductile/status.h"
#include "models/compute_backend.h"

namespace ductile::models {

// A CPU backend whose Gemm uses up to `num_threads` OpenBLAS threads
// (>= 1; InvalidArgument otherwise). OpenBLAS's thread count is one
// process-wide setting, so this sets it for every CPU backend of the
// process. Name: "cpu (OpenBLAS)".
Result<std::unique_ptr<ComputeBackend>> MakeCpuBackend(int num_threads);

}  // namespace ductile::models

#endif  // DUCTILE_MODELS_CPU_BACKEND_H_
