// Flash-style causal attention for BF16 (FlashAttention-2 algorithm, mma.sync m16n8k16 tensor-core
// instructions, ldmatrix, cp.async double buffering). Reads q, k, v straight out of the fused QKV
// activation and writes the output in (B, T, NH, HS); saves only the log-sum-exp per query, never
// the (T, T) probabilities. The backward is two kernels, neither with atomics, so it is
// deterministic: one per key tile (dK, dV), one per query tile (dQ), each recomputing the
// probabilities from the saved log-sum-exp.
//
// Fragment layouts (PTX ISA, "mma.m16n8k16", bf16): with g = lane / 4 and c = lane % 4,
//   A (16 x 16, row-major):  a0 (g, 2c..2c+1)  a1 (g+8, 2c..)  a2 (g, 2c+8..)  a3 (g+8, 2c+8..)
//   B (16 x 8, k x n):       b0 (k 2c..2c+1, n g)  b1 (k 2c+8.., n g)
//   C (16 x 8, fp32):        c0,c1 (g, 2c..2c+1)   c2,c3 (g+8, 2c..2c+1)
// so the accumulator of S (16 x 16 from two n-tiles) is already the A fragment of P for the next
// product once packed to bf16. Shared-memory tiles are row-major with rows padded by 8 elements
// (16 bytes), which makes every ldmatrix phase hit 32 distinct banks.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/attention.h"
#include "kernels/cuda/vec.cuh"

namespace fp8rt {
namespace {

using E = __nv_bfloat16;
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kWarpRows = 16;  // each warp owns 16 rows (queries or keys) of its block's tile

using cuda_detail::CpAsync16;
using cuda_detail::CpAsyncCommit;
using cuda_detail::CpAsyncWait;
using cuda_detail::SmemAddr;

__device__ __forceinline__ void Ldsm4(uint32_t (&r)[4], const E* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}
__device__ __forceinline__ void Ldsm4T(uint32_t (&r)[4], const E* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}

// d += a (16 x 16) * b (16 x 8), FP32 accumulation.
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // lo in the low half: the lower column
  return *reinterpret_cast<uint32_t*>(&v);
}

// Addresses for ldmatrix.x4 within a row-major tile of pitch P elements:
// the A fragment of rows [m0, m0+16) x cols [k0, k0+16);
template <int P>
__device__ __forceinline__ const E* AFrag(const E* tile, int m0, int k0, int lane) {
  return tile + (m0 + (lane & 15)) * P + k0 + (lane >> 4) * 8;
}
// the B fragments of two n-tiles [n0, n0+16) over k [k0, k0+16) from a tile stored [n][k]
// (r0, r1: n-tile n0; r2, r3: n-tile n0+8), for Ldsm4;
template <int P>
__device__ __forceinline__ const E* BFragNK(const E* tile, int n0, int k0, int lane) {
  return tile + (n0 + (lane & 7) + (lane >> 4) * 8) * P + k0 + ((lane >> 3) & 1) * 8;
}
// the same from a tile stored [k][n], for Ldsm4T.
template <int P>
__device__ __forceinline__ const E* BFragKN(const E* tile, int k0, int n0, int lane) {
  return tile + (k0 + (lane & 15)) * P + n0 + (lane >> 4) * 8;
}

// Loads ROWS rows of D elements (row r from src + r * pitch) into a tile of pitch P with NT
// threads; rows at or past `valid_rows` are zero-filled.
template <int D, int P, int ROWS, int NT>
__device__ __forceinline__ void LoadTile(E* tile, const E* src, int64_t pitch, int valid_rows) {
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  for (int i = threadIdx.x; i < ROWS * kChunks; i += NT) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const bool ok = r < valid_rows;
    CpAsync16(tile + r * P + c, ok ? src + r * pitch + c : src, ok);
  }
}

