// AdamW on the GPU: one pass over master/m/v/grad (16-byte vectors) that also writes the working
// copy; the clip factor is computed in the kernel from the device-side squared gradient norm.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda/vec.cuh"
#include "kernels/adamw.h"
#include "kernels/cuda/fp8_device.cuh"
#include "kernels/scaling.h"

namespace fp8rt {
namespace {

using cuda_detail::Pack;
using cuda_detail::Round;

// The step's constants, folded on the host (bias corrections in fp64, then rounded).
struct Consts {
  float lr, beta1, beta2, eps, wd, bias1, bias2, max_norm;
};

__device__ __forceinline__ float ClipFactor(const Consts& k, const float* grad_norm_sq) {
  if (!(k.max_norm > 0.0f)) return 1.0f;
  return fminf(1.0f, k.max_norm / (sqrtf(*grad_norm_sq) + 1e-6f));
}

// A stored moment as fp32 (BF16 moments widen exactly).
__device__ __forceinline__ float Widen(float x) { return x; }
__device__ __forceinline__ float Widen(bf16 x) {
  return __uint_as_float(static_cast<uint32_t>(x.bits) << 16);
}

// One element; returns the new master value. m and v come in as stored and go out rounded to
// their storage type M (round to nearest even for BF16); the update itself uses them unrounded.
template <typename M>
__device__ __forceinline__ float Update(float& p, M& m_io, M& v_io, float g, const Consts& k) {
  // (The fused multiply-adds spelled out: the contraction nvcc chose for FP32 moments before the
  // moments' type became a parameter, so that their results stay bit for bit what they were.)
  const float m = __fmaf_rn(k.beta1, Widen(m_io), (1.0f - k.beta1) * g);
  const float v = __fmaf_rn(g, (1.0f - k.beta2) * g, k.beta2 * Widen(v_io));
  const float m_hat = m / k.bias1, v_hat = v / k.bias2;
  p -= k.lr * (m_hat / (sqrtf(v_hat) + k.eps) + k.wd * p);
  m_io = Round<M>(m);
  v_io = Round<M>(v);
  return p;
}

template <typename T, typename M, int kPack>
__global__ void AdamWKernel(float* __restrict__ master, M* __restrict__ m_buf,
                            M* __restrict__ v_buf, const float* __restrict__ grad,
                            T* __restrict__ working, int64_t npack, Consts k,
                            const float* __restrict__ grad_norm_sq) {
  using F = Pack<float, kPack>;
  using MP = Pack<M, kPack>;
  using W = Pack<T, kPack>;
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= npack) return;
  const float clip = ClipFactor(k, grad_norm_sq);
  F p = reinterpret_cast<F*>(master)[i];
  MP m = reinterpret_cast<MP*>(m_buf)[i], v = reinterpret_cast<MP*>(v_buf)[i];
  const F g = reinterpret_cast<const F*>(grad)[i];
  W w;
#pragma unroll
  for (int j = 0; j < kPack; ++j) {
    w.v[j] = Round<T>(Update(p.v[j], m.v[j], v.v[j], g.v[j] * clip, k));
  }
  reinterpret_cast<F*>(master)[i] = p;
  reinterpret_cast<MP*>(m_buf)[i] = m;
  reinterpret_cast<MP*>(v_buf)[i] = v;
  if (working != nullptr) reinterpret_cast<W*>(working)[i] = w;
}

// FP8 working copy, over 32x32 tiles of the (rows, cols) weight so that the transposed copy is
// written through shared memory in 32-byte rows. Block (32, 8), four rows per thread.
constexpr int kTile = 32;
template <Fp8Format F, typename M>
__global__ void __launch_bounds__(256)
    AdamWFp8Kernel(float* __restrict__ master, M* __restrict__ m_buf, M* __restrict__ v_buf,
                   const float* __restrict__ grad, uint8_t* __restrict__ data,
                   uint8_t* __restrict__ data_t, float* __restrict__ amax,
                   const float* __restrict__ scale_ptr, float* __restrict__ scale_inv, int64_t rows,
                   int64_t cols, int64_t col_tiles, Consts k,
                   const float* __restrict__ grad_norm_sq) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  __shared__ int warp_max[8];
  const int64_t r0 = blockIdx.x / col_tiles * kTile, c0 = blockIdx.x % col_tiles * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const float scale = *scale_ptr;
  const float clip = ClipFactor(k, grad_norm_sq);
  int local_max = 0;  // max of |p| as int bit patterns (NaN above +inf, as Quantize does)
#pragma unroll
  for (int q = 0; q < kTile / 8; ++q) {
    const int64_t r = r0 + ty + 8 * q, c = c0 + tx;
    if (r < rows && c < cols) {
      const int64_t i = r * cols + c;
      float p = master[i];
      M m = m_buf[i], v = v_buf[i];
      Update(p, m, v, grad[i] * clip, k);
      master[i] = p;
      m_buf[i] = m;
      v_buf[i] = v;
      const uint8_t code = cuda_detail::Encode<F>(p * scale);
      data[i] = code;
      tile[ty + 8 * q][tx] = code;
      local_max = max(local_max, static_cast<int>(__float_as_uint(p) & 0x7fffffffu));
    }
  }
  if (data_t != nullptr) {
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kTile / 8; ++q) {
      const int64_t c = c0 + ty + 8 * q, r = r0 + tx;
      if (r < rows && c < cols) data_t[c * rows + r] = tile[tx][ty + 8 * q];
    }
  }
  if (amax != nullptr) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) local_max = max(local_max, __shfl_xor_sync(~0u, local_max, o));
    const int warp = (ty * kTile + tx) / 32;
    if (tx == 0) warp_max[warp] = local_max;
    __syncthreads();
    if (ty == 0 && tx == 0) {
      int block_max = warp_max[0];
      for (int w = 1; w < 8; ++w) block_max = max(block_max, warp_max[w]);
      atomicMax(reinterpret_cast<int*>(amax), block_max);  // max is order-independent
    }
  }
  if (blockIdx.x == 0 && tx == 0 && ty == 0) *scale_inv = ScaleInv(scale);
}

