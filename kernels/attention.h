// Causal multi-head self-attention on the fused QKV activation: a CPU reference and a CUDA version
// built from batched cuBLASLt GEMMs plus masked-softmax kernels, and a flash-style BF16 CUDA version
// (kernels/cuda/flash_attention.cu) that saves one log-sum-exp per query instead of the (T, T)
// probabilities.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/gemm.h"
#include "kernels/stream.h"

namespace fp8rt {

// qkv (B, T, 3, NH, HS) = (B*T, 3C) as the QKV linear layer writes it (q, k, v each C = NH*HS
// wide, heads contiguous within each); out (B, T, NH, HS) = (B*T, C); att (B, NH, T, T) the softmax
// probabilities, saved for the backward (zero above the diagonal). Scores are scaled by
// 1/sqrt(HS).
struct AttentionShape {
  int64_t B = 0, T = 0, NH = 0, HS = 0;
  int64_t C() const { return NH * HS; }
};

// InvalidArgument unless every dimension is >= 1.
Status ValidateAttention(const AttentionShape& s);

// Byte offsets of the pieces of the attention scratch buffer, each 256-byte aligned. One
// definition so AttentionScratchBytes and the CUDA code cannot disagree.
struct AttentionScratchLayout {
  size_t q, k, v, y, dq, dk, dv;  // (B, NH, T, HS) each, element type t
  size_t scores;                  // (B, NH, T, T) fp32
  size_t dpre;                    // (B, NH, T, T) element type t
  size_t total;
};
inline AttentionScratchLayout AttentionScratchPlan(const AttentionShape& s, DType t) {
  const size_t es = t == DType::kBFloat16 ? 2 : 4;
  const size_t heads = static_cast<size_t>(s.B * s.NH * s.T * s.HS) * es;
  const size_t scores = static_cast<size_t>(s.B * s.NH * s.T * s.T);
  auto round_up = [](size_t n) { return (n + 255) / 256 * 256; };
  AttentionScratchLayout l{};
  size_t off = 0;
  for (size_t* p : {&l.q, &l.k, &l.v, &l.y, &l.dq, &l.dk, &l.dv}) {
    *p = off;
    off += round_up(heads);
  }
  l.scores = off;
  off += round_up(scores * 4);
  l.dpre = off;
  off += round_up(scores * es);
  l.total = off;
  return l;
}

// Device scratch the CUDA forward and backward need (the same buffer serves both; nothing in it
// survives from forward to backward): permuted q, k, v, the head-major output or its gradient,
// dq, dk, dv, FP32 scores (B, NH, T, T) and the softmax gradient (B, NH, T, T) in `t`.
size_t AttentionScratchBytes(const AttentionShape& s, DType t);

namespace cpu {
// T in {float, bf16, double}. Accumulates in double; rounds to T where the CUDA version stores T
// (att, the softmax gradient, the outputs), so that the two agree closely in bf16.
template <typename T>
Status AttentionForward(T* out, T* att, const T* qkv, const AttentionShape& s);
// dqkv (B, T, 3C) is overwritten. Reads the forward's qkv and att.
template <typename T>
Status AttentionBackward(T* dqkv, const T* dout, const T* qkv, const T* att,
                         const AttentionShape& s);
// lse (B, NH, T): the base-2 log-sum-exp of each query's scaled, causally masked scores,
// log2(sum_{j <= t} 2^(q_t . k_j * log2(e) / sqrt(HS))) -- the statistic the flash kernels save.
template <typename T>
Status AttentionLse(float* lse, const T* qkv, const AttentionShape& s);
}  // namespace cpu

#if FP8RT_WITH_CUDA
namespace cuda {
// T in {float, bf16}: the GEMMs run as FP32 x FP32 or BF16 x BF16 with FP32 accumulation. The
// scores and their gradient stay FP32 until the softmax (backward) has used them. Deterministic.
// `scratch` holds at least AttentionScratchBytes(s, DTypeOf<T>()) bytes (256-byte aligned, as
// cudaMalloc gives, for the fastest GEMM kernels).
template <typename T>
Status AttentionForward(GemmRunner& gemm, T* out, T* att, const T* qkv, void* scratch,
                        size_t scratch_bytes, const AttentionShape& s, cudaStream_t stream);
// dqkv (B, T, 3C) is overwritten; qkv and att are the forward's.
template <typename T>
Status AttentionBackward(GemmRunner& gemm, T* dqkv, const T* dout, const T* qkv, const T* att,
                         void* scratch, size_t scratch_bytes, const AttentionShape& s,
                         cudaStream_t stream);

// Flash attention, BF16 only (FP32 accumulation, P rounded to BF16 before P V as in
// FlashAttention-2). Head sizes 16, 32, 64 and 128; Ok, or InvalidArgument naming why the shape
// or the device (shared memory per block) cannot take it -- callers then use the GEMM version.
Status FlashAttentionCheck(const AttentionShape& s);
// The tilings compiled for a head size (warps per block of each kernel and the inner tile of the
// two backward kernels); index 0 is the default, the others are there for the benchmark.
struct FlashTiling {
  int fwd_warps, kv_warps, kv_query_tile, q_warps, q_key_tile;
  std::string Name() const;
};
std::vector<FlashTiling> FlashTilings(int64_t head_size);
// Forward: out (B, T, C) and lse (B, NH, T) as cpu::AttentionLse defines it. No scratch.
Status FlashAttentionForward(bf16* out, float* lse, const bf16* qkv, const AttentionShape& s,
                             cudaStream_t stream, int tiling = 0);
// Backward: dqkv (B, T, 3C) is overwritten; qkv, out and lse are the forward's. Deterministic (no
// atomics): dK/dV and dQ come from two kernels that each recompute the probabilities. Scratch
// holds the per-query rowsum(dout * out), FlashAttentionScratchBytes(s) bytes.
size_t FlashAttentionScratchBytes(const AttentionShape& s);
Status FlashAttentionBackward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                              const float* lse, void* scratch, size_t scratch_bytes,
                              const AttentionShape& s, cudaStream_t stream, int tiling = 0);
}  // namespace cuda
#endif

}  // namespace fp8rt
