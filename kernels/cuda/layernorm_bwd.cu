// LayerNorm's backward on the GPU: the forward's row layout (layernorm_fwd.cu), each thread owning
// fixed columns so that it accumulates their dweight/dbias in registers across the rows its block
// visits (rows of 16-byte vectors are copied into shared memory an iteration ahead, wide rows
// loaded into registers a row ahead); per-block partial sums, stored as 16-byte vectors, are then
// added in a fixed order.
#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "common/cuda_check.h"
#include "kernels/cuda/layernorm_device.cuh"
#include "kernels/cuda/vec.cuh"
#include "kernels/layernorm.h"

namespace fp8rt {
namespace {

using cuda_detail::CpAsync16;
using cuda_detail::CpAsyncCommit;
using cuda_detail::CpAsyncWait;
using cuda_detail::LoadStreaming;
using cuda_detail::LoadVector;
using cuda_detail::Pack;
using cuda_detail::PackFor;
using cuda_detail::Repack;
using cuda_detail::StoreStreaming;
using cuda_detail::Unpack;
using cuda_detail::WarpSum;

// The backward's grid is a function of (N, C, pack) only, so the partial sums and the order they
// are added in are too: results do not depend on the device. It is sized for 132-SM Hopper parts
// (kBwdSms times the blocks that fit an SM: one wave); elsewhere it is just more or fewer waves.
// The partials (grid * 2C floats) stay small next to the (N, C) tensors.
constexpr int kBwdSms = 132;

// One row's inputs as thread (tx, ty) sees them.
template <typename T, int kPack, int kVec>
struct BwdRow {
  Pack<T, kPack> x[kVec], dy[kVec], old[kVec];
  float mu, rs;
};

template <typename T, int kPack, int kVec>
__device__ __forceinline__ void LoadBwdRow(BwdRow<T, kPack, kVec>& r, const T* __restrict__ in,
                                           const T* __restrict__ dout, const T* din,
                                           const float* __restrict__ mean,
                                           const float* __restrict__ rstd, int64_t row, int C,
                                           int tx, int tpr, bool accumulate) {
  using P = Pack<T, kPack>;
  r.mu = mean[row];
  r.rs = rstd[row];
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const int v = tx + k * tpr;
    if (v < C / kPack) {
      r.x[k] = LoadStreaming(reinterpret_cast<const P*>(in + row * C) + v);
      r.dy[k] = LoadStreaming(reinterpret_cast<const P*>(dout + row * C) + v);
      if (accumulate) r.old[k] = LoadStreaming(reinterpret_cast<const P*>(din + row * C) + v);
    }
  }
}

// Floats of the backward's row-sum buffers ([2][rpb][kR][wpr] float2, then, with rpb > 1, the
// [2][tpr * kPack] buffer that folds the row groups), rounded up to 16 bytes: kAsync stages
// follow them.
__host__ __device__ constexpr int BwdReduceFloats(int rpb, int rows, int wpr, int tpr, int pack) {
  return (4 * rpb * rows * wpr + (rpb > 1 ? 2 * tpr * pack : 0) + 3) / 4 * 4;
}

// Block shape (tpr, rpb): tpr threads per row (a multiple of 32), rpb row groups of kR rows.
// Thread (tx, ty) owns vectors tx, tx + tpr, ..., tx + tpr (kVec - 1) of rows base + ty * kR + i
// (i < kR), where base starts at blockIdx.x * rpb * kR and steps by gridDim.x * rpb * kR; it
// accumulates their dweight/dbias in registers. All kR rows' loads are in flight together and
// share one barrier for their row sums: the per-row chain (loads, sums, barrier, din) is what
// bounds this kernel, so kR rows per iteration divide its count. With kPrefetch (kR == 1), the
// next row's loads (x, dout and, when accumulating, the old din) are issued before this row's
// math instead. With kAsync (16-byte vectors), the next kStages - 1 iterations' rows are copied
// into shared memory by cp.async while this iteration computes (each thread copies and reads only
// its own vectors, so waiting for its own copies is all the synchronisation needed), keeping
// loads in flight without the registers that kPrefetch would need for kR rows.
template <typename T, int kPack, int kVec, int kThreads, int kMinBlocks, int kR, bool kAhead,
          bool kAsync = false, int kStages = 2, int kTpr = 0>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    LayerNormBackwardKernel(T* __restrict__ din, float* __restrict__ partials,
                            const T* __restrict__ dout, const T* __restrict__ in,
                            const T* __restrict__ weight, const float* __restrict__ mean,
                            const float* __restrict__ rstd, int64_t N, int C, bool accumulate) {
  using P = Pack<T, kPack>;
  static_assert(!kAsync || sizeof(P) == 16, "cp.async copies 16-byte vectors");
  // The 1024-thread shapes have no registers to spare.
  constexpr bool kPrefetch = kThreads < 1024 && kAhead && !kAsync;
  extern __shared__ float smem[];
  // kTpr > 0: the row geometry at compile time (kTpr threads per row, one row group per block).
  static_assert(kTpr == 0 || kTpr == kThreads, "a compile-time row takes the whole block");
  const int tpr = kTpr > 0 ? kTpr : blockDim.x, rpb = kTpr > 0 ? 1 : blockDim.y;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int wpr = tpr / 32, warp = tx / 32, lane = tx % 32;
  const int nvec = C / kPack;
  const float inv_c = 1.0f / C;
  // Row sums of the warps, double-buffered so that one barrier per iteration suffices: a buffer
  // is rewritten two iterations later, after every thread has passed the next barrier.
  float2* red = reinterpret_cast<float2*>(smem);  // [2][rpb][kR][wpr]

  float w[kVec][kPack];
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    if (tx + k * tpr < nvec) {
      Unpack(LoadVector(reinterpret_cast<const P*>(weight) + tx + k * tpr), w[k]);
    }
  }
  float dw[kVec][kPack], db[kVec][kPack];
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
#pragma unroll
    for (int j = 0; j < kPack; ++j) dw[k][j] = db[k][j] = 0.0f;
  }

  int parity = 0;
  const int64_t step = int64_t{gridDim.x} * rpb * kR;
  int64_t base = blockIdx.x * int64_t{rpb} * kR;
  const int64_t first = int64_t{ty} * kR;  // this row group's first row, relative to base
  BwdRow<T, kPack, kVec> cur[kR];
  // kAsync stages, after the row-sum buffers: [2][rpb][kR][x, dout, old din][kVec][tpr] vectors.
  P* const stages = reinterpret_cast<P*>(smem + BwdReduceFloats(rpb, kR, wpr, tpr, kPack));
  auto staged = [&](int stage, int i, int t, int k) -> P* {
    return stages + ((((stage * rpb + ty) * kR + i) * 3 + t) * kVec + k) * tpr + tx;
  };
  // Copies the kR rows of the group starting at row0 into `stage` (one commit group, empty past
  // N).
  auto copy_rows = [&](int stage, int64_t row0) {
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      const int64_t row = row0 + i;
      if (row >= N) continue;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const int v = tx + k * tpr;
        if (v >= nvec) continue;
        CpAsync16(staged(stage, i, 0, k), reinterpret_cast<const P*>(in + row * C) + v);
        CpAsync16(staged(stage, i, 1, k), reinterpret_cast<const P*>(dout + row * C) + v);
        if (accumulate) {
          CpAsync16(staged(stage, i, 2, k), reinterpret_cast<const P*>(din + row * C) + v);
        }
      }
    }
    CpAsyncCommit();
  };
  // Loads the mean and rstd of the kR rows starting at row0 into `rows`.
  auto load_stats = [&](int64_t row0, BwdRow<T, kPack, kVec>* rows) {
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      if (row0 + i < N) {
        rows[i].mu = mean[row0 + i];
        rows[i].rs = rstd[row0 + i];
      }
    }
  };
  int stage = 0;
  if constexpr (kAsync) {
#pragma unroll
    for (int f = 0; f + 1 < kStages; ++f) copy_rows(f, base + f * step + first);
    load_stats(base + first, cur);
  } else {
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      if (base + first + i < N) {
        LoadBwdRow(cur[i], in, dout, din, mean, rstd, base + first + i, C, tx, tpr, accumulate);
      }
    }
  }
  // Every thread runs the same iterations (the barriers); rows past N only skip their math.
  for (; base < N; base += step) {
    BwdRow<T, kPack, kVec> next[kPrefetch || kAsync ? kR : 1];
    if constexpr (kAsync) {
      copy_rows((stage + kStages - 1) % kStages, base + (kStages - 1) * step + first);
      load_stats(base + step + first, next);
      CpAsyncWait<kStages - 1>();  // this iteration's copies (kStages - 1 groups before the last)
#pragma unroll
      for (int i = 0; i < kR; ++i) {
        if (base + first + i >= N) continue;
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          if (tx + k * tpr >= nvec) continue;
          cur[i].x[k] = *staged(stage, i, 0, k);
          cur[i].dy[k] = *staged(stage, i, 1, k);
          if (accumulate) cur[i].old[k] = *staged(stage, i, 2, k);
        }
      }
    }
    if constexpr (kPrefetch) {
#pragma unroll
      for (int i = 0; i < kR; ++i) {
        if (base + step + first + i < N) {
          LoadBwdRow(next[i], in, dout, din, mean, rstd, base + step + first + i, C, tx, tpr,
                     accumulate);
        }
      }
    }
    float s_g[kR], s_gx[kR];
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      s_g[i] = s_gx[i] = 0.0f;
      if (base + first + i >= N) continue;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        if (tx + k * tpr < nvec) {
          float xf[kPack], df[kPack];
          Unpack(cur[i].x[k], xf);
          Unpack(cur[i].dy[k], df);
#pragma unroll
          for (int j = 0; j < kPack; ++j) {
            const float xhat = (xf[j] - cur[i].mu) * cur[i].rs;
            const float g = df[j] * w[k][j];
            s_g[i] += g;
            s_gx[i] = fmaf(g, xhat, s_gx[i]);
            dw[k][j] = fmaf(df[j], xhat, dw[k][j]);
            db[k][j] += df[j];
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      s_g[i] = WarpSum(s_g[i]);
      s_gx[i] = WarpSum(s_gx[i]);
    }
    if (wpr > 1) {
      float2* buf = red + (parity * rpb + ty) * kR * wpr;
      if (lane == 0) {
#pragma unroll
        for (int i = 0; i < kR; ++i) buf[i * wpr + warp] = make_float2(s_g[i], s_gx[i]);
      }
      __syncthreads();
#pragma unroll
      for (int i = 0; i < kR; ++i) {
        s_g[i] = s_gx[i] = 0.0f;
        for (int q = 0; q < wpr; ++q) {
          s_g[i] += buf[i * wpr + q].x;
          s_gx[i] += buf[i * wpr + q].y;
        }
      }
      parity ^= 1;
    }
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      const int64_t row = base + first + i;
      if (row >= N) continue;
      const float mean_g = s_g[i] * inv_c, mean_gx = s_gx[i] * inv_c;
      P* dx = reinterpret_cast<P*>(din + row * C);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const int v = tx + k * tpr;
        if (v < nvec) {
          float xf[kPack], df[kPack], d[kPack], old[kPack];
          Unpack(cur[i].x[k], xf);
          Unpack(cur[i].dy[k], df);
          if (accumulate) Unpack(cur[i].old[k], old);
#pragma unroll
          for (int j = 0; j < kPack; ++j) {
            const float xhat = (xf[j] - cur[i].mu) * cur[i].rs;
            d[j] = cur[i].rs * (df[j] * w[k][j] - mean_g - xhat * mean_gx);
            if (accumulate) d[j] += old[j];
          }
          StoreStreaming(dx + v, Repack<T, kPack>(d));
        }
      }
    }
    if constexpr (kAsync) {
      stage = (stage + 1) % kStages;
#pragma unroll
      for (int i = 0; i < kR; ++i) cur[i].mu = next[i].mu, cur[i].rs = next[i].rs;
    } else if constexpr (kPrefetch) {
#pragma unroll
      for (int i = 0; i < kR; ++i) cur[i] = next[i];
    } else {
#pragma unroll
      for (int i = 0; i < kR; ++i) {
        if (base + step + first + i < N) {
          LoadBwdRow(cur[i], in, dout, din, mean, rstd, base + step + first + i, C, tx, tpr,
                     accumulate);
        }
      }
    }
  }

  if constexpr (kAsync) CpAsyncWait<0>();  // the last groups, which copied nothing (rows past N)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");  // the partials' reduction
