// FP8 block scaling (DeepSeek-V3 style; fp8.scaling: block, issue [7 of 9]): casts whose scales
// belong to blocks of a tensor instead of the whole tensor, in the layouts cuBLASLt's block-scaled
// GEMMs read on Hopper (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F / _BLK128x128_32F;
// docs/BLOCK_SCALING.md), and the GEMM those compute. CPU references for now; the CUDA kernels and
// the cuBLASLt calls are compared against these.
//
// Semantics:
// - A block's scale is ComputeScale(amax of the block, 1, Fp8MaxFinite(format), 0) (kept at 1 for
//   a block whose amax is 0, inf or NaN); with pow2, rounded down to a power of two (mantissa
//   cleared, as TransformerEngine's default). Codes are Fp8Encode(x * scale) (satfinite, RNE);
//   the stored number is scale_inv = ScaleInv(scale): the multiplier the GEMM applies.
// - Vec128 (1 x 128): row r's columns 128 b .. 128 b + 127 form a block. scale_inv has
//   Vec128ScaleCount(rows, cols) floats, block (r, b) at b * Pad4(rows) + r (the row index
//   contiguous); padding entries are 1.
// - Blk128 (128 x 128): rows 128 i.., columns 128 j.. form a block. scale_inv has
//   Blk128ScaleCount(rows, cols) floats, block (i, j) at i * Pad4(Blocks(cols)) + j; padding
//   entries are 1. Its transposed copy (cols, rows) has the same codes and the transposed grid of
//   the same scales (no re-quantization): block (j, i) at j * Pad4(Blocks(rows)) + i.
// - GemmBlockScaled: D (M, N) = sum over K blocks b of
//     (sum over k in b of Decode(A[m][k]) * Decode(B[n][k])) * sA(m, b) * sB(n, b)
//   with A (M, K) and B (N, K) row-major (K innermost, as the TN GEMM reads them), FP32 partial
//   sums promoted once per 128 elements of K (DeepSeek-V3's accumulation). One operand may be
//   Blk128, not both (cuBLASLt has no BLK128x128 x BLK128x128).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/fp8.h"
#include "kernels/gemm.h"
#include "kernels/stream.h"

namespace fp8rt {

struct BlockLayout {
  static constexpr int64_t kBlock = 128;
  FP8RT_HD static int64_t Blocks(int64_t n) { return (n + kBlock - 1) / kBlock; }
  FP8RT_HD static int64_t Pad4(int64_t n) { return (n + 3) / 4 * 4; }
  FP8RT_HD static int64_t Vec128ScaleCount(int64_t rows, int64_t cols) { return Blocks(cols) * Pad4(rows); }
  FP8RT_HD static int64_t Vec128Index(int64_t r, int64_t c, int64_t rows) {
    return c / kBlock * Pad4(rows) + r;
  }
  FP8RT_HD static int64_t Blk128ScaleCount(int64_t rows, int64_t cols) {
    return Blocks(rows) * Pad4(Blocks(cols));
  }
  FP8RT_HD static int64_t Blk128Index(int64_t r, int64_t c, int64_t cols) {
    return r / kBlock * Pad4(Blocks(cols)) + c / kBlock;
  }
};

// One FP8 operand of a block-scaled GEMM: (rows, cols) codes, row-major, cols = K.
struct BlockFp8Operand {
  const uint8_t* data = nullptr;
  const float* scale_inv = nullptr;
  int64_t rows = 0, cols = 0;
  Fp8Format format = Fp8Format::kE4M3;
  bool blk128 = false;  // 128 x 128 blocks; else 1 x 128
};

// GemmArgs for D (M, N) = A B^T, a = A (M, K) and b = B (N, K) block-scaled (GemmScaleMode
// kVec128 / kBlk128 per BlockFp8Operand::blk128), D of d_dtype (fp32 or bf16): for GemmRunner::Run
// on device pointers, or cpu::Gemm on host ones (cpu::GemmBlockScaled's result up to FP32
// summation order). ValidateGemm's rules apply (M, N, K multiples of 16, not both 128x128, ...).
Result<GemmArgs> BlockScaledGemm(const BlockFp8Operand& a, const BlockFp8Operand& b, void* d,
                                 DType d_dtype);

// The casts' preconditions (InvalidArgument naming op otherwise): rows, cols >= 0; in, data,
// scale_inv non-null when the tensor is not empty; data_t and scale_inv_t both given or both null.
Status ValidateBlockCast(const char* op, const void* in, int64_t rows, int64_t cols,
                         const void* data, const float* scale_inv, const void* data_t = nullptr,
                         const float* scale_inv_t = nullptr);

namespace cpu {
template <typename T>
Status QuantizeVec128(const T* in, int64_t rows, int64_t cols, Fp8Format format, bool pow2,
                      uint8_t* data, float* scale_inv);
template <typename T>
Status QuantizeBlk128(const T* in, int64_t rows, int64_t cols, Fp8Format format, bool pow2,
                      uint8_t* data, float* scale_inv, uint8_t* data_t = nullptr,
                      float* scale_inv_t = nullptr);
// The columns of in (rows, cols), in blocks of 128 rows: the Vec128 cast of in's transpose, i.e.
// data_t (cols, rows) codes with scale_inv_t of Vec128ScaleCount(cols, rows) floats, as
// QuantizeVec128 of the transposed matrix writes them. What a wgrad operand needs (X^T, dY^T:
// K = the tokens).
template <typename T>
Status QuantizeVec128Columns(const T* in, int64_t rows, int64_t cols, Fp8Format format, bool pow2,
                             uint8_t* data_t, float* scale_inv_t);
// x = Decode(code) * scale_inv of its block, (rows, cols).
Status DequantizeBlock(const BlockFp8Operand& in, float* out);
// D (M, N) in FP32; a.rows = M, b.rows = N, a.cols = b.cols = K.
Status GemmBlockScaled(const BlockFp8Operand& a, const BlockFp8Operand& b, float* d);
}  // namespace cpu

#if FP8RT_WITH_CUDA
namespace cuda {
// As the CPU references, codes and scales bit for bit. Vec128: one warp per (row, block), one
// launch (it writes the padding too). Blk128: one 256-thread block per 128 x 128 tile, the
// transposed copy written from the same pass. Device pointers; no synchronisation.
template <typename T>
Status QuantizeVec128(const T* in, int64_t rows, int64_t cols, Fp8Format format, bool pow2,
                      uint8_t* data, float* scale_inv, cudaStream_t stream);
template <typename T>
Status QuantizeBlk128(const T* in, int64_t rows, int64_t cols, Fp8Format format, bool pow2,
                      uint8_t* data, float* scale_inv, uint8_t* data_t, float* scale_inv_t,
                      cudaStream_t stream);
// One 256-thread block per 128-row x 32-column tile: 32 blocks' amaxes, then their codes written
// as 128-byte rows of the transpose.
template <typename T>
Status QuantizeVec128Columns(const T* in, int64_t rows, int64_t cols, Fp8Format format, bool pow2,
                             uint8_t* data_t, float* scale_inv_t, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace fp8rt
