// FP8 quantize/dequantize/amax on the GPU: flat vectorized kernels with amax and saturation
// counts fused in, current scaling, and the FP8 byte transpose. Quantize with a transposed copy
// dispatches to the tiled cast+transpose of cast_transpose.cu.
#include <cstdint>

#include "common/cuda_check.h"
#include "kernels/cuda/fp8_device.cuh"
#include "kernels/cuda/gelu_math.cuh"
#include "kernels/cuda/quantize_device.cuh"
#include "kernels/quantize.h"
#include "kernels/scaling.h"

namespace fp8rt {
namespace {

using cuda_detail::AbsBits;
using cuda_detail::Aligned;
using cuda_detail::CommitTelemetry;
using cuda_detail::Decode2;
using cuda_detail::Encode4;
using cuda_detail::GeluFor;
using cuda_detail::kWarpSize;
using cuda_detail::LoadF;
using cuda_detail::LoadVec;
using cuda_detail::Round;
using cuda_detail::StoreF;
using cuda_detail::Telemetry;

// Stores 4 * kWords codes (one 4-, 8- or 16-byte store) at p, aligned to that size.
template <int kWords>
__device__ __forceinline__ void StoreCodes(uint8_t* p, const uint32_t (&w)[kWords]) {
  if constexpr (kWords == 1) {
    *reinterpret_cast<uint32_t*>(p) = w[0];
  } else if constexpr (kWords == 2) {
    *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
  } else {
    static_assert(kWords == 4);
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// ---------------------------------------------------------------------------------------------
// Flat kernels: the tensor as n contiguous elements in warp chunks. A lane handles kGroups
// groups of kE elements (one 16-byte access of the wider side: the input of a cast, the output
// of a dequantize), interleaved with its neighbours' so every warp-wide load and store covers
// one contiguous span; all its loads are issued before any is used (64 bytes in flight per
// lane). kVec: pointers aligned for that; the tail after the last whole chunk is element-wise.
// ---------------------------------------------------------------------------------------------

constexpr int kFlatThreads = 256;
constexpr int kGroups = 4;

template <typename T>
constexpr int FlatVec() {
  return 16 / sizeof(T);  // kE
}
template <typename T>
constexpr int64_t WarpChunk() {
  return int64_t{kWarpSize} * kGroups * FlatVec<T>();
}

struct FlatIndex {
  int64_t tid, stride;  // thread, in the grid-stride tail
  int64_t warp, warps;  // warp, over the chunks
  int lane;
  __device__ FlatIndex() {
    tid = static_cast<int64_t>(blockIdx.x) * kFlatThreads + threadIdx.x;
    stride = static_cast<int64_t>(gridDim.x) * kFlatThreads;
    warp = tid / kWarpSize;
    warps = stride / kWarpSize;
    lane = threadIdx.x % kWarpSize;
  }
  // Element offset of group g of this lane in chunk c.
  template <typename T>
  __device__ int64_t At(int64_t c, int g) const {
    return c * WarpChunk<T>() + (g * kWarpSize + lane) * FlatVec<T>();
  }
};

// kGelu: the cast of GELU(in) rounded to T, as GeluForward stores it (QuantizeGelu's row-major
// cast: FC2's input under train.recompute, whose transposed copy the backward casts again).
template <typename T, bool kGelu>
__device__ __forceinline__ float FlatInput(float x) {
  if constexpr (kGelu) {
    const T g = Round<T>(GeluFor<T>(x));
    return LoadF(&g);
  } else {
    return x;
  }
}

template <typename T, Fp8Format F, bool kVec, bool kGelu = false>
__global__ void __launch_bounds__(kFlatThreads)
    QuantizeFlatKernel(const T* __restrict__ in, uint8_t* __restrict__ data, int64_t n,
                       const float* __restrict__ scale_ptr, float* __restrict__ scale_inv,
                       float* amax, unsigned long long* saturated) {
  constexpr int kE = FlatVec<T>();  // elements per 16-byte load
  const float scale = *scale_ptr;
  const float fp8_max = Fp8MaxFinite(F);
  const FlatIndex ix;
  Telemetry tel;
  int64_t done = 0;  // elements covered by the vector loop
  if constexpr (kVec) {
    const int64_t chunks = n / WarpChunk<T>();
    for (int64_t c = ix.warp; c < chunks; c += ix.warps) {
      float x[kGroups][kE];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        LoadVec<kE>(in + ix.At<T>(c, g), x[g]);
      }
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        uint32_t w[kE / 4];
#pragma unroll
        for (int k = 0; k < kE / 4; ++k) {
          float y[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            x[g][4 * k + j] = FlatInput<T, kGelu>(x[g][4 * k + j]);
            y[j] = x[g][4 * k + j] * scale;
            tel.Add(x[g][4 * k + j], y[j], fp8_max);
          }
          w[k] = Encode4<F>(y[0], y[1], y[2], y[3]);
        }
        StoreCodes(data + ix.At<T>(c, g), w);
      }
    }
    done = chunks * WarpChunk<T>();
  }
  for (int64_t i = done + ix.tid; i < n; i += ix.stride) {
    const float x = FlatInput<T, kGelu>(LoadF(in + i));
    const float y = x * scale;
    tel.Add(x, y, fp8_max);
    data[i] = cuda_detail::Encode<F>(y);
  }
  CommitTelemetry<kFlatThreads>(tel, amax, saturated);
  if (ix.tid == 0) *scale_inv = ScaleInv(scale);
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kFlatThreads)
    AmaxKernel(const T* __restrict__ in, int64_t n, float* amax) {
  constexpr int kE = FlatVec<T>();
  const FlatIndex ix;
  Telemetry tel;
  int64_t done = 0;
  if constexpr (kVec) {
    const int64_t chunks = n / WarpChunk<T>();
    for (int64_t c = ix.warp; c < chunks; c += ix.warps) {
      float x[kGroups][kE];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        LoadVec<kE>(in + ix.At<T>(c, g), x[g]);
      }
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
#pragma unroll
        for (int j = 0; j < kE; ++j) tel.amax_bits = max(tel.amax_bits, AbsBits(x[g][j]));
      }
    }
    done = chunks * WarpChunk<T>();
  }
  for (int64_t i = done + ix.tid; i < n; i += ix.stride) {
    tel.amax_bits = max(tel.amax_bits, AbsBits(LoadF(in + i)));
  }
  CommitTelemetry<kFlatThreads>(tel, amax, nullptr);
}

