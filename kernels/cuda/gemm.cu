// GemmRunner: row-major GemmArgs mapped onto cuBLASLt (column-major), with RAII descriptors and a
// cache of heuristic results so the expensive algorithm query runs once per distinct problem.
#include <array>
#include <cstring>
#include <memory>
#include <type_traits>
#include <unordered_map>

#include "common/cuda_check.h"
#include "kernels/gemm.h"

// cublasGetStatusString lives in libcublas, which this library does not link; cuBLASLt has its own.
#define FP8RT_LT_TRY(expr)                                                                         \
  do {                                                                                             \
    cublasStatus_t fp8rt_st_ = (expr);                                                             \
    if (fp8rt_st_ != CUBLAS_STATUS_SUCCESS)                                                        \
      return ::fp8rt::Status::Internal(::fp8rt::StrCat(__FILE__, ":", __LINE__, ": ", #expr, ": ", \
                                                       cublasLtGetStatusString(fp8rt_st_)));       \
  } while (0)

namespace fp8rt {
namespace {

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

cublasLtEpilogue_t LtEpilogue(Epilogue e) {
  switch (e) {
    case Epilogue::kNone:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kGelu:
      return CUBLASLT_EPILOGUE_GELU;
    case Epilogue::kBiasGelu:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
    case Epilogue::kBiasGeluAux:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::kDGelu:
      return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

int32_t LtScaleMode(GemmScaleMode m) {
  switch (m) {
    case GemmScaleMode::kTensor:
      return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    case GemmScaleMode::kVec128:
      return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case GemmScaleMode::kBlk128:
      return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  }
  return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}

bool HasBias(Epilogue e) {
  return e == Epilogue::kBias || e == Epilogue::kBiasGelu || e == Epilogue::kBiasGeluAux;
}

// ---- RAII for every cuBLASLt object ----
struct LtDeleter {
  void operator()(std::remove_pointer_t<cublasLtHandle_t>* p) const { cublasLtDestroy(p); }
  void operator()(std::remove_pointer_t<cublasLtMatmulDesc_t>* p) const {
    cublasLtMatmulDescDestroy(p);
  }
  void operator()(std::remove_pointer_t<cublasLtMatrixLayout_t>* p) const {
    cublasLtMatrixLayoutDestroy(p);
  }
  void operator()(std::remove_pointer_t<cublasLtMatmulPreference_t>* p) const {
    cublasLtMatmulPreferenceDestroy(p);
  }
};
using LtHandle = std::unique_ptr<std::remove_pointer_t<cublasLtHandle_t>, LtDeleter>;
using MatmulDesc = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>, LtDeleter>;
using MatrixLayout = std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>, LtDeleter>;
using Preference = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, LtDeleter>;

struct CudaFreeDeleter {
  void operator()(void* p) const { cudaFree(p); }
};

template <typename V>
Status SetDesc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& v) {
  FP8RT_LT_TRY(cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof(v)));
  return Status::Ok();
}

// A column-major layout of `rows` x `cols` with pitch ld, strided-batched when batch > 1.
Status MakeLayout(MatrixLayout& out, DType t, int64_t rows, int64_t cols, int64_t ld, int batch,
                  int64_t stride) {
  cublasLtMatrixLayout_t raw = nullptr;
  FP8RT_LT_TRY(cublasLtMatrixLayoutCreate(&raw, CudaType(t), static_cast<uint64_t>(rows),
                                          static_cast<uint64_t>(cols), ld));
  out.reset(raw);
  if (batch > 1) {
    const int32_t count = batch;
    FP8RT_LT_TRY(cublasLtMatrixLayoutSetAttribute(raw, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                  sizeof(count)));
    FP8RT_LT_TRY(cublasLtMatrixLayoutSetAttribute(raw, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                  &stride, sizeof(stride)));
  }
  return Status::Ok();
}

// Largest power of two (up to 256) dividing the address: cuBLASLt's kernels are chosen for a
// minimum alignment, so an algorithm picked for aligned pointers may not run on unaligned ones.
uint32_t AlignmentOf(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  if (u == 0) return 256;
  uint32_t a = 1;
  while (a < 256 && (u & a) == 0) a <<= 1;
  return a;
}

// The C matrix cuBLASLt reads (beta != 0): GemmArgs::c, or D itself.
const void* Cptr(const GemmArgs& g) { return g.c != nullptr ? g.c : g.d; }

// Everything the heuristic's choice depends on. Fixed size, so a lookup never allocates.
struct AlgoKey {
  std::array<int64_t, 26> v;
  bool operator==(const AlgoKey& o) const { return v == o.v; }
};
struct AlgoKeyHash {
  size_t operator()(const AlgoKey& k) const {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t x : k.v) {
      h ^= static_cast<uint64_t>(x) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    }
    return static_cast<size_t>(h);
  }
};

// Pitches and batch strides with the "0 = packed" defaults filled in.
struct Resolved {
  int64_t lda, ldb, ldd, sa, sb, sd;
};
Resolved Resolve(const GemmArgs& g) {
  Resolved r;
  r.lda = g.a.ld != 0 ? g.a.ld : (g.a.trans ? g.M : g.K);
  r.ldb = g.b.ld != 0 ? g.b.ld : (g.b.trans ? g.K : g.N);
  r.ldd = g.ldd != 0 ? g.ldd : g.N;
  r.sa = g.a.batch_stride != 0 ? g.a.batch_stride : (g.a.trans ? g.K : g.M) * r.lda;
  r.sb = g.b.batch_stride != 0 ? g.b.batch_stride : (g.b.trans ? g.N : g.K) * r.ldb;
  r.sd = g.d_batch_stride != 0 ? g.d_batch_stride : g.M * r.ldd;
  return r;
}

}  // namespace

