// LayerNorm's forward on the GPU: a group of threads per row (one to four warps), the row held in
// registers as 16-byte vectors (one DRAM read, exact two-pass variance), the output stored
// streaming, or its FP8 codes in the same kernel (LayerNormForwardFp8). The backward is in
// layernorm_bwd.cu; the helpers both use in layernorm_device.cuh.
#include <cstdint>
#include <type_traits>

#include "common/cuda_check.h"
#include "kernels/cuda/layernorm_device.cuh"
#include "kernels/cuda/quantize_device.cuh"
#include "kernels/cuda/vec.cuh"
#include "kernels/layernorm.h"
#include "kernels/quantize.h"

namespace fp8rt {
namespace {

using cuda_detail::CastScalars;
using cuda_detail::LoadStreaming;
using cuda_detail::LoadVector;
using cuda_detail::NoCast;
using cuda_detail::OutputCast;
using cuda_detail::Pack;
using cuda_detail::PackFor;
using cuda_detail::Repack;
using cuda_detail::Round;
using cuda_detail::StoreStreaming;
using cuda_detail::Unpack;
using cuda_detail::WarpSum;

// kTpr threads per row, kFwdThreads / kTpr rows per block (one-dimensional). Thread tx of row
// group ty holds vectors tx, tx + kTpr, ..., tx + kTpr (kVec - 1) of row blockIdx.x * rpb + ty in
// registers (unpacked to fp32 once). Many small blocks keep the SMs full; the row sums cross warps
// through shared memory. Measured on H200 at 8192 x 2048 bf16: 4 warps per row (16 columns per
// thread) beat 1, 2 and 8 (the barrier waits on the slowest warp's loads, while one warp per row
// needs too many registers for good occupancy). The row geometry is a template parameter, weight
// and bias come in one 16-byte load per vector and the output is stored streaming (evict-first):
// before, with the geometry read from blockDim and weight/bias unpacked straight from global
// memory (which the compiler split into 4-byte loads), the bench measured 66.5% of copy; now
// 72.9-75.2% (2026-11-22, H200; the sweep and both bench warm-ups are in docs/PERFORMANCE.md).
constexpr int kFwdThreads = 128;

// Resident blocks per SM the forward is compiled for: 10 where a thread's share of the row is at
// most 16 elements (48 registers or fewer, no spills), else whatever the row needs.
constexpr int FwdMinBlocks(int vec, int pack) { return vec * pack <= 16 ? 10 : 1; }

// Cast = OutputCast<F> (LayerNormForwardFp8): the same kernel stores the FP8 codes of the T
// values it would have stored (kPack codes per vector, one kPack-byte store where out's alignment
// allows), and each block adds its amax and saturation count once; Cast = NoCast is the plain
// forward (the same PTX as before the option).
template <typename T, int kPack, int kVec, int kTpr, bool kExact, typename Cast = NoCast>
__global__ void __launch_bounds__(kFwdThreads, FwdMinBlocks(kVec, kPack))
    LayerNormForwardKernel(typename Cast::template Out<T>* __restrict__ out,
                           float* __restrict__ mean, float* __restrict__ rstd,
                           const T* __restrict__ in, const T* __restrict__ weight,
                           const T* __restrict__ bias, int64_t N, int C, float eps,
                           CastScalars cast_scalars) {
  using P = Pack<T, kPack>;
  Cast cast(cast_scalars);
  // A cast counts saturation after the row's stores, from the registers, only where the thread's
  // amax allows any; fp32 rows (16 elements a thread) have no registers to keep for it (ptxas
  // spilled) and count as they store.
  constexpr bool kDeferCount = std::is_same_v<T, bf16>;
  constexpr int kRpb = kFwdThreads / kTpr, kWpr = kTpr / 32;
  __shared__ float red[2][kRpb * kWpr];  // [sum, variance][warp]
  const int tx = threadIdx.x % kTpr, ty = threadIdx.x / kTpr;
  const int lane = tx % 32, wid = threadIdx.x / 32;
  const int nvec = C / kPack;
  const float inv_c = 1.0f / C;  // while the loads are in flight
  const int64_t row = blockIdx.x * int64_t{kRpb} + ty;
  const bool valid = kRpb == 1 || row < N;  // the grid covers N rows exactly with one per block
  // kExact: the row is exactly kVec vectors per thread, no column is out of range.
  auto in_row = [&](int k) { return kExact || tx + k * kTpr < nvec; };
  P xv[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) {  // every load in flight before the first use
    if (valid && in_row(k)) {
      xv[k] = LoadStreaming(reinterpret_cast<const P*>(in + row * C) + tx + k * kTpr);
    }
  }
  float f[kVec][kPack];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    if (valid && in_row(k)) {
      Unpack(xv[k], f[k]);
#pragma unroll
      for (int j = 0; j < kPack; ++j) sum += f[k][j];
    }
  }
  sum = WarpSum(sum);
  if constexpr (kWpr > 1) {
    if (lane == 0) red[0][wid] = sum;
    __syncthreads();
    sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kWpr; ++i) sum += red[0][ty * kWpr + i];
  }
  const float mu = sum * inv_c;
  float var = 0.0f;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    if (valid && in_row(k)) {
#pragma unroll
      for (int j = 0; j < kPack; ++j) var = fmaf(f[k][j] - mu, f[k][j] - mu, var);
    }
  }
  var = WarpSum(var);
  if constexpr (kWpr > 1) {
    if (lane == 0) red[1][wid] = var;
    __syncthreads();
    var = 0.0f;
#pragma unroll
    for (int i = 0; i < kWpr; ++i) var += red[1][ty * kWpr + i];
  }
  // A cast's idle rows still join its block-wide telemetry reduction below.
  if (!Cast::kEnabled && !valid) return;
  const float rs = rsqrtf(var * inv_c + eps);
  if (valid) {
    // The row's output: vectors of T, or with a cast bytes (kPack codes per vector).
    auto* const o =
        reinterpret_cast<std::conditional_t<Cast::kEnabled, uint8_t, P>*>(out + row * C);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int v = tx + k * kTpr;
      if (in_row(k)) {
        float w[kPack], b[kPack];
        Unpack(LoadVector(reinterpret_cast<const P*>(weight) + v), w);
        Unpack(LoadVector(reinterpret_cast<const P*>(bias) + v), b);
#pragma unroll
        for (int j = 0; j < kPack; ++j) f[k][j] = fmaf((f[k][j] - mu) * rs, w[j], b[j]);
        if constexpr (Cast::kEnabled) {
          // The codes of the T values the plain kernel stores. Their vector stores need out
          // aligned to kPack bytes (row and vector offsets are multiples of kPack); otherwise
          // bytes, so that the kernel variant, and with it the statistics, never depends on
          // out's alignment.
          cast.Store(o + v * kPack, Repack<T, kPack>(f[k]),
                     reinterpret_cast<uintptr_t>(out) % kPack == 0);
          if constexpr (!kDeferCount) {
            float y[kPack];
            Unpack(Repack<T, kPack>(f[k]), y);
            cast.Count(y);
          }
        } else {
          StoreStreaming(o + v, Repack<T, kPack>(f[k]));
        }
      }
    }
    if constexpr (Cast::kEnabled && kDeferCount) {
      // The saturation count, only where this thread's amax allows one (rarely, under a delayed
      // scale): the row is still in registers.
      if (cast.MaySaturate()) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          if (in_row(k)) {
            float y[kPack];
            Unpack(Repack<T, kPack>(f[k]), y);
            cast.Count(y);
          }
        }
      }
    }
    if (tx == 0 && mean != nullptr) {
      mean[row] = mu;
      rstd[row] = rs;
    }
  }
  if constexpr (Cast::kEnabled) cast.template Commit<kRpb * kTpr>(cast_scalars);
}

