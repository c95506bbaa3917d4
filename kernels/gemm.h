// Matrix products: one argument struct for every GEMM of the model (FP8 linear layers, BF16/FP32
// GEMMs, batched attention GEMMs), a CPU reference, and GemmRunner, the cuBLASLt front end.
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/fp8.h"
#include "kernels/stream.h"

namespace fp8rt {

// Semantics are row-major throughout:
//   D (M, N) = act(alpha * op(A) op(B) + beta * C + bias), C = D unless GemmArgs::c is set
// with op(A) (M, K) and op(B) (K, N); A is stored (M, K), or (K, M) with trans; B is stored
// (K, N), or (N, K) with trans. `bias` has N elements (one per output column, i.e. per output
// feature of a linear layer) and is broadcast over rows and batches. Batches are strided: matrix
// i of an operand starts batch_stride * i elements after the first.

// How an FP8 operand's scale_inv is laid out. kTensor: one float for the whole matrix. kVec128
// and kBlk128 (block scaling, fp8.scaling: block; cuBLASLt's VEC128_32F / BLK128x128_32F on
// Hopper): one float per 1 x 128 or 128 x 128 block of the stored, K-contiguous matrix ((M, K) for
// a, (N, K) for b), in kernels/block_quantize.h's BlockLayout, as its casts write them. Both
// operands block-scaled or neither, never both kBlk128; no batches, no fast accumulation, epilogue
// kNone or kBias (docs/BLOCK_SCALING.md).
enum class GemmScaleMode : uint8_t { kTensor, kVec128, kBlk128 };
const char* GemmScaleModeName(GemmScaleMode m);

// One input matrix. Pointers are device pointers for GemmRunner::Run, host pointers for cpu::Gemm.
struct GemmOperand {
  // First element of the first matrix. Default: nullptr.
  const void* ptr = nullptr;
  // kFloat32, kBFloat16, kE4M3 or kE5M2. Default: kFloat32.
  DType dtype = DType::kFloat32;
  // The operand is stored transposed (see the semantics above). Default: false.
  bool trans = false;
  // Row pitch of the stored matrix in elements; 0 = packed (the stored column count).
  // Default: 0.
  int64_t ld = 0;
  // Elements between consecutive matrices of a batch; 0 = packed (stored rows * ld).
  // Default: 0.
  int64_t batch_stride = 0;
  // FP8 only: the dequantization scale (Fp8Tensor::scale_inv), one float (or one per block, per
  // scale_mode); multiplies the product. Device pointer for GemmRunner, host pointer for
  // cpu::Gemm. Default: nullptr.
  const float* scale_inv = nullptr;
  // FP8 only: what scale_inv holds. Default: kTensor.
  GemmScaleMode scale_mode = GemmScaleMode::kTensor;
};

enum class Epilogue : uint8_t {
  kNone,
  kBias,
  kGelu,  // tanh-approximation GELU, as cuBLASLt implements it
  kBiasGelu,
  kBiasGeluAux,  // also writes the pre-GELU value (bias included) to `aux`, for the backward
  kDGelu,        // D = (alpha A B + beta D) * gelu'(aux), aux (M, N) in d_dtype read, not written:
                 // the GELU backward fused into the GEMM that computes its input gradient
};
const char* EpilogueName(Epilogue e);

struct GemmArgs {
  // D is (M, N), the inner dimension K; M or N = 0 is a no-op, K must be >= 1. Default: 0.
  int64_t M = 0, N = 0, K = 0;
  // Number of matrices (strided batches). Default: 1.
  int batch = 1;
  GemmOperand a, b;
  // Output (M, N) row-major, pitch ldd. Default: nullptr.
  void* d = nullptr;
  // kFloat32 or kBFloat16. Default: kFloat32.
  DType d_dtype = DType::kFloat32;
  // Row pitch of D in elements; 0 = packed (N). Default: 0.
  int64_t ldd = 0;
  // Elements between consecutive D matrices; 0 = packed (M * ldd). Default: 0.
  int64_t d_batch_stride = 0;
  // D = alpha * op(A) op(B) + beta * C (C is read when beta != 0). Default: 1 and 0.
  float alpha = 1.0f, beta = 0.0f;
  // C: an (M, N) matrix laid out as D (dtype d_dtype, pitch ldd, batch stride d_batch_stride),
  // e.g. the residual a projection's output is added to; nullptr = D itself (accumulate in
  // place). Default: nullptr.
  const void* c = nullptr;
  // N elements of dtype GemmBiasDType(*this); used by the epilogues with a bias. Default: nullptr.
  const void* bias = nullptr;
  // kBiasGeluAux (written) and kDGelu (read) only: (M, N) packed per batch (pitch N, batch stride
  // M * N), of dtype d_dtype; N must be a multiple of 8 (cuBLASLt's rule for the aux pitch).
  // Default: nullptr.
  void* aux = nullptr;
  // What follows the product, fused into the GEMM. Default: kNone.
  Epilogue epilogue = Epilogue::kNone;
  // FP8 only: accumulate in the tensor core's reduced-precision accumulator without periodic
  // promotion to FP32 (CUBLASLT_MATMUL_DESC_FAST_ACCUM). TransformerEngine's choice: on for
  // fprop, off for dgrad and wgrad. Default: false.
  bool fast_accum = false;
};

// The bias dtype cuBLASLt requires: the output dtype, except BF16 for FP8 inputs with FP32 out.
DType GemmBiasDType(const GemmArgs& g);
// Checks every precondition shared by the CPU reference and the CUDA runner: shapes, pointers,
// dtype combinations, epilogue requirements, and FP8's layout rules (trans_a false, trans_b true,
// M/N/K and the FP8 pitches multiples of 16). Returns InvalidArgument naming what is wrong.
Status ValidateGemm(const GemmArgs& g);

// ---- the three GEMMs of an FP8 linear layer (X (M, K) activations, W (N, K) weights) ----
// Each checks the tensors' shapes and formats and returns the GemmArgs for cpu::Gemm or
// GemmRunner::Run. FP8 operands must be K-contiguous, which is why dgrad and wgrad read the
// transposed copies (Fp8Tensor::data_t) made by the cast.
//
// fprop: Y (M, N) = X W^T (+ bias, per GemmBiasDType). A = X (E4M3), B = W (E4M3) trans_b.
Result<GemmArgs> Fp8Fprop(const Fp8Tensor& x, const Fp8Tensor& w, void* y, DType y_dtype,
                          const void* bias = nullptr, bool fast_accum = true);
// dgrad: dX (M, K) = dY W. A = dY (E5M2), B = W^T = w.data_t (K, N) trans_b.
Result<GemmArgs> Fp8Dgrad(const Fp8Tensor& dy, const Fp8Tensor& w, void* dx, DType dx_dtype,
                          bool fast_accum = false);
// wgrad: dW (N, K) (+)= dY^T X, FP32. A = dY^T = dy.data_t (N, M), B = X^T = x.data_t (K, M)
// trans_b. With accumulate, adds to dW (parameter gradients accumulate over micro-batches).
Result<GemmArgs> Fp8Wgrad(const Fp8Tensor& dy, const Fp8Tensor& x, float* dw, bool accumulate,
                          bool fast_accum = false);

namespace cpu {
// Reference GEMM on host pointers: FP8 operands decoded and multiplied by their scale_inv,
// accumulation in double, then beta, bias, GELU, aux, and one rounding to d_dtype. Rows are
// spread over a few threads for large problems.
Status Gemm(const GemmArgs& g);

// D (M, N) = alpha * op(A) op(B) + beta * D on packed host arrays of one type, accumulating in
// double: the entry point for references and finite-difference checks that work in double.
// Instantiated for float, bf16 and double.
template <typename T>
void MatMul(T* d, const T* a, const T* b, int64_t M, int64_t N, int64_t K, bool trans_a,
            bool trans_b, double alpha = 1.0, double beta = 0.0);
}  // namespace cpu

#if FP8RT_WITH_CUDA
// Owns a cuBLASLt handle, a workspace allocated once, and a cache of the heuristic's algorithm
// choice keyed by everything that affects it (dtypes, shapes, transposes, pitches, batch
// strides, epilogue, fast accumulation, beta == 0, pointer alignments). Descriptors are built per
// call (cheap); the heuristic query (expensive) runs once per distinct key.
// Not thread-safe, and calls must not overlap on different streams: the workspace is shared.
// Use one runner per stream.
class GemmRunner {
 public:
  // Workspace cuBLASLt may use; 32 MiB is what Hopper's FP8 kernels want. Default: 32 MiB.
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

  static Result<std::unique_ptr<GemmRunner>> Create(
      size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  // Enqueues the GEMM on `stream`; no host synchronisation, no allocation after the first call
  // with a given key.
  Status Run(const GemmArgs& g, cudaStream_t stream);

  // Number of distinct problems whose algorithm is cached (for tests).
  size_t CachedAlgorithms() const;

 private:
  struct Impl;
  explicit GemmRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};
#endif

}  // namespace fp8rt
