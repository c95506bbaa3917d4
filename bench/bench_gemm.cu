// GEMM rows: the raw cuBLASLt ceilings (FP8 and BF16 8192^3, written here directly against
// cuBLASLt), then GemmRunner on those shapes and on the GPT-1.3B linear layers, each timed
// against a raw call of the same problem in the same run, and spot-checked against a CPU dot.
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench.h"
#include "common/cuda_check.h"
#include "kernels/block_quantize.h"
#include "kernels/dtype.h"
#include "kernels/fp8.h"
#include "kernels/gemm.h"

namespace fp8rt::bench {
namespace {

#define LT_CHECK(expr)                                                   \
  do {                                                                   \
    cublasStatus_t st_ = (expr);                                         \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                  \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, \
                   cublasLtGetStatusString(st_));                        \
      std::abort();                                                      \
    }                                                                    \
  } while (0)

size_t Bytes(DType t) { return t == DType::kFloat32 ? 4 : t == DType::kBFloat16 ? 2 : 1; }
bool IsFp8(DType t) { return t == DType::kE4M3 || t == DType::kE5M2; }
cudaDataType_t CudaType(DType t) {
  switch (t) {
    case DType::kFloat32:
      return CUDA_R_32F;
    case DType::kBFloat16:
      return CUDA_R_16BF;
    case DType::kE4M3:
      return CUDA_R_8F_E4M3;
    case DType::kE5M2:
      return CUDA_R_8F_E5M2;
  }
  return CUDA_R_32F;
}

// One problem in row-major terms (as GemmArgs has it), with its device buffers.
struct Case {
  std::string op, layer;
  int64_t M, N, K;
  DType ta, tb, td;
  bool trans_a, trans_b, fast;
  float beta;
  void *a = nullptr, *b = nullptr, *d = nullptr;
  float* scale = nullptr;  // device 1.0f, for FP8 operands
  // Block scaling (both or neither): the scale modes and per-block scales (all 1.0f) of a and b.
  GemmScaleMode ma = GemmScaleMode::kTensor, mb = GemmScaleMode::kTensor;
  float *sa = nullptr, *sb = nullptr;

  bool Block() const { return ma != GemmScaleMode::kTensor; }
  GemmArgs Args() const {
    GemmArgs g;
    g.M = M, g.N = N, g.K = K;
    g.a = {a, ta, trans_a, 0, 0, IsFp8(ta) ? (Block() ? sa : scale) : nullptr, ma};
    g.b = {b, tb, trans_b, 0, 0, IsFp8(tb) ? (Block() ? sb : scale) : nullptr, mb};
    g.d = d, g.d_dtype = td, g.beta = beta, g.fast_accum = fast;
    return g;
  }
  double Flops() const { return 2.0 * M * N * K; }
  std::string Shape() const { return StrCat(M, "x", N, "x", K); }
};

