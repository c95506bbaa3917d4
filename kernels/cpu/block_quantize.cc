// CPU references of the block-scaled FP8 casts and GEMM (kernels/block_quantize.h).
#include "kernels/block_quantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/scaling.h"

namespace fp8rt {

Status ValidateBlockCast(const char* op, const void* in, int64_t rows, int64_t cols,
                         const void* data, const float* scale_inv, const void* data_t,
                         const float* scale_inv_t) {
  if (rows < 0 || cols < 0) {
    return Status::InvalidArgument(StrCat(op, ": rows=", rows, ", cols=", cols, " must be >= 0"));
  }
  if (rows * cols > 0 && (in == nullptr || data == nullptr || scale_inv == nullptr)) {
    return Status::InvalidArgument(StrCat(op, ": in, data and scale_inv must be non-null"));
  }
  if ((data_t == nullptr) != (scale_inv_t == nullptr)) {
    return Status::InvalidArgument(StrCat(op, ": data_t and scale_inv_t go together"));
  }
  return Status::Ok();
}

Result<GemmArgs> BlockScaledGemm(const BlockFp8Operand& a, const BlockFp8Operand& b, void* d,
                                 DType d_dtype) {
  if (a.cols != b.cols) {
    return Status::InvalidArgument(
        StrCat("BlockScaledGemm: K differs (A has ", a.cols, " columns, B ", b.cols, ")"));
  }
  auto dtype = [](Fp8Format f) { return f == Fp8Format::kE4M3 ? DType::kE4M3 : DType::kE5M2; };
  auto mode = [](bool blk) { return blk ? GemmScaleMode::kBlk128 : GemmScaleMode::kVec128; };
  GemmArgs g;
  g.M = a.rows, g.N = b.rows, g.K = a.cols;
  g.a = {a.data, dtype(a.format), false, 0, 0, a.scale_inv, mode(a.blk128)};
  g.b = {b.data, dtype(b.format), true, 0, 0, b.scale_inv, mode(b.blk128)};
  g.d = d, g.d_dtype = d_dtype;
  FP8RT_RETURN_IF_ERROR(ValidateGemm(g));
  return g;
}

namespace cpu {
namespace {

float AsFloat(float x) { return x; }
float AsFloat(bf16 x) { return ToFloat(x); }

// The block's scale (ComputeScale from its amax, kept at 1 without usable range), optionally
// rounded down to a power of two.
float BlockScale(float amax, Fp8Format f, bool pow2) {
  float s = ComputeScale(amax, 1.0f, Fp8MaxFinite(f), 0);
  if (pow2) s = BitsFloat(FloatBits(s) & 0xff800000u);
  return s;
}

// amax of |x| over rows r0..r1 x cols c0..c1 by bit pattern (a NaN wins, as in ComputeAmax).
template <typename T>
float BlockAmax(const T* in, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  uint32_t bits = 0;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = c0; c < c1; ++c) {
      bits = std::max(bits, FloatBits(AsFloat(in[r * cols + c])) & 0x7fffffffu);
    }
  }
  return BitsFloat(bits);
}

}  // namespace

template <typename T>
Status QuantizeVec128(const T* in, int64_t rows, int64_t cols, Fp8Format f, bool pow2,
                      uint8_t* data, float* scale_inv) {
  FP8RT_RETURN_IF_ERROR(ValidateBlockCast("QuantizeVec128", in, rows, cols, data, scale_inv));
  if (rows * cols == 0) return Status::Ok();
  std::fill_n(scale_inv, BlockLayout::Vec128ScaleCount(rows, cols), 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c0 = 0; c0 < cols; c0 += BlockLayout::kBlock) {
      const int64_t c1 = std::min(cols, c0 + BlockLayout::kBlock);
      const float s = BlockScale(BlockAmax(in, cols, r, r + 1, c0, c1), f, pow2);
      scale_inv[BlockLayout::Vec128Index(r, c0, rows)] = ScaleInv(s);
      for (int64_t c = c0; c < c1; ++c) data[r * cols + c] = Fp8Encode(AsFloat(in[r * cols + c]) * s, f);
    }
  }
  return Status::Ok();
}

template <typename T>
Status QuantizeVec128Columns(const T* in, int64_t rows, int64_t cols, Fp8Format f, bool pow2,
                             uint8_t* data_t, float* scale_inv_t) {
  FP8RT_RETURN_IF_ERROR(
      ValidateBlockCast("QuantizeVec128Columns", in, rows, cols, data_t, scale_inv_t));
  if (rows * cols == 0) return Status::Ok();
  std::vector<T> t(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = in[r * cols + c];
  }
  return QuantizeVec128(t.data(), cols, rows, f, pow2, data_t, scale_inv_t);
}

