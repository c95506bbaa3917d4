// Fused softmax + cross-entropy on the GPU: one block per row; pass 1 reads the row once with an
// online (max, sum of exponentials), pass 2 re-reads it (from L2) and writes dlogits in place.
// Several 16-byte loads per thread are in flight before their first use, in both passes.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda/vec.cuh"
#include "kernels/cross_entropy.h"

namespace fp8rt {
namespace {

using cuda_detail::LoadStreaming;
using cuda_detail::Pack;
using cuda_detail::Round;
using cuda_detail::StoreStreaming;

constexpr float kLog2e = 1.4426950408889634f;

// 2^x in one MUFU instruction (relative error ~2^-22; results below 2^-126 flush to 0, far below
// anything a loss or its gradient can resolve). exp2f would add denormal handling around it, and
// this kernel issues two exponentials per logit: it is limited by instruction issue, not memory.
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Merges the running softmax state (m, s) = (max, sum exp(x - max)) of two parts. Commutative to
// the bit, so butterfly shuffles leave every lane with the same state.
__device__ __forceinline__ void Merge(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;  // both parts empty
  s = s * Exp2((m - mx) * kLog2e) + s2 * Exp2((m2 - mx) * kLog2e);
  m = mx;
}

// Block size and vectors in flight per thread: 512 threads at <= 64 registers, two blocks per SM,
// each thread loading kUnroll 16-byte vectors before it uses the first.
constexpr int kXentThreads = 512;
constexpr int kUnroll = 4;

template <typename T, int kPack>
__global__ void __launch_bounds__(kXentThreads, 2)
    SoftmaxCrossEntropyKernel(float* __restrict__ losses, T* __restrict__ logits,
                              const int32_t* __restrict__ targets, int V, int Vp, float dloss,
                              bool compute_grad) {
  using P = Pack<T, kPack>;
  __shared__ float2 warp_state[kXentThreads / 32];
  const int64_t row = blockIdx.x;
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int nvec = Vp / kPack;
  P* x = reinterpret_cast<P*>(logits + row * Vp);
  const int32_t target = targets[row];

  if (target < 0) {  // ignored position: zero loss, zero gradient
    if (tid == 0 && losses != nullptr) losses[row] = 0.0f;
    if (compute_grad) {
      P zero;
#pragma unroll
      for (int j = 0; j < kPack; ++j) zero.v[j] = Round<T>(0.0f);
      for (int v = tid; v < nvec; v += nthreads) StoreStreaming(x + v, zero);
    }
    return;
  }
  const bool bad = target >= V;  // no valid target to read: NaN loss and gradient, see header
  // Read before any thread of the block can overwrite it (pass 2 starts after the barrier below).
  const float target_logit = (tid == 0 && !bad) ? ToFloat(logits[row * Vp + target]) : 0.0f;

  // Pass 1: running (max, sum of exp(x - max)) over this thread's vectors, kUnroll at a time.
  // m is the max in natural units (the loss needs it exactly); m2 = m * log2(e) is the exponent
  // offset, the same for every term, so its rounding cancels in the softmax.
  const int full = V / kPack;  // vectors entirely inside [0, V): no per-column checks
  float m = -INFINITY, m2 = -INFINITY, s = 0.0f;
  for (int base = tid; base < nvec; base += kUnroll * nthreads) {
    P p[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * nthreads < nvec) p[u] = x[base + u * nthreads];
    }
    float xv[kUnroll][kPack];
    float pm = -INFINITY;
    if (base + (kUnroll - 1) * nthreads < full) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int j = 0; j < kPack; ++j) {
          xv[u][j] = ToFloat(p[u].v[j]);
          pm = fmaxf(pm, xv[u][j]);
        }
      }
    } else {  // the row's end: padding columns and vectors past the row leave the softmax
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int v = base + u * nthreads;
#pragma unroll
        for (int j = 0; j < kPack; ++j) {
          xv[u][j] = (v < nvec && v * kPack + j < V) ? ToFloat(p[u].v[j]) : -INFINITY;
          pm = fmaxf(pm, xv[u][j]);
        }
      }
      if (pm == -INFINITY) continue;  // nothing but padding
    }
    if (pm > m) {
      s *= Exp2((m - pm) * kLog2e);
      m = pm;
      m2 = m * kLog2e;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float t = 0.0f;
#pragma unroll
      for (int j = 0; j < kPack; ++j) t += Exp2(fmaf(xv[u][j], kLog2e, -m2));
      s += t;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  }
  if (tid % 32 == 0) warp_state[tid / 32] = make_float2(m, s);
  __syncthreads();
  m = -INFINITY;
  s = 0.0f;
  for (int w = 0; w < nthreads / 32; ++w) Merge(m, s, warp_state[w].x, warp_state[w].y);

  if (tid == 0 && losses != nullptr) {
    losses[row] = bad ? NAN : (m - target_logit) + logf(s);
  }
  if (!compute_grad) return;
  // Pass 2: the row again (from L2, read-once from here on) and dlogits in its place. A bad
  // target makes the scale NaN: the whole row's gradient (padding aside) becomes NaN.
  m2 = m * kLog2e;
  const float scale = bad ? NAN : dloss / s;
  for (int base = tid; base < nvec; base += kUnroll * nthreads) {
    P p[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * nthreads < nvec) p[u] = LoadStreaming(x + base + u * nthreads);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = base + u * nthreads;
      if (v >= nvec) continue;
      P out;
      if (v < full && static_cast<unsigned>(target - v * kPack) >= static_cast<unsigned>(kPack)) {
#pragma unroll
        for (int j = 0; j < kPack; ++j) {
          out.v[j] = Round<T>(Exp2(fmaf(ToFloat(p[u].v[j]), kLog2e, -m2)) * scale);
        }
      } else {  // the target's vector, or the row's end
#pragma unroll
        for (int j = 0; j < kPack; ++j) {
          const int col = v * kPack + j;
          float g = 0.0f;
          if (col < V) {
            g = Exp2(fmaf(ToFloat(p[u].v[j]), kLog2e, -m2)) * scale;
            if (col == target) g -= dloss;
          }
          out.v[j] = Round<T>(g);
        }
      }
      StoreStreaming(x + v, out);
    }
  }
}