// The same problem issued straight to cuBLASLt: column-major D^T (N, M) = op(B)^T op(A)^T, so
// cuBLASLt's A is our B. Descriptors and the heuristic-best algorithm are set up once; Run() is
// the bare cublasLtMatmul.
class RawMatmul {
 public:
  RawMatmul(cublasLtHandle_t h, void* ws, size_t ws_bytes, const Case& c)
      : h_(h), ws_(ws), ws_bytes_(ws_bytes), c_(c) {
    LT_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t op_a = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int32_t op_b = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, 4));
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, 4));
    if (IsFp8(c.ta)) {
      const int8_t fast = c.fast;
      const void* s_a = c.Block() ? c.sb : c.scale;  // cuBLASLt's A is our B
      const void* s_b = c.Block() ? c.sa : c.scale;
      LT_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, 1));
      LT_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &s_a,
                                              sizeof(s_a)));
      LT_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &s_b,
                                              sizeof(s_b)));
      if (c.Block()) {
        auto mode = [](GemmScaleMode m) -> int32_t {
          return m == GemmScaleMode::kBlk128 ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                             : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        };
        const int32_t mode_a = mode(c.mb), mode_b = mode(c.ma);
        LT_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a,
                                                sizeof(mode_a)));
        LT_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b,
                                                sizeof(mode_b)));
      }
    }
    const int64_t lda = c.trans_a ? c.M : c.K, ldb = c.trans_b ? c.K : c.N;
    LT_CHECK(cublasLtMatrixLayoutCreate(&la_, CudaType(c.tb), c.trans_b ? c.K : c.N,
                                        c.trans_b ? c.N : c.K, ldb));
    LT_CHECK(cublasLtMatrixLayoutCreate(&lb_, CudaType(c.ta), c.trans_a ? c.M : c.K,
                                        c.trans_a ? c.K : c.M, lda));
    LT_CHECK(cublasLtMatrixLayoutCreate(&ld_, CudaType(c.td), c.N, c.M, c.N));
    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t wsb = ws_bytes;
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &wsb, sizeof(wsb)));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    LT_CHECK(cublasLtMatmulAlgoGetHeuristic(h_, desc_, la_, lb_, ld_, ld_, pref, 1, &res, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) {
      std::fprintf(stderr, "raw cuBLASLt: no algorithm for %s %s\n", c.op.c_str(),
                   c.Shape().c_str());
      std::abort();
    }
    algo_ = res.algo;
  }
  ~RawMatmul() {
    cublasLtMatrixLayoutDestroy(la_);
    cublasLtMatrixLayoutDestroy(lb_);
    cublasLtMatrixLayoutDestroy(ld_);
    cublasLtMatmulDescDestroy(desc_);
  }
  void Run(cudaStream_t s) {
    const float alpha = 1.f, beta = c_.beta;
    LT_CHECK(cublasLtMatmul(h_, desc_, &alpha, c_.b, la_, c_.a, lb_, &beta, c_.d, ld_, c_.d, ld_,
                            &algo_, ws_, ws_bytes_, s));
  }

 private:
  cublasLtHandle_t h_;
  void* ws_;
  size_t ws_bytes_;
  Case c_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, ld_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
};

// Random non-zero values in [-2, 2) in the case's dtype (FP8: encoded with scale 1).
void FillOperand(void* p, size_t n, DType t, uint64_t seed, cudaStream_t s) {
  if (t == DType::kFloat32) {
    FillUniform(static_cast<float*>(p), n, -2.f, 2.f, seed, s);
  } else if (t == DType::kBFloat16) {
    FillUniformBf16(p, n, -2.f, 2.f, seed, s);
  } else {
    float* tmp = static_cast<float*>(DeviceAlloc(n * 4));
    FillUniform(tmp, n, -2.f, 2.f, seed, s);
    FP8RT_CHECK_OK(cuda::Fp8EncodeArray(tmp, static_cast<uint8_t*>(p), n,
                                        t == DType::kE4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2,
                                        s));
    FP8RT_CUDA_CHECK(cudaStreamSynchronize(s));
    DeviceFree(tmp);
  }
}

double HostValue(const std::vector<uint8_t>& bytes, size_t i, DType t) {
  switch (t) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, &bytes[4 * i], 4);
      return f;
    }
    case DType::kBFloat16: {
      bf16 b;
      std::memcpy(&b.bits, &bytes[2 * i], 2);
      return ToFloat(b);
    }
    case DType::kE4M3:
      return Fp8Decode(bytes[i], Fp8Format::kE4M3);
    case DType::kE5M2:
      return Fp8Decode(bytes[i], Fp8Format::kE5M2);
  }
  return 0;
}

// `count` elements of a device matrix starting at `first`, `stride` elements apart.
std::vector<uint8_t> Fetch(const void* base, int64_t first, int64_t count, int64_t stride,
                           DType t) {
  const size_t es = Bytes(t);
  std::vector<uint8_t> out(count * es);
  FP8RT_CUDA_CHECK(cudaMemcpy2D(out.data(), es, static_cast<const char*>(base) + first * es,
                                stride * es, es, count, cudaMemcpyDeviceToHost));
  return out;
}