// Sum over the four lanes of a quad (the lanes sharing a fragment row).
__device__ __forceinline__ float QuadSum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
__device__ __forceinline__ float QuadMax(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

// Double-buffered key and value tiles of Bc rows (stages 0 and 1 of sK, sV): starts loading tile
// j + 1, when there is one, into the other stage and waits until tile j has landed. The caller
// then syncs the block.
template <int D, int P, int Bc, int NT>
__device__ __forceinline__ void NextKeyValueTile(E* sK, E* sV, const E* base, int64_t pitch, int C,
                                                 int T, int j, int n_kv) {
  if (j + 1 < n_kv) {
    const int stage = (j + 1) & 1, k0 = (j + 1) * Bc;
    LoadTile<D, P, Bc, NT>(sK + stage * Bc * P, base + k0 * pitch + C, pitch, T - k0);
    LoadTile<D, P, Bc, NT>(sV + stage * Bc * P, base + k0 * pitch + 2 * C, pitch, T - k0);
    CpAsyncCommit();
    CpAsyncWait<1>();
  } else {
    CpAsyncWait<0>();
  }
}

// acc (16 x NC) += A (rows [m0, m0+16) of a_tile) B^T (rows [0, NC) of b_tile), both tiles stored
// [row][k] with k in [0, D): S = Q K^T, dP = dO V^T and their transposes.
template <int D, int P, int NC>
__device__ __forceinline__ void MmaRowsByRows(float (&acc)[NC / 8][4], const E* a_tile, int m0,
                                              const E* b_tile, int lane) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4];
    Ldsm4(a, AFrag<P>(a_tile, m0, kk * 16, lane));
#pragma unroll
    for (int np = 0; np < NC / 16; ++np) {
      uint32_t bfr[4];
      Ldsm4(bfr, BFragNK<P>(b_tile, np * 16, kk * 16, lane));
      Mma(acc[2 * np], a, bfr[0], bfr[1]);
      Mma(acc[2 * np + 1], a, bfr[2], bfr[3]);
    }
  }
}

