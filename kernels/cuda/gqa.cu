// Grouped-query expansion and its backward on the GPU (kernels/gqa.h): one thread per 16 bytes
// (or element) of the expanded row (expand) or of the grouped row (reduce), FP32 sums.
#include <cuda_bf16.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda/vec.cuh"
#include "kernels/gqa.h"

namespace fp8rt {
namespace {

using cuda_detail::Pack;
using cuda_detail::Round;

constexpr int kThreads = 256;

// Each thread moves kPack consecutive elements of one head (HS % kPack == 0), as one 16-byte
// load and store when kPack > 1.
template <typename T, int kPack>
__global__ void GqaExpandKernel(T* __restrict__ out, const T* __restrict__ in, int64_t M, int NH,
                                int KV, int HS) {
  using P = Pack<T, kPack>;
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int Q = NH * HS, ldo = 3 * Q, ldi = (NH + 2 * KV) * HS, packs = ldo / kPack;
  if (i >= M * packs) return;
  const int64_t m = i / packs;
  const int c = static_cast<int>(i - m * packs) * kPack;
  int src = c;  // Q: the same column
  if (c >= Q) {
    const int part = (c - Q) / Q, rest = (c - Q) % Q;  // K or V; head h, element d
    src = Q + part * KV * HS + (rest / HS / (NH / KV)) * HS + rest % HS;
  }
  *reinterpret_cast<P*>(out + m * ldo + c) = *reinterpret_cast<const P*>(in + m * ldi + src);
}

template <typename T, int kPack>
__global__ void GqaReduceKernel(T* __restrict__ din, const T* __restrict__ dout, int64_t M,
                                int NH, int KV, int HS) {
  using P = Pack<T, kPack>;
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int Q = NH * HS, ldo = 3 * Q, ldi = (NH + 2 * KV) * HS, packs = ldi / kPack;
  if (i >= M * packs) return;
  const int64_t m = i / packs;
  const int c = static_cast<int>(i - m * packs) * kPack;
  const T* o = dout + m * ldo;
  if (c < Q) {
    *reinterpret_cast<P*>(din + m * ldi + c) = *reinterpret_cast<const P*>(o + c);
    return;
  }
  const int part = (c - Q) / (KV * HS), rest = (c - Q) % (KV * HS);
  const int k = rest / HS, d = rest % HS, G = NH / KV;
  float acc[kPack] = {};
  for (int g = 0; g < G; ++g) {
    const P v = *reinterpret_cast<const P*>(o + Q + part * Q + (k * G + g) * HS + d);
#pragma unroll
    for (int j = 0; j < kPack; ++j) acc[j] += ToFloat(v.v[j]);
  }
  P r;
#pragma unroll
  for (int j = 0; j < kPack; ++j) r.v[j] = Round<T>(acc[j]);
  *reinterpret_cast<P*>(din + m * ldi + c) = r;
}

// 16-byte packs when every head starts on a 16-byte boundary, else one element per thread.
template <typename T>
int PackFor(int64_t HS, const void* a, const void* b) {
  constexpr int kVec = 16 / sizeof(T);
  return HS % kVec == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 &&
                 reinterpret_cast<uintptr_t>(b) % 16 == 0
             ? kVec
             : 1;
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
  if ((NH + 2 * KV) * HS > INT32_MAX / 3) return Status::InvalidArgument("GqaExpand: rows too wide");
  const int nh = static_cast<int>(NH), kv = static_cast<int>(KV), hs = static_cast<int>(HS);
  constexpr int kVec = 16 / sizeof(T);
  if (PackFor<T>(HS, out, in) > 1) {
    GqaExpandKernel<T, kVec><<<Blocks(n / kVec), kThreads, 0, stream>>>(out, in, M, nh, kv, hs);
  } else {
    GqaExpandKernel<T, 1><<<Blocks(n), kThreads, 0, stream>>>(out, in, M, nh, kv, hs);
  }
  FP8RT_CUDA_TRY_LAUNCH("GqaExpand");
  return Status::Ok();
}

template <typename T>
Status GqaReduce(T* din, const T* dout, int64_t M, int64_t NH, int64_t KV, int64_t HS,
                 cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateGqa("GqaReduce", din, dout, M, NH, KV, HS));
  const int64_t n = M * (NH + 2 * KV) * HS;
  if (n == 0) return Status::Ok();
  if (3 * NH * HS > INT32_MAX) return Status::InvalidArgument("GqaReduce: rows too wide");
  const int nh = static_cast<int>(NH), kv = static_cast<int>(KV), hs = static_cast<int>(HS);
  constexpr int kVec = 16 / sizeof(T);
  if (PackFor<T>(HS, din, dout) > 1) {
    GqaReduceKernel<T, kVec><<<Blocks(n / kVec), kThreads, 0, stream>>>(din, dout, M, nh, kv, hs);
  } else {
    GqaReduceKernel<T, 1><<<Blocks(n), kThreads, 0, stream>>>(din, dout, M, nh, kv, hs);
  }
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
