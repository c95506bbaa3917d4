// Reference GEMM (the oracle for GemmRunner and the CPU backend's matrix products), the shared
// precondition checks, and the FP8 linear-layer GEMM builders.
#include "kernels/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/block_quantize.h"

namespace fp8rt {
namespace {

bool IsFp8(DType t) { return t == DType::kE4M3 || t == DType::kE5M2; }

size_t ElemBytes(DType t) {
  switch (t) {
    case DType::kFloat32:
      return 4;
    case DType::kBFloat16:
      return 2;
    case DType::kE4M3:
    case DType::kE5M2:
      return 1;
  }
  return 1;
}

bool HasBias(Epilogue e) {
  return e == Epilogue::kBias || e == Epilogue::kBiasGelu || e == Epilogue::kBiasGeluAux;
}
bool HasGelu(Epilogue e) {
  return e == Epilogue::kGelu || e == Epilogue::kBiasGelu || e == Epilogue::kBiasGeluAux;
}

// Stored shape of an operand whose op() is (rows, cols).
int64_t StoredCols(const GemmOperand& x, int64_t op_rows, int64_t op_cols) {
  return x.trans ? op_rows : op_cols;
}
int64_t StoredRows(const GemmOperand& x, int64_t op_rows, int64_t op_cols) {
  return x.trans ? op_cols : op_rows;
}

Status CheckOperand(const char* name, const GemmOperand& x, int64_t op_rows, int64_t op_cols) {
  if (x.ptr == nullptr) return Status::InvalidArgument(StrCat("gemm: ", name, ".ptr is null"));
  const int64_t cols = StoredCols(x, op_rows, op_cols);
  if (x.ld != 0 && x.ld < cols) {
    return Status::InvalidArgument(StrCat("gemm: ", name, ".ld=", x.ld, " is less than the ", cols,
                                          " columns of the stored ", name, " (0 = packed)"));
  }
  if (x.batch_stride < 0) {
    return Status::InvalidArgument(
        StrCat("gemm: ", name, ".batch_stride=", x.batch_stride, " must be >= 0 (0 = packed)"));
  }
  return Status::Ok();
}

// Block scaling's rules on Hopper (docs/BLOCK_SCALING.md, from cuBLASLt's documentation).
Status CheckBlockScaling(const GemmArgs& g) {
  const GemmScaleMode ma = g.a.scale_mode, mb = g.b.scale_mode;
  if (ma == GemmScaleMode::kTensor && mb == GemmScaleMode::kTensor) return Status::Ok();
  const std::string modes = StrCat("a is ", GemmScaleModeName(ma), " and b is ", GemmScaleModeName(mb));
  if (ma == GemmScaleMode::kTensor || mb == GemmScaleMode::kTensor) {
    return Status::InvalidArgument(
        StrCat("gemm: ", modes, ": block scaling needs both operands block-scaled"));
  }
  if (ma == GemmScaleMode::kBlk128 && mb == GemmScaleMode::kBlk128) {
    return Status::InvalidArgument(
        StrCat("gemm: ", modes, ": cuBLASLt has no 128x128 x 128x128 GEMM (make one side vec128)"));
  }
  if (g.batch != 1) {
    return Status::InvalidArgument(StrCat("gemm: block scaling with batch=", g.batch, "; needs 1"));
  }
  if (g.fast_accum) {
    return Status::InvalidArgument(
        "gemm: block scaling with fast_accum; its partial sums must be promoted to FP32 every 128 "
        "elements of K (fast_accum = false)");
  }
  if (g.epilogue != Epilogue::kNone && g.epilogue != Epilogue::kBias) {
    return Status::InvalidArgument(StrCat("gemm: block scaling with epilogue ",
                                          EpilogueName(g.epilogue), "; allowed: none, bias"));
  }
  if (g.a.ld != 0 && g.a.ld != g.K) {
    return Status::InvalidArgument(StrCat("gemm: block scaling with a.ld=", g.a.ld,
                                          "; its scales describe a packed (M, K) a"));
  }
  if (g.b.ld != 0 && g.b.ld != g.K) {
    return Status::InvalidArgument(StrCat("gemm: block scaling with b.ld=", g.b.ld,
                                          "; its scales describe a packed (N, K) b"));
  }
  return Status::Ok();
}

Status CheckFp8(const GemmArgs& g) {
  if (!IsFp8(g.a.dtype) || !IsFp8(g.b.dtype)) {
    return Status::InvalidArgument(StrCat("gemm: a is ", DTypeName(g.a.dtype), " and b is ",
                                          DTypeName(g.b.dtype),
                                          ": FP8 GEMMs need both operands FP8"));
  }
  if (g.a.dtype == DType::kE5M2 && g.b.dtype == DType::kE5M2) {
    return Status::InvalidArgument(
        "gemm: a and b are both e5m2; cuBLASLt needs at least one e4m3 operand");
  }
  if (g.a.scale_inv == nullptr || g.b.scale_inv == nullptr) {
    return Status::InvalidArgument(StrCat("gemm: FP8 operand ",
                                          g.a.scale_inv == nullptr ? "a" : "b",
                                          ".scale_inv is null (pass Fp8Tensor::scale_inv)"));
  }
  if (g.a.trans) {
    return Status::InvalidArgument(
        "gemm: FP8 a with trans=true; Hopper's FP8 GEMM needs both operands K-contiguous "
        "(trans_a=false, trans_b=true): pass the transposed FP8 copy (Fp8Tensor::data_t) "
        "instead");
  }
  if (!g.b.trans) {
    return Status::InvalidArgument(
        "gemm: FP8 b with trans=false; Hopper's FP8 GEMM needs both operands K-contiguous "
        "(trans_a=false, trans_b=true): pass the transposed FP8 copy (Fp8Tensor::data_t) "
        "instead");
  }
  const struct {
    const char* name;
    int64_t v;
  } dims[] = {{"M", g.M}, {"N", g.N}, {"K", g.K}};
  for (const auto& d : dims) {
    if (d.v % 16 != 0) {
      return Status::InvalidArgument(StrCat("gemm: FP8 GEMM with ", d.name, "=", d.v,
                                            ", which is not a multiple of 16 (callers pad)"));
    }
  }
  if (g.a.ld % 16 != 0 || g.b.ld % 16 != 0) {
    return Status::InvalidArgument(StrCat("gemm: FP8 pitches a.ld=", g.a.ld, " b.ld=", g.b.ld,
                                          " must be multiples of 16 (0 = packed)"));
  }
  if (g.d_dtype != DType::kFloat32 && g.d_dtype != DType::kBFloat16) {
    return Status::InvalidArgument(
        StrCat("gemm: FP8 GEMM output ", DTypeName(g.d_dtype), "; allowed: fp32, bf16"));
  }
  return CheckBlockScaling(g);
}

Status CheckHighPrecision(const GemmArgs& g) {
  if (g.a.dtype != g.b.dtype) {
    return Status::InvalidArgument(StrCat("gemm: a is ", DTypeName(g.a.dtype), " and b is ",
                                          DTypeName(g.b.dtype), "; they must match"));
  }
  if (g.a.dtype == DType::kFloat32 && g.d_dtype != DType::kFloat32) {
    return Status::InvalidArgument(
        StrCat("gemm: fp32 operands with ", DTypeName(g.d_dtype), " output; allowed: fp32"));
  }
  if (g.d_dtype != DType::kFloat32 && g.d_dtype != DType::kBFloat16) {
    return Status::InvalidArgument(
        StrCat("gemm: output ", DTypeName(g.d_dtype), "; allowed: fp32, bf16"));
  }
  return Status::Ok();
}

// ---- reference arithmetic ----

double LoadAsDouble(const void* base, int64_t idx, DType t, const float* fp8_table) {
  switch (t) {
    case DType::kFloat32:
      return static_cast<const float*>(base)[idx];
    case DType::kBFloat16:
      return ToFloat(static_cast<const bf16*>(base)[idx]);
    case DType::kE4M3:
    case DType::kE5M2:
      return fp8_table[static_cast<const uint8_t*>(base)[idx]];
  }
  return 0;
}

void StoreFromDouble(void* base, int64_t idx, DType t, double v) {
  if (t == DType::kFloat32) {
    static_cast<float*>(base)[idx] = static_cast<float>(v);
  } else {
    static_cast<bf16*>(base)[idx] = bf16(static_cast<float>(v));
  }
}

double GeluTanh(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
// d/dx of GeluTanh.
double GeluTanhGrad(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  const double th = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

// op(X) of one batch as a packed (rows, cols) double matrix; a block-scaled FP8 operand's values
// times their block's scale_inv (exact in double).
void LoadOp(const GemmOperand& x, const void* base, int64_t rows, int64_t cols, int64_t ld,
            std::vector<double>& out) {
  out.resize(static_cast<size_t>(rows * cols));
  const float* table =
      IsFp8(x.dtype) ? Fp8DecodeTable(x.dtype == DType::kE4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2)
                     : nullptr;
  // The stored matrix is (rows, cols), or (cols, rows) with trans; block scales index it.
  const int64_t stored_rows = x.trans ? cols : rows, stored_cols = x.trans ? rows : cols;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t idx = x.trans ? c * ld + r : r * ld + c;
      double v = LoadAsDouble(base, idx, x.dtype, table);
      const int64_t sr = x.trans ? c : r, sc = x.trans ? r : c;
      if (x.scale_mode == GemmScaleMode::kVec128) {
        v *= x.scale_inv[BlockLayout::Vec128Index(sr, sc, stored_rows)];
      } else if (x.scale_mode == GemmScaleMode::kBlk128) {
        v *= x.scale_inv[BlockLayout::Blk128Index(sr, sc, stored_cols)];
      }
      out[r * cols + c] = v;
    }
  }
}

// acc (M, N) = a (M, K) b (K, N), all packed. i-k-j order keeps the inner loop contiguous; rows
// are split over threads when the problem is big enough to pay for them.
void MatMulCore(const double* a, const double* b, double* acc, int64_t M, int64_t N, int64_t K) {
  auto rows = [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      double* c = acc + i * N;
      std::fill(c, c + N, 0.0);
      for (int64_t k = 0; k < K; ++k) {
        const double av = a[i * K + k];
        const double* br = b + k * N;
        for (int64_t j = 0; j < N; ++j) c[j] += av * br[j];
      }
    }
  };
  const double work = static_cast<double>(M) * N * K;
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t nthreads = std::min<int64_t>({hw, M, static_cast<int64_t>(work / (1 << 22)) + 1});
  if (nthreads <= 1) {
    rows(0, M);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t per = (M + nthreads - 1) / nthreads;
  for (int64_t t = 0; t < nthreads; ++t) {
    const int64_t r0 = t * per, r1 = std::min(M, r0 + per);
    if (r0 < r1) pool.emplace_back(rows, r0, r1);
  }
  for (auto& th : pool) th.join();
}

template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return T(static_cast<float>(v));
  }
}
template <typename T>
double ToDouble(T v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return ToFloat(v);
  }
}

}  // namespace

