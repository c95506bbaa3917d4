// Causal attention from batched GEMMs (GemmRunner, one batch entry per (b, h)) and two masked
// softmax kernels; head (un)permutes around them. Correct-first: the GEMMs compute the full T x T
// scores and the mask is applied in the softmax.
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/cuda_check.h"
#include "kernels/attention.h"
#include "kernels/cuda/fp8_device.cuh"

namespace fp8rt {
namespace {

using cuda_detail::LoadF;
using cuda_detail::StoreF;

constexpr int kBlock = 256;
constexpr int kRowsPerBlock = kBlock / 32;  // one warp per row

// Grid for the grid-stride element kernels (capped: each thread loops).
unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65535 * 16)));
}
// Grid for the row kernels: one warp per row, every row gets its warp (B*NH*T / 8 blocks).
unsigned RowGrid(int64_t rows) {
  return static_cast<unsigned>(std::max<int64_t>(1, (rows + kRowsPerBlock - 1) / kRowsPerBlock));
}

// dst (B, NH, T, HS) <- columns [offset, offset + C) of src (B*T, pitch) viewed as (B, T, NH, HS).
template <typename T>
__global__ void SplitHeadsKernel(T* __restrict__ dst, const T* __restrict__ src, int64_t B,
                                 int64_t seq, int64_t NH, int64_t HS, int64_t pitch,
                                 int64_t offset) {
  const int64_t n = B * NH * seq * HS;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = i % HS, t = (i / HS) % seq, h = (i / (HS * seq)) % NH;
    const int64_t b = i / (HS * seq * NH);
    dst[i] = src[(b * seq + t) * pitch + offset + h * HS + d];
  }
}

// The inverse: columns [offset, offset + C) of dst (B*T, pitch) <- src (B, NH, T, HS).
template <typename T>
__global__ void MergeHeadsKernel(T* __restrict__ dst, const T* __restrict__ src, int64_t B,
                                 int64_t seq, int64_t NH, int64_t HS, int64_t pitch,
                                 int64_t offset) {
  const int64_t n = B * NH * seq * HS;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = i % HS, h = (i / HS) % NH, t = (i / (HS * NH)) % seq;
    const int64_t b = i / (HS * NH * seq);
    dst[(b * seq + t) * pitch + offset + h * HS + d] = src[((b * NH + h) * seq + t) * HS + d];
  }
}

// att[row, j] = softmax over j <= t of scores[row, j] (t = row % T), zero for j > t. Each lane
// keeps a running (max, sum); lanes combine with a symmetric formula, so every lane ends with
// the same bits and the result does not depend on scheduling.
template <typename T>
__global__ void CausalSoftmaxKernel(T* __restrict__ att, const float* __restrict__ scores,
                                    int64_t rows, int64_t seq) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t t = row % seq;
  const float* s = scores + row * seq;
  T* a = att + row * seq;
  float mx = -INFINITY, sum = 0.f;
  for (int64_t j = lane; j <= t; j += 32) {
    const float x = s[j];
    const float nm = fmaxf(mx, x);
    sum = sum * expf(mx - nm) + expf(x - nm);
    mx = nm;
  }
  for (int off = 16; off > 0; off /= 2) {
    const float omx = __shfl_xor_sync(0xffffffffu, mx, off);
    const float osum = __shfl_xor_sync(0xffffffffu, sum, off);
    const float nm = fmaxf(mx, omx);
    sum = nm == -INFINITY ? 0.f : sum * expf(mx - nm) + osum * expf(omx - nm);
    mx = nm;
  }
  const float inv = 1.f / sum;
  for (int64_t j = lane; j < seq; j += 32) StoreF(a + j, j <= t ? expf(s[j] - mx) * inv : 0.f);
}

// dpre[row, j] = att[row, j] * (datt[row, j] - sum_k att[row, k] datt[row, k]) for j <= t, else 0.
template <typename T>
__global__ void CausalSoftmaxBackwardKernel(T* __restrict__ dpre, const T* __restrict__ att,
                                            const float* __restrict__ datt, int64_t rows,
                                            int64_t seq) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t t = row % seq;
  const T* a = att + row * seq;
  const float* g = datt + row * seq;
  T* out = dpre + row * seq;
  float dot = 0.f;
  for (int64_t j = lane; j <= t; j += 32) dot += LoadF(a + j) * g[j];
  for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
  for (int64_t j = lane; j < seq; j += 32) {
    StoreF(out + j, j <= t ? LoadF(a + j) * (g[j] - dot) : 0.f);
  }
}