// acc (16 x D) += X (16 x KC, the C fragments of an earlier product, rounded to bf16) times rows
// [0, KC) of tile (stored [k][n]): O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K.
template <int D, int P, int KC>
__device__ __forceinline__ void MmaFragsByTile(float (&acc)[D / 8][4], const float (&x)[KC / 8][4],
                                               const E* tile, int lane) {
#pragma unroll
  for (int kk = 0; kk < KC / 16; ++kk) {
    const uint32_t a[4] = {PackBf16(x[2 * kk][0], x[2 * kk][1]), PackBf16(x[2 * kk][2], x[2 * kk][3]),
                           PackBf16(x[2 * kk + 1][0], x[2 * kk + 1][1]),
                           PackBf16(x[2 * kk + 1][2], x[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t bfr[4];
      Ldsm4T(bfr, BFragKN<P>(tile, kk * 16, dp * 16, lane));
      Mma(acc[2 * dp], a, bfr[0], bfr[1]);
      Mma(acc[2 * dp + 1], a, bfr[2], bfr[3]);
    }
  }
}

// Stores row r (0: the fragment's row g, 1: row g + 8) of a 16 x D accumulator, times mult, as bf16
// at dst (this lane's first column already added).
template <int D>
__device__ __forceinline__ void StoreRow(E* dst, const float (&acc)[D / 8][4], int r, float mult) {
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    *reinterpret_cast<__nv_bfloat162*>(dst + dt * 8) =
        __floats2bfloat162_rn(acc[dt][2 * r] * mult, acc[dt][2 * r + 1] * mult);
  }
}

// ---------------------------------------------------------------------------------------------
// Forward. W warps own 16 W query rows; grid (ceil(T / 16W), B * NH); the heaviest query tiles
// (last rows, most keys) start first. Its products are written out here rather than through
// MmaRowsByRows / MmaFragsByTile / NextKeyValueTile as in the backward: with the helpers the
// HS-128 forward measured 10% slower on H200 (0.382 against 0.347 ms at GPT-1.3B's shape).
template <int D, int W>
__global__ void __launch_bounds__(32 * W)
    FlashForwardKernel(E* __restrict__ out, float* __restrict__ lse, const E* __restrict__ qkv,
                       int T, int NH, float scale_log2) {
  constexpr int P = D + 8, Bc = 64, kTileRows = 16 * W, kThreads = 32 * W;
  extern __shared__ __align__(16) unsigned char smem[];
  E* sQ = reinterpret_cast<E*>(smem);
  E* sK = sQ + kTileRows * P;  // 2 stages
  E* sV = sK + 2 * Bc * P;     // 2 stages

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int qt = gridDim.x - 1 - blockIdx.x;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int C = NH * D;
  const int64_t pitch = 3 * int64_t{C};
  const E* base = qkv + int64_t{b} * T * pitch + int64_t{h} * D;
  const int q0 = qt * kTileRows;
  const int n_kv = (std::min(T, q0 + kTileRows) + Bc - 1) / Bc;

  LoadTile<D, P, kTileRows, kThreads>(sQ, base + q0 * pitch, pitch, T - q0);
  LoadTile<D, P, Bc, kThreads>(sK, base + C, pitch, T);
  LoadTile<D, P, Bc, kThreads>(sV, base + 2 * C, pitch, T);
  CpAsyncCommit();

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int row0 = q0 + warp * kWarpRows + (lane >> 2);  // this thread's rows: row0, row0 + 8

  for (int j = 0; j < n_kv; ++j) {
    const int stage = j & 1;
    if (j + 1 < n_kv) {
      const int k0 = (j + 1) * Bc;
      LoadTile<D, P, Bc, kThreads>(sK + (stage ^ 1) * Bc * P, base + k0 * pitch + C, pitch, T - k0);
      LoadTile<D, P, Bc, kThreads>(sV + (stage ^ 1) * Bc * P, base + k0 * pitch + 2 * C, pitch, T - k0);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const E* k_tile = sK + stage * Bc * P;
    const E* v_tile = sV + stage * Bc * P;

    // S = Q K^T for this warp's 16 rows x 64 keys. (Keeping the Q fragments in registers across
    // the key tiles instead of reloading them measured 16% slower at HS 128 on H200: occupancy.)
    float s[Bc / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      Ldsm4(a, AFrag<P>(sQ, warp * kWarpRows, kk * 16, lane));
#pragma unroll
      for (int np = 0; np < Bc / 16; ++np) {
        uint32_t bfr[4];
        Ldsm4(bfr, BFragNK<P>(k_tile, np * 16, kk * 16, lane));
        Mma(s[2 * np], a, bfr[0], bfr[1]);
        Mma(s[2 * np + 1], a, bfr[2], bfr[3]);
      }
    }
    // Scale into the log2 domain; mask keys after the query where the tile crosses the diagonal.
    const bool diag = j * Bc + Bc - 1 > q0;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < Bc / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = j * Bc + nt * 8 + (lane & 3) * 2 + (e & 1);
        const int row = row0 + (e >> 1) * 8;
        float v = s[nt][e] * scale_log2;
        if (diag && key > row) v = -INFINITY;
        s[nt][e] = v;
        mx[e >> 1] = fmaxf(mx[e >> 1], v);
      }
    }
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[r], QuadMax(mx[r]));  // finite: key j*Bc <= row always
      corr[r] = exp2f(m[r] - m_new);
      m[r] = m_new;
      l[r] *= corr[r];
    }
