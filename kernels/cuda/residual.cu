// Residual add on the GPU: one 16-byte vector per thread, the sum in fp32 rounded once to T.
#include <cuda_bf16.h>

#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda/vec.cuh"
#include "kernels/residual.h"

namespace fp8rt {
namespace {

using cuda_detail::Pack;
using cuda_detail::Round;

// out may alias a or b (no __restrict__): each thread reads its vector before writing it.
template <typename T, int kPack>
__global__ void ResidualAddKernel(T* out, const T* a, const T* b, int64_t npack) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= npack) return;
  using P = Pack<T, kPack>;
  const P x = reinterpret_cast<const P*>(a)[i];
  const P y = reinterpret_cast<const P*>(b)[i];
  P z;
#pragma unroll
  for (int j = 0; j < kPack; ++j) z.v[j] = Round<T>(ToFloat(x.v[j]) + ToFloat(y.v[j]));
  reinterpret_cast<P*>(out)[i] = z;
}

constexpr int kBlock = 256;

template <typename T, int kPack>
void Launch(T* out, const T* a, const T* b, int64_t npack, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((npack + kBlock - 1) / kBlock);
  ResidualAddKernel<T, kPack><<<blocks, kBlock, 0, stream>>>(out, a, b, npack);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

namespace cuda {

template <typename T>
Status ResidualAdd(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream) {
  if (n < 0) return Status::InvalidArgument(StrCat("ResidualAdd: n=", n, " must be >= 0"));
  if (n == 0) return Status::Ok();
  if (!out || !a || !b)
    return Status::InvalidArgument("ResidualAdd: out, a and b must be non-null");
  constexpr int kPack = 16 / sizeof(T);
  int64_t done = 0;
  if (Aligned16(out) && Aligned16(a) && Aligned16(b) && n >= kPack) {
    Launch<T, kPack>(out, a, b, n / kPack, stream);
    done = n / kPack * kPack;
  }
  if (done < n) Launch<T, 1>(out + done, a + done, b + done, n - done, stream);
  FP8RT_CUDA_TRY_LAUNCH("ResidualAdd");
  return Status::Ok();
}

template Status ResidualAdd<float>(float*, const float*, const float*, int64_t, cudaStream_t);
template Status ResidualAdd<bf16>(bf16*, const bf16*, const bf16*, int64_t, cudaStream_t);

}  // namespace cuda
}  // namespace fp8rt