template <typename T, Fp8Format F, bool kVec>
__global__ void __launch_bounds__(kFlatThreads)
    DequantizeFlatKernel(const uint8_t* __restrict__ data, T* __restrict__ out, int64_t n,
                         const float* __restrict__ scale_inv_ptr) {
  constexpr int kE = FlatVec<T>();  // outputs per 16-byte store: 4 or 8 codes loaded
  const float scale_inv = *scale_inv_ptr;
  const FlatIndex ix;
  int64_t done = 0;
  if constexpr (kVec) {
    const int64_t chunks = n / WarpChunk<T>();
    for (int64_t c = ix.warp; c < chunks; c += ix.warps) {
      uint32_t codes[kGroups][kE / 4];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const uint8_t* src = data + ix.At<T>(c, g);
        if constexpr (kE == 4) {
          codes[g][0] = *reinterpret_cast<const uint32_t*>(src);
        } else {
          const uint2 raw = *reinterpret_cast<const uint2*>(src);
          codes[g][0] = raw.x;
          codes[g][1] = raw.y;
        }
      }
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        alignas(16) T buf[kE];
#pragma unroll
        for (int k = 0; k < kE / 4; ++k) {
          const float2 a = Decode2<F>(static_cast<uint16_t>(codes[g][k] & 0xffffu));
          const float2 b = Decode2<F>(static_cast<uint16_t>(codes[g][k] >> 16));
          StoreF(&buf[4 * k + 0], a.x * scale_inv);
          StoreF(&buf[4 * k + 1], a.y * scale_inv);
          StoreF(&buf[4 * k + 2], b.x * scale_inv);
          StoreF(&buf[4 * k + 3], b.y * scale_inv);
        }
        *reinterpret_cast<uint4*>(out + ix.At<T>(c, g)) = *reinterpret_cast<const uint4*>(buf);
      }
    }
    done = chunks * WarpChunk<T>();
  }
  for (int64_t i = done + ix.tid; i < n; i += ix.stride) {
    StoreF(out + i, cuda_detail::Decode<F>(data[i]) * scale_inv);
  }
}

