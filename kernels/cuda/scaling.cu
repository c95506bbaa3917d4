// Delayed scaling on the GPU: one bulk kernel per step updates the amax history, scale and
// scale_inv of every FP8 tensor and advances the ring position, all on the device.
#include <algorithm>

#include "common/cuda_check.h"
#include "kernels/scaling.h"

namespace fp8rt {
namespace {

// A block owns 32 tensors (threadIdx.x, so a warp reads 32 consecutive floats of one history
// row) and splits the history among 32 slices (threadIdx.y: rows y, y + 32, ...).
constexpr int kTensorsPerBlock = 32;
constexpr int kSlices = 32;
// *pos doubles as a counter during the kernel: the ring position in the low 16 bits and the
// number of blocks that have read it in the high 16 bits.
constexpr unsigned kPosBits = 16;
constexpr int64_t kMaxBlocks = int64_t{1} << kPosBits;

__global__ void __launch_bounds__(kTensorsPerBlock* kSlices)
    UpdateDelayedScalingKernel(ScalingState s, AmaxAlgo algo, int margin) {
  __shared__ int s_pos;
  __shared__ float s_max[kSlices][kTensorsPerBlock + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  if (tx == 0 && ty == 0) {
    // Read the position and count this block in one atomic. The last block to read it stores
    // the advanced plain position; every block has its old value by then, so *pos moves exactly
    // once per launch with no second kernel and no host involvement (graph-safe).
    const unsigned old = atomicAdd(reinterpret_cast<unsigned*>(s.pos), 1u << kPosBits);
    const int p = static_cast<int>(old & ((1u << kPosBits) - 1));
    if ((old >> kPosBits) == gridDim.x - 1) atomicExch(s.pos, p + 1 == s.history_len ? 0 : p + 1);
    s_pos = p;
  }
  __syncthreads();
  const int p = s_pos;
  const int n = s.num_tensors;
  const int i = blockIdx.x * kTensorsPerBlock + tx;
  const float a = i < n ? s.amax[i] : 0.0f;
  // fmaxf ignores NaN entries (as std::fmax in the reference); starting from NaN makes an
  // all-NaN window NaN, like the reference's fold from the first entry. Row p is this step's
  // amax, not what the ring held.
  float m = __int_as_float(0x7fffffff);
  if (algo == AmaxAlgo::kMax && i < n) {
#pragma unroll 8
    for (int h = ty; h < s.history_len; h += kSlices) {
      const float v = s.amax_history[static_cast<int64_t>(h) * n + i];
      m = fmaxf(m, h == p ? a : v);
    }
  }
  s_max[ty][tx] = m;
  __syncthreads();
  if (ty != 0 || i >= n) return;
  float used = a;
  if (algo == AmaxAlgo::kMax) {
    used = s_max[0][tx];
#pragma unroll
    for (int k = 1; k < kSlices; ++k) used = fmaxf(used, s_max[k][tx]);
  }
  s.amax_history[static_cast<int64_t>(p) * n + i] = a;
  const float fp8_max = Fp8MaxFinite(static_cast<Fp8Format>(s.formats[i]));
  const float scale = ComputeScale(used, s.scale[i], fp8_max, margin);
  s.scale[i] = scale;
  s.scale_inv[static_cast<size_t>(i) * s.scale_inv_stride] = ScaleInv(scale);
  s.amax[i] = 0.0f;
}

__global__ void InitScalingStateKernel(ScalingState s) {
  const int64_t n = s.num_tensors;
  const int64_t hn = n * s.history_len;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < hn;
       k += stride) {
    s.amax_history[k] = 0.0f;
    if (k < n) {
      s.amax[k] = 0.0f;
      s.scale[k] = 1.0f;
      s.scale_inv[static_cast<size_t>(k) * s.scale_inv_stride] = 1.0f;
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *s.pos = 0;
}

}  // namespace

namespace cuda {

__global__ void AmaxNanToInfKernel(float* amax, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if (isnan(amax[i])) amax[i] = __int_as_float(0x7f800000);
  }
}

Status AmaxNanToInf(float* amax, int64_t n, cudaStream_t stream) {
  if (n < 0 || (n > 0 && amax == nullptr)) {
    return Status::InvalidArgument(
        StrCat("AmaxNanToInf: n=", n, " with amax=", amax == nullptr ? "null" : "set"));
  }
  if (n == 0) return Status::Ok();
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 1024);
  AmaxNanToInfKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(amax, n);
  FP8RT_CUDA_TRY_LAUNCH("AmaxNanToInf");
  return Status::Ok();
}

Status InitScalingState(const ScalingState& state, cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateScalingState("InitScalingState", state));
  const int64_t hn = int64_t{state.num_tensors} * state.history_len;
  const int64_t blocks = (hn + 255) / 256;
  InitScalingStateKernel<<<static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 4096 ? 4096 : blocks)),
                           256, 0, stream>>>(state);
  FP8RT_CUDA_TRY_LAUNCH("InitScalingState");
  return Status::Ok();
}

Status UpdateDelayedScaling(const ScalingState& state, const DelayedScalingConfig& config,
                            cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateScalingUpdate("UpdateDelayedScaling", state, config));
  const int64_t blocks = (int64_t{state.num_tensors} + kTensorsPerBlock - 1) / kTensorsPerBlock;
  if (blocks > kMaxBlocks) {
    return Status::InvalidArgument(StrCat("UpdateDelayedScaling: num_tensors=", state.num_tensors,
                                          " exceeds the maximum ", kMaxBlocks * kTensorsPerBlock));
  }
  // With no tensors one block still runs, to advance the position.
  const dim3 block(kTensorsPerBlock, kSlices);
  UpdateDelayedScalingKernel<<<static_cast<unsigned>(blocks < 1 ? 1 : blocks), block, 0, stream>>>(
      state, config.algo, config.margin);
  FP8RT_CUDA_TRY_LAUNCH("UpdateDelayedScaling");
  return Status::Ok();
}

}  // namespace cuda
}  // namespace fp8rt
