// FP8 cast + transpose on the GPU: one pass over a (rows, cols) input writes both orientations
// (data and data_t) with amax and saturation fused in; the bias-gradient casts (QuantizeDbias,
// QuantizeDbiasGeluGrad), the GELU forward (QuantizeGelu) and a norm's output recomputed from
// its saved statistics (QuantizeLayerNorm) ride on the same tiles. cuda::Quantize (quantize.cu)
// calls in here when it writes data_t.
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda/fp8_device.cuh"
#include "kernels/cuda/gelu_math.cuh"
#include "kernels/cuda/quantize_device.cuh"
#include "kernels/cuda/vec.cuh"
#include "kernels/quantize.h"
#include "kernels/scaling.h"

namespace fp8rt {
namespace {

using cuda_detail::Aligned;
using cuda_detail::CommitTelemetry;
using cuda_detail::Decode2;
using cuda_detail::Encode4;
using cuda_detail::GeluFor;
using cuda_detail::GeluGradFor;
using cuda_detail::kWarpSize;
using cuda_detail::LoadF;
using cuda_detail::LoadVec;
using cuda_detail::Round;
using cuda_detail::Telemetry;

// 4 E4M3 codes at scale 1 (a GELU input saved in FP8, fp8.gelu_input_fp8), aligned to 4 bytes.
template <int kN>
__device__ __forceinline__ void LoadVec(const uint8_t* __restrict__ p, float (&x)[kN]) {
  static_assert(kN == 4);
  const uint32_t w = *reinterpret_cast<const uint32_t*>(p);
  const float2 a = Decode2<Fp8Format::kE4M3>(static_cast<uint16_t>(w & 0xffffu));
  const float2 b = Decode2<Fp8Format::kE4M3>(static_cast<uint16_t>(w >> 16));
  x[0] = a.x, x[1] = a.y, x[2] = b.x, x[3] = b.y;
}
__device__ __forceinline__ float LoadF(const uint8_t* p) {
  return cuda_detail::Decode<Fp8Format::kE4M3>(*p);
}

// 4x4 byte transpose: a[i] holds row i (byte j = column j); on return a[j] holds column j
// (byte i = row i).
__device__ __forceinline__ void Transpose4x4(uint32_t (&a)[4]) {
  const uint32_t t0 = __byte_perm(a[0], a[1], 0x5140);  // a0.0 a1.0 a0.1 a1.1
  const uint32_t t1 = __byte_perm(a[0], a[1], 0x7362);  // a0.2 a1.2 a0.3 a1.3
  const uint32_t t2 = __byte_perm(a[2], a[3], 0x5140);
  const uint32_t t3 = __byte_perm(a[2], a[3], 0x7362);
  a[0] = __byte_perm(t0, t2, 0x5410);
  a[1] = __byte_perm(t0, t2, 0x7632);
  a[2] = __byte_perm(t1, t3, 0x5410);
  a[3] = __byte_perm(t1, t3, 0x7632);
}

__device__ __forceinline__ uint8_t ByteOf(uint2 v, int b) {
  return static_cast<uint8_t>((b < 4 ? v.x : v.y) >> (8 * (b & 3)));
}

// ---------------------------------------------------------------------------------------------
// Cast + transpose. A block of 8 warps owns a tile of 64 rows x 128 columns. Each thread owns
// a sub-tile of 8 rows x 4 columns: warp w rows 8w..8w+7, lane l columns 4l..4l+3, so every
// warp-wide load (16 bytes a lane for fp32, 8 for bf16) and every row-major store (4 bytes a
// lane) covers one contiguous span. The thread transposes its 8 x 4 codes in registers into 4
// pieces of 8 bytes (8 consecutive rows of one data_t row) and parks them in shared memory;
// after one barrier the block writes each of its 128 data_t rows as 64 contiguous bytes (8
// lanes, one piece each). Measured on an H200 at 8192x8192, this shape (small tiles, one
// sub-tile per thread, 8 blocks per SM) beat 256-row tiles with 4 sub-tiles per thread by 7%
// (fp32) and 3% (bf16) of the copy rate.
// ---------------------------------------------------------------------------------------------

constexpr int kSubR = 8;     // rows per sub-tile = bytes per data_t piece
constexpr int kSubC = 4;     // columns per sub-tile = codes per data word
constexpr int kCtWarps = 8;  // one sub-tile row per warp
constexpr int kCtThreads = kCtWarps * kWarpSize;
constexpr int kTileR = kCtWarps * kSubR;                  // 64
constexpr int kTileC = kWarpSize * kSubC;                 // 128
constexpr int kPiecesPerRow = kTileR / kSubR;             // pieces of one data_t row in a tile: 8
constexpr int kRowsPerStore = kWarpSize / kPiecesPerRow;  // data_t rows per warp-wide store: 4
// Shared memory [kSubC][32 sub-tile columns][8 sub-tile rows + 1] pieces: the +1 makes the
// parking stores (lanes 9 pieces apart) hit 16 distinct bank pairs per half-warp.
constexpr int kPitch = kPiecesPerRow + 1;
constexpr int kCtSmemPieces = kSubC * kWarpSize * kPitch;

// What the tile casts: the input as loaded, or an element-wise function of it computed in the
// same pass and rounded to T as the unfused op would store it (the same bits).
enum class InputOp {
  kNone,
  kGeluGrad,  // GELU'(pre) * in, as GeluBackward (the GELU backward fused into its output's cast)
  kGeluGradAndGelu,  // kGeluGrad, and GELU(pre) cast to a second tensor, transposed only (below)
  kGelu,             // GELU(in), as GeluForward (FC2's input cast from FC's output, or recomputed)
  kLayerNorm,        // fmaf((in - mean) * rstd, weight, bias), as the LayerNorm forward kernels
  kRmsNorm,          // in * rstd * weight, as RmsNormForward
};

constexpr bool IsNorm(InputOp op) { return op == InputOp::kLayerNorm || op == InputOp::kRmsNorm; }
constexpr bool ReadsPre(InputOp op) {
  return op == InputOp::kGeluGrad || op == InputOp::kGeluGradAndGelu;
}

// kGeluGradAndGelu's second output: GELU(pre), as QuantizeGelu casts it, with its own scale,
// written transposed only (the input of the layer whose output gradient the first output is:
// train.recompute's FC2 input, cast again in the backward). No telemetry: the forward's cast
// counted those values.
struct GeluT {
  uint8_t* data_t = nullptr;
  const float* scale = nullptr;
  float* scale_inv = nullptr;
};

// Whether the tile may skip data_t (a row-major-only cast). The plain cast and QuantizeGelu write
// data alone in quantize.cu's flat kernel and the bias gradient needs data_t, so only the fused
// forward ops compile the check (kGelu's is then unused: its code is kept as it was).
constexpr bool RowMajorOnlyOk(InputOp op) { return op == InputOp::kGelu || IsNorm(op); }

// The norm ops' other inputs: the forward's saved per-row statistics (rows) and the per-column
// weight and bias (cols). mean and bias are null for kRmsNorm, all four for the non-norm ops.
template <typename T>
struct NormParams {
  const float* mean = nullptr;
  const float* rstd = nullptr;
  const T* weight = nullptr;
  const T* bias = nullptr;
};

// Transposes a thread's 8 x 4 codes (w[i]: row r0 + i, column c0 in the low byte) in registers
// into 4 pieces (piece j = column c0 + j, rows r0 .. r0 + 7, row r0 in the low byte) and parks
// them in shared memory for StoreTransposed, after a barrier.
__device__ __forceinline__ void ParkTransposed(const uint32_t (&w)[kSubR], uint2* smem, int lane,
                                               int warp) {
  uint32_t lo[4] = {w[0], w[1], w[2], w[3]};
  uint32_t hi[4] = {w[4], w[5], w[6], w[7]};
  Transpose4x4(lo);
  Transpose4x4(hi);
#pragma unroll
  for (int j = 0; j < kSubC; ++j) {
    smem[(j * kWarpSize + lane) * kPitch + warp] = make_uint2(lo[j], hi[j]);
  }
}

// Stores the tile's parked pieces into data_t: lane = (piece p of the row, which of
// kRowsPerStore rows), so a warp-wide store writes 64 contiguous bytes into each of 4 data_t
// rows.
template <bool kFull>
__device__ __forceinline__ void StoreTransposed(const uint2* smem, uint8_t* __restrict__ data_t,
                                                int64_t rows, int64_t cols, int64_t tile_r,
                                                int64_t tile_c, int lane, int warp) {
  const int p = lane % kPiecesPerRow;
  const int64_t row0 = tile_r + p * kSubR;
#pragma unroll
  for (int j = 0; j < kSubC; ++j) {
    const int sub_col = warp * kRowsPerStore + lane / kPiecesPerRow;  // 0..31
    const uint2 piece = smem[(j * kWarpSize + sub_col) * kPitch + p];
    const int64_t col = tile_c + sub_col * kSubC + j;
    if constexpr (kFull) {
      *reinterpret_cast<uint2*>(data_t + col * rows + row0) = piece;
    } else if (col < cols) {
#pragma unroll
      for (int b = 0; b < kSubR; ++b) {
        if (row0 + b < rows) data_t[col * rows + row0 + b] = ByteOf(piece, b);
      }
    }
  }
}

// One tile. kFull: the tile lies inside the tensor and every pointer/stride allows vector
// access; otherwise every element is bounds-checked (edge tiles and odd shapes).
// kOp: see InputOp; only kGeluGrad and kGeluGradAndGelu read pre, only the norm ops norm. P: pre's
// type, T or uint8_t (E4M3 codes at scale 1, whose values T holds exactly).
template <typename T, typename P, Fp8Format F, bool kFull, InputOp kOp, Fp8Format FX>
__device__ __forceinline__ void CastTransposeTile(
    const T* __restrict__ in, const P* __restrict__ pre, const NormParams<T>& norm,
    uint8_t* __restrict__ data, uint8_t* __restrict__ data_t, int64_t rows, int64_t cols,
    float scale, int64_t tile_r, int64_t tile_c, uint2* smem, Telemetry& tel, float* colsum,
    float* partials, uint8_t* __restrict__ gelu_t, float gelu_scale) {
  const float fp8_max = Fp8MaxFinite(F);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t r0 = tile_r + warp * kSubR;
  const int64_t c0 = tile_c + lane * kSubC;

  // Load the sub-tile: all 8 rows first (and, reading pre, their pre-activations; with a
  // norm, the rows' statistics and the columns' weight and bias), so every load is in flight
  // together.
  constexpr bool kPre = ReadsPre(kOp);
  constexpr bool kNorm = IsNorm(kOp), kLn = kOp == InputOp::kLayerNorm;
  float x[kSubR][kSubC];
  float pre_x[kPre ? kSubR : 1][kSubC];
  float row_mu[kLn ? kSubR : 1], row_rs[kNorm ? kSubR : 1];
  float col_w[kNorm ? kSubC : 1], col_b[kLn ? kSubC : 1];
  if constexpr (kNorm && kFull) {
    LoadVec<kSubC>(norm.weight + c0, col_w);
    if constexpr (kLn) LoadVec<kSubC>(norm.bias + c0, col_b);
  } else if constexpr (kNorm) {
#pragma unroll
    for (int j = 0; j < kSubC; ++j) {
      const bool ok = c0 + j < cols;
      col_w[j] = ok ? LoadF(norm.weight + c0 + j) : 0.0f;
      if constexpr (kLn) col_b[j] = ok ? LoadF(norm.bias + c0 + j) : 0.0f;
    }
  }
#pragma unroll
  for (int i = 0; i < kSubR; ++i) {
    const int64_t r = r0 + i;
    if constexpr (kNorm) {
      row_rs[i] = kFull || r < rows ? norm.rstd[r] : 0.0f;
      if constexpr (kLn) row_mu[i] = kFull || r < rows ? norm.mean[r] : 0.0f;
    }
    if constexpr (kFull) {
      LoadVec<kSubC>(in + r * cols + c0, x[i]);
      if constexpr (kPre) LoadVec<kSubC>(pre + r * cols + c0, pre_x[i]);
    } else {
#pragma unroll
      for (int j = 0; j < kSubC; ++j) {
        const bool ok = r < rows && c0 + j < cols;
        x[i][j] = ok ? LoadF(in + r * cols + c0 + j) : 0.0f;
        if constexpr (kPre) pre_x[i][j] = ok ? LoadF(pre + r * cols + c0 + j) : 0.0f;
      }
    }
  }
  // kGeluGradAndGelu's second output's codes (wg[i]: row r0 + i, as w below), encoded here so
  // that pre's values die with this loop (kept to the end, they cost the kernel two thirds of
  // its occupancy).
  constexpr bool kGeluOut = kOp == InputOp::kGeluGradAndGelu;
  uint32_t wg[kGeluOut ? kSubR : 1];
  if constexpr (kPre) {
#pragma unroll
    for (int i = 0; i < kSubR; ++i) {
      float gy[kSubC];
#pragma unroll
      for (int j = 0; j < kSubC; ++j) {
        const T g = Round<T>(x[i][j] * GeluGradFor<T>(pre_x[i][j]));
        x[i][j] = LoadF(&g);
        if constexpr (kGeluOut) {  // GELU(pre), as the kGelu op computes and encodes it
          const T ge = Round<T>(GeluFor<T>(pre_x[i][j]));
          gy[j] = LoadF(&ge) * gelu_scale;
        }
      }
      if constexpr (kGeluOut) wg[i] = Encode4<FX>(gy[0], gy[1], gy[2], gy[3]);
    }
  } else if constexpr (kOp == InputOp::kGelu) {
    // Out-of-bounds elements load as 0 and GELU(0) = 0: they add nothing to the telemetry.
#pragma unroll
    for (int i = 0; i < kSubR; ++i) {
#pragma unroll
      for (int j = 0; j < kSubC; ++j) {
        const T g = Round<T>(GeluFor<T>(x[i][j]));
        x[i][j] = LoadF(&g);
      }
    }
  } else if constexpr (kNorm) {
    // The forward kernels' fp32 expressions, operation for operation (layernorm_fwd.cu,
    // rmsnorm.cu), rounded to T as they store it. Out-of-bounds elements are zeroed: they would add
    // bias.
#pragma unroll
    for (int i = 0; i < kSubR; ++i) {
#pragma unroll
      for (int j = 0; j < kSubC; ++j) {
        float v;
        if constexpr (kLn) {
          v = fmaf((x[i][j] - row_mu[i]) * row_rs[i], col_w[j], col_b[j]);
        } else {
          v = x[i][j] * row_rs[i] * col_w[j];
        }
        const T y = Round<T>(v);
        x[i][j] = kFull || (r0 + i < rows && c0 + j < cols) ? LoadF(&y) : 0.0f;
      }
    }
  }
  // Column sums of the unscaled input (bias gradient), when asked: this thread's 8 rows, parked
  // per warp; the block adds its 8 warps after the barrier below.
  if (partials != nullptr) {
#pragma unroll
    for (int j = 0; j < kSubC; ++j) {
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < kSubR; ++i) sum += x[i][j];
      colsum[warp * kTileC + lane * kSubC + j] = sum;
    }
  }
  // Scale, encode, count; store the row-major codes. w[i] holds row r0 + i, column c0 in the
  // low byte.
  uint32_t w[kSubR];
#pragma unroll
  for (int i = 0; i < kSubR; ++i) {
    const int64_t r = r0 + i;
    float y[kSubC];
#pragma unroll
    for (int j = 0; j < kSubC; ++j) {
      y[j] = x[i][j] * scale;
      tel.Add(x[i][j], y[j], fp8_max);
    }
    w[i] = Encode4<F>(y[0], y[1], y[2], y[3]);
    if (data == nullptr) continue;  // (a transposed-only cast; the same for the whole grid)
    if constexpr (kFull) {
      *reinterpret_cast<uint32_t*>(data + r * cols + c0) = w[i];
    } else if (r < rows) {
#pragma unroll
      for (int j = 0; j < kSubC; ++j) {
        if (c0 + j < cols) data[r * cols + c0 + j] = static_cast<uint8_t>(w[i] >> (8 * j));
      }
    }
  }
  if constexpr (RowMajorOnlyOk(kOp)) {
    if (data_t == nullptr) return;  // (a row-major-only cast, no partials: the same for the grid)
  }
  ParkTransposed(w, smem, lane, warp);
  if constexpr (kGeluOut) ParkTransposed(wg, smem + kCtSmemPieces, lane, warp);  // (second half)
  __syncthreads();
  if (partials != nullptr && threadIdx.x < kTileC && tile_c + threadIdx.x < cols) {
    float sum = 0.0f;
#pragma unroll
    for (int w8 = 0; w8 < kCtWarps; ++w8) sum += colsum[w8 * kTileC + threadIdx.x];
    partials[(tile_r / kTileR) * cols + tile_c + threadIdx.x] = sum;  // one per (tile row, column)
  }
  StoreTransposed<kFull>(smem, data_t, rows, cols, tile_r, tile_c, lane, warp);
  if constexpr (kGeluOut) {
    StoreTransposed<kFull>(smem + kCtSmemPieces, gelu_t, rows, cols, tile_r, tile_c, lane, warp);
  }
}

// Tiles are numbered in one dimension. kFull: the full_r x full_c interior tiles, row-major.
// Otherwise the tiles outside that interior: first the bottom band of tile rows full_r.., then
// the right band (columns full_c..) of the rows above; full_r = full_c = 0 makes that every
// tile. Two kernels rather than one branch, so the guarded code does not cost the fast path
// registers.
// FX: gelu's format (kGeluGradAndGelu; F otherwise, unused). The body of the kernels below.
template <typename T, typename P, Fp8Format F, bool kFull, InputOp kOp, Fp8Format FX>
__device__ __forceinline__ void CastTransposeBody(
    const T* __restrict__ in, const P* __restrict__ pre, uint8_t* __restrict__ data,
    uint8_t* __restrict__ data_t, int64_t rows, int64_t cols, const float* __restrict__ scale_ptr,
    float* __restrict__ scale_inv, float* amax, unsigned long long* saturated, int64_t full_r,
    int64_t full_c, int64_t tiles_c, bool write_scale_inv, float* partials,
    const NormParams<T>& norm, const GeluT& gelu) {
  // (kGeluGradAndGelu parks its second output's pieces in a second half)
  __shared__ uint2 smem[(kOp == InputOp::kGeluGradAndGelu ? 2 : 1) * kCtSmemPieces];
  __shared__ float colsum[kCtWarps * kTileC];
  const float scale = *scale_ptr;
  const int64_t b = blockIdx.x;
  int64_t tr, tc;
  if constexpr (kFull) {
    tr = b / full_c;
    tc = b % full_c;
  } else {
    const int64_t bottom = (((rows + kTileR - 1) / kTileR) - full_r) * tiles_c;
    if (b < bottom) {
      tr = full_r + b / tiles_c;
      tc = b % tiles_c;
    } else {
      tr = (b - bottom) / (tiles_c - full_c);
      tc = full_c + (b - bottom) % (tiles_c - full_c);
    }
  }
  float gelu_scale = 0.0f;
  if constexpr (kOp == InputOp::kGeluGradAndGelu) gelu_scale = *gelu.scale;
  Telemetry tel;
  CastTransposeTile<T, P, F, kFull, kOp, FX>(in, pre, norm, data, data_t, rows, cols, scale,
                                             tr * kTileR, tc * kTileC, smem, tel, colsum, partials,
                                             gelu.data_t, gelu_scale);
  CommitTelemetry<kCtThreads>(tel, amax, saturated);
  if (write_scale_inv && blockIdx.x == 0 && threadIdx.x == 0) {
    *scale_inv = ScaleInv(scale);
    if constexpr (kOp == InputOp::kGeluGradAndGelu) *gelu.scale_inv = ScaleInv(gelu_scale);
  }
}

#define FP8RT_CT_PARAMS                                                                \
  const T *__restrict__ in, const P *__restrict__ pre, uint8_t *__restrict__ data,     \
      uint8_t *__restrict__ data_t, int64_t rows, int64_t cols,                        \
      const float *__restrict__ scale_ptr, float *__restrict__ scale_inv, float *amax, \
      unsigned long long *saturated, int64_t full_r, int64_t full_c, int64_t tiles_c,  \
      bool write_scale_inv, float *partials, NormParams<T> norm, GeluT gelu
#define FP8RT_CT_ARGS                                                                       \
  in, pre, data, data_t, rows, cols, scale_ptr, scale_inv, amax, saturated, full_r, full_c, \
      tiles_c, write_scale_inv, partials, norm, gelu

template <typename T, typename P, Fp8Format F, bool kFull, InputOp kOp, Fp8Format FX>
__global__ void __launch_bounds__(kCtThreads) CastTransposeKernel(FP8RT_CT_PARAMS) {
  CastTransposeBody<T, P, F, kFull, kOp, FX>(FP8RT_CT_ARGS);
}

// kGeluGradAndGelu's: three blocks per SM, as the other ops' register use gives them (its own,
// 115 registers, gave two). Capped at 80 registers it spills 20 bytes in bf16's interior tiles,
// none in fp32's, and 44 (bf16) or 92 (fp32) bytes in the guarded edge tiles (sm_90a, ptxas 13.0).
template <typename T, typename P, Fp8Format F, bool kFull, InputOp kOp, Fp8Format FX>
__global__ void __launch_bounds__(kCtThreads, 3) CastTransposeGeluOutKernel(FP8RT_CT_PARAMS) {
  CastTransposeBody<T, P, F, kFull, kOp, FX>(FP8RT_CT_ARGS);
}
#undef FP8RT_CT_PARAMS
#undef FP8RT_CT_ARGS

template <InputOp kOp, typename T, typename P, Fp8Format F, Fp8Format FX, bool kFull>
cudaError_t LaunchCastTransposeKernel(int64_t blocks, const T* in, const P* pre,
                                      const Fp8Tensor& out, unsigned long long* saturated,
                                      int64_t full_r, int64_t full_c, int64_t tiles_c,
                                      bool write_scale_inv, float* partials,
                                      const NormParams<T>& norm, const GeluT& gelu,
                                      cudaStream_t stream) {
  if (blocks == 0) return cudaSuccess;
  const auto launch = [&](auto* kernel) {
    kernel<<<static_cast<unsigned>(blocks), kCtThreads, 0, stream>>>(
        in, pre, out.data, out.data_t, out.rows, out.cols, out.scale, out.scale_inv, out.amax,
        saturated, full_r, full_c, tiles_c, write_scale_inv, partials, norm, gelu);
  };
  if constexpr (kOp == InputOp::kGeluGradAndGelu) {
    launch(CastTransposeGeluOutKernel<T, P, F, kFull, kOp, FX>);
  } else {
    launch(CastTransposeKernel<T, P, F, kFull, kOp, FX>);
  }
  return cudaGetLastError();
}

// dbias[c] += sum over tile rows t of partials[t][c]. Block (32, 32): column x of a 32-wide
// strip, lane y sums tile rows y, y + 32, ...; then y == 0 adds the 32 lane sums in order (a
// fixed order: deterministic). One thread per column looping over every tile row was too little
// parallelism for narrow layers (768 columns: 768 threads).
__global__ void __launch_bounds__(1024)
    AddColumnPartialsKernel(float* __restrict__ dbias, const float* __restrict__ partials,
                            int64_t tiles_r, int64_t cols) {
  __shared__ float tile[32][33];
  const int64_t c = blockIdx.x * int64_t{32} + threadIdx.x;
  float sum = 0.0f;
  if (c < cols) {
    for (int64_t t = threadIdx.y; t < tiles_r; t += 32) sum += partials[t * cols + c];
  }
  tile[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.0f;
    for (int y = 0; y < 32; ++y) total += tile[y][threadIdx.x];
    dbias[c] += total;
  }
}

// pre: kGeluGrad's second input (null otherwise); norm: the norm ops' (empty otherwise);
// gelu_out: kGeluGradAndGelu's second output (validated by the caller; null otherwise).
template <InputOp kOp, typename T, typename P = T>
Status LaunchCastTranspose(const T* in, const Fp8Tensor& out, unsigned long long* saturated,
                           cudaStream_t stream, float* partials = nullptr, const P* pre = nullptr,
                           const NormParams<T>& norm = {}, const Fp8Tensor* gelu_out = nullptr) {
  const int64_t rows = out.rows, cols = out.cols;
  // The fast kernel needs vector access everywhere: input rows (and a norm's weight and bias)
  // aligned for kSubC-element loads, data rows for 4-byte stores, and 8-row pieces of data_t for
  // 8-byte stores.
  const bool vector_ok = cols % kSubC == 0 && rows % kSubR == 0 && Aligned(in, kSubC * sizeof(T)) &&
                         (pre == nullptr || Aligned(pre, kSubC * sizeof(P))) &&
                         Aligned(norm.weight, kSubC * sizeof(T)) &&
                         Aligned(norm.bias, kSubC * sizeof(T)) && Aligned(out.data, kSubC) &&
                         Aligned(out.data_t, kSubR) &&
                         (gelu_out == nullptr || Aligned(gelu_out->data_t, kSubR));
  const int64_t tiles_r = (rows + kTileR - 1) / kTileR;
  const int64_t tiles_c = (cols + kTileC - 1) / kTileC;
  const int64_t full_r = vector_ok ? rows / kTileR : 0;
  const int64_t full_c = vector_ok ? cols / kTileC : 0;
  const int64_t interior = full_r * full_c;
  const int64_t edge = tiles_r * tiles_c - interior;
  if (interior > 0x7fffffff || edge > 0x7fffffff) {
    return Status::InvalidArgument(StrCat("Quantize: shape (", rows, ", ", cols,
                                          ") needs more than 2^31-1 tiles of ", kTileR, "x",
                                          kTileC));
  }
  const GeluT gelu =
      gelu_out == nullptr ? GeluT{} : GeluT{gelu_out->data_t, gelu_out->scale, gelu_out->scale_inv};
  cudaError_t err = cudaSuccess;
  auto launch = [&]<Fp8Format F, Fp8Format FX>() {
    err = LaunchCastTransposeKernel<kOp, T, P, F, FX, true>(interior, in, pre, out, saturated,
                                                            full_r, full_c, tiles_c, true, partials,
                                                            norm, gelu, stream);
    if (err != cudaSuccess) return;
    err = LaunchCastTransposeKernel<kOp, T, P, F, FX, false>(edge, in, pre, out, saturated, full_r,
                                                             full_c, tiles_c, interior == 0,
                                                             partials, norm, gelu, stream);
  };
  cuda_detail::DispatchFp8(out.format, [&]<Fp8Format F>() {
    if constexpr (kOp == InputOp::kGeluGradAndGelu) {
      cuda_detail::DispatchFp8(gelu_out->format,
                               [&]<Fp8Format FX>() { launch.template operator()<F, FX>(); });
    } else {
      launch.template operator()<F, F>();
    }
  });
  if (err != cudaSuccess) {
    return Status::Internal(
        StrCat("Quantize (cast+transpose): launch failed: ", cudaGetErrorString(err)));
  }
  return Status::Ok();
}

}  // namespace