// Current scaling's middle step: the scale from the amax just computed, on the device.
__global__ void CurrentScaleKernel(const float* __restrict__ amax, float* __restrict__ scale,
                                   float fp8_max, int margin) {
  *scale = ComputeScale(*amax, *scale, fp8_max, margin);
}

// ---------------------------------------------------------------------------------------------
// Launch helpers.
// ---------------------------------------------------------------------------------------------

// Enough blocks to give every warp one chunk, capped (the kernels stride over the rest).
template <typename T>
unsigned FlatGrid(int64_t n) {
  const int64_t per_block = int64_t{kFlatThreads / kWarpSize} * WarpChunk<T>();
  const int64_t blocks = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > (1 << 20) ? (1 << 20) : blocks));
}

}  // namespace

namespace cuda {

template <typename T>
Status Quantize(const T* in, const Fp8Tensor& out, unsigned long long* saturated,
                cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateFp8Tensor("Quantize", out, /*transposed_only_ok=*/true));
  const int64_t n = out.numel();
  if (n > 0 && in == nullptr) return Status::InvalidArgument("Quantize: in is null");
  if (n > 0 && out.data_t != nullptr) return cuda_detail::CastTranspose(in, out, saturated, stream);
  // Empty tensors: one block that only writes scale_inv (no telemetry, as on the CPU).
  float* amax = n > 0 ? out.amax : nullptr;
  unsigned long long* sat = n > 0 ? saturated : nullptr;
  const bool vec = Aligned(in, 16) && Aligned(out.data, 16 / sizeof(T));
  cuda_detail::DispatchFp8(out.format, [&]<Fp8Format F>() {
    auto kernel = vec ? QuantizeFlatKernel<T, F, true> : QuantizeFlatKernel<T, F, false>;
    kernel<<<FlatGrid<T>(n), kFlatThreads, 0, stream>>>(in, out.data, n, out.scale, out.scale_inv,
                                                        amax, sat);
  });
  FP8RT_CUDA_TRY_LAUNCH("Quantize");
  return Status::Ok();
}

}  // namespace cuda

namespace cuda_detail {

template <typename T>
Status QuantizeGeluRowMajor(const T* pre, const Fp8Tensor& out, unsigned long long* saturated,
                            cudaStream_t stream) {
  const int64_t n = out.numel();
  const bool vec = Aligned(pre, 16) && Aligned(out.data, 16 / sizeof(T));
  DispatchFp8(out.format, [&]<Fp8Format F>() {
    auto kernel =
        vec ? QuantizeFlatKernel<T, F, true, true> : QuantizeFlatKernel<T, F, false, true>;
    kernel<<<FlatGrid<T>(n), kFlatThreads, 0, stream>>>(pre, out.data, n, out.scale, out.scale_inv,
                                                        out.amax, saturated);
  });
  FP8RT_CUDA_TRY_LAUNCH("QuantizeGelu");
  return Status::Ok();
}
template Status QuantizeGeluRowMajor<float>(const float*, const Fp8Tensor&, unsigned long long*,
                                            cudaStream_t);
template Status QuantizeGeluRowMajor<bf16>(const bf16*, const Fp8Tensor&, unsigned long long*,
                                           cudaStream_t);

}  // namespace cuda_detail

