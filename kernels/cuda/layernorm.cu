// LayerNorm on the GPU. Forward: one warp per row, the row held in registers as 16-byte vectors
// (one DRAM read, exact two-pass variance). Backward: a block-wide group of threads per row, each
// thread owning fixed columns so that it accumulates their dweight/dbias in registers across the
// rows its block visits; per-block partials are then summed in a fixed order.
#include <algorithm>
#include <cstdint>

#include <cuda_bf16.h>

#include "common/cuda_check.h"
#include "kernels/layernorm.h"

namespace fp8rt {
namespace {

template <typename T, int kPack>
struct alignas(sizeof(T) * kPack) Pack {
  T v[kPack];
};

template <typename T>
__device__ __forceinline__ T Round(float x);
template <>
__device__ __forceinline__ float Round<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 Round<bf16>(float x) {
  bf16 r;
  r.bits = __bfloat16_as_ushort(__float2bfloat16_rn(x));
  return r;
}

// Butterfly sum: every lane ends with the same bits (fp addition is commutative).
__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// ---- forward ----

constexpr int kFwdWarps = 4;  // rows per block

// Lane l holds vectors l, l + 32, ..., l + 32 (kVec - 1) of its row.
// Up to 8 vectors per lane the kernel is held to 64 registers: 32 warps per SM, so GPT-2's 8192
// rows of 2048 take two full waves.
template <typename T, int kPack, int kVec>
__global__ void __launch_bounds__(kFwdWarps * 32, kVec <= 8 ? 8 : 1)
    LayerNormForwardKernel(T* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                           const T* __restrict__ in, const T* __restrict__ weight,
                           const T* __restrict__ bias, int64_t N, int C, float eps) {
  using P = Pack<T, kPack>;
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t{kFwdWarps} + threadIdx.x / 32;
  if (row >= N) return;
  const int nvec = C / kPack;
  const P* x = reinterpret_cast<const P*>(in + row * C);
  P xv[kVec];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const int v = lane + 32 * k;
    if (v < nvec) {
      xv[k] = x[v];
#pragma unroll
      for (int j = 0; j < kPack; ++j) sum += ToFloat(xv[k].v[j]);
    }
  }
  const float mu = WarpSum(sum) / C;
  float var = 0.0f;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    if (lane + 32 * k < nvec) {
#pragma unroll
      for (int j = 0; j < kPack; ++j) {
        const float d = ToFloat(xv[k].v[j]) - mu;
        var += d * d;
      }
    }
  }
  const float rs = 1.0f / sqrtf(WarpSum(var) / C + eps);
  P* o = reinterpret_cast<P*>(out + row * C);
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const int v = lane + 32 * k;
    if (v < nvec) {
      const P w = reinterpret_cast<const P*>(weight)[v];
      const P b = reinterpret_cast<const P*>(bias)[v];
      P y;
#pragma unroll
      for (int j = 0; j < kPack; ++j) {
        y.v[j] = Round<T>((ToFloat(xv[k].v[j]) - mu) * rs * ToFloat(w.v[j]) + ToFloat(b.v[j]));
      }
      o[v] = y;
    }
  }
  if (lane == 0 && mean != nullptr) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// Rows too wide for registers: the same math, re-reading the row (from L1/L2) in each pass.