// Rows too wide for registers: one warp per row, the same math, re-reading the row (from L1/L2)
// in each pass.
constexpr int kFwdWarps = 4;

template <typename T, int kPack, typename Cast = NoCast>
__global__ void __launch_bounds__(kFwdWarps * 32)
    LayerNormForwardWideKernel(typename Cast::template Out<T>* __restrict__ out,
                               float* __restrict__ mean, float* __restrict__ rstd,
                               const T* __restrict__ in, const T* __restrict__ weight,
                               const T* __restrict__ bias, int64_t N, int C, float eps,
                               CastScalars cast_scalars) {
  using P = Pack<T, kPack>;
  Cast cast(cast_scalars);
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t{kFwdWarps} + threadIdx.x / 32;
  const bool valid = row < N;
  if (!Cast::kEnabled && !valid) return;  // a cast's idle warps still join its telemetry
  if (valid) {
    const int nvec = C / kPack;
    const P* x = reinterpret_cast<const P*>(in + row * C);
    float sum = 0.0f;
    for (int v = lane; v < nvec; v += 32) {
      const P xv = x[v];
#pragma unroll
      for (int j = 0; j < kPack; ++j) sum += ToFloat(xv.v[j]);
    }
    const float mu = WarpSum(sum) / C;
    float var = 0.0f;
    for (int v = lane; v < nvec; v += 32) {
      const P xv = x[v];
#pragma unroll
      for (int j = 0; j < kPack; ++j) {
        const float d = ToFloat(xv.v[j]) - mu;
        var += d * d;
      }
    }
    const float rs = 1.0f / sqrtf(WarpSum(var) / C + eps);
    if constexpr (Cast::kEnabled) {
      // The loop below with the codes stored, one loop per alignment of out (kPack-byte stores
      // or bytes): with that choice inside the loop ptxas spilled.
      auto store_codes = [&]<bool kAligned>() {
        for (int v = lane; v < nvec; v += 32) {
          const P xv = x[v];
          const P w = reinterpret_cast<const P*>(weight)[v];
          const P b = reinterpret_cast<const P*>(bias)[v];
          float y[kPack];
#pragma unroll
          for (int j = 0; j < kPack; ++j) {
            y[j] = ToFloat(
                Round<T>(fmaf((ToFloat(xv.v[j]) - mu) * rs, ToFloat(w.v[j]), ToFloat(b.v[j]))));
          }
          cast.Store(out + row * C + v * kPack, y, kAligned);
          cast.Count(y);
        }
      };
      if (reinterpret_cast<uintptr_t>(out) % kPack == 0) {
        store_codes.template operator()<true>();
      } else {
        store_codes.template operator()<false>();
      }
    } else {
      P* o = reinterpret_cast<P*>(out + row * C);
      for (int v = lane; v < nvec; v += 32) {
        const P xv = x[v];
        const P w = reinterpret_cast<const P*>(weight)[v];
        const P b = reinterpret_cast<const P*>(bias)[v];
        P y;
        // The register kernel's expression, fma included (nvcc contracted the plain form to the
        // same instructions; spelt out because QuantizeLayerNorm recomputes this output bit for
        // bit).
#pragma unroll
        for (int j = 0; j < kPack; ++j) {
          y.v[j] = Round<T>(fmaf((ToFloat(xv.v[j]) - mu) * rs, ToFloat(w.v[j]), ToFloat(b.v[j])));
        }
        o[v] = y;
      }
    }
    if (lane == 0 && mean != nullptr) {
      mean[row] = mu;
      rstd[row] = rs;
    }
  }
  if constexpr (Cast::kEnabled) cast.template Commit<kFwdWarps * 32>(cast_scalars);
}

