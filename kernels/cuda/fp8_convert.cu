// Element-wise FP8 encode/decode with no scaling: the GPU side of the bit-exactness test.
#include "common/cuda_check.h"
#include "kernels/cuda/fp8_device.cuh"
#include "kernels/fp8.h"

namespace fp8rt {
namespace {

template <Fp8Format F>
__global__ void EncodeKernel(const float* __restrict__ in, uint8_t* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    out[i] = cuda_detail::Encode<F>(in[i]);
  }
}

template <Fp8Format F>
__global__ void DecodeKernel(const uint8_t* __restrict__ in, float* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    out[i] = cuda_detail::Decode<F>(in[i]);
  }
}

unsigned GridFor(size_t n, unsigned block) {
  size_t blocks = (n + block - 1) / block;
  return static_cast<unsigned>(blocks < 65535 ? (blocks == 0 ? 1 : blocks) : 65535);
}

}  // namespace

namespace cuda {

Status Fp8EncodeArray(const float* in, uint8_t* out, size_t n, Fp8Format f, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  if (in == nullptr || out == nullptr) return Status::InvalidArgument("Fp8EncodeArray: null buffer");
  cuda_detail::DispatchFp8(f, [&]<Fp8Format F>() {
    EncodeKernel<F><<<GridFor(n, 256), 256, 0, stream>>>(in, out, n);
  });
  FP8RT_CUDA_TRY_LAUNCH("Fp8EncodeArray");
  return Status::Ok();
}

Status Fp8DecodeArray(const uint8_t* in, float* out, size_t n, Fp8Format f, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  if (in == nullptr || out == nullptr) return Status::InvalidArgument("Fp8DecodeArray: null buffer");
  cuda_detail::DispatchFp8(f, [&]<Fp8Format F>() {
    DecodeKernel<F><<<GridFor(n, 256), 256, 0, stream>>>(in, out, n);
  });
  FP8RT_CUDA_TRY_LAUNCH("Fp8DecodeArray");
  return Status::Ok();
}

}  // namespace cuda
}  // namespace fp8rt