template <typename T, int kPack>
__global__ void __launch_bounds__(kFwdWarps * 32)
    LayerNormForwardWideKernel(T* __restrict__ out, float* __restrict__ mean,
                               float* __restrict__ rstd, const T* __restrict__ in,
                               const T* __restrict__ weight, const T* __restrict__ bias, int64_t N,
                               int C, float eps) {
  using P = Pack<T, kPack>;
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t{kFwdWarps} + threadIdx.x / 32;
  if (row >= N) return;
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
  P* o = reinterpret_cast<P*>(out + row * C);
  for (int v = lane; v < nvec; v += 32) {
    const P xv = x[v];
    const P w = reinterpret_cast<const P*>(weight)[v];
    const P b = reinterpret_cast<const P*>(bias)[v];
    P y;
#pragma unroll
    for (int j = 0; j < kPack; ++j) {
      y.v[j] = Round<T>((ToFloat(xv.v[j]) - mu) * rs * ToFloat(w.v[j]) + ToFloat(b.v[j]));
    }
    o[v] = y;
  }
  if (lane == 0 && mean != nullptr) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// ---- backward ----

// A fixed grid (a function of N and C only, so the partial sums and their order are too): 256
// blocks of <= 256 threads (<= 512 or 1024 for wide rows) fit one wave on 132-SM parts, and the
// partials (grid * 2C floats) stay small next to the (N, C) tensors.
constexpr int kBwdMaxBlocks = 256;
constexpr int kBwdBlockThreads = 256;


// Block shape (tpr, rpb): tpr threads per row (a multiple of 32), rpb row groups. Thread (tx, ty)
// owns vectors tx, tx + tpr, ..., tx + tpr (kVec - 1) of rows base + r * rpb + ty, r < kRows, and
// keeps their dweight/dbias in registers across every row its block visits; base starts at
// blockIdx.x * rpb * kRows and steps by gridDim.x * rpb * kRows. All loads of an iteration (x,
// dout and, when accumulating, the old din) are issued before the first use.
// kThreads bounds the block size (256, 512 or 1024); below 1024 two blocks fit an SM.
template <typename T, int kPack, int kVec, int kRows, int kThreads>
__global__ void __launch_bounds__(kThreads, kThreads < 1024 ? 2 : 1)
    LayerNormBackwardKernel(T* __restrict__ din, float* __restrict__ partials,
                            const T* __restrict__ dout, const T* __restrict__ in,
                            const T* __restrict__ weight, const float* __restrict__ mean,
                            const float* __restrict__ rstd, int64_t N, int C, bool accumulate) {
  using P = Pack<T, kPack>;
  extern __shared__ float smem[];
  const int tpr = blockDim.x, rpb = blockDim.y;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int wpr = tpr / 32, warp = tx / 32, lane = tx % 32;
  const int nvec = C / kPack;
  const float inv_c = 1.0f / C;
  // Row sums of the warps, double-buffered so that one barrier per iteration suffices: a buffer
  // is rewritten two iterations later, after every thread has passed the next barrier.
  float2* red = reinterpret_cast<float2*>(smem);  // [2][rpb][kRows][wpr]

  P w[kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    if (tx + k * tpr < nvec) w[k] = reinterpret_cast<const P*>(weight)[tx + k * tpr];
  }
  float dw[kVec][kPack], db[kVec][kPack];
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
#pragma unroll
    for (int j = 0; j < kPack; ++j) dw[k][j] = db[k][j] = 0.0f;
  }

  int parity = 0;
  const int64_t step = int64_t{gridDim.x} * rpb * kRows;
  for (int64_t base = blockIdx.x * int64_t{rpb} * kRows; base < N; base += step) {
    P xv[kRows][kVec], dv[kRows][kVec], ov[kRows][kVec];
    float mu[kRows], rs[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = base + r * rpb + ty;
      if (row < N) {
        mu[r] = mean[row];
        rs[r] = rstd[row];
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const int v = tx + k * tpr;
          if (v < nvec) {
            xv[r][k] = reinterpret_cast<const P*>(in + row * C)[v];
            dv[r][k] = reinterpret_cast<const P*>(dout + row * C)[v];
            if (accumulate) ov[r][k] = reinterpret_cast<const P*>(din + row * C)[v];
          }
        }
      }
    }
    float s_g[kRows], s_gx[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      s_g[r] = s_gx[r] = 0.0f;
      if (base + r * rpb + ty < N) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          if (tx + k * tpr < nvec) {
#pragma unroll
            for (int j = 0; j < kPack; ++j) {
              const float d = ToFloat(dv[r][k].v[j]);
              const float xhat = (ToFloat(xv[r][k].v[j]) - mu[r]) * rs[r];
              const float g = d * ToFloat(w[k].v[j]);
              s_g[r] += g;
              s_gx[r] += g * xhat;
              dw[k][j] += d * xhat;
              db[k][j] += d;
            }
          }
        }
      }
      s_g[r] = WarpSum(s_g[r]);
      s_gx[r] = WarpSum(s_gx[r]);
    }
    if (wpr > 1) {
      float2* buf = red + ((parity * rpb + ty) * kRows) * wpr;
      if (lane == 0) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) buf[r * wpr + warp] = make_float2(s_g[r], s_gx[r]);
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        s_g[r] = s_gx[r] = 0.0f;
        for (int i = 0; i < wpr; ++i) {
          s_g[r] += buf[r * wpr + i].x;
          s_gx[r] += buf[r * wpr + i].y;
        }
      }
      parity ^= 1;
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = base + r * rpb + ty;
      if (row >= N) continue;
      const float mean_g = s_g[r] * inv_c, mean_gx = s_gx[r] * inv_c;
      P* dx = reinterpret_cast<P*>(din + row * C);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const int v = tx + k * tpr;
        if (v < nvec) {
          P out;
#pragma unroll
          for (int j = 0; j < kPack; ++j) {
            const float xhat = (ToFloat(xv[r][k].v[j]) - mu[r]) * rs[r];
            const float g = ToFloat(dv[r][k].v[j]) * ToFloat(w[k].v[j]);
            float d = rs[r] * (g - mean_g - xhat * mean_gx);
            if (accumulate) d += ToFloat(ov[r][k].v[j]);
            out.v[j] = Round<T>(d);
          }
          dx[v] = out;
        }
      }
    }
  }

  // Fold the rpb row groups into ty == 0, in order ty = 1, 2, ... (rpb > 1 only where
  // tpr < kBwdBlockThreads, see BackwardShape, so this buffer is under 2 * 256 * 8 floats).
  if (rpb > 1) {
    float* comb = smem + 4 * rpb * kRows * wpr;  // [2][tpr * kPack], after the float2 buffers
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      for (int y = 1; y < rpb; ++y) {
        __syncthreads();
        if (ty == y) {
#pragma unroll
          for (int j = 0; j < kPack; ++j) {
            comb[tx * kPack + j] = dw[k][j];
            comb[(tpr + tx) * kPack + j] = db[k][j];
          }
        }
        __syncthreads();
        if (ty == 0) {
#pragma unroll
          for (int j = 0; j < kPack; ++j) {
            dw[k][j] += comb[tx * kPack + j];
            db[k][j] += comb[(tpr + tx) * kPack + j];
          }
        }
      }
    }
  }
  if (ty == 0) {
    float* pdw = partials + blockIdx.x * int64_t{2} * C;
    float* pdb = pdw + C;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int v = tx + k * tpr;
      if (v < nvec) {
#pragma unroll
        for (int j = 0; j < kPack; ++j) {
          pdw[v * kPack + j] = dw[k][j];
          pdb[v * kPack + j] = db[k][j];
        }
      }
    }
  }
}