// Cast: NoCast (LayerNormForward) or OutputCast<F> (LayerNormForwardFp8), same launches.
template <typename T, int kPack, typename Cast>
void LaunchForward(typename Cast::template Out<T>* out, float* mean, float* rstd, const T* in,
                   const T* weight, const T* bias, int64_t N, int C, float eps,
                   const CastScalars& cs, cudaStream_t stream) {
  const int nvec = C / kPack;
  // Up to 8 vectors (128 bytes) per thread in registers; wider rows are re-read.
  int kvec = 1;
  while ((nvec + kvec - 1) / kvec > kFwdThreads && kvec < 8) kvec *= 2;
  const int tpr = ((nvec + kvec - 1) / kvec + 31) / 32 * 32;
  if (tpr > kFwdThreads) {
    const unsigned blocks = static_cast<unsigned>((N + kFwdWarps - 1) / kFwdWarps);
    LayerNormForwardWideKernel<T, kPack, Cast>
        <<<blocks, kFwdWarps * 32, 0, stream>>>(out, mean, rstd, in, weight, bias, N, C, eps, cs);
    return;
  }
  const int rpb = kFwdThreads / tpr;
  const unsigned blocks = static_cast<unsigned>((N + rpb - 1) / rpb);
  auto launch = [&]<int kVec, int kTpr>() {
    const unsigned threads = kTpr * (kFwdThreads / kTpr);
    // Rows that fill every thread's vectors skip the column checks (16-byte vectors only; the
    // one-element fallback keeps them).
    if (kPack > 1 && nvec == kVec * kTpr) {
      LayerNormForwardKernel<T, kPack, kVec, kTpr, kPack != 1, Cast>
          <<<blocks, threads, 0, stream>>>(out, mean, rstd, in, weight, bias, N, C, eps, cs);
    } else {
      LayerNormForwardKernel<T, kPack, kVec, kTpr, false, Cast>
          <<<blocks, threads, 0, stream>>>(out, mean, rstd, in, weight, bias, N, C, eps, cs);
    }
  };
  // kvec > 1 only where nvec / (kvec / 2) > kFwdThreads, so its rows take 96 or 128 threads.
  if (kvec == 1) {
    switch (tpr) {
      case 32:
        launch.template operator()<1, 32>();
        break;
      case 64:
        launch.template operator()<1, 64>();
        break;
      case 96:
        launch.template operator()<1, 96>();
        break;
      default:
        launch.template operator()<1, 128>();
        break;
    }
    return;
  }
  auto wide = [&]<int kVec>() {
    if (tpr == 96) {
      launch.template operator()<kVec, 96>();
    } else {
      launch.template operator()<kVec, 128>();
    }
  };
  switch (kvec) {
    case 2:
      wide.template operator()<2>();
      break;
    case 4:
      wide.template operator()<4>();
      break;
    default:
      wide.template operator()<8>();
      break;
  }
}