const char* EpilogueName(Epilogue e) {
  switch (e) {
    case Epilogue::kNone:
      return "none";
    case Epilogue::kBias:
      return "bias";
    case Epilogue::kGelu:
      return "gelu";
    case Epilogue::kBiasGelu:
      return "bias+gelu";
    case Epilogue::kBiasGeluAux:
      return "bias+gelu+aux";
    case Epilogue::kDGelu:
      return "dgelu";
  }
  return "?";
}

const char* GemmScaleModeName(GemmScaleMode m) {
  switch (m) {
    case GemmScaleMode::kTensor:
      return "tensor";
    case GemmScaleMode::kVec128:
      return "vec128";
    case GemmScaleMode::kBlk128:
      return "blk128";
  }
  return "?";
}

DType GemmBiasDType(const GemmArgs& g) {
  if (IsFp8(g.a.dtype) && g.d_dtype == DType::kFloat32) return DType::kBFloat16;
  return g.d_dtype;
}

Status ValidateGemm(const GemmArgs& g) {
  if (g.M < 0 || g.N < 0) {
    return Status::InvalidArgument(StrCat("gemm: M=", g.M, ", N=", g.N, "; must be >= 0"));
  }
  if (g.K < 1) return Status::InvalidArgument(StrCat("gemm: K=", g.K, "; must be >= 1"));
  if (g.batch < 1)
    return Status::InvalidArgument(StrCat("gemm: batch=", g.batch, "; must be >= 1"));
  FP8RT_RETURN_IF_ERROR(CheckOperand("a", g.a, g.M, g.K));
  FP8RT_RETURN_IF_ERROR(CheckOperand("b", g.b, g.K, g.N));
  if (g.d == nullptr) return Status::InvalidArgument("gemm: d is null");
  if (g.ldd != 0 && g.ldd < g.N) {
    return Status::InvalidArgument(
        StrCat("gemm: ldd=", g.ldd, " is less than N=", g.N, " (0 = packed)"));
  }
  if (g.d_batch_stride < 0) {
    return Status::InvalidArgument(
        StrCat("gemm: d_batch_stride=", g.d_batch_stride, " must be >= 0 (0 = packed)"));
  }
  if (IsFp8(g.a.dtype) || IsFp8(g.b.dtype)) {
    FP8RT_RETURN_IF_ERROR(CheckFp8(g));
  } else {
    FP8RT_RETURN_IF_ERROR(CheckHighPrecision(g));
    if (g.a.scale_mode != GemmScaleMode::kTensor || g.b.scale_mode != GemmScaleMode::kTensor) {
      return Status::InvalidArgument(StrCat("gemm: ", DTypeName(g.a.dtype),
                                            " operands with a block scale mode (FP8 only)"));
    }
  }
  if (HasBias(g.epilogue) && g.bias == nullptr) {
    return Status::InvalidArgument(
        StrCat("gemm: epilogue ", EpilogueName(g.epilogue), " needs a bias (N elements)"));
  }
  if (g.epilogue == Epilogue::kBiasGeluAux || g.epilogue == Epilogue::kDGelu) {
    const char* name = EpilogueName(g.epilogue);
    if (g.aux == nullptr) return Status::InvalidArgument(StrCat("gemm: epilogue ", name, " needs aux"));
    if (g.N % 8 != 0) {
      return Status::InvalidArgument(StrCat("gemm: epilogue ", name, " with N=", g.N,
                                            "; the aux pitch N must be a multiple of 8"));
    }
    if (g.epilogue == Epilogue::kDGelu && g.d_dtype != DType::kBFloat16 &&
        g.d_dtype != DType::kFloat32) {
      return Status::InvalidArgument("gemm: epilogue dgelu needs a bf16 or fp32 output");
    }
  }
  return Status::Ok();
}

