// Global squared gradient norm on the GPU: a fixed grid (a function of n only) of per-block
// partial sums, then one block that adds the partials in order: bit-identical run to run.
#include <algorithm>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/grad_norm.h"

namespace fp8rt {
namespace {

constexpr int kThreads = 512;
constexpr int kMaxBlocks = 1024;

// Enough blocks to fill any current GPU, and each thread sums at least 32 float4s.
int Blocks(int64_t n) {
  const int64_t per_block = int64_t{kThreads} * 4 * 32;
  return static_cast<int>(std::clamp<int64_t>((n + per_block - 1) / per_block, 1, kMaxBlocks));
}

// Fixed-order block sum (butterfly in each warp, then warp 0 over the warp sums); the result is
// valid in thread 0.
__device__ float BlockSum(float s) {
  __shared__ float warp_sum[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = s;
  __syncthreads();
  s = threadIdx.x < blockDim.x / 32 ? warp_sum[threadIdx.x] : 0.0f;
  if (threadIdx.x < 32) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  }
  return s;
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    SumSquaresKernel(float* __restrict__ partials, const float* __restrict__ grad, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  float s = 0.0f;
  if constexpr (kVec) {
    const int64_t n4 = n / 4;
    const float4* g4 = reinterpret_cast<const float4*>(grad);
    for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n4; i += stride) {
      const float4 g = g4[i];
      s += g.x * g.x + g.y * g.y + g.z * g.z + g.w * g.w;
    }
    // The n % 4 tail goes to the first threads of block 0.
    const int64_t t = n4 * 4 + blockIdx.x * int64_t{kThreads} + threadIdx.x;
    if (t < n && blockIdx.x == 0) s += grad[t] * grad[t];
  } else {
    for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += stride) {
      s += grad[i] * grad[i];
    }
  }
  s = BlockSum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void __launch_bounds__(1024)
    SumPartialsKernel(float* __restrict__ out, const float* __restrict__ partials, int G,
                      bool accumulate) {
  float s = 0.0f;
  for (int i = threadIdx.x; i < G; i += blockDim.x) s += partials[i];
  s = BlockSum(s);
  if (threadIdx.x == 0) *out = accumulate ? *out + s : s;
}

}  // namespace

namespace cuda {

size_t GlobalNormSquaredScratchBytes(int64_t n) {
  return static_cast<size_t>(Blocks(std::max<int64_t>(n, 0))) * sizeof(float);
}

Status GlobalNormSquared(float* out, const float* grad, int64_t n, void* scratch,
                         size_t scratch_bytes, cudaStream_t stream, bool accumulate) {
  if (n < 0) return Status::InvalidArgument(StrCat("GlobalNormSquared: n=", n, " must be >= 0"));
  if (!out || (n > 0 && !grad)) {
    return Status::InvalidArgument("GlobalNormSquared: out and grad must be non-null");
  }
  const size_t need = GlobalNormSquaredScratchBytes(n);
  if (scratch == nullptr || scratch_bytes < need ||
      reinterpret_cast<uintptr_t>(scratch) % 16 != 0) {
    return Status::InvalidArgument(StrCat("GlobalNormSquared: scratch of ", scratch_bytes,
                                          " bytes; need ", need, " bytes, 16-byte aligned"));
  }
  float* partials = static_cast<float*>(scratch);
  const int G = Blocks(n);
  if (reinterpret_cast<uintptr_t>(grad) % 16 == 0) {
    SumSquaresKernel<true><<<G, kThreads, 0, stream>>>(partials, grad, n);
  } else {
    SumSquaresKernel<false><<<G, kThreads, 0, stream>>>(partials, grad, n);
  }
  SumPartialsKernel<<<1, 1024, 0, stream>>>(out, partials, G, accumulate);
  FP8RT_CUDA_TRY_LAUNCH("GlobalNormSquared");
  return Status::Ok();
}

}  // namespace cuda
}  // namespace fp8rt