// One block sums the N losses: thread t takes t, t + 1024, ...; then a fixed tree. N is B*T,
// small enough that one block streams it in microseconds.
constexpr int kMeanThreads = 1024;
__global__ void __launch_bounds__(kMeanThreads)
    MeanLossKernel(float* __restrict__ out, const float* __restrict__ losses, int64_t N) {
  __shared__ float warp_sum[kMeanThreads / 32];
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < N; i += kMeanThreads) s += losses[i];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    s = warp_sum[threadIdx.x];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) *out = s / static_cast<float>(N);
  }
}

template <typename T, int kPack>
void Launch(float* losses, T* logits, const int32_t* targets, int64_t N, int V, int Vp, float dloss,
            bool compute_grad, cudaStream_t stream) {
  // kXentThreads for wide rows (GPT-2's 50304 columns: about 12 vectors per thread); fewer for
  // narrow rows, never below a warp.
  const int nvec = Vp / kPack;
  int threads = kXentThreads;
  while (threads > 32 && threads / 2 >= nvec) threads /= 2;
  SoftmaxCrossEntropyKernel<T, kPack><<<static_cast<unsigned>(N), threads, 0, stream>>>(
      losses, logits, targets, V, Vp, dloss, compute_grad);
}

}  // namespace

namespace cuda {

template <typename T>
Status SoftmaxCrossEntropy(float* losses, T* logits_or_dlogits, const int32_t* targets, int64_t N,
                           int64_t V, int64_t Vp, float dloss, bool compute_grad,
                           cudaStream_t stream) {
  if (N < 0 || N > INT32_MAX) {
    return Status::InvalidArgument(StrCat("SoftmaxCrossEntropy: N=", N, " must be in [0, 2^31)"));
  }
  if (V < 1 || Vp < V || Vp > INT32_MAX / 2) {
    return Status::InvalidArgument(
        StrCat("SoftmaxCrossEntropy: V=", V, " Vp=", Vp, ": need 1 <= V <= Vp < 2^30"));
  }
  if (!losses && !compute_grad) {
    return Status::InvalidArgument(
        "SoftmaxCrossEntropy: losses is null and compute_grad is false: nothing to compute");
  }
  if (N == 0) return Status::Ok();
  if (!logits_or_dlogits || !targets) {
    return Status::InvalidArgument("SoftmaxCrossEntropy: logits and targets must be non-null");
  }
  constexpr int kPack = 16 / sizeof(T);
  const bool vec = Vp % kPack == 0 && reinterpret_cast<uintptr_t>(logits_or_dlogits) % 16 == 0;
  if (vec) {
    Launch<T, kPack>(losses, logits_or_dlogits, targets, N, static_cast<int>(V),
                     static_cast<int>(Vp), dloss, compute_grad, stream);
  } else {
    Launch<T, 1>(losses, logits_or_dlogits, targets, N, static_cast<int>(V), static_cast<int>(Vp),
                 dloss, compute_grad, stream);
  }
  FP8RT_CUDA_TRY_LAUNCH("SoftmaxCrossEntropy");
  return Status::Ok();
}

Status MeanLoss(float* out, const float* losses, int64_t N, cudaStream_t stream) {
  if (N < 1) return Status::InvalidArgument(StrCat("MeanLoss: N=", N, " must be >= 1"));
  if (!out || !losses) return Status::InvalidArgument("MeanLoss: out and losses must be non-null");
  MeanLossKernel<<<1, kMeanThreads, 0, stream>>>(out, losses, N);
  FP8RT_CUDA_TRY_LAUNCH("MeanLoss");
  return Status::Ok();
}

template Status SoftmaxCrossEntropy<float>(float*, float*, const int32_t*, int64_t, int64_t,
                                           int64_t, float, bool, cudaStream_t);
template Status SoftmaxCrossEntropy<bf16>(float*, bf16*, const int32_t*, int64_t, int64_t, int64_t,
                                          float, bool, cudaStream_t);

}  // namespace cuda
}  // namespace fp8rt