Result<GemmArgs> Fp8Fprop(const Fp8Tensor& x, const Fp8Tensor& w, void* y, DType y_dtype,
                          const void* bias, bool fast_accum) {
  if (x.cols != w.cols) {
    return Status::InvalidArgument(StrCat("Fp8Fprop: x is (", x.rows, ", ", x.cols, ") and w is (",
                                          w.rows, ", ", w.cols, "); the K columns must match"));
  }
  GemmArgs g;
  g.M = x.rows, g.N = w.rows, g.K = x.cols;
  g.a = {x.data, ToDType(x.format), false, 0, 0, x.scale_inv};
  g.b = {w.data, ToDType(w.format), true, 0, 0, w.scale_inv};
  g.d = y, g.d_dtype = y_dtype;
  g.bias = bias;
  g.epilogue = bias != nullptr ? Epilogue::kBias : Epilogue::kNone;
  g.fast_accum = fast_accum;
  FP8RT_RETURN_IF_ERROR(ValidateGemm(g));
  return g;
}

Result<GemmArgs> Fp8Dgrad(const Fp8Tensor& dy, const Fp8Tensor& w, void* dx, DType dx_dtype,
                          bool fast_accum) {
  if (dy.cols != w.rows) {
    return Status::InvalidArgument(StrCat("Fp8Dgrad: dy is (", dy.rows, ", ", dy.cols,
                                          ") and w is (", w.rows, ", ", w.cols,
                                          "); dy.cols must equal w.rows (N)"));
  }
  if (w.data_t == nullptr) {
    return Status::InvalidArgument(
        "Fp8Dgrad: w.data_t is null; dgrad reads the weight's transposed FP8 copy (K, N)");
  }
  GemmArgs g;
  g.M = dy.rows, g.N = w.cols, g.K = dy.cols;
  g.a = {dy.data, ToDType(dy.format), false, 0, 0, dy.scale_inv};
  g.b = {w.data_t, ToDType(w.format), true, 0, 0, w.scale_inv};
  g.d = dx, g.d_dtype = dx_dtype;
  g.fast_accum = fast_accum;
  FP8RT_RETURN_IF_ERROR(ValidateGemm(g));
  return g;
}

