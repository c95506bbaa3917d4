// Grouped-query expansion and its backward on the GPU (kernels/gqa.h): one thread per element of
// the expanded row (expand) or of the grouped row (reduce), FP32 sums.
#include <cuda_bf16.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda/vec.cuh"
#include "kernels/gqa.h"

namespace fp8rt {
namespace {

using cuda_detail::Round;

constexpr int kThreads = 256;

template <typename T>
__global__ void GqaExpandKernel(T* __restrict__ out, const T* __restrict__ in, int64_t M, int NH,
                                int KV, int HS) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t Q = int64_t{NH} * HS, ldo = 3 * Q, ldi = int64_t{NH + 2 * KV} * HS;
  if (i >= M * ldo) return;
  const int64_t m = i / ldo, c = i - m * ldo;
  int64_t src = c;  // Q: the same column
  if (c >= Q) {
    const int64_t part = (c - Q) / Q, rest = (c - Q) % Q;  // K or V; head h, element d
    const int64_t h = rest / HS, d = rest % HS;
    src = Q + part * KV * HS + (h / (NH / KV)) * HS + d;
  }
  out[i] = in[m * ldi + src];
}

template <typename T>
__global__ void GqaReduceKernel(T* __restrict__ din, const T* __restrict__ dout, int64_t M,
                                int NH, int KV, int HS) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t Q = int64_t{NH} * HS, ldo = 3 * Q, ldi = int64_t{NH + 2 * KV} * HS;
  if (i >= M * ldi) return;
  const int64_t m = i / ldi, c = i - m * ldi;
  const T* o = dout + m * ldo;
  if (c < Q) {
    din[i] = o[c];
    return;
  }
  const int64_t part = (c - Q) / (int64_t{KV} * HS), rest = (c - Q) % (int64_t{KV} * HS);
  const int64_t k = rest / HS, d = rest % HS, G = NH / KV;
  float acc = 0.0f;
  for (int64_t g = 0; g < G; ++g) acc += ToFloat(o[Q + part * Q + (k * G + g) * HS + d]);
  din[i] = Round<T>(acc);
}

unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

namespace cuda {

template <typename T>
Status GqaExpand(T* out, const T* in, int64_t M, int64_t NH, int64_t KV, int64_t HS,
                 cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateGqa("GqaExpand", out, in, M, NH, KV, HS));
  const int64_t n = M * 3 * NH * HS;
  if (n == 0) return Status::Ok();
  GqaExpandKernel<T><<<Blocks(n), kThreads, 0, stream>>>(out, in, M, static_cast<int>(NH),
                                                          static_cast<int>(KV),
                                                          static_cast<int>(HS));
  FP8RT_CUDA_TRY_LAUNCH("GqaExpand");
  return Status::Ok();
}

template <typename T>
Status GqaReduce(T* din, const T* dout, int64_t M, int64_t NH, int64_t KV, int64_t HS,
                 cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateGqa("GqaReduce", din, dout, M, NH, KV, HS));
  const int64_t n = M * (NH + 2 * KV) * HS;
  if (n == 0) return Status::Ok();
  GqaReduceKernel<T><<<Blocks(n), kThreads, 0, stream>>>(din, dout, M, static_cast<int>(NH),
                                                          static_cast<int>(KV),
                                                          static_cast<int>(HS));
  FP8RT_CUDA_TRY_LAUNCH("GqaReduce");
  return Status::Ok();
}

#define FP8RT_INSTANTIATE(T)                                                                   \
  template Status GqaExpand<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, cudaStream_t); \
  template Status GqaReduce<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, cudaStream_t);
FP8RT_INSTANTIATE(float)
FP8RT_INSTANTIATE(bf16)
#undef FP8RT_INSTANTIATE

}  // namespace cuda
}  // namespace fp8rt
