// The pieces shared by the FP8 casts of quantize.cu (flat kernels) and cast_transpose.cu (the
// tiled cast+transpose): amax and saturation telemetry, vector loads, code packing, the
// cast+transpose entry point that cuda::Quantize dispatches to when it writes data_t, and the
// output cast of kernels that store their results as FP8 codes (the norms' forwards).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/status.h"
#include "kernels/cuda/fp8_device.cuh"
#include "kernels/cuda/vec.cuh"
#include "kernels/fp8.h"
#include "kernels/scaling.h"
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
// kSkipKnown: known_amax_bits is a value *amax held earlier (read by thread 0), and the atomic
// is skipped where the block's amax does not exceed it (the max only grows, so a stale value
// costs an atomic, never a lost maximum). For grids of thousands of small blocks (the norms'
// fused casts), whose atomics on one address otherwise serialise.
template <int kThreads, bool kSkipKnown = false>
__device__ __forceinline__ void CommitTelemetry(const Telemetry& t, float* amax,
                                                unsigned long long* saturated,
                                                int known_amax_bits = 0) {
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
    if (amax != nullptr && (!kSkipKnown || a > known_amax_bits)) {
      atomicMax(reinterpret_cast<int*>(amax), a);
    }
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

// ---------------------------------------------------------------------------------------------
// Output casts: a kernel that computes T values can store their FP8 codes instead (Cast =
// OutputCast<F>) or the values themselves (Cast = NoCast, which costs nothing). The codes,
// amax, saturation count and scale_inv are cuda::Quantize's of the T values the kernel would
// have stored.
// ---------------------------------------------------------------------------------------------

// The scalars of the FP8 tensor an output cast writes (Fp8Tensor's, plus the saturation counter).
struct CastScalars {
  const float* scale = nullptr;
  float* scale_inv = nullptr;
  float* amax = nullptr;                    // may be null
  unsigned long long* saturated = nullptr;  // may be null
};

struct NoCast {
  static constexpr bool kEnabled = false;
  template <typename T>
  using Out = T;
  __device__ explicit NoCast(const CastScalars&) {}
};

// Telemetry as Quantize's, split for speed: Code and Store take the amax of what they encode,
// Count the saturation count. A kernel that can revisit its values calls Count only where
// MaySaturate() (rarely, for a delayed scale: the LayerNorm register kernel, whose row stays in
// registers); the others count as they store.
template <Fp8Format F>
struct OutputCast {
  static constexpr bool kEnabled = true;
  template <typename T>
  using Out = uint8_t;
  float scale;
  Telemetry tel;
  uint32_t amax_pairs = 0;  // Store of bf16 pairs: max |x| bits per 16-bit half, folded later

  // Every thread reads the scale once, at the kernel's start (the input loads' latency hides it).
  __device__ explicit OutputCast(const CastScalars& s) : scale(*s.scale) {}

  // The code of x, a T value in fp32.
  __device__ __forceinline__ uint8_t Code(float x) {
    tel.amax_bits = max(tel.amax_bits, AbsBits(x));
    return Encode<F>(x * scale);
  }

  // The codes of kN consecutive T values (kN = 1, 4, 8 or 16) stored at p: one kN-byte store
  // when `vector` (p aligned to kN bytes), else byte by byte.
  template <int kN>
  __device__ __forceinline__ void Store(uint8_t* p, const float (&x)[kN], bool vector) {
#pragma unroll
    for (int j = 0; j < kN; ++j) tel.amax_bits = max(tel.amax_bits, AbsBits(x[j]));
    EncodeAndStore(p, x, vector);
  }
  // The same from the T values as the plain kernel packs them. bf16 pairs take their amax as
  // 16-bit halves (one max.u16x2 per pair on sm_90: the bits of |x| order as its values, NaN
  // above inf, and a bf16's float bits are its own shifted up).
  template <typename T, int kN>
  __device__ __forceinline__ void Store(uint8_t* p, const Pack<T, kN>& v, bool vector) {
    if constexpr (std::is_same_v<T, bf16> && kN % 2 == 0) {
      const uint32_t* u = reinterpret_cast<const uint32_t*>(&v);
      float x[kN];
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) {
        amax_pairs = __vmaxu2(amax_pairs, u[i] & 0x7fff7fffu);
        x[2 * i] = __uint_as_float(u[i] << 16);
        x[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
      }
      EncodeAndStore(p, x, vector);
    } else {
      float x[kN];
#pragma unroll
      for (int j = 0; j < kN; ++j) x[j] = ToFloat(v.v[j]);
      Store(p, x, vector);
    }
  }

  // Adds x's saturation (a T value in fp32, as given to Code or Store) to the count.
  __device__ __forceinline__ void Count(float x) {
    tel.saturated += fabsf(x * scale) > Fp8MaxFinite(F) ? 1u : 0u;
  }
  template <int kN>
  __device__ __forceinline__ void Count(const float (&x)[kN]) {
#pragma unroll
    for (int j = 0; j < kN; ++j) Count(x[j]);
  }

  // Whether a value this thread encoded can have saturated: its largest |x| does (|x * scale|
  // rounds monotonically in |x|), or it saw a NaN.
  __device__ __forceinline__ bool MaySaturate() const {
    return !(fabsf(__int_as_float(AmaxBits()) * scale) <= Fp8MaxFinite(F));
  }

  // Every thread of the block (kThreads of them) calls this once, after its last store and
  // count. Thread 0 first reads the amax so far (from L2, its latency under the block's
  // reduction) and the block's atomic is skipped where that already holds the block's amax: an
  // atomic from each of 8192 one-row blocks cost about 8 us (2026-11-27, H200, 8192 x 768 bf16),
  // and a read at the kernel's start is stale for the whole first wave. Thread 0 of block 0
  // writes scale_inv.
  template <int kThreads>
  __device__ __forceinline__ void Commit(const CastScalars& s) {
    const int known =
        threadIdx.x == 0 && s.amax != nullptr ? __ldcg(reinterpret_cast<const int*>(s.amax)) : 0;
    if (blockIdx.x == 0 && threadIdx.x == 0) *s.scale_inv = ScaleInv(scale);
    tel.amax_bits = AmaxBits();
    CommitTelemetry<kThreads, /*kSkipKnown=*/true>(tel, s.amax, s.saturated, known);
  }

 private:
  __device__ __forceinline__ int AmaxBits() const {
    return max(tel.amax_bits,
               max(static_cast<int>(amax_pairs << 16), static_cast<int>(amax_pairs & 0xffff0000u)));
  }

  // Encodes and stores, no telemetry.
  template <int kN>
  __device__ __forceinline__ void EncodeAndStore(uint8_t* p, const float (&x)[kN], bool vector) {
    static_assert(kN == 1 || kN == 4 || kN == 8 || kN == 16);
    if constexpr (kN > 1) {
      if (vector) {
        uint32_t w[kN / 4];
#pragma unroll
        for (int k = 0; k < kN / 4; ++k) {
          w[k] = Encode4<F>(x[4 * k] * scale, x[4 * k + 1] * scale, x[4 * k + 2] * scale,
                            x[4 * k + 3] * scale);
        }
        if constexpr (kN == 4) {
          *reinterpret_cast<uint32_t*>(p) = w[0];
        } else if constexpr (kN == 8) {
          *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
        } else {
          *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
        }
        return;
      }
    }
#pragma unroll
    for (int j = 0; j < kN; ++j) p[j] = Encode<F>(x[j] * scale);
  }
};

inline bool Aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// cuda::Quantize with out.data_t set and a non-empty tensor (validated by the caller): the tiled
// cast+transpose, one or two launches. Instantiated for T in {float, bf16}.
template <typename T>
Status CastTranspose(const T* in, const Fp8Tensor& out, unsigned long long* saturated,
                     cudaStream_t stream);

// cuda::QuantizeGelu writing out.data alone (validated by the caller, a non-empty tensor): the
// flat kernel of quantize.cu with the GELU applied to each loaded element (one launch; the
// tiled kernel's codes, amax, saturation and scale_inv). Instantiated for T in {float, bf16}.
template <typename T>
Status QuantizeGeluRowMajor(const T* pre, const Fp8Tensor& out, unsigned long long* saturated,
                            cudaStream_t stream);

}  // namespace fp8rt::cuda_detail