Result<GemmArgs> Fp8Wgrad(const Fp8Tensor& dy, const Fp8Tensor& x, float* dw, bool accumulate,
                          bool fast_accum) {
  if (dy.rows != x.rows) {
    return Status::InvalidArgument(StrCat("Fp8Wgrad: dy is (", dy.rows, ", ", dy.cols,
                                          ") and x is (", x.rows, ", ", x.cols,
                                          "); the M rows must match"));
  }
  if (dy.data_t == nullptr || x.data_t == nullptr) {
    return Status::InvalidArgument(StrCat("Fp8Wgrad: ", dy.data_t == nullptr ? "dy" : "x",
                                          ".data_t is null; wgrad reads the transposed FP8 "
                                          "copies of dy (N, M) and x (K, M)"));
  }
  GemmArgs g;
  g.M = dy.cols, g.N = x.cols, g.K = dy.rows;
  g.a = {dy.data_t, ToDType(dy.format), false, 0, 0, dy.scale_inv};
  g.b = {x.data_t, ToDType(x.format), true, 0, 0, x.scale_inv};
  g.d = dw, g.d_dtype = DType::kFloat32;
  g.beta = accumulate ? 1.0f : 0.0f;
  g.fast_accum = fast_accum;
  FP8RT_RETURN_IF_ERROR(ValidateGemm(g));
  return g;
}