// The forward's preconditions apart from its output's; op names the caller in the message.
Status ValidateForward(const char* op, float* mean, float* rstd, const void* in, const void* weight,
                       const void* bias, int64_t N, int64_t C, float eps) {
  if (N < 0 || C < 1 || C > INT32_MAX / 2) {
    return Status::InvalidArgument(
        StrCat(op, ": N=", N, " C=", C, ": need N >= 0 and 1 <= C < 2^30"));
  }
  if ((mean == nullptr) != (rstd == nullptr)) {
    return Status::InvalidArgument(StrCat(op, ": mean and rstd must be both null or both set"));
  }
  if (!(eps >= 0.0f)) return Status::InvalidArgument(StrCat(op, ": eps=", eps, " must be >= 0"));
  if (N > 0 && (!in || !weight || !bias)) {
    return Status::InvalidArgument(StrCat(op, ": in, weight and bias must be non-null"));
  }
  return Status::Ok();
}

}  // namespace

namespace cuda {

template <typename T>
Status LayerNormForward(T* out, float* mean, float* rstd, const T* in, const T* weight,
                        const T* bias, int64_t N, int64_t C, float eps, cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(
      ValidateForward("LayerNormForward", mean, rstd, in, weight, bias, N, C, eps));
  if (N == 0) return Status::Ok();
  if (!out) return Status::InvalidArgument("LayerNormForward: out must be non-null");
  const int c = static_cast<int>(C);
  if (PackFor<T>(C, {out, in, weight, bias}) > 1) {
    LaunchForward<T, 16 / sizeof(T), NoCast>(out, mean, rstd, in, weight, bias, N, c, eps, {},
                                             stream);
  } else {
    LaunchForward<T, 1, NoCast>(out, mean, rstd, in, weight, bias, N, c, eps, {}, stream);
  }
  FP8RT_CUDA_TRY_LAUNCH("LayerNormForward");
  return Status::Ok();
}

template <typename T>
Status LayerNormForwardFp8(const Fp8Tensor& out, float* mean, float* rstd, const T* in,
                           const T* weight, const T* bias, int64_t N, int64_t C, float eps,
                           unsigned long long* saturated, cudaStream_t stream) {
  constexpr const char* kOp = "LayerNormForwardFp8";
  FP8RT_RETURN_IF_ERROR(ValidateFp8RowMajorOutput(kOp, out, N, C));
  FP8RT_RETURN_IF_ERROR(ValidateForward(kOp, mean, rstd, in, weight, bias, N, C, eps));
  // No rows: Quantize's empty cast, which writes scale_inv alone.
  if (N == 0) return Quantize<T>(nullptr, out, saturated, stream);
  const int c = static_cast<int>(C);
  // The kernel LayerNormForward picks for in, weight and bias (with a 16-byte aligned out).
  const bool vec = PackFor<T>(C, {in, weight, bias}) > 1;
  const CastScalars cs{out.scale, out.scale_inv, out.amax, saturated};
  cuda_detail::DispatchFp8(out.format, [&]<Fp8Format F>() {
    if (vec) {
      LaunchForward<T, 16 / sizeof(T), OutputCast<F>>(out.data, mean, rstd, in, weight, bias, N, c,
                                                      eps, cs, stream);
    } else {
      LaunchForward<T, 1, OutputCast<F>>(out.data, mean, rstd, in, weight, bias, N, c, eps, cs,
                                         stream);
    }
  });
  FP8RT_CUDA_TRY_LAUNCH(kOp);
  return Status::Ok();
}

template Status LayerNormForward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, int64_t, int64_t, float, cudaStream_t);
template Status LayerNormForward<bf16>(bf16*, float*, float*, const bf16*, const bf16*, const bf16*,
                                       int64_t, int64_t, float, cudaStream_t);
template Status LayerNormForwardFp8<float>(const Fp8Tensor&, float*, float*, const float*,
                                           const float*, const float*, int64_t, int64_t, float,
                                           unsigned long long*, cudaStream_t);
template Status LayerNormForwardFp8<bf16>(const Fp8Tensor&, float*, float*, const bf16*,
                                          const bf16*, const bf16*, int64_t, int64_t, float,
                                          unsigned long long*, cudaStream_t);

}  // namespace cuda
}  // namespace fp8rt
