// CUDA casts of FP8 block scaling (kernels/block_quantize.h): 1x128 and 128x128 blocks in
// cuBLASLt's scale layouts, bit-identical to the CPU references.
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/block_quantize.h"
#include "kernels/cuda/fp8_device.cuh"
#include "kernels/scaling.h"

namespace fp8rt {
namespace {

using cuda_detail::Encode;
using cuda_detail::LoadF;
constexpr int64_t kB = BlockLayout::kBlock;

__device__ __forceinline__ uint32_t AbsBits(float x) { return FloatBits(x) & 0x7fffffffu; }

// The block's scale from its amax bits (as cpu's BlockScale).
__device__ __forceinline__ float BlockScale(uint32_t amax_bits, float fp8_max, bool pow2) {
  float s = ComputeScale(BitsFloat(amax_bits), 1.0f, fp8_max, 0);
  if (pow2) s = BitsFloat(FloatBits(s) & 0xff800000u);
  return s;
}

__device__ __forceinline__ uint32_t WarpMax(uint32_t v) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// One warp per (row, 128-column block); consecutive warps take consecutive rows of one block, so
// the scale writes (row index contiguous) coalesce. Rows rows..Pad4(rows) write the padding (1).
template <typename T, Fp8Format F>
__global__ void Vec128Kernel(const T* __restrict__ in, int64_t rows, int64_t cols, float fp8_max,
                             bool pow2, uint8_t* __restrict__ data, float* __restrict__ scale_inv) {
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t prow = BlockLayout::Pad4(rows);
  if (warp >= prow * BlockLayout::Blocks(cols)) return;
  const int64_t r = warp % prow, b = warp / prow;
  if (r >= rows) {
    if (lane == 0) scale_inv[b * prow + r] = 1.0f;
    return;
  }
  const int64_t c0 = b * kB, n = min(kB, cols - c0);
  const T* row = in + r * cols + c0;
  float v[4];
  uint32_t bits = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t c = lane + 32 * i;
    v[i] = c < n ? LoadF(row + c) : 0.0f;
    if (c < n) bits = max(bits, AbsBits(v[i]));
  }
  const float s = BlockScale(WarpMax(bits), fp8_max, pow2);
  if (lane == 0) scale_inv[b * prow + r] = ScaleInv(s);
  uint8_t* out = data + r * cols + c0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t c = lane + 32 * i;
    if (c < n) out[c] = Encode<F>(v[i] * s);
  }
}

// One 256-thread block per 128 x 128 tile (blockIdx.y: tile row, x: tile column): the tile's amax,
// its scale (thread 0 also writes the grids' padding), then the codes and their transposes.
template <typename T, Fp8Format F>
__global__ void __launch_bounds__(256)
    Blk128Kernel(const T* __restrict__ in, int64_t rows, int64_t cols, float fp8_max, bool pow2,
                 uint8_t* __restrict__ data, float* __restrict__ scale_inv,
                 uint8_t* __restrict__ data_t, float* __restrict__ scale_inv_t) {
  const int64_t i = blockIdx.y, j = blockIdx.x, r0 = i * kB, c0 = j * kB;
  const int64_t nr = min(kB, rows - r0), nc = min(kB, cols - c0);
  uint32_t bits = 0;
  for (int idx = threadIdx.x; idx < kB * kB; idx += blockDim.x) {
    const int rr = idx / kB, cc = idx % kB;
    if (rr < nr && cc < nc) bits = max(bits, AbsBits(LoadF(in + (r0 + rr) * cols + c0 + cc)));
  }
  __shared__ uint32_t warp_max[8];
  __shared__ float tile_scale;
  bits = WarpMax(bits);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = bits;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < 8; ++w) bits = max(bits, warp_max[w]);
    const float s = BlockScale(bits, fp8_max, pow2);
    tile_scale = s;
    const int64_t nbr = BlockLayout::Blocks(rows), nbc = BlockLayout::Blocks(cols);
    const int64_t pc = BlockLayout::Pad4(nbc), pr = BlockLayout::Pad4(nbr);
    scale_inv[i * pc + j] = ScaleInv(s);
    if (j == nbc - 1) {
      for (int64_t jj = nbc; jj < pc; ++jj) scale_inv[i * pc + jj] = 1.0f;
    }
    if (scale_inv_t != nullptr) {
      scale_inv_t[j * pr + i] = ScaleInv(s);
      if (i == nbr - 1) {
        for (int64_t ii = nbr; ii < pr; ++ii) scale_inv_t[j * pr + ii] = 1.0f;
      }
    }
  }
  __syncthreads();
  const float s = tile_scale;
  for (int idx = threadIdx.x; idx < kB * kB; idx += blockDim.x) {
    const int rr = idx / kB, cc = idx % kB;
    if (rr >= nr || cc >= nc) continue;
    const uint8_t code = Encode<F>(LoadF(in + (r0 + rr) * cols + c0 + cc) * s);
    data[(r0 + rr) * cols + c0 + cc] = code;
    if (data_t != nullptr) data_t[(c0 + cc) * rows + r0 + rr] = code;
  }
}