// partials (G, 2, C) -> dweight, dbias (+=). Block (32, 32): column x of a 32-wide tile of the 2C
// values, lane y sums partials y, y + 32, ...; then y == 0 adds the 32 lane sums in order.
__global__ void __launch_bounds__(1024)
    LayerNormReducePartialsKernel(float* __restrict__ dweight, float* __restrict__ dbias,
                                  const float* __restrict__ partials, int G, int C) {
  __shared__ float tile[32][33];
  const int idx = blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f;
  if (idx < 2 * C) {
    for (int g = threadIdx.y; g < G; g += 32) s += partials[g * int64_t{2} * C + idx];
  }
  tile[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && idx < 2 * C) {
    float t = 0.0f;
    for (int y = 0; y < 32; ++y) t += tile[y][threadIdx.x];
    if (idx < C) {
      dweight[idx] += t;
    } else {
      dbias[idx - C] += t;
    }
  }
}

// Backward launch geometry, a function of (N, C, pack) only.
struct BwdShape {
  int kvec;     // vectors per thread: 1, 2, 4, 8 or 16 (kvec * pack <= 16)
  int rows;     // rows in flight per thread: 4, 2 or 1
  int threads;  // block size bound: 256, 512 or 1024
  int tpr;      // threads per row
  int rpb;   // row groups per block
  int grid;  // blocks = partial sums
};

BwdShape BackwardShape(int64_t N, int64_t C, int pack) {
  const int64_t nvec = C / pack;
  BwdShape s{1, 1, 1024, 32, 1, 1};
  while ((nvec + s.kvec - 1) / s.kvec > 1024) s.kvec *= 2;
  const int64_t per_thread = (nvec + s.kvec - 1) / s.kvec;
  s.tpr = static_cast<int>((per_thread + 31) / 32 * 32);
  // Rows in flight: as many as 128 registers hold (bf16 packs unpack to twice the floats).
  if (s.tpr <= kBwdBlockThreads) {
    s.threads = kBwdBlockThreads;
    s.rows = pack == 8 ? 2 : 4;
  } else if (s.tpr <= 512) {
    s.threads = 512;
  }
  s.rpb = s.tpr >= kBwdBlockThreads ? 1 : kBwdBlockThreads / s.tpr;
  const int64_t rows_per_iter = int64_t{s.rpb} * s.rows;
  s.grid = static_cast<int>(std::min<int64_t>(
      std::max<int64_t>((N + rows_per_iter - 1) / rows_per_iter, 1), kBwdMaxBlocks));
  return s;
}