Status Prepare(const char* op, int64_t n, int step, const AdamWConfig& cfg, float weight_decay,
               const float* grad_norm_sq, float max_grad_norm, Consts* k) {
  FP8RT_RETURN_IF_ERROR(
      ValidateAdamWArgs(op, n, step, cfg, weight_decay, grad_norm_sq, max_grad_norm));
  *k = Consts{cfg.lr,
              cfg.beta1,
              cfg.beta2,
              cfg.eps,
              weight_decay,
              static_cast<float>(1.0 - std::pow(static_cast<double>(cfg.beta1), step)),
              static_cast<float>(1.0 - std::pow(static_cast<double>(cfg.beta2), step)),
              max_grad_norm > 0.0f ? max_grad_norm : 0.0f};
  return Status::Ok();
}

bool Aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

}  // namespace

namespace cuda {

template <typename T, typename M>
Status AdamW(float* master, M* m, M* v, const float* grad, T* working, int64_t n, int step,
             const AdamWConfig& cfg, float weight_decay, const float* grad_norm_sq,
             float max_grad_norm, cudaStream_t stream) {
  Consts k;
  FP8RT_RETURN_IF_ERROR(
      Prepare("AdamW", n, step, cfg, weight_decay, grad_norm_sq, max_grad_norm, &k));
  if (n == 0) return Status::Ok();
  if (!master || !m || !v || !grad) {
    return Status::InvalidArgument("AdamW: master, m, v and grad must be non-null");
  }
  constexpr int kPack = 4;  // 16 bytes of each fp32 array
  const bool vec = Aligned(master, 16) && Aligned(m, kPack * sizeof(M)) &&
                   Aligned(v, kPack * sizeof(M)) && Aligned(grad, 16) &&
                   Aligned(working, kPack * sizeof(T));
  int64_t done = 0;
  if (vec && n >= kPack) {
    const int64_t npack = n / kPack;
    AdamWKernel<T, M, kPack><<<static_cast<unsigned>((npack + 255) / 256), 256, 0, stream>>>(
        master, m, v, grad, working, npack, k, grad_norm_sq);
    done = npack * kPack;
  }
  if (done < n) {
    const int64_t rest = n - done;
    AdamWKernel<T, M, 1><<<static_cast<unsigned>((rest + 255) / 256), 256, 0, stream>>>(
        master + done, m + done, v + done, grad + done, working ? working + done : nullptr, rest, k,
        grad_norm_sq);
  }
  FP8RT_CUDA_TRY_LAUNCH("AdamW");
  return Status::Ok();
}

template <typename M>
Status AdamWFp8(float* master, M* m, M* v, const float* grad, const Fp8Tensor& working, int step,
                const AdamWConfig& cfg, float weight_decay, const float* grad_norm_sq,
                float max_grad_norm, cudaStream_t stream) {
  if (working.rows < 0 || working.cols < 0) {
    return Status::InvalidArgument(StrCat("AdamWFp8: working shape (", working.rows, ", ",
                                          working.cols, ") has a negative dimension"));
  }
  const int64_t n = working.numel();
  Consts k;
  FP8RT_RETURN_IF_ERROR(
      Prepare("AdamWFp8", n, step, cfg, weight_decay, grad_norm_sq, max_grad_norm, &k));
  if (!working.scale || !working.scale_inv) {
    return Status::InvalidArgument(
        "AdamWFp8: working.scale and working.scale_inv must be non-null");
  }
  if (n > 0 && (!master || !m || !v || !grad || !working.data)) {
    return Status::InvalidArgument(
        "AdamWFp8: master, m, v, grad and working.data must be non-null");
  }
  if (working.data_t != nullptr && working.data_t == working.data) {
    return Status::InvalidArgument("AdamWFp8: working.data_t must not alias working.data");
  }
  const int64_t row_tiles = (working.rows + kTile - 1) / kTile;
  const int64_t col_tiles = std::max<int64_t>((working.cols + kTile - 1) / kTile, 1);
  const int64_t tiles = std::max<int64_t>(row_tiles * col_tiles, 1);  // >= 1: writes scale_inv
  if (tiles > INT32_MAX) {
    return Status::InvalidArgument(StrCat("AdamWFp8: (", working.rows, ", ", working.cols,
                                          ") has more than 2^31 32x32 tiles"));
  }
  cuda_detail::DispatchFp8(working.format, [&]<Fp8Format F>() {
    AdamWFp8Kernel<F, M><<<static_cast<unsigned>(tiles), dim3(kTile, 8), 0, stream>>>(
        master, m, v, grad, working.data, working.data_t, working.amax, working.scale,
        working.scale_inv, working.rows, working.cols, col_tiles, k, grad_norm_sq);
  });
  FP8RT_CUDA_TRY_LAUNCH("AdamWFp8");
  return Status::Ok();
}

#define FP8RT_ADAMW_INSTANTIATE(T, M)                                                        \
  template Status AdamW<T, M>(float*, M*, M*, const float*, T*, int64_t, int, const AdamWConfig&, \
                              float, const float*, float, cudaStream_t);
FP8RT_ADAMW_INSTANTIATE(float, float)
FP8RT_ADAMW_INSTANTIATE(bf16, float)
FP8RT_ADAMW_INSTANTIATE(float, bf16)
FP8RT_ADAMW_INSTANTIATE(bf16, bf16)
#undef FP8RT_ADAMW_INSTANTIATE
template Status AdamWFp8<float>(float*, float*, float*, const float*, const Fp8Tensor&, int,
                                const AdamWConfig&, float, const float*, float, cudaStream_t);
template Status AdamWFp8<bf16>(float*, bf16*, bf16*, const float*, const Fp8Tensor&, int,
                               const AdamWConfig&, float, const float*, float, cudaStream_t);

}  // namespace cuda
}  // namespace fp8rt