namespace cpu {

Status Gemm(const GemmArgs& g) {
  FP8RT_RETURN_IF_ERROR(ValidateGemm(g));
  if (g.M == 0 || g.N == 0) return Status::Ok();
  const int64_t M = g.M, N = g.N, K = g.K;
  const int64_t lda = g.a.ld != 0 ? g.a.ld : StoredCols(g.a, M, K);
  const int64_t ldb = g.b.ld != 0 ? g.b.ld : StoredCols(g.b, K, N);
  const int64_t ldd = g.ldd != 0 ? g.ldd : N;
  const int64_t sa = g.a.batch_stride != 0 ? g.a.batch_stride : StoredRows(g.a, M, K) * lda;
  const int64_t sb = g.b.batch_stride != 0 ? g.b.batch_stride : StoredRows(g.b, K, N) * ldb;
  const int64_t sd = g.d_batch_stride != 0 ? g.d_batch_stride : M * ldd;
  // Block scales are applied as the operands are loaded; a tensor scale once to the product.
  const bool tensor_fp8 = IsFp8(g.a.dtype) && g.a.scale_mode == GemmScaleMode::kTensor;
  const double scale = static_cast<double>(g.alpha) *
                       (tensor_fp8 ? static_cast<double>(*g.a.scale_inv) * *g.b.scale_inv : 1.0);
  const DType bias_t = GemmBiasDType(g);
  const float* no_table = nullptr;

  std::vector<double> opa, opb, acc(static_cast<size_t>(M * N));
  for (int bi = 0; bi < g.batch; ++bi) {
    const auto* a = static_cast<const char*>(g.a.ptr) + bi * sa * ElemBytes(g.a.dtype);
    const auto* b = static_cast<const char*>(g.b.ptr) + bi * sb * ElemBytes(g.b.dtype);
    char* d = static_cast<char*>(g.d) + bi * sd * ElemBytes(g.d_dtype);
    const char* c = g.c != nullptr ? static_cast<const char*>(g.c) + bi * sd * ElemBytes(g.d_dtype) : d;
    char* aux = g.aux ? static_cast<char*>(g.aux) + bi * M * N * ElemBytes(g.d_dtype) : nullptr;
    LoadOp(g.a, a, M, K, lda, opa);
    LoadOp(g.b, b, K, N, ldb, opb);
    MatMulCore(opa.data(), opb.data(), acc.data(), M, N, K);
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        double v = scale * acc[i * N + j];
        if (g.beta != 0.0f) v += g.beta * LoadAsDouble(c, i * ldd + j, g.d_dtype, no_table);
        if (HasBias(g.epilogue)) v += LoadAsDouble(g.bias, j, bias_t, no_table);
        if (g.epilogue == Epilogue::kBiasGeluAux) StoreFromDouble(aux, i * N + j, g.d_dtype, v);
        if (HasGelu(g.epilogue)) v = GeluTanh(v);
        if (g.epilogue == Epilogue::kDGelu) {
          v *= GeluTanhGrad(LoadAsDouble(aux, i * N + j, g.d_dtype, no_table));
        }
        StoreFromDouble(d, i * ldd + j, g.d_dtype, v);
      }
    }
  }
  return Status::Ok();
}

