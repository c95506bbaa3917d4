// SwiGLU on the GPU (kernels/swiglu.h): one thread per output element, FP32 math.
#include <cuda_bf16.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda/vec.cuh"
#include "kernels/swiglu.h"

namespace fp8rt {
namespace {

using cuda_detail::Round;

constexpr int kThreads = 256;

__device__ __forceinline__ float Sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

template <typename T>
__global__ void SwiGluForwardKernel(T* out, const T* gu, int64_t N, int64_t F) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= N * F) return;
  const int64_t n = i / F, f = i % F;
  const float g = ToFloat(gu[n * 2 * F + f]), u = ToFloat(gu[n * 2 * F + F + f]);
  out[i] = Round<T>(g * Sigmoid(g) * u);
}

template <typename T>
__global__ void SwiGluBackwardKernel(T* dgu, const T* gu, const T* dout, int64_t N, int64_t F) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= N * F) return;
  const int64_t n = i / F, f = i % F;
  const float g = ToFloat(gu[n * 2 * F + f]), u = ToFloat(gu[n * 2 * F + F + f]);
  const float dy = ToFloat(dout[i]), s = Sigmoid(g);
  dgu[n * 2 * F + f] = Round<T>(dy * u * s * (1.0f + g * (1.0f - s)));
  dgu[n * 2 * F + F + f] = Round<T>(dy * g * s);
}

unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

namespace cuda {

template <typename T>
Status SwiGluForward(T* out, const T* gu, int64_t N, int64_t F, cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateSwiGlu("SwiGluForward", N, F, {out, gu}));
  if (N * F == 0) return Status::Ok();
  SwiGluForwardKernel<T><<<Blocks(N * F), kThreads, 0, stream>>>(out, gu, N, F);
  FP8RT_CUDA_TRY_LAUNCH("SwiGluForward");
  return Status::Ok();
}

template <typename T>
Status SwiGluBackward(T* dgu, const T* gu, const T* dout, int64_t N, int64_t F,
                      cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateSwiGlu("SwiGluBackward", N, F, {dgu, gu, dout}));
  if (N * F == 0) return Status::Ok();
  SwiGluBackwardKernel<T><<<Blocks(N * F), kThreads, 0, stream>>>(dgu, gu, dout, N, F);
  FP8RT_CUDA_TRY_LAUNCH("SwiGluBackward");
  return Status::Ok();
}

#define FP8RT_INSTANTIATE(T)                                                                 \
  template Status SwiGluForward<T>(T*, const T*, int64_t, int64_t, cudaStream_t);            \
  template Status SwiGluBackward<T>(T*, const T*, const T*, int64_t, int64_t, cudaStream_t);
FP8RT_INSTANTIATE(float)
FP8RT_INSTANTIATE(bf16)
#undef FP8RT_INSTANTIATE

}  // namespace cuda
}  // namespace fp8rt
