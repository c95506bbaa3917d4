// The pieces shared by the FP8 casts of quantize.cu (flat kernels) and cast_transpose.cu (the
// tiled cast+transpose): amax and saturation telemetry, vector loads, code packing, and the
// cast+transpose entry point that cuda::Quantize dispatches to when it writes data_t.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "kernels/cuda/fp8_device.cuh"
#include "kernels/fp8.h"
#include "kernels/stream.h"

namespace fp8rt::cuda_detail {

inline constexpr int kWarpSize = 32;
inline constexpr unsigned kFullMask = 0xffffffffu;

// ---------------------------------------------------------------------------------------------
// Telemetry: max |x| and the saturation count, reduced warp -> block -> one atomic per block.
// ---------------------------------------------------------------------------------------------

// |x| as the signed int of its bits: ordered like |x| for every non-NaN and above +inf for NaN,
// so an integer max keeps NaN (fmaxf would drop it) and is independent of reduction order.
// Non-negative ints compare like the floats, which is why atomicMax on the bits is valid.
__device__ __forceinline__ int AbsBits(float x) { return __float_as_int(x) & 0x7fffffff; }

struct Telemetry {
  int amax_bits = 0;
  unsigned saturated = 0;

  // x: the input element; y = x * scale, the value that is encoded.
  __device__ __forceinline__ void Add(float x, float y, float fp8_max) {
    amax_bits = max(amax_bits, AbsBits(x));
    saturated += fabsf(y) > fp8_max ? 1u : 0u;
  }
};

// Every thread of the block calls this (kThreads a multiple of 32); null outputs are skipped.
template <int kThreads>
__device__ __forceinline__ void CommitTelemetry(const Telemetry& t, float* amax,
                                                unsigned long long* saturated) {
  constexpr int kWarps = kThreads / kWarpSize;
  __shared__ int s_amax[kWarps];
  __shared__ unsigned s_sat[kWarps];
  if (amax == nullptr && saturated == nullptr) return;  // uniform over the block
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  int a = __reduce_max_sync(kFullMask, t.amax_bits);
  unsigned s = __reduce_add_sync(kFullMask, t.saturated);
  if (lane == 0) {
    s_amax[warp] = a;
    s_sat[warp] = s;
  }
  __syncthreads();
  if (warp != 0) return;
  a = __reduce_max_sync(kFullMask, lane < kWarps ? s_amax[lane] : 0);
  s = __reduce_add_sync(kFullMask, lane < kWarps ? s_sat[lane] : 0u);
  if (lane == 0) {
    if (amax != nullptr) atomicMax(reinterpret_cast<int*>(amax), a);
    if (saturated != nullptr && s != 0) atomicAdd(saturated, static_cast<unsigned long long>(s));
  }
}

// ---------------------------------------------------------------------------------------------
// Vector helpers.
// ---------------------------------------------------------------------------------------------

// Loads kN consecutive elements (8 bytes, or a multiple of 16) from p, aligned to that size,
// into fp32.
template <int kN, typename T>
__device__ __forceinline__ void LoadVec(const T* __restrict__ p, float (&x)[kN]) {
  constexpr int kBytes = kN * static_cast<int>(sizeof(T));
  static_assert(kBytes == 8 || kBytes % 16 == 0);
  if constexpr (kBytes == 8) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < kN; ++j) x[j] = LoadF(e + j);
  } else {
    constexpr int kPer = 16 / sizeof(T);
#pragma unroll
    for (int v = 0; v < kN / kPer; ++v) {
      const uint4 raw = reinterpret_cast<const uint4*>(p)[v];
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < kPer; ++j) x[v * kPer + j] = LoadF(e + j);
    }
  }
}

// Four codes of y[0..3] packed into one word, y[0] in the low byte.
template <Fp8Format F>
__device__ __forceinline__ uint32_t Encode4(float y0, float y1, float y2, float y3) {
  return static_cast<uint32_t>(Encode2<F>(y0, y1)) |
         (static_cast<uint32_t>(Encode2<F>(y2, y3)) << 16);
}

inline bool Aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// cuda::Quantize with out.data_t set and a non-empty tensor (validated by the caller): the tiled
// cast+transpose, one or two launches. Instantiated for T in {float, bf16}.
template <typename T>
Status CastTranspose(const T* in, const Fp8Tensor& out, unsigned long long* saturated,
                     cudaStream_t stream);

}  // namespace fp8rt::cuda_detail