// One GEMM per (b, h): D (M, N) = alpha * op(A) op(B), all operands packed head-major.
Status HeadGemm(GemmRunner& gemm, const AttentionShape& s, int64_t M, int64_t N, int64_t K,
                const void* a, bool trans_a, const void* b, bool trans_b, DType in, void* d,
                DType out, float alpha, cudaStream_t stream) {
  GemmArgs g;
  g.M = M, g.N = N, g.K = K;
  g.batch = static_cast<int>(s.B * s.NH);
  g.a = {a, in, trans_a, 0, 0, nullptr};
  g.b = {b, in, trans_b, 0, 0, nullptr};
  g.d = d, g.d_dtype = out;
  g.alpha = alpha;
  return gemm.Run(g, stream);
}

template <typename T>
struct Scratch {
  T *q, *k, *v, *y, *dq, *dk, *dv, *dpre;
  float* scores;
};

template <typename T>
Result<Scratch<T>> CarveScratch(void* scratch, size_t bytes, const AttentionShape& s) {
  const AttentionScratchLayout l = AttentionScratchPlan(s, DTypeOf<T>());
  if (scratch == nullptr) return Status::InvalidArgument("attention: scratch is null");
  if (bytes < l.total) {
    return Status::InvalidArgument(
        StrCat("attention: scratch_bytes=", bytes, " < ", l.total, " (AttentionScratchBytes)"));
  }
  char* p = static_cast<char*>(scratch);
  return Scratch<T>{reinterpret_cast<T*>(p + l.q),         reinterpret_cast<T*>(p + l.k),
                    reinterpret_cast<T*>(p + l.v),         reinterpret_cast<T*>(p + l.y),
                    reinterpret_cast<T*>(p + l.dq),        reinterpret_cast<T*>(p + l.dk),
                    reinterpret_cast<T*>(p + l.dv),        reinterpret_cast<T*>(p + l.dpre),
                    reinterpret_cast<float*>(p + l.scores)};
}

Status CheckShape(const AttentionShape& s) {
  FP8RT_RETURN_IF_ERROR(ValidateAttention(s));
  if (s.B * s.NH > std::numeric_limits<int>::max()) {
    return Status::InvalidArgument(
        StrCat("attention: B*NH=", s.B * s.NH, " exceeds the GEMM batch limit (int)"));
  }
  return Status::Ok();
}

}  // namespace

namespace cuda {

template <typename T>
Status AttentionForward(GemmRunner& gemm, T* out, T* att, const T* qkv, void* scratch,
                        size_t scratch_bytes, const AttentionShape& s, cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(CheckShape(s));
  if (out == nullptr || att == nullptr || qkv == nullptr) {
    return Status::InvalidArgument("AttentionForward: out, att or qkv is null");
  }
  FP8RT_ASSIGN_OR_RETURN(const Scratch<T> w, CarveScratch<T>(scratch, scratch_bytes, s));
  const DType dt = DTypeOf<T>();
  const int64_t C = s.C(), seq = s.T, heads = s.B * s.NH * s.T * s.HS, rows = s.B * s.NH * s.T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HS));

  T* qkv_split[3] = {w.q, w.k, w.v};
  for (int i = 0; i < 3; ++i) {
    SplitHeadsKernel<T><<<GridFor(heads), kBlock, 0, stream>>>(qkv_split[i], qkv, s.B, seq, s.NH,
                                                               s.HS, 3 * C, i * C);
  }
  FP8RT_CUDA_TRY_LAUNCH("AttentionForward: split heads");
  // scores (T, T) = scale * q k^T, FP32 so the softmax sees unrounded logits.
  FP8RT_RETURN_IF_ERROR(HeadGemm(gemm, s, seq, seq, s.HS, w.q, false, w.k, true, dt, w.scores,
                                 DType::kFloat32, scale, stream));
  CausalSoftmaxKernel<T><<<RowGrid(rows), kBlock, 0, stream>>>(att, w.scores, rows, seq);
  FP8RT_CUDA_TRY_LAUNCH("AttentionForward: softmax");
  // y (T, HS) = att v.
  FP8RT_RETURN_IF_ERROR(
      HeadGemm(gemm, s, seq, s.HS, seq, att, false, w.v, false, dt, w.y, dt, 1.0f, stream));
  MergeHeadsKernel<T><<<GridFor(heads), kBlock, 0, stream>>>(out, w.y, s.B, seq, s.NH, s.HS, C, 0);
  FP8RT_CUDA_TRY_LAUNCH("AttentionForward: merge heads");
  return Status::Ok();
}

