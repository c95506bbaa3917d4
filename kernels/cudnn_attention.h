// Causal BF16 attention through cuDNN's fused flash-attention engines (the backend graph API), an
// optional faster path beside the flash kernels of kernels/cuda/flash_attention.cu. cuDNN is not
// linked: libcudnn.so.9 is opened at first use, and where it is missing or refuses a shape every
// call returns a Status saying why, so the caller can fall back to the flash kernels.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"
#include "kernels/attention.h"
#include "kernels/dtype.h"
#include "kernels/stream.h"

namespace fp8rt {

#if FP8RT_WITH_CUDA
namespace cuda {

struct CudnnAttentionOptions {
  // Backward only on engines without cuDNN's NONDETERMINISTIC note, with dQ computed from the
  // dP workspace rather than accumulated with atomics: two runs give the same bits (what resumed
  // training needs). false allows the faster atomic dQ accumulation. Default: true.
  bool deterministic = true;
};

// Same layouts and semantics as FlashAttentionForward / FlashAttentionBackward: qkv (B, T, 3C)
// bf16, out (B, T, C) bf16, causal, scores scaled by 1/sqrt(HS), FP32 accumulation. The saved
// statistic differs: stats (B, NH, T) fp32 is cuDNN's natural-log log-sum-exp of each query's
// scaled, masked scores (max + log(sum exp(s - max))), i.e. ln(2) times cpu::AttentionLse.
// One object per stream user; not thread-safe.
class CudnnAttention {
 public:
  // Unavailable when libcudnn.so.9 cannot be opened, lacks a symbol, or cudnnCreate fails (no
  // device); the message says which.
  static Result<std::unique_ptr<CudnnAttention>> Create(CudnnAttentionOptions options = {});
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Builds the forward and backward execution plans for `s` (once per shape, then cached). May
  // synchronise. Ok, or InvalidArgument / Unimplemented naming why cuDNN refuses the shape.
  Status Prepare(const AttentionShape& s);
  // Device workspace Forward and Backward need for `s` (the larger of the two; 0 before Prepare).
  // Nothing in it survives from Forward to Backward.
  size_t WorkspaceBytes(const AttentionShape& s) const;
  // Each pass's own (0 before Prepare): Forward's and Backward's workspaces may lie in different
  // memory (the model puts them in buffers dead during that pass).
  size_t ForwardWorkspaceBytes(const AttentionShape& s) const;
  size_t BackwardWorkspaceBytes(const AttentionShape& s) const;

  // No host synchronisation; Prepare(s) must have succeeded. Pointers 16-byte aligned (cudaMalloc
  // gives 256). out (B, T, C) and stats (B, NH, T) are overwritten.
  Status Forward(bf16* out, float* stats, const bf16* qkv, const AttentionShape& s, void* ws,
                 size_t ws_bytes, cudaStream_t stream);
  // dqkv (B, T, 3C) is overwritten; qkv, out and stats are the forward's.
  Status Backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                  const float* stats, const AttentionShape& s, void* ws, size_t ws_bytes,
                  cudaStream_t stream);

  // The loaded library, e.g. "cuDNN 9.14.0".
  std::string Version() const;
  // For logs and the benchmark: "fwd engine 3 (ws 0 B), bwd engine 5 (ws 402653184 B)" for `s`,
  // or "" before Prepare(s).
  std::string PlanSummary(const AttentionShape& s) const;

 private:
  struct Impl;
  explicit CudnnAttention(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cuda
#endif

}  // namespace fp8rt