namespace cuda {

template <typename T>
Status Dequantize(const Fp8Tensor& in, T* out, cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateFp8Tensor("Dequantize", in));
  const int64_t n = in.numel();
  if (n == 0) return Status::Ok();
  if (out == nullptr) return Status::InvalidArgument("Dequantize: out is null");
  const bool vec = Aligned(in.data, 16 / sizeof(T)) && Aligned(out, 16);
  cuda_detail::DispatchFp8(in.format, [&]<Fp8Format F>() {
    auto kernel = vec ? DequantizeFlatKernel<T, F, true> : DequantizeFlatKernel<T, F, false>;
    kernel<<<FlatGrid<T>(n), kFlatThreads, 0, stream>>>(in.data, out, n, in.scale_inv);
  });
  FP8RT_CUDA_TRY_LAUNCH("Dequantize");
  return Status::Ok();
}

template <typename T>
Status ComputeAmax(const T* in, int64_t n, float* amax, cudaStream_t stream) {
  if (n < 0) return Status::InvalidArgument(StrCat("ComputeAmax: n=", n, " must be >= 0"));
  if (amax == nullptr) return Status::InvalidArgument("ComputeAmax: amax is null");
  if (n == 0) return Status::Ok();
  if (in == nullptr) return Status::InvalidArgument("ComputeAmax: in is null");
  auto kernel = Aligned(in, 16) ? AmaxKernel<T, true> : AmaxKernel<T, false>;
  kernel<<<FlatGrid<T>(n), kFlatThreads, 0, stream>>>(in, n, amax);
  FP8RT_CUDA_TRY_LAUNCH("ComputeAmax");
  return Status::Ok();
}

Status ScaleFromAmax(const float* amax, float* scale, Fp8Format format, int margin,
                     cudaStream_t stream) {
  if (amax == nullptr || scale == nullptr) {
    return Status::InvalidArgument("ScaleFromAmax: amax and scale must be non-null");
  }
  if (margin < 0 || margin > 32) {
    return Status::InvalidArgument(StrCat("ScaleFromAmax: margin=", margin, " is outside 0..32"));
  }
  CurrentScaleKernel<<<1, 1, 0, stream>>>(amax, scale, Fp8MaxFinite(format), margin);
  FP8RT_CUDA_TRY_LAUNCH("ScaleFromAmax");
  return Status::Ok();
}

template <typename T>
Status QuantizeCurrentScaling(const T* in, const Fp8Tensor& out, int margin,
                              unsigned long long* saturated, cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(ValidateFp8Tensor("QuantizeCurrentScaling", out));
  if (out.amax == nullptr) {
    return Status::InvalidArgument("QuantizeCurrentScaling: amax is null (it receives the amax)");
  }
  if (margin < 0 || margin > 32) {
    return Status::InvalidArgument(
        StrCat("QuantizeCurrentScaling: margin=", margin, " is outside 0..32"));
  }
  if (out.numel() > 0 && in == nullptr) {
    return Status::InvalidArgument("QuantizeCurrentScaling: in is null");
  }
  FP8RT_CUDA_TRY(cudaMemsetAsync(out.amax, 0, sizeof(float), stream));
  FP8RT_RETURN_IF_ERROR(ComputeAmax(in, out.numel(), out.amax, stream));
  FP8RT_RETURN_IF_ERROR(ScaleFromAmax(out.amax, out.scale, out.format, margin, stream));
  Fp8Tensor no_amax = out;  // the amax is already complete
  no_amax.amax = nullptr;
  return Quantize(in, no_amax, saturated, stream);
}

#define FP8RT_INSTANTIATE(T)                                                                      \
  template Status Quantize<T>(const T*, const Fp8Tensor&, unsigned long long*, cudaStream_t);     \
  template Status Dequantize<T>(const Fp8Tensor&, T*, cudaStream_t);                              \
  template Status ComputeAmax<T>(const T*, int64_t, float*, cudaStream_t);                        \
  template Status QuantizeCurrentScaling<T>(const T*, const Fp8Tensor&, int, unsigned long long*, \
                                            cudaStream_t);