template <typename T>
void MatMul(T* d, const T* a, const T* b, int64_t M, int64_t N, int64_t K, bool trans_a,
            bool trans_b, double alpha, double beta) {
  if (M <= 0 || N <= 0) return;
  std::vector<double> opa(static_cast<size_t>(M * K)), opb(static_cast<size_t>(K * N));
  std::vector<double> acc(static_cast<size_t>(M * N));
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t c = 0; c < K; ++c)
      opa[r * K + c] = ToDouble(trans_a ? a[c * M + r] : a[r * K + c]);
  }
  for (int64_t r = 0; r < K; ++r) {
    for (int64_t c = 0; c < N; ++c)
      opb[r * N + c] = ToDouble(trans_b ? b[c * K + r] : b[r * N + c]);
  }
  MatMulCore(opa.data(), opb.data(), acc.data(), M, N, K);
  for (int64_t i = 0; i < M * N; ++i) {
    double v = alpha * acc[i];
    if (beta != 0.0) v += beta * ToDouble(d[i]);
    d[i] = FromDouble<T>(v);
  }
}

template void MatMul<float>(float*, const float*, const float*, int64_t, int64_t, int64_t, bool,
                            bool, double, double);
template void MatMul<bf16>(bf16*, const bf16*, const bf16*, int64_t, int64_t, int64_t, bool, bool,
                           double, double);
template void MatMul<double>(double*, const double*, const double*, int64_t, int64_t, int64_t, bool,
                             bool, double, double);

}  // namespace cpu
}  // namespace fp8rt