// Recomputes a few elements of D = op(A) op(B) with a CPU dot product (D zeroed, one run).
bool Verify(GemmRunner& runner, const Case& c, cudaStream_t s) {
  FP8RT_CUDA_CHECK(cudaMemsetAsync(c.d, 0, c.M * c.N * Bytes(c.td), s));
  FP8RT_CHECK_OK(runner.Run(c.Args(), s));
  FP8RT_CUDA_CHECK(cudaStreamSynchronize(s));
  const int64_t lda = c.trans_a ? c.M : c.K, ldb = c.trans_b ? c.K : c.N;
  const int64_t picks[][2] = {{0, 0}, {c.M - 1, c.N - 1}, {c.M / 3, c.N / 2}, {c.M / 2, 7}};
  for (const auto& p : picks) {
    const int64_t i = p[0], j = p[1];
    // Row i of op(A): A[i, :] or, stored transposed, column i. Column j of op(B) likewise.
    const std::vector<uint8_t> arow =
        c.trans_a ? Fetch(c.a, i, c.K, lda, c.ta) : Fetch(c.a, i * lda, c.K, 1, c.ta);
    const std::vector<uint8_t> bcol =
        c.trans_b ? Fetch(c.b, j * ldb, c.K, 1, c.tb) : Fetch(c.b, j, c.K, ldb, c.tb);
    double ref = 0, scale = 0;
    for (int64_t k = 0; k < c.K; ++k) {
      const double prod = HostValue(arow, k, c.ta) * HostValue(bcol, k, c.tb);
      ref += prod;
      scale += prod * prod;
    }
    const double got = HostValue(Fetch(c.d, i * c.N + j, 1, 1, c.td), 0, c.td);
    // bf16 output rounds to 2^-9 relative. FP8 fast accumulation (no promotion of the partial
    // sums to FP32) loses more with K: 1.7% was seen at K = 8192.
    const double rel = IsFp8(c.ta) && c.fast ? 4e-2 : 1e-2;
    if (std::fabs(got - ref) > rel * (std::fabs(ref) + std::sqrt(scale))) {
      std::fprintf(stderr, "gemm bench verify FAILED: %s %s D[%ld, %ld] = %g, CPU dot %g\n",
                   c.op.c_str(), c.Shape().c_str(), long(i), long(j), got, ref);
      return false;
    }
  }
  return true;
}

// Median times of two functions timed call by call in alternation (and alternating which goes
// first), so both see the same clocks: at ~800 TFLOP/s an H200 throttles within a second, and
// timing one after the other favours whichever ran first on a cooler chip.
std::pair<double, double> PairedMedianMs(Context& ctx, const std::function<void()>& fa,
                                         const std::function<void()>& fb) {
  for (int i = 0; i < ctx.warmup; ++i) fa(), fb();
  const int n = 3 * ctx.repeats;
  std::vector<cudaEvent_t> ev(3 * n);
  for (auto& e : ev) FP8RT_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < n; ++i) {
    const bool a_first = i % 2 == 0;
    FP8RT_CUDA_CHECK(cudaEventRecord(ev[3 * i], ctx.stream));
    a_first ? fa() : fb();
    FP8RT_CUDA_CHECK(cudaEventRecord(ev[3 * i + 1], ctx.stream));
    a_first ? fb() : fa();
    FP8RT_CUDA_CHECK(cudaEventRecord(ev[3 * i + 2], ctx.stream));
  }
  FP8RT_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  std::vector<float> ta(n), tb(n);
  for (int i = 0; i < n; ++i) {
    float first, second;
    FP8RT_CUDA_CHECK(cudaEventElapsedTime(&first, ev[3 * i], ev[3 * i + 1]));
    FP8RT_CUDA_CHECK(cudaEventElapsedTime(&second, ev[3 * i + 1], ev[3 * i + 2]));
    (i % 2 == 0 ? ta : tb)[i] = first;
    (i % 2 == 0 ? tb : ta)[i] = second;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[n / 2], tb[n / 2]};
}

