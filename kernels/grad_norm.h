// Global gradient norm for clipping: the sum of squares of all parameter gradients (one contiguous
// buffer), reduced deterministically; AdamW reads the result straight from device memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "kernels/stream.h"

namespace fp8rt {

// *out = sum_i grad[i]^2, or with accumulate *out += that sum (so a norm can be gathered over
// several ranges, e.g. the tensors a tensor-parallel rank owns). The CPU reference sums in fp64;
// the CUDA version sums fp32 per-thread and per-block partials, then the partials in a fixed
// order: the result depends only on n, bit-identical run to run.

namespace cpu {
Status GlobalNormSquared(float* out, const float* grad, int64_t n, bool accumulate = false);
}  // namespace cpu

#if FP8RT_WITH_CUDA
namespace cuda {
// Scratch bytes GlobalNormSquared needs for n elements (the per-block partial sums).
size_t GlobalNormSquaredScratchBytes(int64_t n);
// Device pointers. scratch: at least GlobalNormSquaredScratchBytes(n) bytes, 16-byte aligned.
Status GlobalNormSquared(float* out, const float* grad, int64_t n, void* scratch,
                         size_t scratch_bytes, cudaStream_t stream, bool accumulate = false);
}  // namespace cuda
#endif

}  // namespace fp8rt
