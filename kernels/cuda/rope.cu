// RoPE on the GPU (kernels/rope.h): one thread per (row, head, pair); the inverse frequencies are
// computed on the host by the reference's RopeInvFreq and passed by value, so the FP32 angles are
// the CPU reference's bit for bit; cos and sin in FP32.
#include <cuda_bf16.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda/vec.cuh"
#include "kernels/rope.h"

namespace fp8rt {
namespace {

using cuda_detail::Round;

constexpr int kThreads = 256;

struct InvFreq {
  float v[kRopeMaxHeadSize / 2];
};

template <typename T>
__global__ void RopeKernel(T* out, const T* in, int64_t rows, int64_t T_, int64_t NH, int64_t HS,
                           int64_t ld, int64_t pos0, InvFreq inv, float sign) {
  const int64_t h = HS / 2;
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= rows * NH * h) return;
  const int64_t k = i % h, hd = (i / h) % NH, r = i / (h * NH);
  const float p = static_cast<float>(r % T_ + pos0);
  const float a = p * inv.v[k];
  float s, c;
  sincosf(a, &s, &c);
  s *= sign;
  const T* x = in + r * ld + hd * HS;
  T* y = out + r * ld + hd * HS;
  const float x0 = ToFloat(x[k]), x1 = ToFloat(x[k + h]);
  y[k] = Round<T>(x0 * c - x1 * s);
  y[k + h] = Round<T>(x1 * c + x0 * s);
}

template <typename T>
Status Launch(const char* op, T* out, const T* in, int64_t B, int64_t T_, int64_t NH, int64_t HS,
              int64_t ld, float theta, int64_t pos0, float sign, cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateRope(op, out, in, B, T_, NH, HS, ld, theta, pos0));
  const int64_t n = B * T_ * NH * (HS / 2);
  if (n == 0) return Status::Ok();
  InvFreq inv{};
  RopeInvFreq(theta, HS, inv.v);
  RopeKernel<T><<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      out, in, B * T_, T_, NH, HS, ld, pos0, inv, sign);
  FP8RT_CUDA_TRY_LAUNCH(op);
  return Status::Ok();
}

}  // namespace

namespace cuda {

template <typename T>
Status RopeForward(T* out, const T* in, int64_t B, int64_t T_, int64_t NH, int64_t HS,
                   int64_t ld, float theta, int64_t pos0, cudaStream_t stream) {
  return Launch("RopeForward", out, in, B, T_, NH, HS, ld, theta, pos0, 1.0f, stream);
}

template <typename T>
Status RopeBackward(T* din, const T* dout, int64_t B, int64_t T_, int64_t NH, int64_t HS,
                    int64_t ld, float theta, int64_t pos0, cudaStream_t stream) {
  return Launch("RopeBackward", din, dout, B, T_, NH, HS, ld, theta, pos0, -1.0f, stream);
}

#define FP8RT_INSTANTIATE(T)                                                                 \
  template Status RopeForward<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                 float, int64_t, cudaStream_t);                             \
  template Status RopeBackward<T>(T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                  float, int64_t, cudaStream_t);
FP8RT_INSTANTIATE(float)
FP8RT_INSTANTIATE(bf16)
#undef FP8RT_INSTANTIATE

}  // namespace cuda
}  // namespace fp8rt