#pragma unroll
    for (int nt = 0; nt < Bc / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(s[nt][e] - m[e >> 1]);
        s[nt][e] = p;
        l[e >> 1] += p;
      }
    }
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][0] *= corr[0], o[dt][1] *= corr[0];
      o[dt][2] *= corr[1], o[dt][3] *= corr[1];
    }
    // O += P V.
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk) {
      const uint32_t a[4] = {PackBf16(s[2 * kk][0], s[2 * kk][1]),
                             PackBf16(s[2 * kk][2], s[2 * kk][3]),
                             PackBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             PackBf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t bfr[4];
        Ldsm4T(bfr, BFragKN<P>(v_tile, kk * 16, dp * 16, lane));
        Mma(o[2 * dp], a, bfr[0], bfr[1]);
        Mma(o[2 * dp + 1], a, bfr[2], bfr[3]);
      }
    }
    __syncthreads();  // the next iteration's loads overwrite this stage
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + r * 8;
    const float sum = QuadSum(l[r]);
    if (row >= T) continue;
    const float inv = 1.0f / sum;
    E* dst = out + (int64_t{b} * T + row) * C + int64_t{h} * D + (lane & 3) * 2;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      *reinterpret_cast<__nv_bfloat162*>(dst + dt * 8) =
          __floats2bfloat162_rn(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
    }
    if ((lane & 3) == 0) lse[int64_t{bh} * T + row] = m[r] + log2f(sum);
  }
}

// ---------------------------------------------------------------------------------------------
// Backward, step 1: delta[b, h, t] = sum_d dout[b, t, h, d] * out[b, t, h, d]. One warp per row.
template <int D>
__global__ void FlashDeltaKernel(float* __restrict__ delta, const E* __restrict__ dout,
                                 const E* __restrict__ out, int B, int T, int NH) {
  const int64_t rows = int64_t{B} * NH * T;
  const int lane = threadIdx.x & 31;
  for (int64_t r = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; r < rows;
       r += int64_t{gridDim.x} * blockDim.x / 32) {
    const int64_t t = r % T, bh = r / T, b = bh / NH, h = bh % NH;
    const int64_t off = (b * T + t) * NH * D + h * D;
    float acc = 0.f;
    for (int d = lane * 2; d < D; d += 64) {
      const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(dout + off + d));
      const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(out + off + d));
      acc += x.x * y.x + x.y * y.y;
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) delta[r] = acc;
  }
}