struct GemmRunner::Impl {
  LtHandle handle;
  std::unique_ptr<void, CudaFreeDeleter> workspace;
  size_t workspace_bytes = 0;
  std::unordered_map<AlgoKey, cublasLtMatmulAlgo_t, AlgoKeyHash> cache;
};

GemmRunner::GemmRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GemmRunner::~GemmRunner() = default;

Result<std::unique_ptr<GemmRunner>> GemmRunner::Create(size_t workspace_bytes) {
  auto impl = std::make_unique<Impl>();
  cublasLtHandle_t h = nullptr;
  FP8RT_LT_TRY(cublasLtCreate(&h));
  impl->handle.reset(h);
  if (workspace_bytes > 0) {
    void* p = nullptr;
    FP8RT_CUDA_TRY(cudaMalloc(&p, workspace_bytes));
    impl->workspace.reset(p);
  }
  impl->workspace_bytes = workspace_bytes;
  return std::unique_ptr<GemmRunner>(new GemmRunner(std::move(impl)));
}

size_t GemmRunner::CachedAlgorithms() const { return impl_->cache.size(); }

Status GemmRunner::Run(const GemmArgs& g, cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateGemm(g));
  if (g.M == 0 || g.N == 0) return Status::Ok();
  // cuBLASLt refuses FP8 scale pointers that are not 16-byte aligned, with only "not supported".
  for (const GemmOperand* op : {&g.a, &g.b}) {
    if (IsFp8(op->dtype) && reinterpret_cast<uintptr_t>(op->scale_inv) % 16 != 0) {
      return Status::InvalidArgument(StrCat(
          "gemm: operand ", op == &g.a ? "A" : "B", " scale_inv pointer ", op->scale_inv,
          " is not 16-byte aligned, which cuBLASLt's FP8 kernels need"));
    }
  }
  const Resolved r = Resolve(g);
  const bool fp8 = IsFp8(g.a.dtype);

  // cuBLASLt is column-major. Row-major D (M, N) is column-major D^T (N, M) = op(B)^T op(A)^T,
  // so our B is cuBLASLt's A and our A is its B; a row-major matrix read column-major is its own
  // transpose, so each operand keeps its trans flag. FP8's "TN" rule (cuBLASLt A transposed, B
  // not) is therefore our trans_b = true, trans_a = false.
  MatmulDesc desc;
  {
    cublasLtMatmulDesc_t raw = nullptr;
    FP8RT_LT_TRY(cublasLtMatmulDescCreate(&raw, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    desc.reset(raw);
  }
  const int32_t op_a = g.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t op_b = g.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  FP8RT_RETURN_IF_ERROR(SetDesc(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, op_a));
  FP8RT_RETURN_IF_ERROR(SetDesc(desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, op_b));
  if (fp8) {
    const int8_t fast = g.fast_accum ? 1 : 0;
    const void* scale_a = g.b.scale_inv;  // cuBLASLt's A is our B
    const void* scale_b = g.a.scale_inv;
    FP8RT_RETURN_IF_ERROR(SetDesc(desc.get(), CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast));
    FP8RT_RETURN_IF_ERROR(SetDesc(desc.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scale_a));
    FP8RT_RETURN_IF_ERROR(SetDesc(desc.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, scale_b));
    if (g.a.scale_mode != GemmScaleMode::kTensor) {  // block scaling (both, per ValidateGemm)
      // Our B (N, K) is cuBLASLt's A (K x N column-major, transposed): its VEC128 scales are
      // N-major [K/128][N], its BLK128x128 scales [N/128][pad4(K/128)]: BlockLayout's order.
      const int32_t mode_a = LtScaleMode(g.b.scale_mode), mode_b = LtScaleMode(g.a.scale_mode);
      FP8RT_RETURN_IF_ERROR(SetDesc(desc.get(), CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode_a));
      FP8RT_RETURN_IF_ERROR(SetDesc(desc.get(), CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode_b));
    }
  }
  const cublasLtEpilogue_t epi = LtEpilogue(g.epilogue);
  FP8RT_RETURN_IF_ERROR(SetDesc(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE, epi));
  if (HasBias(g.epilogue)) {
    // cuBLASLt's bias has one element per row of its D, i.e. per column of ours.
    const int32_t bias_type = CudaType(GemmBiasDType(g));
    FP8RT_RETURN_IF_ERROR(SetDesc(desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias));
    FP8RT_RETURN_IF_ERROR(SetDesc(desc.get(), CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type));
  }
  if (g.epilogue == Epilogue::kBiasGeluAux || g.epilogue == Epilogue::kDGelu) {
    const int64_t aux_ld = g.N, aux_stride = g.M * g.N;
    FP8RT_RETURN_IF_ERROR(SetDesc(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux));
    FP8RT_RETURN_IF_ERROR(SetDesc(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld));
    if (g.batch > 1) {
      FP8RT_RETURN_IF_ERROR(
          SetDesc(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, aux_stride));
    }
  }

  MatrixLayout la, lb, ld;
  FP8RT_RETURN_IF_ERROR(MakeLayout(la, g.b.dtype, g.b.trans ? g.K : g.N, g.b.trans ? g.N : g.K,
                                   r.ldb, g.batch, r.sb));
  FP8RT_RETURN_IF_ERROR(MakeLayout(lb, g.a.dtype, g.a.trans ? g.M : g.K, g.a.trans ? g.K : g.M,
                                   r.lda, g.batch, r.sa));
  FP8RT_RETURN_IF_ERROR(MakeLayout(ld, g.d_dtype, g.N, g.M, r.ldd, g.batch, r.sd));

  const bool batched = g.batch > 1;
  const AlgoKey key{{static_cast<int64_t>(g.a.dtype),
                     static_cast<int64_t>(g.b.dtype),
                     static_cast<int64_t>(g.d_dtype),
                     g.M,
                     g.N,
                     g.K,
                     g.batch,
                     g.a.trans,
                     g.b.trans,
                     r.lda,
                     r.ldb,
                     r.ldd,
                     batched ? r.sa : 0,
                     batched ? r.sb : 0,
                     batched ? r.sd : 0,
                     static_cast<int64_t>(g.epilogue),
                     g.fast_accum,
                     g.beta != 0.0f,
                     AlignmentOf(g.a.ptr),
                     AlignmentOf(g.b.ptr),
                     AlignmentOf(g.d),
                     AlignmentOf(Cptr(g)),
                     AlignmentOf(g.bias),
                     AlignmentOf(g.aux),
                     static_cast<int64_t>(g.a.scale_mode),
                     static_cast<int64_t>(g.b.scale_mode)}};
  auto it = impl_->cache.find(key);
  if (it == impl_->cache.end()) {
    Preference pref;
    {
      cublasLtMatmulPreference_t raw = nullptr;
      FP8RT_LT_TRY(cublasLtMatmulPreferenceCreate(&raw));
      pref.reset(raw);
    }
    const uint64_t ws = impl_->workspace_bytes;
    const uint32_t align_a = AlignmentOf(g.b.ptr), align_b = AlignmentOf(g.a.ptr);
    const uint32_t align_c = AlignmentOf(Cptr(g)), align_d = AlignmentOf(g.d);
    FP8RT_LT_TRY(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    FP8RT_LT_TRY(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
    FP8RT_LT_TRY(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
    FP8RT_LT_TRY(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
    FP8RT_LT_TRY(cublasLtMatmulPreferenceSetAttribute(
        pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d)));
    // Ask for several candidates: on some cuBLASLt builds the first one the heuristic returns is
    // refused by cublasLtMatmul itself ("not supported") for some FP8 shapes, so the first call
    // of a key tries them in order and caches the first that runs.
    constexpr int kCandidates = 8;
    cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
    int found = 0;
    FP8RT_LT_TRY(cublasLtMatmulAlgoGetHeuristic(impl_->handle.get(), desc.get(), la.get(), lb.get(),
                                                ld.get(), ld.get(), pref.get(), kCandidates,
                                                results, &found));
    cublasStatus_t last = CUBLAS_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < found; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
      last = cublasLtMatmul(impl_->handle.get(), desc.get(), &g.alpha, g.b.ptr, la.get(), g.a.ptr,
                            lb.get(), &g.beta, Cptr(g), ld.get(), g.d, ld.get(), &results[i].algo,
                            impl_->workspace.get(), impl_->workspace_bytes, stream);
      if (last == CUBLAS_STATUS_SUCCESS) {
        impl_->cache.emplace(key, results[i].algo);
        return Status::Ok();
      }
      if (last != CUBLAS_STATUS_NOT_SUPPORTED) break;
    }
    return Status::Unimplemented(StrCat(
        "GemmRunner: no cuBLASLt algorithm runs (", found, " candidates, last: ",
        cublasLtGetStatusString(last), ") for ", DTypeName(g.a.dtype), " x ",
        DTypeName(g.b.dtype), " -> ", DTypeName(g.d_dtype), " M=", g.M, " N=", g.N, " K=", g.K,
        " batch=", g.batch, " trans_a=", g.a.trans, " trans_b=", g.b.trans, " lda=", r.lda,
        " ldb=", r.ldb, " ldd=", r.ldd, " epilogue=", EpilogueName(g.epilogue),
        " scale modes=", GemmScaleModeName(g.a.scale_mode), "/", GemmScaleModeName(g.b.scale_mode)));
  }

  const cublasStatus_t st =
      cublasLtMatmul(impl_->handle.get(), desc.get(), &g.alpha, g.b.ptr, la.get(), g.a.ptr,
                     lb.get(), &g.beta, Cptr(g), ld.get(), g.d, ld.get(), &it->second,
                     impl_->workspace.get(), impl_->workspace_bytes, stream);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return Status::Internal(StrCat(
        "GemmRunner: cublasLtMatmul failed (", cublasLtGetStatusString(st), ") for ",
        DTypeName(g.a.dtype), " x ", DTypeName(g.b.dtype), " -> ", DTypeName(g.d_dtype),
        " M=", g.M, " N=", g.N, " K=", g.K, " batch=", g.batch, " trans_a=", g.a.trans,
        " trans_b=", g.b.trans, " lda=", r.lda, " ldb=", r.ldb, " ldd=", r.ldd,
        " beta=", g.beta, " fast_accum=", g.fast_accum, " epilogue=", EpilogueName(g.epilogue)));
  }
  return Status::Ok();
}

}  // namespace fp8rt
