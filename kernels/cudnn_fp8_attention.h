// FP8 causal attention through cuDNN's fused FP8 SDPA engines (the backend graph API, as
// kernels/cudnn_attention.h does for BF16), with the semantics of kernels/fp8_attention.h. On
// Hopper cuDNN's FP8 engines write FP8 O and FP8 dQ/dK/dV only, and its FP8 backward takes head
// size 128 only: Prepare says so (Unimplemented) for other shapes, and the caller keeps BF16
// attention for them.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"
#include "kernels/fp8_attention.h"
#include "kernels/stream.h"

namespace fp8rt {

#if FP8RT_WITH_CUDA
namespace cuda {

struct CudnnFp8AttentionOptions {
  Fp8AttentionFormats formats;
  // Backward engines without cuDNN's NONDETERMINISTIC note only (bit-reproducible runs).
  // Default: true.
  bool deterministic = true;
  // The byte alignment the plans assume for the scale and amax pointers: 16 (what
  // cudnn-frontend declares), or 4 to take them from a packed array of floats. Default: 16.
  int scalar_alignment = 16;
  // Zero the amax outputs on the stream before each run (for engines that max into them rather
  // than overwrite). Default: true.
  bool zero_amax = true;
};

// One object per stream user; not thread-safe.
class CudnnFp8Attention {
 public:
  // Unavailable when libcudnn.so.9 cannot be opened or is older than 9.1 (no FP8 SDPA).
  static Result<std::unique_ptr<CudnnFp8Attention>> Create(CudnnFp8AttentionOptions options = {});
  ~CudnnFp8Attention();
  CudnnFp8Attention(const CudnnFp8Attention&) = delete;
  CudnnFp8Attention& operator=(const CudnnFp8Attention&) = delete;

  // Builds and caches the forward plan, and the backward plan unless `forward_only`. May
  // synchronise. InvalidArgument / Unimplemented naming why cuDNN refuses the shape.
  Status Prepare(const Fp8AttentionShape& s, bool forward_only = false);
  // The pass's device workspace (0 before Prepare).
  size_t ForwardWorkspaceBytes(const Fp8AttentionShape& s) const;
  size_t BackwardWorkspaceBytes(const Fp8AttentionShape& s) const;

  // No host synchronisation. Tensors 16-byte aligned, the scales and amaxes to
  // options.scalar_alignment. The amax outputs are overwritten.
  Status Forward(uint8_t* out, float* stats, const uint8_t* qkv, const Fp8AttentionShape& s,
                 const Fp8AttentionScales& sc, void* ws, size_t ws_bytes, cudaStream_t stream);
  Status Backward(uint8_t* dqkv, const uint8_t* dout, const uint8_t* qkv, const uint8_t* out,
                  const float* stats, const Fp8AttentionShape& s, const Fp8AttentionScales& sc,
                  void* ws, size_t ws_bytes, cudaStream_t stream);

  // Whether two runs of each prepared pass on the same inputs gave the same bits, as Prepare
  // measured them (with options.deterministic; false before Prepare). cuDNN 9.14's FP8 forward
  // on Hopper does not, at the model shapes measured (see docs/PERFORMANCE.md).
  bool Repeats(const Fp8AttentionShape& s) const;
  std::string Version() const;
  // "fwd engine 5 (ws 0 B), bwd engine 7 (ws 1048576 B)" for `s`, or "" before Prepare(s).
  std::string PlanSummary(const Fp8AttentionShape& s) const;

 private:
  struct Impl;
  explicit CudnnFp8Attention(std::unique_ptr<Impl> impl);
  Status ProbeRepeats(const Fp8AttentionShape& s);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cuda
#endif

}  // namespace fp8rt