// Step 2: dK, dV for one tile of 16 W keys, looping over the query tiles (Br rows) at or after it.
// Grid (ceil(T / 16W), B * NH); warp w owns keys [k0 + 16w, k0 + 16w + 16).
template <int D, int W, int Br>
__global__ void __launch_bounds__(32 * W)
    FlashBackwardKVKernel(E* __restrict__ dqkv, const E* __restrict__ dout,
                          const E* __restrict__ qkv, const float* __restrict__ lse,
                          const float* __restrict__ delta, int T, int NH, float scale,
                          float scale_log2) {
  constexpr int P = D + 8, kTileRows = 16 * W, kThreads = 32 * W;
  extern __shared__ __align__(16) unsigned char smem[];
  E* sK = reinterpret_cast<E*>(smem);
  E* sV = sK + kTileRows * P;
  E* sQ = sV + kTileRows * P;   // 2 stages
  E* sdO = sQ + 2 * Br * P;     // 2 stages
  float* sL = reinterpret_cast<float*>(sdO + 2 * Br * P);  // 2 stages of lse
  float* sD = sL + 2 * Br;                                  // 2 stages of delta

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kt = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int C = NH * D;
  const int64_t pitch = 3 * int64_t{C};
  const E* base = qkv + int64_t{b} * T * pitch + int64_t{h} * D;
  const E* dbase = dout + int64_t{b} * T * C + int64_t{h} * D;
  const float* lse_row = lse + int64_t{bh} * T;
  const float* delta_row = delta + int64_t{bh} * T;
  const int k0 = kt * kTileRows;
  const int i_begin = k0 / Br, i_end = (T + Br - 1) / Br;

  auto load_q = [&](int i, int stage) {
    const int q0 = i * Br;
    LoadTile<D, P, Br, kThreads>(sQ + stage * Br * P, base + q0 * pitch, pitch, T - q0);
    LoadTile<D, P, Br, kThreads>(sdO + stage * Br * P, dbase + int64_t{q0} * C, C, T - q0);
    for (int r = threadIdx.x; r < Br; r += kThreads) {
      const bool ok = q0 + r < T;
      sL[stage * Br + r] = ok ? lse_row[q0 + r] : 0.f;
      sD[stage * Br + r] = ok ? delta_row[q0 + r] : 0.f;
    }
  };
  LoadTile<D, P, kTileRows, kThreads>(sK, base + k0 * pitch + C, pitch, T - k0);
  LoadTile<D, P, kTileRows, kThreads>(sV, base + k0 * pitch + 2 * C, pitch, T - k0);
  load_q(i_begin, 0);
  CpAsyncCommit();

  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  const int key0 = k0 + warp * kWarpRows + (lane >> 2);  // this thread's keys: key0, key0 + 8

  for (int i = i_begin; i < i_end; ++i) {
    const int stage = (i - i_begin) & 1;
    if (i + 1 < i_end) {
      load_q(i + 1, stage ^ 1);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const E* q_tile = sQ + stage * Br * P;
    const E* do_tile = sdO + stage * Br * P;
    const float* l_tile = sL + stage * Br;
    const float* d_tile = sD + stage * Br;
    const int q0 = i * Br;

    // S^T = K Q^T and dP^T = V dO^T, 16 keys x Br queries.
    float s[Br / 8][4] = {}, dp[Br / 8][4] = {};
    MmaRowsByRows<D, P, Br>(s, sK, warp * kWarpRows, q_tile, lane);
    MmaRowsByRows<D, P, Br>(dp, sV, warp * kWarpRows, do_tile, lane);
    // P^T = exp2(S^T * scale_log2 - lse), zero where the query precedes the key or is past T;
    // dS^T = P^T (dP^T - delta).
    const bool edge = q0 < k0 + kTileRows - 1 || q0 + Br > T;
#pragma unroll
    for (int nt = 0; nt < Br / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qc = nt * 8 + (lane & 3) * 2 + (e & 1);
        const int key = key0 + (e >> 1) * 8;
        float p = exp2f(s[nt][e] * scale_log2 - l_tile[qc]);
        if (edge && (q0 + qc < key || q0 + qc >= T)) p = 0.f;
        s[nt][e] = p;
        dp[nt][e] = p * (dp[nt][e] - d_tile[qc]);
      }
    }
    // dV += P^T dO, dK += dS^T Q (k = queries).
    MmaFragsByTile<D, P, Br>(dv, s, do_tile, lane);
    MmaFragsByTile<D, P, Br>(dk, dp, q_tile, lane);
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + r * 8;
    if (key >= T) continue;
    E* dst = dqkv + (int64_t{b} * T + key) * pitch + int64_t{h} * D + (lane & 3) * 2;
    StoreRow<D>(dst + C, dk, r, scale);
    StoreRow<D>(dst + 2 * C, dv, r, 1.0f);
  }
}

