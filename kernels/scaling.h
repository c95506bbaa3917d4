// Per-tensor FP8 scaling: the one scale formula (ComputeScale), the delayed-scaling recipe
// config, and the bulk amax-history/scale update of many tensors at once (ScalingState).
#pragma once

#include <cfloat>
#include <cstddef>
#include <cstdint>

#include "common/fp8_recipe.h"
#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/stream.h"

namespace fp8rt {

// IEEE round-to-nearest division on host and device alike. nvcc's --use_fast_math would turn a
// plain `/` in device code into an approximate division and the GPU scales would drift from the
// CPU reference; __fdiv_rn is correctly rounded whatever the flags.
FP8RT_HD float DivRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// THE scale formula; every scale in fp8rt comes from here.
// scale = (fp8_max / amax) / 2^margin. An amax that is 0, negative, inf or NaN carries no usable
// range information (an all-zero tensor, or an overflow), so the old scale is kept. A tiny amax
// can overflow the quotient to inf; FLT_MAX is used instead so that scale_inv stays non-zero.
// margin must lie in 0..32 (DelayedScalingConfig::Validate checks it where it comes from a user).
FP8RT_HD float ComputeScale(float amax, float old_scale, float fp8_max, int margin) {
  if (!(amax > 0.0f) || !(amax <= FLT_MAX)) return old_scale;  // 0, negative, inf, NaN
  // 2^margin is exact in float for margin <= 127, and dividing by it is exact unless the result
  // is subnormal, where DivRn rounds the same way on both sides.
  const float pow2 = BitsFloat(static_cast<uint32_t>(127 + margin) << 23);
  float scale = DivRn(DivRn(fp8_max, amax), pow2);
  if (!(scale <= FLT_MAX)) scale = FLT_MAX;
  return scale;
}

// scale_inv = 1 / scale, correctly rounded on host and device.
FP8RT_HD float ScaleInv(float scale) { return DivRn(1.0f, scale); }

// The format a tensor gets under a recipe; gradients are the tensors of the backward pass.
inline Fp8Format FormatFor(Fp8Recipe recipe, bool is_gradient) {
  return recipe == Fp8Recipe::kHybrid && is_gradient ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
}

// The delayed-scaling state of many tensors (N = num_tensors, H = history_len), kept together so
// that one kernel updates all of them per step. Pointers are device pointers for the CUDA
// functions and host pointers for the CPU ones; ScalingStateLayout places them all in one
// allocation.
struct ScalingState {
  int num_tensors = 0;  // N
  int history_len = 0;  // H, 1..1024
  // (N) this step's amax of each tensor, max-accumulated by the casts, zeroed by the update.
  float* amax = nullptr;
  // (H, N) ring buffer of past amaxes; row *pos is written next. (H, N) rather than (N, H) so
  // that consecutive threads read consecutive tensors of one row (coalesced).
  float* amax_history = nullptr;
  float* scale = nullptr;  // (N)
  // (N, scale_inv_stride): scale_inv of tensor i at scale_inv[i * scale_inv_stride]. The model
  // uses a stride of 16 floats so that each is 64-byte aligned: cuBLASLt reads its FP8 GEMMs'
  // scales from there, so this is the one scale_inv array.
  float* scale_inv = nullptr;
  int scale_inv_stride = 1;  // >= 1
  // (N) the Fp8Format of each tensor, as uint8_t. Set by the caller, never written here.
  const uint8_t* formats = nullptr;
  // (1) ring position in [0, H): the history row this step's amax goes to. Lives on the device so
  // a captured CUDA graph sees it advance. While the CUDA update runs, its high 16 bits count
  // the blocks that have read it (zero again when the kernel ends): read it only between steps.
  int* pos = nullptr;
};

// Byte offsets of each ScalingState array inside one contiguous allocation of `total_bytes`
// (every array 16-byte aligned; the base must be too: cudaMalloc/aligned_alloc give 256/16).
struct ScalingStateLayout {
  int num_tensors = 0;
  int history_len = 0;
  int scale_inv_stride = 1;
  size_t amax = 0, amax_history = 0, scale = 0, scale_inv = 0, formats = 0, pos = 0;
  size_t total_bytes = 0;

  static ScalingStateLayout For(int num_tensors, int history_len, int scale_inv_stride = 1);
  // The state whose arrays live at `base` (which holds total_bytes). The formats array is
  // written by the caller at static_cast<uint8_t*>(base) + formats.
  ScalingState Bind(void* base) const;
};

// InvalidArgument (prefixed with op) when the state's sizes or pointers are unusable.
Status ValidateScalingState(const char* op, const ScalingState& state);
// The above, config.Validate(), and state.history_len == config.history_len.
Status ValidateScalingUpdate(const char* op, const ScalingState& state,
                             const DelayedScalingConfig& config);

namespace cpu {
// Fresh state: history 0, amax 0, scale 1, scale_inv 1, pos 0 (formats untouched).
Status InitScalingState(const ScalingState& state);
// One step for every tensor i: history[*pos][i] = amax[i]; amax_used = max over the history
// window (kMax) or amax[i] (kMostRecent); scale[i] = ComputeScale(amax_used, scale[i],
// Fp8MaxFinite(formats[i]), margin); scale_inv[i] = 1 / scale[i]; amax[i] = 0; then *pos
// advances by one (mod H). config.history_len must equal state.history_len.
Status UpdateDelayedScaling(const ScalingState& state, const DelayedScalingConfig& config);
// Before the MAX all-reduce of the amaxes across ranks: every NaN amax (either sign) becomes
// +Inf, so that a NaN on any rank wins the reduction (a MAX reduction may drop NaN) and every
// rank then keeps its old scale for that tensor. Other values are untouched.
Status AmaxNanToInf(float* amax, int64_t n);
}  // namespace cpu

#if FP8RT_WITH_CUDA
namespace cuda {
// As the CPU versions, on device pointers; one kernel launch each, no host synchronisation, safe
// to capture in a CUDA graph (the ring position is read and advanced on the device).
Status InitScalingState(const ScalingState& state, cudaStream_t stream);
Status UpdateDelayedScaling(const ScalingState& state, const DelayedScalingConfig& config,
                            cudaStream_t stream);
Status AmaxNanToInf(float* amax, int64_t n, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace fp8rt