template <typename T>
int PackFor(int64_t C, std::initializer_list<const void*> ptrs) {
  constexpr int kPack = 16 / sizeof(T);
  if (C % kPack != 0) return 1;
  for (const void* p : ptrs) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return 1;
  }
  return kPack;
}

template <typename T, int kPack>
void LaunchForward(T* out, float* mean, float* rstd, const T* in, const T* weight, const T* bias,
                   int64_t N, int C, float eps, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((N + kFwdWarps - 1) / kFwdWarps);
  const int threads = kFwdWarps * 32;
  const int per_lane = (C / kPack + 31) / 32;  // vectors per lane
#define FP8RT_LN_FWD(KVEC)                                                               \
  LayerNormForwardKernel<T, kPack, KVEC>                                                 \
      <<<blocks, threads, 0, stream>>>(out, mean, rstd, in, weight, bias, N, C, eps)
  // Registers hold kVec * 16 bytes of the row per lane: up to 64 registers.
  if (per_lane <= 1) {
    FP8RT_LN_FWD(1);
  } else if (per_lane <= 2) {
    FP8RT_LN_FWD(2);
  } else if (per_lane <= 4 && kPack * 4 <= 64) {
    FP8RT_LN_FWD(4);
  } else if (per_lane <= 8 && kPack * 8 <= 64) {
    FP8RT_LN_FWD(8);
  } else if (per_lane <= 16 && kPack > 1) {
    FP8RT_LN_FWD(16);
  } else {
    LayerNormForwardWideKernel<T, kPack>
        <<<blocks, threads, 0, stream>>>(out, mean, rstd, in, weight, bias, N, C, eps);
  }
#undef FP8RT_LN_FWD
}

template <typename T, int kPack, int kVec, int kRows, int kThreads>
void LaunchBackwardKernel(const BwdShape& s, T* din, float* partials, const T* dout, const T* in,
                          const T* weight, const float* mean, const float* rstd, int64_t N, int C,
                          bool accumulate, cudaStream_t stream) {
  size_t smem = sizeof(float2) * 2 * s.rpb * kRows * (s.tpr / 32);
  if (s.rpb > 1) smem += sizeof(float) * 2 * s.tpr * kPack;
  LayerNormBackwardKernel<T, kPack, kVec, kRows, kThreads>
      <<<s.grid, dim3(s.tpr, s.rpb), smem, stream>>>(
      din, partials, dout, in, weight, mean, rstd, N, C, accumulate);
}

template <typename T, int kPack>
void LaunchBackward(const BwdShape& s, T* din, float* dweight, float* dbias, float* partials,
                    const T* dout, const T* in, const T* weight, const float* mean,
                    const float* rstd, int64_t N, int C, bool accumulate, cudaStream_t stream) {
  auto launch = [&]<int kVec, int kRows, int kThreads>() {
    LaunchBackwardKernel<T, kPack, kVec, kRows, kThreads>(s, din, partials, dout, in, weight,
                                                          mean, rstd, N, C, accumulate, stream);
  };
  constexpr int kRowsNarrow = kPack == 8 ? 2 : 4;  // BackwardShape's choice for tpr <= 256
  if (s.kvec == 1) {
    if (s.threads == kBwdBlockThreads) {
      launch.template operator()<1, kRowsNarrow, kBwdBlockThreads>();
    } else if (s.threads == 512) {
      launch.template operator()<1, 1, 512>();
    } else {
      launch.template operator()<1, 1, 1024>();
    }
  } else if (s.kvec == 2) {
    launch.template operator()<2, 1, 1024>();
  } else if constexpr (kPack <= 4) {
    if (s.kvec == 4) {
      launch.template operator()<4, 1, 1024>();
    } else if constexpr (kPack == 1) {
      if (s.kvec == 8) {
        launch.template operator()<8, 1, 1024>();
      } else {
        launch.template operator()<16, 1, 1024>();
      }
    }
  }
  const unsigned reduce_blocks = static_cast<unsigned>((2 * C + 31) / 32);
  LayerNormReducePartialsKernel<<<reduce_blocks, dim3(32, 32), 0, stream>>>(dweight, dbias,
                                                                            partials, s.grid, C);
}

}  // namespace