// Step 3: dQ for one tile of 16 W queries, looping over the key tiles (Bc rows) up to the
// diagonal. Grid (ceil(T / 16W), B * NH), heaviest tiles first; warp w owns queries
// [q0 + 16w, +16).
template <int D, int W, int Bc>
__global__ void __launch_bounds__(32 * W)
    FlashBackwardQKernel(E* __restrict__ dqkv, const E* __restrict__ dout,
                         const E* __restrict__ qkv, const float* __restrict__ lse,
                         const float* __restrict__ delta, int T, int NH, float scale,
                         float scale_log2) {
  constexpr int P = D + 8, kTileRows = 16 * W, kThreads = 32 * W;
  extern __shared__ __align__(16) unsigned char smem[];
  E* sQ = reinterpret_cast<E*>(smem);
  E* sdO = sQ + kTileRows * P;
  E* sK = sdO + kTileRows * P;  // 2 stages
  E* sV = sK + 2 * Bc * P;      // 2 stages

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int qt = gridDim.x - 1 - blockIdx.x;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int C = NH * D;
  const int64_t pitch = 3 * int64_t{C};
  const E* base = qkv + int64_t{b} * T * pitch + int64_t{h} * D;
  const int q0 = qt * kTileRows;
  const int n_kv = (std::min(T, q0 + kTileRows) + Bc - 1) / Bc;

  LoadTile<D, P, kTileRows, kThreads>(sQ, base + q0 * pitch, pitch, T - q0);
  LoadTile<D, P, kTileRows, kThreads>(sdO, dout + (int64_t{b} * T + q0) * C + int64_t{h} * D, C, T - q0);
  LoadTile<D, P, Bc, kThreads>(sK, base + C, pitch, T);
  LoadTile<D, P, Bc, kThreads>(sV, base + 2 * C, pitch, T);
  CpAsyncCommit();

  const int row0 = q0 + warp * kWarpRows + (lane >> 2);
  float lrow[2], drow[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + r * 8;
    lrow[r] = row < T ? lse[int64_t{bh} * T + row] : 0.f;
    drow[r] = row < T ? delta[int64_t{bh} * T + row] : 0.f;
  }
  float dq[D / 8][4] = {};

  for (int j = 0; j < n_kv; ++j) {
    const int stage = j & 1;
    NextKeyValueTile<D, P, Bc, kThreads>(sK, sV, base, pitch, C, T, j, n_kv);
    __syncthreads();
    const E* k_tile = sK + stage * Bc * P;
    const E* v_tile = sV + stage * Bc * P;

    // S = Q K^T and dP = dO V^T, 16 queries x Bc keys. (Q and dO fragments kept in registers
    // across key tiles measured no faster on H200.)
    float s[Bc / 8][4] = {}, dp[Bc / 8][4] = {};
    MmaRowsByRows<D, P, Bc>(s, sQ, warp * kWarpRows, k_tile, lane);
    MmaRowsByRows<D, P, Bc>(dp, sdO, warp * kWarpRows, v_tile, lane);
    const bool diag = j * Bc + Bc - 1 > q0;
#pragma unroll
    for (int nt = 0; nt < Bc / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = j * Bc + nt * 8 + (lane & 3) * 2 + (e & 1);
        const int r = e >> 1;
        float p = exp2f(s[nt][e] * scale_log2 - lrow[r]);
        if (diag && key > row0 + r * 8) p = 0.f;
        dp[nt][e] = p * (dp[nt][e] - drow[r]);
      }
    }
    MmaFragsByTile<D, P, Bc>(dq, dp, k_tile, lane);  // dQ += dS K (k = keys)
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + r * 8;
    if (row >= T) continue;
    StoreRow<D>(dqkv + (int64_t{b} * T + row) * pitch + int64_t{h} * D + (lane & 3) * 2, dq, r,
                scale);
  }
}

// Dynamic shared memory of each kernel, in bytes.
template <int D, int W>
constexpr size_t ForwardSmem() {
  return size_t{16 * W + 4 * 64} * (D + 8) * sizeof(E);
}
template <int D, int W, int Br>
constexpr size_t BackwardKVSmem() {
  return size_t{2 * 16 * W + 4 * Br} * (D + 8) * sizeof(E) + 4 * Br * sizeof(float);
}
template <int D, int W, int Bc>
constexpr size_t BackwardQSmem() {
  return size_t{2 * 16 * W + 4 * Bc} * (D + 8) * sizeof(E);
}

int MaxSmemOptin() {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    return 0;
  }
  return v;
}

template <typename Kernel>
Status AllowSmem(Kernel k, size_t bytes) {
  FP8RT_CUDA_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(bytes)));
  return Status::Ok();
}

unsigned Tiles(int64_t T, int rows) { return static_cast<unsigned>((T + rows - 1) / rows); }

template <int D, int W>
Status Forward(bf16* out, float* lse, const bf16* qkv, const AttentionShape& s,
               cudaStream_t stream) {
  static const Status allowed = AllowSmem(FlashForwardKernel<D, W>, ForwardSmem<D, W>());
  FP8RT_RETURN_IF_ERROR(allowed);
  const dim3 grid(Tiles(s.T, 16 * W), static_cast<unsigned>(s.B * s.NH));
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(D));
  FlashForwardKernel<D, W><<<grid, 32 * W, ForwardSmem<D, W>(), stream>>>(
      reinterpret_cast<E*>(out), lse, reinterpret_cast<const E*>(qkv), static_cast<int>(s.T),
      static_cast<int>(s.NH), scale_log2);
  FP8RT_CUDA_TRY(cudaGetLastError());
  return Status::Ok();
}