#endif
  // Fold the rpb row groups into ty == 0, in order ty = 1, 2, ... (rpb > 1 only where tpr < 256,
  // see BackwardShape, so this buffer is under 2 * 256 * 8 floats).
  if (rpb > 1) {
    float* comb = smem + 4 * rpb * kR * wpr;  // [2][tpr * kPack], after the float2 buffers
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
  // The partials leave in 16-byte stores where a vector holds 4 or more floats: storing them one
  // float at a time (a warp's store then touches 32 sectors for 4 bytes each) cost the whole
  // backward 10 points of copy bandwidth at 8192 x 2048 bf16 (about 64% -> 74% on H200).
  if (ty == 0) {
    float* pdw = partials + blockIdx.x * int64_t{2} * C;
    float* pdb = pdw + C;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int v = tx + k * tpr;
      if (v < nvec) {
        if constexpr (kPack % 4 == 0) {
#pragma unroll
          for (int j = 0; j < kPack; j += 4) {
            *reinterpret_cast<float4*>(pdw + v * kPack + j) =
                make_float4(dw[k][j], dw[k][j + 1], dw[k][j + 2], dw[k][j + 3]);
            *reinterpret_cast<float4*>(pdb + v * kPack + j) =
                make_float4(db[k][j], db[k][j + 1], db[k][j + 2], db[k][j + 3]);
          }
        } else {
#pragma unroll
          for (int j = 0; j < kPack; ++j) {
            pdw[v * kPack + j] = dw[k][j];
            pdb[v * kPack + j] = db[k][j];
          }
        }
      }
    }
  }
}

