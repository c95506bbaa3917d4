// SwiGLU on the GPU (kernels/swiglu.h): one thread per 16 bytes of output (or per element where
// F or the pointers do not allow packs), FP32 math.
#include <cuda_bf16.h>

#include <cstdint>
#include <initializer_list>

#include "common/cuda_check.h"
#include "kernels/cuda/vec.cuh"
#include "kernels/swiglu.h"

namespace fp8rt {
namespace {

using cuda_detail::Pack;
using cuda_detail::Round;

constexpr int kThreads = 256;

__device__ __forceinline__ float Sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

// Each thread computes kPack consecutive outputs of one row (F % kPack == 0), loading gate, up
// (and dout) as 16-byte packs when kPack > 1.
template <typename T, int kPack>
__global__ void SwiGluForwardKernel(T* out, const T* gu, int64_t N, int64_t F) {
  using P = Pack<T, kPack>;
  const int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * kPack;
  if (i >= N * F) return;
  const int64_t n = i / F, f = i % F;
  const P g = *reinterpret_cast<const P*>(gu + n * 2 * F + f);
  const P u = *reinterpret_cast<const P*>(gu + n * 2 * F + F + f);
  P o;
#pragma unroll
  for (int j = 0; j < kPack; ++j) {
    const float x = ToFloat(g.v[j]);
    o.v[j] = Round<T>(x * Sigmoid(x) * ToFloat(u.v[j]));
  }
  *reinterpret_cast<P*>(out + i) = o;
}

template <typename T, int kPack>
__global__ void SwiGluBackwardKernel(T* dgu, const T* gu, const T* dout, int64_t N, int64_t F) {
  using P = Pack<T, kPack>;
  const int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * kPack;
  if (i >= N * F) return;
  const int64_t n = i / F, f = i % F;
  const P g = *reinterpret_cast<const P*>(gu + n * 2 * F + f);
  const P u = *reinterpret_cast<const P*>(gu + n * 2 * F + F + f);
  const P d = *reinterpret_cast<const P*>(dout + i);
  P dg, du;
#pragma unroll
  for (int j = 0; j < kPack; ++j) {
    const float x = ToFloat(g.v[j]), dy = ToFloat(d.v[j]), s = Sigmoid(x);
    dg.v[j] = Round<T>(dy * ToFloat(u.v[j]) * s * (1.0f + x * (1.0f - s)));
    du.v[j] = Round<T>(dy * x * s);
  }
  *reinterpret_cast<P*>(dgu + n * 2 * F + f) = dg;
  *reinterpret_cast<P*>(dgu + n * 2 * F + F + f) = du;
}

// 16-byte packs when F and every pointer allow them.
template <typename T>
bool Vectorize(int64_t F, std::initializer_list<const void*> ptrs) {
  if (F % (16 / sizeof(T)) != 0) return false;
  for (const void* p : ptrs) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

namespace cuda {

template <typename T>
Status SwiGluForward(T* out, const T* gu, int64_t N, int64_t F, cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateSwiGlu("SwiGluForward", N, F, {out, gu}));
  if (N * F == 0) return Status::Ok();
  constexpr int kVec = 16 / sizeof(T);
  if (Vectorize<T>(F, {out, gu})) {
    SwiGluForwardKernel<T, kVec><<<Blocks(N * F / kVec), kThreads, 0, stream>>>(out, gu, N, F);
  } else {
    SwiGluForwardKernel<T, 1><<<Blocks(N * F), kThreads, 0, stream>>>(out, gu, N, F);
  }
  FP8RT_CUDA_TRY_LAUNCH("SwiGluForward");
  return Status::Ok();
}

template <typename T>
Status SwiGluBackward(T* dgu, const T* gu, const T* dout, int64_t N, int64_t F,
                      cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateSwiGlu("SwiGluBackward", N, F, {dgu, gu, dout}));
  if (N * F == 0) return Status::Ok();
  constexpr int kVec = 16 / sizeof(T);
  if (Vectorize<T>(F, {dgu, gu, dout})) {
    SwiGluBackwardKernel<T, kVec>
        <<<Blocks(N * F / kVec), kThreads, 0, stream>>>(dgu, gu, dout, N, F);
  } else {
    SwiGluBackwardKernel<T, 1><<<Blocks(N * F), kThreads, 0, stream>>>(dgu, gu, dout, N, F);
  }
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