// The columns of in in blocks of 128 rows, written as the transpose's Vec128 cast: one 256-thread
// block per 128 x 32 tile (blockIdx.y: the row block, x: 32 columns). Warp w takes columns w,
// w + 8, w + 16, w + 24: each column's amax over the tile's 128 rows (the padding rows' zeros
// change no max), its scale, then its 128 codes as one contiguous row of data_t. The tile's
// columns in cols..Pad4(cols) write the scale grid's padding (1).
template <typename T, Fp8Format F>
__global__ void __launch_bounds__(256)
    Vec128ColumnsKernel(const T* __restrict__ in, int64_t rows, int64_t cols, float fp8_max,
                        bool pow2, uint8_t* __restrict__ data_t, float* __restrict__ scale_inv_t) {
  __shared__ float tile[kB][33];
  __shared__ float col_scale[32];
  const int64_t b = blockIdx.y, r0 = b * kB, c0 = int64_t{blockIdx.x} * 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int i = warp; i < kB; i += 8) {
    const int64_t r = r0 + i, c = c0 + lane;
    tile[i][lane] = r < rows && c < cols ? LoadF(in + r * cols + c) : 0.0f;
  }
  __syncthreads();
  const int64_t pc = BlockLayout::Pad4(cols);
  for (int j = warp; j < 32; j += 8) {
    uint32_t bits = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) bits = max(bits, AbsBits(tile[lane + 32 * k][j]));
    const float s = BlockScale(WarpMax(bits), fp8_max, pow2);
    const int64_t c = c0 + j;
    if (lane == 0) {
      col_scale[j] = s;
      if (c < cols) {
        scale_inv_t[b * pc + c] = ScaleInv(s);
      } else if (c < pc) {
        scale_inv_t[b * pc + c] = 1.0f;
      }
    }
  }
  __syncthreads();
  const int64_t nr = min(kB, rows - r0);
  for (int j = warp; j < 32; j += 8) {
    const int64_t c = c0 + j;
    if (c >= cols) continue;
    const float s = col_scale[j];
    uint8_t* out = data_t + c * rows + r0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int rr = lane + 32 * k;
      if (rr < nr) out[rr] = Encode<F>(tile[rr][j] * s);
    }
  }
}

}  // namespace

namespace cuda {

template <typename T>
Status QuantizeVec128(const T* in, int64_t rows, int64_t cols, Fp8Format format, bool pow2,
                      uint8_t* data, float* scale_inv, cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateBlockCast("QuantizeVec128", in, rows, cols, data, scale_inv));
  if (rows * cols == 0) return Status::Ok();
  const int64_t warps = BlockLayout::Pad4(rows) * BlockLayout::Blocks(cols);
  const unsigned blocks = static_cast<unsigned>((warps + 3) / 4);
  cuda_detail::DispatchFp8(format, [&]<Fp8Format F>() {
    Vec128Kernel<T, F><<<blocks, 128, 0, stream>>>(in, rows, cols, Fp8MaxFinite(format), pow2,
                                                    data, scale_inv);
    return 0;
  });
  FP8RT_CUDA_TRY_LAUNCH("QuantizeVec128");
  return Status::Ok();
}

template <typename T>
Status QuantizeBlk128(const T* in, int64_t rows, int64_t cols, Fp8Format format, bool pow2,
                      uint8_t* data, float* scale_inv, uint8_t* data_t, float* scale_inv_t,
                      cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(
      ValidateBlockCast("QuantizeBlk128", in, rows, cols, data, scale_inv, data_t, scale_inv_t));
  if (rows * cols == 0) return Status::Ok();
  if (BlockLayout::Blocks(rows) > 65535) {
    return Status::InvalidArgument(
        StrCat("QuantizeBlk128: rows=", rows, " exceed 65535 tiles of 128 (the grid's y limit)"));
  }
  const dim3 grid(static_cast<unsigned>(BlockLayout::Blocks(cols)),
                  static_cast<unsigned>(BlockLayout::Blocks(rows)));
  cuda_detail::DispatchFp8(format, [&]<Fp8Format F>() {
    Blk128Kernel<T, F><<<grid, 256, 0, stream>>>(in, rows, cols, Fp8MaxFinite(format), pow2, data,
                                                  scale_inv, data_t, scale_inv_t);
    return 0;
  });
  FP8RT_CUDA_TRY_LAUNCH("QuantizeBlk128");
  return Status::Ok();
}

template <typename T>
Status QuantizeVec128Columns(const T* in, int64_t rows, int64_t cols, Fp8Format format, bool pow2,
                             uint8_t* data_t, float* scale_inv_t, cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(
      ValidateBlockCast("QuantizeVec128Columns", in, rows, cols, data_t, scale_inv_t));
  if (rows * cols == 0) return Status::Ok();
  if (BlockLayout::Blocks(rows) > 65535) {
    return Status::InvalidArgument(StrCat("QuantizeVec128Columns: rows=", rows,
                                          " exceed 65535 blocks of 128 (the grid's y limit)"));
  }
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32),
                  static_cast<unsigned>(BlockLayout::Blocks(rows)));
  cuda_detail::DispatchFp8(format, [&]<Fp8Format F>() {
    Vec128ColumnsKernel<T, F><<<grid, 256, 0, stream>>>(in, rows, cols, Fp8MaxFinite(format), pow2,
                                                         data_t, scale_inv_t);
    return 0;
  });
  FP8RT_CUDA_TRY_LAUNCH("QuantizeVec128Columns");
  return Status::Ok();
}

#define FP8RT_INSTANTIATE(T)                                                                    \
  template Status QuantizeVec128<T>(const T*, int64_t, int64_t, Fp8Format, bool, uint8_t*,      \
                                    float*, cudaStream_t);                                      \
  template Status QuantizeBlk128<T>(const T*, int64_t, int64_t, Fp8Format, bool, uint8_t*,      \
                                    float*, uint8_t*, float*, cudaStream_t);                    \
  template Status QuantizeVec128Columns<T>(const T*, int64_t, int64_t, Fp8Format, bool,         \
                                           uint8_t*, float*, cudaStream_t);
FP8RT_INSTANTIATE(float)
FP8RT_INSTANTIATE(bf16)
#undef FP8RT_INSTANTIATE

}  // namespace cuda
}  // namespace fp8rt