template <int D, int KW, int KBr, int QW, int QBc>
Status Backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                float* delta, const AttentionShape& s, cudaStream_t stream) {
  static const Status allowed_kv =
      AllowSmem(FlashBackwardKVKernel<D, KW, KBr>, BackwardKVSmem<D, KW, KBr>());
  static const Status allowed_q =
      AllowSmem(FlashBackwardQKernel<D, QW, QBc>, BackwardQSmem<D, QW, QBc>());
  FP8RT_RETURN_IF_ERROR(allowed_kv);
  FP8RT_RETURN_IF_ERROR(allowed_q);
  const int T = static_cast<int>(s.T), NH = static_cast<int>(s.NH);
  const int64_t rows = s.B * s.NH * s.T;
  const unsigned delta_grid =
      static_cast<unsigned>(std::min<int64_t>((rows + 7) / 8, int64_t{65535} * 8));
  FlashDeltaKernel<D><<<delta_grid, 256, 0, stream>>>(delta, reinterpret_cast<const E*>(dout),
                                                      reinterpret_cast<const E*>(out),
                                                      static_cast<int>(s.B), T, NH);
  FP8RT_CUDA_TRY(cudaGetLastError());
  const unsigned bh = static_cast<unsigned>(s.B * s.NH);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D)), scale_log2 = scale * kLog2e;
  FlashBackwardKVKernel<D, KW, KBr>
      <<<dim3(Tiles(s.T, 16 * KW), bh), 32 * KW, BackwardKVSmem<D, KW, KBr>(), stream>>>(
          reinterpret_cast<E*>(dqkv), reinterpret_cast<const E*>(dout),
          reinterpret_cast<const E*>(qkv), lse, delta, T, NH, scale, scale_log2);
  FP8RT_CUDA_TRY(cudaGetLastError());
  FlashBackwardQKernel<D, QW, QBc>
      <<<dim3(Tiles(s.T, 16 * QW), bh), 32 * QW, BackwardQSmem<D, QW, QBc>(), stream>>>(
          reinterpret_cast<E*>(dqkv), reinterpret_cast<const E*>(dout),
          reinterpret_cast<const E*>(qkv), lse, delta, T, NH, scale, scale_log2);
  FP8RT_CUDA_TRY(cudaGetLastError());
  return Status::Ok();
}

// One compiled tiling: its description, the most shared memory any of its kernels takes, and
// its launchers.
struct Variant {
  cuda::FlashTiling tiling;
  size_t smem;
  Status (*forward)(bf16*, float*, const bf16*, const AttentionShape&, cudaStream_t);
  Status (*backward)(bf16*, const bf16*, const bf16*, const bf16*, const float*, float*,
                     const AttentionShape&, cudaStream_t);
};

template <int D, int FW, int KW, int KBr, int QW, int QBc>
Variant Make() {
  return {{FW, KW, KBr, QW, QBc},
          std::max({ForwardSmem<D, FW>(), BackwardKVSmem<D, KW, KBr>(),
                    BackwardQSmem<D, QW, QBc>()}),
          &Forward<D, FW>, &Backward<D, KW, KBr, QW, QBc>};
}