struct RawContext {
  cublasLtHandle_t handle = nullptr;
  void* ws = nullptr;
  size_t ws_bytes = GemmRunner::kDefaultWorkspaceBytes;
};

// Allocates and fills the case's buffers; times raw and runner; adds the row(s).
void Measure(Context& ctx, RawContext& raw, GemmRunner& runner, Case c, bool ceiling_row) {
  const size_t na = c.M * c.K, nb = c.K * c.N, nd = c.M * c.N;
  c.a = DeviceAlloc(na * Bytes(c.ta));
  c.b = DeviceAlloc(nb * Bytes(c.tb));
  c.d = DeviceAlloc(nd * Bytes(c.td));
  c.scale = static_cast<float*>(DeviceAlloc(sizeof(float)));
  const float one = 1.f;
  FP8RT_CUDA_CHECK(cudaMemcpy(c.scale, &one, sizeof(one), cudaMemcpyHostToDevice));
  auto block_scales = [](GemmScaleMode m, int64_t rows, int64_t cols) -> float* {
    if (m == GemmScaleMode::kTensor) return nullptr;
    const std::vector<float> ones(m == GemmScaleMode::kBlk128
                                      ? BlockLayout::Blk128ScaleCount(rows, cols)
                                      : BlockLayout::Vec128ScaleCount(rows, cols),
                                  1.0f);
    auto* p = static_cast<float*>(DeviceAlloc(ones.size() * sizeof(float)));
    FP8RT_CUDA_CHECK(cudaMemcpy(p, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
    return p;
  };
  c.sa = block_scales(c.ma, c.M, c.K);  // a stored (M, K), b (N, K): the FP8 layout
  c.sb = block_scales(c.mb, c.N, c.K);
  FillOperand(c.a, na, c.ta, 1, ctx.stream);
  FillOperand(c.b, nb, c.tb, 2, ctx.stream);
  FillOperand(c.d, nd, c.td, 3, ctx.stream);

  RawMatmul rm(raw.handle, raw.ws, raw.ws_bytes, c);
  const GemmArgs args = c.Args();
  const auto [raw_ms, ms] = PairedMedianMs(
      ctx, [&] { rm.Run(ctx.stream); }, [&] { FP8RT_CHECK_OK(runner.Run(args, ctx.stream)); });
  const double raw_tflops = c.Flops() / (raw_ms * 1e-3) / 1e12;
  const double tflops = c.Flops() / (ms * 1e-3) / 1e12;
  if (ceiling_row) {
    ctx.rows.push_back({StrCat("ceiling: raw cuBLASLt ", c.op), c.Shape(), raw_ms, raw_tflops,
                        "TFLOP/s", raw_tflops, StrCat("raw ", c.op), "", true});
    if (IsFp8(c.ta)) {
      ctx.raw_fp8_tflops = raw_tflops;
    } else {
      ctx.raw_bf16_tflops = raw_tflops;
    }
  }
  const bool ok = Verify(runner, c, ctx.stream);
  ctx.rows.push_back(
      {StrCat("gemm ", c.op, c.layer.empty() ? "" : " ", c.layer, ok ? "" : " (verify FAILED)"),
       c.Shape(), ms, tflops, "TFLOP/s", raw_tflops, "raw same shape", "within 3% of raw",
       ok && ms <= 1.03 * raw_ms});
  DeviceFree(c.a), DeviceFree(c.b), DeviceFree(c.d), DeviceFree(c.scale);
  if (c.sa) DeviceFree(c.sa);
  if (c.sb) DeviceFree(c.sb);
}

// A block-scaled case (fp8.scaling: block): a's and b's scale modes set on a tensor-scaled case.
Case BlockCase(Case c, GemmScaleMode ma, GemmScaleMode mb) {
  c.ma = ma, c.mb = mb;
  return c;
}

}  // namespace

void BenchGemm(Context& ctx) {
  RawContext raw;
  LT_CHECK(cublasLtCreate(&raw.handle));
  raw.ws = DeviceAlloc(raw.ws_bytes);
  auto runner_or = GemmRunner::Create(raw.ws_bytes);
  FP8RT_CHECK_OK(runner_or.status());
  GemmRunner& runner = **runner_or;

  const DType e4 = DType::kE4M3, e5 = DType::kE5M2, b16 = DType::kBFloat16, f32 = DType::kFloat32;
  // Ceilings, then the runner on the same problems (the rows above set ctx.raw_*_tflops).
  Measure(ctx, raw, runner,
          {"fp8 e4m3 (bf16 out, fast accum)", "", 8192, 8192, 8192, e4, e4, b16, false, true, true,
           0.f},
          true);
  Measure(ctx, raw, runner, {"bf16", "", 8192, 8192, 8192, b16, b16, b16, false, true, false, 0.f},
          true);

  // GPT-1.3B (C = 2048, 8192 tokens): X (M, Kl), W (Nl, Kl). fprop Y = X W^T; dgrad dX = dY W
  // (FP8 reads W^T as its K-contiguous copy); wgrad dW += dY^T X in FP32.
  const int64_t M = 8192;
  const struct {
    const char* name;
    int64_t n, k;
  } layers[] = {
      {"qkv", 6144, 2048}, {"attn-proj", 2048, 2048}, {"fc", 8192, 2048}, {"fc-proj", 2048, 8192}};
  for (const auto& l : layers) {
    const std::string name = l.name;
    Measure(ctx, raw, runner,
            {"fp8 fprop (fast accum)", name, M, l.n, l.k, e4, e4, b16, false, true, true, 0.f},
            false);
    Measure(ctx, raw, runner,
            {"fp8 dgrad", name, M, l.k, l.n, e5, e4, b16, false, true, false, 0.f}, false);
    Measure(ctx, raw, runner,
            {"fp8 wgrad (fp32 +=)", name, l.n, l.k, M, e5, e4, f32, false, true, false, 1.f},
            false);
    Measure(ctx, raw, runner,
            {"bf16 fprop", name, M, l.n, l.k, b16, b16, b16, false, true, false, 0.f}, false);
    Measure(ctx, raw, runner,
            {"bf16 dgrad", name, M, l.k, l.n, b16, b16, b16, false, false, false, 0.f}, false);
    Measure(ctx, raw, runner,
            {"bf16 wgrad (fp32 +=)", name, l.n, l.k, M, b16, b16, f32, true, false, false, 1.f},
            false);
  }

  // Block scaling (DeepSeek-V3's recipe, cuBLASLt's VEC128 / BLK128x128 modes; E4M3 everywhere,
  // no fast accumulation): fprop X (1x128) x W (128x128), dgrad dY (1x128) x W^T (128x128, the
  // weight's transposed copy), wgrad dY^T (1x128 along the tokens) x X^T (1x128).
  const GemmScaleMode vec = GemmScaleMode::kVec128, blk = GemmScaleMode::kBlk128;
  Measure(ctx, raw, runner,
          BlockCase({"fp8 block fprop (1x128 x 128x128)", "", 8192, 8192, 8192, e4, e4, b16, false,
                     true, false, 0.f},
                    vec, blk),
          false);
  for (const auto& l : layers) {
    const std::string name = l.name;
    Measure(ctx, raw, runner,
            BlockCase({"fp8 block fprop (1x128 x 128x128)", name, M, l.n, l.k, e4, e4, b16, false,
                       true, false, 0.f},
                      vec, blk),
            false);
    Measure(ctx, raw, runner,
            BlockCase({"fp8 block dgrad (1x128 x 128x128)", name, M, l.k, l.n, e4, e4, b16, false,
                       true, false, 0.f},
                      vec, blk),
            false);
    Measure(ctx, raw, runner,
            BlockCase({"fp8 block wgrad (1x128 x 1x128, fp32 +=)", name, l.n, l.k, M, e4, e4, f32,
                       false, true, false, 1.f},
                      vec, vec),
            false);
  }

  DeviceFree(raw.ws);
  cublasLtDestroy(raw.handle);
}

}  // namespace fp8rt::bench