namespace cuda {

size_t LayerNormBackwardScratchBytes(int64_t N, int64_t C) {
  // The scalar layout (pack 1) has the most rows per block, hence the fewest blocks; the largest
  // grid over the possible packs bounds every launch.
  size_t most = 0;
  for (int pack : {1, 4, 8}) {
    if (C % pack != 0) continue;
    most = std::max(most, static_cast<size_t>(BackwardShape(N, C, pack).grid));
  }
  return most * 2 * static_cast<size_t>(C) * sizeof(float);
}

template <typename T>
Status LayerNormForward(T* out, float* mean, float* rstd, const T* in, const T* weight,
                        const T* bias, int64_t N, int64_t C, float eps, cudaStream_t stream) {
  if (N < 0 || C < 1 || C > INT32_MAX / 2) {
    return Status::InvalidArgument(
        StrCat("LayerNormForward: N=", N, " C=", C, ": need N >= 0 and 1 <= C < 2^30"));
  }
  if ((mean == nullptr) != (rstd == nullptr)) {
    return Status::InvalidArgument("LayerNormForward: mean and rstd must be both null or both set");
  }
  if (!(eps >= 0.0f)) {
    return Status::InvalidArgument(StrCat("LayerNormForward: eps=", eps, " must be >= 0"));
  }
  if (N == 0) return Status::Ok();
  if (!out || !in || !weight || !bias) {
    return Status::InvalidArgument("LayerNormForward: out, in, weight and bias must be non-null");
  }
  const int c = static_cast<int>(C);
  if (PackFor<T>(C, {out, in, weight, bias}) > 1) {
    LaunchForward<T, 16 / sizeof(T)>(out, mean, rstd, in, weight, bias, N, c, eps, stream);
  } else {
    LaunchForward<T, 1>(out, mean, rstd, in, weight, bias, N, c, eps, stream);
  }
  FP8RT_CUDA_TRY_LAUNCH("LayerNormForward");
  return Status::Ok();
}

template <typename T>
Status LayerNormBackward(T* din, float* dweight, float* dbias, const T* dout, const T* in,
                         const T* weight, const float* mean, const float* rstd, int64_t N,
                         int64_t C, bool accumulate_din, void* scratch, size_t scratch_bytes,
                         cudaStream_t stream) {
  if (N < 0 || C < 1 || C > kLayerNormBackwardMaxC) {
    return Status::InvalidArgument(StrCat("LayerNormBackward: N=", N, " C=", C,
                                          ": need N >= 0 and 1 <= C <= ", kLayerNormBackwardMaxC));
  }
  if (N == 0) return Status::Ok();
  if (!din || !dweight || !dbias || !dout || !in || !weight || !mean || !rstd) {
    return Status::InvalidArgument(
        "LayerNormBackward: din, dweight, dbias, dout, in, weight, mean and rstd must be non-null");
  }
  const size_t need = LayerNormBackwardScratchBytes(N, C);
  if (scratch == nullptr || scratch_bytes < need ||
      reinterpret_cast<uintptr_t>(scratch) % 16 != 0) {
    return Status::InvalidArgument(StrCat("LayerNormBackward: scratch of ", scratch_bytes,
                                          " bytes; need ", need, " bytes, 16-byte aligned"));
  }
  float* partials = static_cast<float*>(scratch);
  const int c = static_cast<int>(C);
  const int pack = PackFor<T>(C, {din, dout, in, weight});
  const BwdShape s = BackwardShape(N, C, pack);
  if (pack > 1) {
    LaunchBackward<T, 16 / sizeof(T)>(s, din, dweight, dbias, partials, dout, in, weight, mean,
                                      rstd, N, c, accumulate_din, stream);
  } else {
    LaunchBackward<T, 1>(s, din, dweight, dbias, partials, dout, in, weight, mean, rstd, N, c,
                         accumulate_din, stream);
  }
  FP8RT_CUDA_TRY_LAUNCH("LayerNormBackward");
  return Status::Ok();
}

template Status LayerNormForward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, int64_t, int64_t, float, cudaStream_t);
template Status LayerNormForward<bf16>(bf16*, float*, float*, const bf16*, const bf16*,
                                       const bf16*, int64_t, int64_t, float, cudaStream_t);
template Status LayerNormBackward<float>(float*, float*, float*, const float*, const float*,
                                         const float*, const float*, const float*, int64_t,
                                         int64_t, bool, void*, size_t, cudaStream_t);
template Status LayerNormBackward<bf16>(bf16*, float*, float*, const bf16*, const bf16*,
                                        const bf16*, const float*, const float*, int64_t, int64_t,
                                        bool, void*, size_t, cudaStream_t);

}  // namespace cuda
}  // namespace fp8rt