// The tilings compiled per head size, the default first.
const std::vector<Variant>& Variants(int64_t hs) {
  static const std::vector<Variant> v16 = {Make<16, 4, 4, 64, 4, 64>()};
  static const std::vector<Variant> v32 = {Make<32, 4, 4, 64, 4, 64>()};
  // Measured on H200 (docs/PERFORMANCE.md): 4 warps beat 8 in every kernel at HS 64 and 128
  // (8 warps x 16-row tiles was slower still); the 8-warp tiling stays for the benchmark.
  static const std::vector<Variant> v64 = {Make<64, 4, 4, 64, 4, 64>(),
                                           Make<64, 8, 8, 64, 8, 64>()};
  static const std::vector<Variant> v128 = {Make<128, 4, 4, 32, 4, 32>(),
                                            Make<128, 8, 8, 32, 8, 32>()};
  static const std::vector<Variant> none;
  switch (hs) {
    case 16: return v16;
    case 32: return v32;
    case 64: return v64;
    case 128: return v128;
    default: return none;
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

Result<const Variant*> Pick(const AttentionShape& s, int tiling) {
  FP8RT_RETURN_IF_ERROR(ValidateAttention(s));
  const std::vector<Variant>& v = Variants(s.HS);
  if (v.empty()) {
    return Status::InvalidArgument(
        StrCat("flash attention: head size ", s.HS, " is not one of 16, 32, 64, 128"));
  }
  if (tiling < 0 || tiling >= static_cast<int>(v.size())) {
    return Status::InvalidArgument(StrCat("flash attention: tiling ", tiling, " of ", v.size(),
                                          " for head size ", s.HS));
  }
  if (s.T > (int64_t{1} << 30) || s.B * s.NH > 65535) {
    return Status::InvalidArgument(StrCat("flash attention: B * NH = ", s.B * s.NH,
                                          " must be <= 65535 and T = ", s.T, " <= 2^30"));
  }
  const Variant* chosen = &v[static_cast<size_t>(tiling)];
  const int have = MaxSmemOptin();
  if (static_cast<size_t>(have) < chosen->smem) {
    return Status::InvalidArgument(StrCat("flash attention: head size ", s.HS, " needs ",
                                          chosen->smem,
                                          " bytes of shared memory per block, the device offers ",
                                          have));
  }
  return chosen;
}

}  // namespace

namespace cuda {

std::string FlashTiling::Name() const {
  return StrCat("fwd ", fwd_warps, "w, dkdv ", kv_warps, "w x q", kv_query_tile, ", dq ", q_warps,
                "w x k", q_key_tile);
}

std::vector<FlashTiling> FlashTilings(int64_t head_size) {
  std::vector<FlashTiling> out;
  for (const Variant& v : Variants(head_size)) out.push_back(v.tiling);
  return out;
}

Status FlashAttentionCheck(const AttentionShape& s) { return Pick(s, 0).status(); }

size_t FlashAttentionScratchBytes(const AttentionShape& s) {
  return static_cast<size_t>(s.B * s.NH * s.T) * sizeof(float);
}

Status FlashAttentionForward(bf16* out, float* lse, const bf16* qkv, const AttentionShape& s,
                             cudaStream_t stream, int tiling) {
  FP8RT_ASSIGN_OR_RETURN(const Variant* v, Pick(s, tiling));
  if (!Aligned16(qkv) || !Aligned16(out)) {
    return Status::InvalidArgument("flash attention: qkv and out must be 16-byte aligned");
  }
  return v->forward(out, lse, qkv, s, stream);
}

Status FlashAttentionBackward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                              const float* lse, void* scratch, size_t scratch_bytes,
                              const AttentionShape& s, cudaStream_t stream, int tiling) {
  FP8RT_ASSIGN_OR_RETURN(const Variant* v, Pick(s, tiling));
  if (scratch_bytes < FlashAttentionScratchBytes(s)) {
    return Status::InvalidArgument(StrCat("flash attention backward: scratch_bytes = ",
                                          scratch_bytes, ", need ",
                                          FlashAttentionScratchBytes(s)));
  }
  if (!Aligned16(qkv) || !Aligned16(dout) || !Aligned16(dqkv) || !Aligned16(out)) {
    return Status::InvalidArgument(
        "flash attention backward: qkv, dout, out and dqkv must be 16-byte aligned");
  }
  return v->backward(dqkv, dout, qkv, out, lse, static_cast<float*>(scratch), s, stream);
}

}  // namespace cuda
}  // namespace fp8rt