namespace cuda_detail {

template <typename T>
Status CastTranspose(const T* in, const Fp8Tensor& out, unsigned long long* saturated,
                     cudaStream_t stream) {
  return LaunchCastTranspose<InputOp::kNone>(in, out, saturated, stream);
}

template Status CastTranspose<float>(const float*, const Fp8Tensor&, unsigned long long*,
                                     cudaStream_t);
template Status CastTranspose<bf16>(const bf16*, const Fp8Tensor&, unsigned long long*,
                                    cudaStream_t);

}  // namespace cuda_detail

namespace cuda {

size_t QuantizeDbiasScratchBytes(int64_t rows, int64_t cols) {
  return static_cast<size_t>((rows + kTileR - 1) / kTileR) * static_cast<size_t>(cols) *
         sizeof(float);
}

namespace {
template <InputOp kOp, typename T, typename P>
Status QuantizeDbiasImpl(const char* op, const T* in, const P* pre, const Fp8Tensor& out,
                         float* dbias, unsigned long long* saturated, void* scratch,
                         size_t scratch_bytes, cudaStream_t stream,
                         const Fp8Tensor* gelu_out = nullptr) {
  FP8RT_RETURN_IF_ERROR(ValidateFp8Tensor(op, out));
  if (out.data_t == nullptr) {
    return Status::InvalidArgument(StrCat(
        op, ": out.data_t is null; the bias gradient rides on the cast+transpose pass"));
  }
  if (dbias == nullptr) return Status::InvalidArgument(StrCat(op, ": dbias is null"));
  const int64_t n = out.numel();
  if (n == 0) return Quantize(in, out, saturated, stream);
  if (in == nullptr) return Status::InvalidArgument(StrCat(op, ": in is null"));
  const size_t need = QuantizeDbiasScratchBytes(out.rows, out.cols);
  if (scratch == nullptr || scratch_bytes < need) {
    return Status::InvalidArgument(StrCat(op, ": scratch_bytes=", scratch_bytes, " < ", need,
                                          " (QuantizeDbiasScratchBytes)"));
  }
  float* partials = static_cast<float*>(scratch);
  FP8RT_RETURN_IF_ERROR(
      LaunchCastTranspose<kOp>(in, out, saturated, stream, partials, pre, {}, gelu_out));
  const int64_t tiles_r = (out.rows + kTileR - 1) / kTileR;
  AddColumnPartialsKernel<<<static_cast<unsigned>((out.cols + 31) / 32), dim3(32, 32), 0,
                            stream>>>(dbias, partials, tiles_r, out.cols);
  FP8RT_CUDA_TRY_LAUNCH(op);
  return Status::Ok();
}
}  // namespace

template <typename T>
Status QuantizeDbias(const T* in, const Fp8Tensor& out, float* dbias,
                     unsigned long long* saturated, void* scratch, size_t scratch_bytes,
                     cudaStream_t stream) {
  return QuantizeDbiasImpl<InputOp::kNone, T, T>("QuantizeDbias", in, nullptr, out, dbias,
                                                 saturated, scratch, scratch_bytes, stream);
}

template <typename T>
Status QuantizeDbiasGeluGrad(const T* dout, const T* pre, const Fp8Tensor& out, float* dbias,
                             unsigned long long* saturated, void* scratch, size_t scratch_bytes,
                             cudaStream_t stream, const Fp8Tensor* gelu_out) {
  if (out.numel() > 0 && pre == nullptr) {
    return Status::InvalidArgument("QuantizeDbiasGeluGrad: pre is null");
  }
  if (gelu_out == nullptr) {
    return QuantizeDbiasImpl<InputOp::kGeluGrad, T, T>(
        "QuantizeDbiasGeluGrad", dout, pre, out, dbias, saturated, scratch, scratch_bytes, stream);
  }
  FP8RT_RETURN_IF_ERROR(ValidateGeluOut("QuantizeDbiasGeluGrad", out, *gelu_out));
  const Status st = QuantizeDbiasImpl<InputOp::kGeluGradAndGelu, T, T>(
      "QuantizeDbiasGeluGrad", dout, pre, out, dbias, saturated, scratch, scratch_bytes, stream,
      gelu_out);
  FP8RT_RETURN_IF_ERROR(st);
  // (an empty tensor: out's scale_inv was written above, once out was validated; now gelu_out's)
  return out.numel() == 0 ? QuantizeGelu(pre, *gelu_out, nullptr, stream) : Status::Ok();
}

template <typename T>
Status QuantizeDbiasGeluGrad(const T* dout, const uint8_t* pre_e4m3, const Fp8Tensor& out,
                             float* dbias, unsigned long long* saturated, void* scratch,
                             size_t scratch_bytes, cudaStream_t stream) {
  if (out.numel() > 0 && pre_e4m3 == nullptr) {
    return Status::InvalidArgument("QuantizeDbiasGeluGrad: pre is null");
  }
  return QuantizeDbiasImpl<InputOp::kGeluGrad, T, uint8_t>("QuantizeDbiasGeluGrad", dout,
                                                           pre_e4m3, out, dbias, saturated,
                                                           scratch, scratch_bytes, stream);
}

template <typename T>
Status QuantizeGelu(const T* pre, const Fp8Tensor& out, unsigned long long* saturated,
                    cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateFp8Tensor("QuantizeGelu", out, /*transposed_only_ok=*/true));
  const int64_t n = out.numel();
  if (n == 0) return Quantize(pre, out, saturated, stream);  // scale_inv only
  if (pre == nullptr) return Status::InvalidArgument("QuantizeGelu: pre is null");
  // (row-major only: the flat kernel, whose occupancy hides the GELU's arithmetic better)
  if (out.data_t == nullptr) return cuda_detail::QuantizeGeluRowMajor(pre, out, saturated, stream);
  return LaunchCastTranspose<InputOp::kGelu>(pre, out, saturated, stream);
}

