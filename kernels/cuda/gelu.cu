// tanh-GELU on the GPU: one 16-byte vector (8 bf16 / 4 fp32) per thread, fp32 math from
// gelu_math.cuh.
#include <cuda_bf16.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda/gelu_math.cuh"
#include "kernels/cuda/vec.cuh"
#include "kernels/gelu.h"

namespace fp8rt {
namespace {

using cuda_detail::Pack;
using cuda_detail::Round;

using cuda_detail::GeluFor;
using cuda_detail::GeluGradFor;

// Pointers may alias (out == in, din == dout): each element is read before it is written, by the
// same thread, so there is no __restrict__.
template <typename T, int kPack>
__global__ void GeluForwardKernel(T* out, const T* in, int64_t npack) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= npack) return;
  using P = Pack<T, kPack>;
  const P x = reinterpret_cast<const P*>(in)[i];
  P y;
#pragma unroll
  for (int j = 0; j < kPack; ++j) y.v[j] = Round<T>(GeluFor<T>(ToFloat(x.v[j])));
  reinterpret_cast<P*>(out)[i] = y;
}

template <typename T, int kPack>
__global__ void GeluBackwardKernel(T* din, const T* in, const T* dout, int64_t npack) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= npack) return;
  using P = Pack<T, kPack>;
  const P x = reinterpret_cast<const P*>(in)[i];
  const P dy = reinterpret_cast<const P*>(dout)[i];
  P dx;
#pragma unroll
  for (int j = 0; j < kPack; ++j) {
    dx.v[j] = Round<T>(ToFloat(dy.v[j]) * GeluGradFor<T>(ToFloat(x.v[j])));
  }
  reinterpret_cast<P*>(din)[i] = dx;
}

constexpr int kBlock = 256;

unsigned Blocks(int64_t items) { return static_cast<unsigned>((items + kBlock - 1) / kBlock); }

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Runs launch<kPack>(offset, count) over 16-byte vectors where every pointer allows it, and the
// scalar kernel over the n % kPack tail (or everything, when a pointer is misaligned).
template <typename T, typename Launch>
void ForVectorsAndTail(int64_t n, bool aligned, Launch&& launch) {
  constexpr int kPack = 16 / sizeof(T);
  int64_t done = 0;
  if (aligned && n >= kPack) {
    launch.template operator()<kPack>(int64_t{0}, n / kPack);
    done = n / kPack * kPack;
  }
  if (done < n) launch.template operator()<1>(done, n - done);
}

}  // namespace

namespace cuda {

template <typename T>
Status GeluForward(T* out, const T* in, int64_t n, cudaStream_t stream) {
  if (n < 0) return Status::InvalidArgument(StrCat("GeluForward: n=", n, " must be >= 0"));
  if (n == 0) return Status::Ok();
  if (!out || !in) return Status::InvalidArgument("GeluForward: out and in must be non-null");
  ForVectorsAndTail<T>(n, Aligned16(out) && Aligned16(in), [&]<int kPack>(int64_t off, int64_t k) {
    GeluForwardKernel<T, kPack><<<Blocks(k), kBlock, 0, stream>>>(out + off, in + off, k);
  });
  FP8RT_CUDA_TRY_LAUNCH("GeluForward");
  return Status::Ok();
}

template <typename T>
Status GeluBackward(T* din, const T* in, const T* dout, int64_t n, cudaStream_t stream) {
  if (n < 0) return Status::InvalidArgument(StrCat("GeluBackward: n=", n, " must be >= 0"));
  if (n == 0) return Status::Ok();
  if (!din || !in || !dout) {
    return Status::InvalidArgument("GeluBackward: din, in and dout must be non-null");
  }
  const bool aligned = Aligned16(din) && Aligned16(in) && Aligned16(dout);
  ForVectorsAndTail<T>(n, aligned, [&]<int kPack>(int64_t off, int64_t k) {
    GeluBackwardKernel<T, kPack>
        <<<Blocks(k), kBlock, 0, stream>>>(din + off, in + off, dout + off, k);
  });
  FP8RT_CUDA_TRY_LAUNCH("GeluBackward");
  return Status::Ok();
}

template Status GeluForward<float>(float*, const float*, int64_t, cudaStream_t);
template Status GeluForward<bf16>(bf16*, const bf16*, int64_t, cudaStream_t);
template Status GeluBackward<float>(float*, const float*, const float*, int64_t, cudaStream_t);
template Status GeluBackward<bf16>(bf16*, const bf16*, const bf16*, int64_t, cudaStream_t);

}  // namespace cuda
}  // namespace fp8rt