template <typename T>
Status AttentionBackward(GemmRunner& gemm, T* dqkv, const T* dout, const T* qkv, const T* att,
                         void* scratch, size_t scratch_bytes, const AttentionShape& s,
                         cudaStream_t stream) {
  FP8RT_RETURN_IF_ERROR(CheckShape(s));
  if (dqkv == nullptr || dout == nullptr || qkv == nullptr || att == nullptr) {
    return Status::InvalidArgument("AttentionBackward: dqkv, dout, qkv or att is null");
  }
  FP8RT_ASSIGN_OR_RETURN(const Scratch<T> w, CarveScratch<T>(scratch, scratch_bytes, s));
  const DType dt = DTypeOf<T>();
  const int64_t C = s.C(), seq = s.T, heads = s.B * s.NH * s.T * s.HS, rows = s.B * s.NH * s.T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.HS));

  // The scratch holds nothing between forward and backward: permute q, k, v again.
  T* qkv_split[3] = {w.q, w.k, w.v};
  for (int i = 0; i < 3; ++i) {
    SplitHeadsKernel<T><<<GridFor(heads), kBlock, 0, stream>>>(qkv_split[i], qkv, s.B, seq, s.NH,
                                                               s.HS, 3 * C, i * C);
  }
  SplitHeadsKernel<T><<<GridFor(heads), kBlock, 0, stream>>>(w.y, dout, s.B, seq, s.NH, s.HS, C, 0);
  FP8RT_CUDA_TRY_LAUNCH("AttentionBackward: split heads");
  const T* dy = w.y;
  // datt (T, T) = dy v^T in FP32 (the softmax backward subtracts nearly equal numbers).
  FP8RT_RETURN_IF_ERROR(HeadGemm(gemm, s, seq, seq, s.HS, dy, false, w.v, true, dt, w.scores,
                                 DType::kFloat32, 1.0f, stream));
  // dv (T, HS) = att^T dy.
  FP8RT_RETURN_IF_ERROR(
      HeadGemm(gemm, s, seq, s.HS, seq, att, true, dy, false, dt, w.dv, dt, 1.0f, stream));
  CausalSoftmaxBackwardKernel<T>
      <<<RowGrid(rows), kBlock, 0, stream>>>(w.dpre, att, w.scores, rows, seq);
  FP8RT_CUDA_TRY_LAUNCH("AttentionBackward: softmax backward");
  // dq = scale * dpre k, dk = scale * dpre^T q.
  FP8RT_RETURN_IF_ERROR(
      HeadGemm(gemm, s, seq, s.HS, seq, w.dpre, false, w.k, false, dt, w.dq, dt, scale, stream));
  FP8RT_RETURN_IF_ERROR(
      HeadGemm(gemm, s, seq, s.HS, seq, w.dpre, true, w.q, false, dt, w.dk, dt, scale, stream));
  const T* grads[3] = {w.dq, w.dk, w.dv};
  for (int i = 0; i < 3; ++i) {
    MergeHeadsKernel<T>
        <<<GridFor(heads), kBlock, 0, stream>>>(dqkv, grads[i], s.B, seq, s.NH, s.HS, 3 * C, i * C);
  }
  FP8RT_CUDA_TRY_LAUNCH("AttentionBackward: merge heads");
  return Status::Ok();
}

#define FP8RT_INSTANTIATE_ATTENTION(T)                                                       \
  template Status AttentionForward<T>(GemmRunner&, T*, T*, const T*, void*, size_t,          \
                                      const AttentionShape&, cudaStream_t);                  \
  template Status AttentionBackward<T>(GemmRunner&, T*, const T*, const T*, const T*, void*, \
                                       size_t, const AttentionShape&, cudaStream_t);
FP8RT_INSTANTIATE_ATTENTION(float)
FP8RT_INSTANTIATE_ATTENTION(bf16)
#undef FP8RT_INSTANTIATE_ATTENTION

}  // namespace cuda
}  // namespace fp8rt