template <typename T>
Status QuantizeLayerNorm(const T* in, const float* mean, const float* rstd, const T* weight,
                         const T* bias, const Fp8Tensor& out, unsigned long long* saturated,
                         cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateQuantizeLayerNorm(in, mean, rstd, weight, bias, out));
  if (out.numel() == 0) return Quantize(in, out, saturated, stream);  // scale_inv only
  const NormParams<T> norm{mean, rstd, weight, bias};
  if (mean == nullptr) {
    return LaunchCastTranspose<InputOp::kRmsNorm, T, T>(in, out, saturated, stream, nullptr,
                                                        nullptr, norm);
  }
  return LaunchCastTranspose<InputOp::kLayerNorm, T, T>(in, out, saturated, stream, nullptr,
                                                        nullptr, norm);
}

#define FP8RT_INSTANTIATE(T)                                                                       \
  template Status QuantizeDbias<T>(const T*, const Fp8Tensor&, float*, unsigned long long*, void*, \
                                   size_t, cudaStream_t);                                          \
  template Status QuantizeDbiasGeluGrad<T>(const T*, const T*, const Fp8Tensor&, float*,           \
                                           unsigned long long*, void*, size_t, cudaStream_t,       \
                                           const Fp8Tensor*);                                      \
  template Status QuantizeDbiasGeluGrad<T>(const T*, const uint8_t*, const Fp8Tensor&, float*,     \
                                           unsigned long long*, void*, size_t, cudaStream_t);      \
  template Status QuantizeGelu<T>(const T*, const Fp8Tensor&, unsigned long long*, cudaStream_t);  \
  template Status QuantizeLayerNorm<T>(const T*, const float*, const float*, const T*, const T*,   \
                                       const Fp8Tensor&, unsigned long long*, cudaStream_t);
FP8RT_INSTANTIATE(float)
FP8RT_INSTANTIATE(bf16)
#undef FP8RT_INSTANTIATE

}  // namespace cuda
}  // namespace fp8rt