// partials (G, 2, C) -> dweight, dbias (+=). Block (32, 32): column x of a 32-wide tile of the 2C
// values, lane y sums partials y, y + 32, ... (eight loads in flight before the first add); then
// warp y adds the 32 lane sums of column y with a butterfly. A fixed order: bit-identical results.
__global__ void __launch_bounds__(1024)
    LayerNormReducePartialsKernel(float* __restrict__ dweight, float* __restrict__ dbias,
                                  const float* __restrict__ partials, int G, int C) {
  __shared__ float tile[32][33];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Launched early (programmatic dependent launch): wait for the partials to be complete.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  const int idx = blockIdx.x * 32 + threadIdx.x;
  const int64_t stride = int64_t{2} * C;
  float s = 0.0f;
  if (idx < 2 * C) {
    const float* p = partials + idx;
    int g = threadIdx.y;
    for (; g + 7 * 32 < G; g += 8 * 32) {
      float v[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = p[(g + 32 * i) * stride];
#pragma unroll
      for (int i = 0; i < 8; ++i) s += v[i];
    }
    for (; g < G; g += 32) s += p[g * stride];
  }
  tile[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  const int col = blockIdx.x * 32 + threadIdx.y;
  const float t = WarpSum(tile[threadIdx.x][threadIdx.y]);
  if (threadIdx.x == 0 && col < 2 * C) {
    if (col < C) {
      dweight[col] += t;
    } else {
      dbias[col - C] += t;
    }
  }
}

// Backward launch geometry, a function of (N, C, pack) only.
struct BwdShape {
  int kvec;        // vectors per thread: 1, 2, 4, 8 or 16, kvec * pack <= 16
  int threads;     // block size bound: 256 or 1024
  int min_blocks;  // resident blocks per SM the kernel is compiled for
  int tpr;         // threads per row
  int rpb;         // row groups per block
  int rows;        // rows per row group and iteration (kR)
  int grid;        // blocks = partial sums
};
// Where each thread holds one 16-byte vector of a row (kvec * pack * element size <= 16 bytes,
// e.g. C = 2048 in bf16), an iteration takes three rows. Measured on H200 at 8192 x 2048 bf16, %
// of copy, in a copy of this kernel with the partials stored as 16-byte vectors (2026-11-22 09:03
// UTC, one run): through two cp.async stages, 3 rows 76.0-76.5% against 73.1-73.7% for 4 rows,
// 74.4-74.8% for 2 rows (contiguous row ranges per block) and 73.5-74.8% for three stages of 3
// rows. That copy also put an L2 evict-first hint on the x and dout copies (worth 0.5-1.5 points);
// here ptxas 13.0 compiled the hinted cp.async into an illegal instruction, so it is left out.
// Before the vector stores every variant was 10 points lower and 3 rows led the same way (four
// stages of 2 rows 57.9%, 8 rows 47.7%). In registers instead: one row with the next loaded ahead
// 47%, two rows with the next two loaded ahead 44%. Wider shapes have no registers for more and
// run one row per iteration with the next row loaded ahead.
constexpr int kBwdRows = 3;
constexpr bool BwdManyRows(int kvec, int pack, int elem) {
  return kvec * pack * elem <= 16 && kvec <= 4;
}

BwdShape BackwardShape(int64_t N, int64_t C, int pack, int elem) {
  const int64_t nvec = C / pack;
  BwdShape s{1, 256, 3, 32, 1, 1, 1};
  // Rows of at most 256 threads while the accumulators (2 * kvec * pack floats) fit; up to 1024
  // threads per row beyond (C > 4096; C <= 16384 keeps kvec * pack <= 16).
  while ((nvec + s.kvec - 1) / s.kvec > 256 && s.kvec * pack < 16) s.kvec *= 2;
  while ((nvec + s.kvec - 1) / s.kvec > 1024) s.kvec *= 2;
  s.tpr = static_cast<int>(((nvec + s.kvec - 1) / s.kvec + 31) / 32 * 32);
  if (s.tpr <= 256) {
    s.rpb = 256 / s.tpr;
    if (BwdManyRows(s.kvec, pack, elem)) {
      s.rows = kBwdRows;
      s.min_blocks = 2;
    } else {
      s.min_blocks = s.kvec * pack <= 8 ? 3 : 2;
    }
  } else {
    s.threads = 1024;
    s.min_blocks = 1;
  }
  const int64_t per_block = int64_t{s.rpb} * s.rows;
  s.grid = static_cast<int>(std::min<int64_t>(
      std::max<int64_t>((N + per_block - 1) / per_block, 1), int64_t{kBwdSms} * s.min_blocks));
  return s;
}

// Whether the partials' reduction may be launched early (programmatic dependent launch): only
// where the code loaded for it on this device is sm_90 or later, i.e. contains its
// griddepcontrol.wait (a binary with sm_80 code only, JIT-run on Hopper, must not). Per device.
bool ReduceMayLaunchEarly() {
  static int state[64] = {};  // 0 unknown, 1 yes, 2 no
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  if (state[dev] == 0) {
    cudaFuncAttributes a{};
    const bool ok = cudaFuncGetAttributes(&a, LayerNormReducePartialsKernel) == cudaSuccess &&
                    a.binaryVersion >= 90;
    state[dev] = ok ? 1 : 2;
  }
  return state[dev] == 1;
}

template <typename T, int kPack, int kVec, int kThreads, int kMinBlocks, int kR, bool kAhead,
          bool kAsync = false, int kStages = 2, int kTpr = 0>
void LaunchBackwardKernel(const BwdShape& s, T* din, float* partials, const T* dout, const T* in,
                          const T* weight, const float* mean, const float* rstd, int64_t N, int C,
                          bool accumulate, cudaStream_t stream) {
  auto* kernel = LayerNormBackwardKernel<T, kPack, kVec, kThreads, kMinBlocks, kR, kAhead, kAsync,
                                         kStages, kTpr>;
  size_t smem = sizeof(float) * BwdReduceFloats(s.rpb, kR, s.tpr / 32, s.tpr, kPack);
  if constexpr (kAsync) {
    // kStages stages of kR rows x (x, dout, old din) x kVec vectors per thread: 72 KiB at most
    // with two stages of three rows (tpr * rpb * kVec <= 256), within every sm_80+ part's opt-in
    // limit (99 KiB on sm_86/sm_89).
    static_assert(kStages * kR * 3 * 4096 + 9 * 1024 <= 99 * 1024, "stages exceed 99 KiB");
    smem += sizeof(Pack<T, kPack>) * kStages * s.rpb * kR * 3 * kVec * s.tpr;
    static const cudaError_t opt_in =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 99 * 1024);
    (void)opt_in;  // a failure shows as the launch's error
  }
  kernel<<<s.grid, dim3(s.tpr, s.rpb), smem, stream>>>(din, partials, dout, in, weight, mean, rstd,
                                                       N, C, accumulate);
}

template <typename T, int kPack>
void LaunchBackward(const BwdShape& s, T* din, float* dweight, float* dbias, float* partials,
                    const T* dout, const T* in, const T* weight, const float* mean,
                    const float* rstd, int64_t N, int C, bool accumulate, cudaStream_t stream) {
  // One instantiation per (kvec, threads) that BackwardShape can pick for this pack.
  auto launch = [&]<int kVec>() {
    if constexpr (kVec * kPack <= 16) {
      if (s.threads == 256 && s.rows == kBwdRows) {
        if constexpr (BwdManyRows(kVec, kPack, sizeof(T))) {
          // 16-byte vectors come through shared memory (cp.async), others straight to registers.
          // Rows of 256 threads (e.g. C = 2048 in bf16, 1024 in fp32, 1001 from scalar loads) get
          // their geometry at compile time: 73.9% of copy against 71.7% read from blockDim at
          // 8192 x 2048 bf16 (H200).
          constexpr bool kAsync = kPack * sizeof(T) == 16;
          if (s.tpr == 256) {
            LaunchBackwardKernel<T, kPack, kVec, 256, 2, kBwdRows, false, kAsync, 2, 256>(
                s, din, partials, dout, in, weight, mean, rstd, N, C, accumulate, stream);
          } else {
            LaunchBackwardKernel<T, kPack, kVec, 256, 2, kBwdRows, false, kAsync>(
                s, din, partials, dout, in, weight, mean, rstd, N, C, accumulate, stream);
          }
        }
      } else if (s.threads == 256) {
        LaunchBackwardKernel<T, kPack, kVec, 256, (kVec * kPack <= 8 ? 3 : 2), 1, true>(
            s, din, partials, dout, in, weight, mean, rstd, N, C, accumulate, stream);
      } else if constexpr (kVec * kPack == 16) {
        LaunchBackwardKernel<T, kPack, kVec, 1024, 1, 1, true>(
            s, din, partials, dout, in, weight, mean, rstd, N, C, accumulate, stream);
      }
    }
  };
  switch (s.kvec) {
    case 1:
      launch.template operator()<1>();
      break;
    case 2:
      launch.template operator()<2>();
      break;
    case 4:
      launch.template operator()<4>();
      break;
    case 8:
      launch.template operator()<8>();
      break;
    default:
      launch.template operator()<16>();
      break;
  }
  // On sm_90 the reduction is launched while the backward drains (programmatic dependent launch:
  // it waits for the backward's completion in the kernel), hiding its launch latency. Measured on
  // H200 at 8192 x 2048 bf16: about 1.5 points of copy. The reduction still costs about 4 points:
  // in a copy of the kernel (with an L2 hint this one lacks) 80.2% of copy without it, a timing
  // experiment, against 75.7-76.5% with it; reducing in the same kernel after a grid-wide barrier
  // (cooperative launch) measured 72.4-73.1% there.
  const unsigned reduce_blocks = static_cast<unsigned>((2 * C + 31) / 32);
  if (ReduceMayLaunchEarly()) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(reduce_blocks);
    config.blockDim = dim3(32, 32);
    config.stream = stream;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attr;
    config.numAttrs = 1;
    // A failure shows in the caller's launch check (cudaGetLastError).
    (void)cudaLaunchKernelEx(&config, LayerNormReducePartialsKernel, dweight, dbias,
                             static_cast<const float*>(partials), s.grid, C);
  } else {
    LayerNormReducePartialsKernel<<<reduce_blocks, dim3(32, 32), 0, stream>>>(dweight, dbias,
                                                                              partials, s.grid, C);
  }
}

}  // namespace

namespace cuda {

size_t LayerNormBackwardScratchBytes(int64_t N, int64_t C) {
  // The largest grid over the packs a launch can pick (it depends on the pointers' alignment).
  size_t most = 0;
  for (int pack : {1, 4, 8}) {
    if (C % pack != 0) continue;
    for (int elem : {2, 4}) {
      most = std::max(most, static_cast<size_t>(BackwardShape(N, C, pack, elem).grid));
    }
  }
  return most * 2 * static_cast<size_t>(C) * sizeof(float);
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
  const BwdShape s = BackwardShape(N, C, pack, sizeof(T));
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

template Status LayerNormBackward<float>(float*, float*, float*, const float*, const float*,
                                         const float*, const float*, const float*, int64_t, int64_t,
                                         bool, void*, size_t, cudaStream_t);
template Status LayerNormBackward<bf16>(bf16*, float*, float*, const bf16*, const bf16*,
                                        const bf16*, const float*, const float*, int64_t, int64_t,
                                        bool, void*, size_t, cudaStream_t);

}  // namespace cuda
}  // namespace fp8rt