FP8RT_INSTANTIATE(float)
FP8RT_INSTANTIATE(bf16)
#undef FP8RT_INSTANTIATE

namespace {
__global__ void TransposeFp8Kernel(uint8_t* out, const uint8_t* in, int64_t rows, int64_t cols) {
  __shared__ uint8_t tile[32][33];
  const int64_t r0 = int64_t{blockIdx.y} * 32, c0 = int64_t{blockIdx.x} * 32;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = in[r * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (r < rows && c < cols) out[c * rows + r] = tile[threadIdx.x][i];
  }
}

// rows and cols multiples of 4 (every FP8 GEMM operand's are 16s): 64 x 64 tiles, four bytes
// per load and per store (a row's four neighbours in, a column's four neighbours out), about
// four times the byte kernel's bandwidth on H100.
__global__ void TransposeFp8Kernel4(uint8_t* out, const uint8_t* in, int64_t rows, int64_t cols) {
  __shared__ uint8_t tile[64][68];
  const int64_t r0 = int64_t{blockIdx.y} * 64, c0 = int64_t{blockIdx.x} * 64;
  const int tx = threadIdx.x, ty = threadIdx.y;  // 16 x 16
  for (int i = ty; i < 64; i += 16) {
    const int64_t r = r0 + i, c = c0 + 4 * tx;
    if (r < rows && c < cols) {
      const uint32_t v = *reinterpret_cast<const uint32_t*>(in + r * cols + c);
      *reinterpret_cast<uint32_t*>(&tile[i][4 * tx]) = v;
    }
  }
  __syncthreads();
  for (int i = ty; i < 64; i += 16) {  // out row c0 + i, columns r0 + 4 tx ..
    const int64_t c = c0 + i, r = r0 + 4 * tx;
    if (r < rows && c < cols) {
      const uint32_t v = uint32_t{tile[4 * tx][i]} | uint32_t{tile[4 * tx + 1][i]} << 8 |
                         uint32_t{tile[4 * tx + 2][i]} << 16 | uint32_t{tile[4 * tx + 3][i]} << 24;
      *reinterpret_cast<uint32_t*>(out + c * rows + r) = v;
    }
  }
}
}  // namespace

Status TransposeFp8(uint8_t* out, const uint8_t* in, int64_t rows, int64_t cols,
                    cudaStream_t stream) {
  if (rows < 0 || cols < 0 || ((rows * cols > 0) && (out == nullptr || in == nullptr)) ||
      (rows * cols > 0 && out < in + rows * cols && in < out + rows * cols)) {
    return Status::InvalidArgument(StrCat("TransposeFp8: rows=", rows, " cols=", cols,
                                          ": needs rows, cols >= 0 and distinct, non-null buffers"));
  }
  if (rows * cols == 0) return Status::Ok();
  if ((cols + 31) / 32 > 2147483647 || (rows + 31) / 32 > 65535) {
    return Status::InvalidArgument(StrCat("TransposeFp8: rows=", rows, " exceeds the grid"));
  }
  const bool words = rows % 4 == 0 && cols % 4 == 0 && reinterpret_cast<uintptr_t>(in) % 4 == 0 &&
                     reinterpret_cast<uintptr_t>(out) % 4 == 0;
  if (words) {
    const dim3 grid(static_cast<unsigned>((cols + 63) / 64), static_cast<unsigned>((rows + 63) / 64));
    TransposeFp8Kernel4<<<grid, dim3(16, 16), 0, stream>>>(out, in, rows, cols);
    FP8RT_CUDA_TRY_LAUNCH("TransposeFp8");
    return Status::Ok();
  }
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>((rows + 31) / 32));
  TransposeFp8Kernel<<<grid, dim3(32, 8), 0, stream>>>(out, in, rows, cols);
  FP8RT_CUDA_TRY_LAUNCH("TransposeFp8");
  return Status::Ok();
}

}  // namespace cuda
}  // namespace fp8rt
