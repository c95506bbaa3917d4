// FP32 <-> BF16 buffers on the GPU: grid-stride loops, the conversions of kernels/dtype.h (the
// same bits as the CPU reference).
#include <algorithm>

#include "common/cuda_check.h"
#include "kernels/convert.h"

namespace fp8rt {

namespace {

__global__ void FloatToBf16Kernel(bf16* out, const float* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = bf16(in[i]);
  }
}

__global__ void Bf16ToFloatKernel(float* out, const bf16* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = static_cast<float>(in[i]);
  }
}

template <typename In>
__global__ void AccumulateShardKernel(float* out, const In* in, int64_t n, bool add) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float x = static_cast<float>(in[i]);
    out[i] = add ? out[i] + x : x;
  }
}

unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
}

}  // namespace

namespace cuda {

Status FloatToBf16(bf16* out, const float* in, int64_t n, cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateConvert("FloatToBf16", out, in, n));
  if (n == 0) return Status::Ok();
  FloatToBf16Kernel<<<Blocks(n), 256, 0, stream>>>(out, in, n);
  FP8RT_CUDA_TRY_LAUNCH("FloatToBf16");
  return Status::Ok();
}

Status Bf16ToFloat(float* out, const bf16* in, int64_t n, cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateConvert("Bf16ToFloat", out, in, n));
  if (n == 0) return Status::Ok();
  Bf16ToFloatKernel<<<Blocks(n), 256, 0, stream>>>(out, in, n);
  FP8RT_CUDA_TRY_LAUNCH("Bf16ToFloat");
  return Status::Ok();
}

template <typename In>
Status AccumulateShardOn(float* out, const In* in, int64_t n, bool add, cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateConvert("AccumulateShard", out, in, n));
  if (n == 0) return Status::Ok();
  AccumulateShardKernel<<<Blocks(n), 256, 0, stream>>>(out, in, n, add);
  FP8RT_CUDA_TRY_LAUNCH("AccumulateShard");
  return Status::Ok();
}

Status AccumulateShard(float* out, const float* in, int64_t n, bool add, cudaStream_t stream) {
  return AccumulateShardOn(out, in, n, add, stream);
}
Status AccumulateShard(float* out, const bf16* in, int64_t n, bool add, cudaStream_t stream) {
  return AccumulateShardOn(out, in, n, add, stream);
}

}  // namespace cuda
}  // namespace fp8rt
