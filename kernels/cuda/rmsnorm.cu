// RMSNorm on the GPU (kernels/rmsnorm.h): one 256-thread block per row for the forward and the
// input gradient (FP32 sums reduced in a fixed order), and one thread per column for the weight
// gradient, summing the rows in order: deterministic, no atomics. Correct first; not yet tuned
// (the Llama model that uses it is not built yet).
#include <cuda_bf16.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda/vec.cuh"
#include "kernels/rmsnorm.h"

namespace fp8rt {
namespace {

using cuda_detail::Round;

constexpr int kThreads = 256;

// The block's sum of v, the same on every thread, in a fixed order.
__device__ float BlockSum(float v, float* smem) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // smem may still be read from a previous call
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  float t = 0;
  for (int w = 0; w < kThreads / 32; ++w) t += smem[w];
  return t;
}

template <typename T>
__global__ void RmsNormForwardKernel(T* out, float* rstd, const T* in, const T* weight, int64_t C,
                                     float eps) {
  __shared__ float smem[kThreads / 32];
  const int64_t n = blockIdx.x;
  const T* x = in + n * C;
  float ss = 0;
  for (int64_t c = threadIdx.x; c < C; c += kThreads) {
    const float v = ToFloat(x[c]);
    ss += v * v;
  }
  const float r = rsqrtf(BlockSum(ss, smem) / static_cast<float>(C) + eps);
  if (rstd && threadIdx.x == 0) rstd[n] = r;
  for (int64_t c = threadIdx.x; c < C; c += kThreads) {
    out[n * C + c] = Round<T>(ToFloat(x[c]) * r * ToFloat(weight[c]));
  }
}

template <typename T>
__global__ void RmsNormBackwardKernel(T* din, const T* dout, const T* in, const T* weight,
                                      const float* rstd, int64_t C, bool accumulate) {
  __shared__ float smem[kThreads / 32];
  const int64_t n = blockIdx.x;
  const T* x = in + n * C;
  const T* dy = dout + n * C;
  float gx = 0;
  for (int64_t c = threadIdx.x; c < C; c += kThreads) {
    gx += ToFloat(dy[c]) * ToFloat(weight[c]) * ToFloat(x[c]);
  }
  const float mean_gx = BlockSum(gx, smem) / static_cast<float>(C);
  const float r = rstd[n];
  for (int64_t c = threadIdx.x; c < C; c += kThreads) {
    const float g = ToFloat(dy[c]) * ToFloat(weight[c]);
    float v = r * (g - ToFloat(x[c]) * r * r * mean_gx);
    if (accumulate) v += ToFloat(din[n * C + c]);
    din[n * C + c] = Round<T>(v);
  }
}

template <typename T>
__global__ void RmsNormWeightGradKernel(float* dweight, const T* dout, const T* in,
                                        const float* rstd, int64_t N, int64_t C) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  float s = 0;
  for (int64_t n = 0; n < N; ++n) s += ToFloat(dout[n * C + c]) * ToFloat(in[n * C + c]) * rstd[n];
  dweight[c] += s;
}

}  // namespace

namespace cuda {

template <typename T>
Status RmsNormForward(T* out, float* rstd, const T* in, const T* weight, int64_t N, int64_t C,
                      float eps, cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateRmsNorm("RmsNormForward", N, C, eps, {out, in, weight}, rstd, true));
  if (N * C == 0) return Status::Ok();
  RmsNormForwardKernel<T><<<static_cast<unsigned>(N), kThreads, 0, stream>>>(out, rstd, in, weight,
                                                                              C, eps);
  FP8RT_CUDA_TRY_LAUNCH("RmsNormForward");
  return Status::Ok();
}

template <typename T>
Status RmsNormBackward(T* din, float* dweight, const T* dout, const T* in, const T* weight,
                       const float* rstd, int64_t N, int64_t C, bool accumulate_din,
                       cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateRmsNorm("RmsNormBackward", N, C, 0.0f,
                                        {din, dweight, dout, in, weight}, rstd, false));
  if (N * C == 0) return Status::Ok();
  RmsNormBackwardKernel<T><<<static_cast<unsigned>(N), kThreads, 0, stream>>>(
      din, dout, in, weight, rstd, C, accumulate_din);
  FP8RT_CUDA_TRY_LAUNCH("RmsNormBackward");
  RmsNormWeightGradKernel<T><<<static_cast<unsigned>((C + kThreads - 1) / kThreads), kThreads, 0,
                               stream>>>(dweight, dout, in, rstd, N, C);
  FP8RT_CUDA_TRY_LAUNCH("RmsNormBackward (weight gradient)");
  return Status::Ok();
}

#define FP8RT_INSTANTIATE(T)                                                                  \
  template Status RmsNormForward<T>(T*, float*, const T*, const T*, int64_t, int64_t, float, \
                                    cudaStream_t);                                           \
  template Status RmsNormBackward<T>(T*, float*, const T*, const T*, const T*, const float*, \
                                     int64_t, int64_t, bool, cudaStream_t);
FP8RT_INSTANTIATE(float)
FP8RT_INSTANTIATE(bf16)
#undef FP8RT_INSTANTIATE

}  // namespace cuda
}  // namespace fp8rt