template <typename T>
Status QuantizeBlk128(const T* in, int64_t rows, int64_t cols, Fp8Format f, bool pow2,
                      uint8_t* data, float* scale_inv, uint8_t* data_t, float* scale_inv_t) {
  FP8RT_RETURN_IF_ERROR(
      ValidateBlockCast("QuantizeBlk128", in, rows, cols, data, scale_inv, data_t, scale_inv_t));
  if (rows * cols == 0) return Status::Ok();
  constexpr int64_t kB = BlockLayout::kBlock;
  std::fill_n(scale_inv, BlockLayout::Blk128ScaleCount(rows, cols), 1.0f);
  if (scale_inv_t) std::fill_n(scale_inv_t, BlockLayout::Blk128ScaleCount(cols, rows), 1.0f);
  for (int64_t r0 = 0; r0 < rows; r0 += kB) {
    for (int64_t c0 = 0; c0 < cols; c0 += kB) {
      const int64_t r1 = std::min(rows, r0 + kB), c1 = std::min(cols, c0 + kB);
      const float s = BlockScale(BlockAmax(in, cols, r0, r1, c0, c1), f, pow2);
      scale_inv[BlockLayout::Blk128Index(r0, c0, cols)] = ScaleInv(s);
      if (scale_inv_t) scale_inv_t[BlockLayout::Blk128Index(c0, r0, rows)] = ScaleInv(s);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const uint8_t code = Fp8Encode(AsFloat(in[r * cols + c]) * s, f);
          data[r * cols + c] = code;
          if (data_t) data_t[c * rows + r] = code;
        }
      }
    }
  }
  return Status::Ok();
}

namespace {
float ScaleOf(const BlockFp8Operand& t, int64_t r, int64_t c) {
  return t.scale_inv[t.blk128 ? BlockLayout::Blk128Index(r, c, t.cols)
                              : BlockLayout::Vec128Index(r, c, t.rows)];
}
}  // namespace

Status DequantizeBlock(const BlockFp8Operand& t, float* out) {
  FP8RT_RETURN_IF_ERROR(ValidateBlockCast("DequantizeBlock", t.data, t.rows, t.cols, out, t.scale_inv));
  for (int64_t r = 0; r < t.rows; ++r) {
    for (int64_t c = 0; c < t.cols; ++c) {
      out[r * t.cols + c] = Fp8Decode(t.data[r * t.cols + c], t.format) * ScaleOf(t, r, c);
    }
  }
  return Status::Ok();
}

Status GemmBlockScaled(const BlockFp8Operand& a, const BlockFp8Operand& b, float* d) {
  if (a.blk128 && b.blk128) {
    return Status::InvalidArgument(
        "GemmBlockScaled: both operands 128x128-scaled (cuBLASLt takes 1x128 x 1x128, 1x128 x "
        "128x128 and 128x128 x 1x128)");
  }
  if (a.cols != b.cols) {
    return Status::InvalidArgument(
        StrCat("GemmBlockScaled: K differs (A has ", a.cols, " columns, B ", b.cols, ")"));
  }
  FP8RT_RETURN_IF_ERROR(ValidateBlockCast("GemmBlockScaled (A)", a.data, a.rows, a.cols, d, a.scale_inv));
  FP8RT_RETURN_IF_ERROR(ValidateBlockCast("GemmBlockScaled (B)", b.data, b.rows, b.cols, d, b.scale_inv));
  const int64_t M = a.rows, N = b.rows, K = a.cols;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t k0 = 0; k0 < K; k0 += BlockLayout::kBlock) {
        float part = 0.0f;
        for (int64_t k = k0; k < std::min(K, k0 + BlockLayout::kBlock); ++k) {
          part += Fp8Decode(a.data[m * K + k], a.format) * Fp8Decode(b.data[n * K + k], b.format);
        }
        acc += part * ScaleOf(a, m, k0) * ScaleOf(b, n, k0);
      }
      d[m * N + n] = acc;
    }
  }
  return Status::Ok();
}

#define FP8RT_INSTANTIATE(T)                                                                    \
  template Status QuantizeVec128<T>(const T*, int64_t, int64_t, Fp8Format, bool, uint8_t*,      \
                                    float*);                                                    \
  template Status QuantizeBlk128<T>(const T*, int64_t, int64_t, Fp8Format, bool, uint8_t*,      \
                                    float*, uint8_t*, float*);                                  \
  template Status QuantizeVec128Columns<T>(const T*, int64_t, int64_t, Fp8Format, bool,         \
                                           uint8_t*, float*);
FP8RT_INSTANTIATE(float)
FP8RT_INSTANTIATE(bf16)
#undef FP8RT_INSTANTIATE

}  // namespace cpu
}  // namespace fp8rt
