// Token + position embedding on the GPU. Forward: one 16-byte vector per thread. Backward:
// positions are radix-sorted by token (CUB, stable), then each token's rows are summed in
// increasing position order within segments of 32 sorted positions and the segments' sums in
// order (two passes, so that no block walks a frequent token's whole run): deterministic, no
// float atomics.
#include <cuda_bf16.h>

#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "common/cuda_check.h"
#include "kernels/cuda/vec.cuh"
#include "kernels/embedding.h"

namespace fp8rt {
namespace {

using cuda_detail::Pack;
using cuda_detail::Round;

template <typename T, int kPack>
__global__ void EmbeddingForwardKernel(T* __restrict__ out, const int32_t* __restrict__ tokens,
                                       const T* __restrict__ wte, const T* __restrict__ wpe,
                                       int64_t npack, int seq_len, int C, int V) {
  using P = Pack<T, kPack>;
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= npack) return;
  const int vecs_per_row = C / kPack;
  const int64_t pos = i / vecs_per_row;
  const int cv = static_cast<int>(i - pos * vecs_per_row);
  const int t = static_cast<int>(pos % seq_len);
  const int32_t tok = tokens[pos];
  P o;
  if (tok < 0 || tok >= V) {  // never read out of bounds; NaN makes the bad id visible
#pragma unroll
    for (int j = 0; j < kPack; ++j) o.v[j] = Round<T>(NAN);
  } else {
    const P a = reinterpret_cast<const P*>(wte + int64_t{tok} * C)[cv];
    if (wpe == nullptr) {
      o = a;
    } else {
      const P b = reinterpret_cast<const P*>(wpe + int64_t{t} * C)[cv];
#pragma unroll
      for (int j = 0; j < kPack; ++j) o.v[j] = Round<T>(ToFloat(a.v[j]) + ToFloat(b.v[j]));
    }
  }
  reinterpret_cast<P*>(out)[i] = o;
}

// Sort keys: the token, or V for an id outside [0, V) (sorted last, then skipped); values: the
// position.
__global__ void EmbeddingKeysKernel(int32_t* __restrict__ keys, int32_t* __restrict__ positions,
                                    const int32_t* __restrict__ tokens, int n, int V) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t tok = tokens[i];
  keys[i] = (tok < 0 || tok >= V) ? V : tok;
  positions[i] = i;
}

// The token table's gradient from the positions sorted by token, in two passes over segments of
// kSeg sorted rows, so that no block walks a frequent token's whole run (thousands of rows in
// text: one block summing it alone set the kernel's time, 1.1 ms of an 8192-row batch of bytes):
// - pass 1, block (segment, chunk of kChunk channels): sums each piece of a run inside its
//   segment, in order. A run wholly inside the segment is added to dst; a piece of a longer run
//   is stored in the segment's two partial rows: 0 for the piece that continues the previous
//   segment's run, 1 for the piece that starts a run continuing into the next segment;
// - pass 2, block (segment, chunk) whose last piece starts a run that continues: that piece and
//   each following segment's continuing piece, in order, added to dst.
// Every sum is compensated (Kahan) and in a fixed order: bit-identical run to run. Only the
// channels of a row inside the window [lo, hi) of the table's flat elements are read and added
// (dst[e - lo]); invalid tokens (key V) are skipped.
constexpr int kSeg = 32, kChPerThread = 4, kRowsAtOnce = 4, kSegThreads = 256,
              kChunk = kSegThreads * kChPerThread;

__device__ __forceinline__ void Kahan(float& acc, float& comp, float y) {
  y -= comp;
  const float t = acc + y;
  comp = (t - acc) - y;
  acc = t;
}

// The channels [c_lo, c_hi) of token tok's row that lie in the window.
__device__ __forceinline__ void WindowOf(int64_t row, int C, int64_t lo, int64_t hi, int* c_lo,
                                         int* c_hi) {
  *c_lo = static_cast<int>(max(int64_t{0}, min(int64_t{C}, lo - row)));
  *c_hi = static_cast<int>(max(int64_t{0}, min(int64_t{C}, hi - row)));
}

template <typename T>
__global__ void __launch_bounds__(kSegThreads)
    EmbeddingSegmentKernel(float* __restrict__ dst, float* __restrict__ part,
                           const T* __restrict__ dout, const int32_t* __restrict__ keys,
                           const int32_t* __restrict__ positions, int n, int C, int V, int64_t lo,
                           int64_t hi) {
  const int s = blockIdx.x, b = s * kSeg, e = min(n, b + kSeg), len = e - b;
  __shared__ int32_t sk[kSeg], sp[kSeg];
  for (int i = threadIdx.x; i < kSeg; i += blockDim.x) {
    sk[i] = i < len ? keys[b + i] : -1;
    sp[i] = i < len ? positions[b + i] : 0;
  }
  __syncthreads();
  const bool from_prev = s > 0 && keys[b - 1] == sk[0];
  const bool into_next = e < n && keys[e] == sk[len - 1];
  const int c0 = blockIdx.y * kChunk + static_cast<int>(threadIdx.x);
  for (int i = 0; i < len;) {
    const int32_t tok = sk[i];
    int j = i + 1;
    while (j < len && sk[j] == tok) ++j;
    const int64_t row = int64_t{tok} * C;
    int c_lo, c_hi;
    WindowOf(row, C, lo, hi, &c_lo, &c_hi);
    if (tok < V && c_lo < c_hi) {
      float acc[kChPerThread], comp[kChPerThread];
#pragma unroll
      for (int h = 0; h < kChPerThread; ++h) acc[h] = comp[h] = 0.0f;
      for (int k = i; k < j; k += kRowsAtOnce) {
        float v[kRowsAtOnce][kChPerThread];  // loaded together, then added in order
#pragma unroll
        for (int u = 0; u < kRowsAtOnce; ++u) {
#pragma unroll
          for (int h = 0; h < kChPerThread; ++h) {
            const int c = c0 + h * kSegThreads;
            v[u][h] = k + u < j && c >= c_lo && c < c_hi
                          ? ToFloat(dout[int64_t{sp[k + u]} * C + c])
                          : 0.0f;
          }
        }
#pragma unroll
        for (int u = 0; u < kRowsAtOnce; ++u) {
          if (k + u >= j) break;
#pragma unroll
          for (int h = 0; h < kChPerThread; ++h) Kahan(acc[h], comp[h], v[u][h]);
        }
      }
      const bool first = i == 0 && from_prev, last = j == len && into_next;
#pragma unroll
      for (int h = 0; h < kChPerThread; ++h) {
        const int c = c0 + h * kSegThreads;
        if (c < c_lo || c >= c_hi) continue;
        if (!first && !last) {
          dst[row + c - lo] += acc[h];
        } else {
          part[(int64_t{s} * 2 + (first ? 0 : 1)) * C + c] = acc[h];
        }
      }
    }
    i = j;
  }
}

__global__ void __launch_bounds__(kSegThreads)
    EmbeddingJoinKernel(float* __restrict__ dst, const float* __restrict__ part,
                        const int32_t* __restrict__ keys, int n, int C, int V, int64_t lo,
                        int64_t hi) {
  const int s = blockIdx.x, b = s * kSeg, e = min(n, b + kSeg);
  const int32_t tok = keys[e - 1];
  if (tok >= V || e >= n || keys[e] != tok) return;           // its last run ends here
  if (keys[b] == tok && s > 0 && keys[b - 1] == tok) return;  // that run began further back
  const int64_t row = int64_t{tok} * C;
  int c_lo, c_hi;
  WindowOf(row, C, lo, hi, &c_lo, &c_hi);
  const int c0 = blockIdx.y * kChunk + static_cast<int>(threadIdx.x);
  float acc[kChPerThread], comp[kChPerThread];
#pragma unroll
  for (int h = 0; h < kChPerThread; ++h) {
    const int c = c0 + h * kSegThreads;
    acc[h] = c >= c_lo && c < c_hi ? part[(int64_t{s} * 2 + 1) * C + c] : 0.0f;
    comp[h] = 0.0f;
  }
  for (int t = s + 1;; ++t) {
#pragma unroll
    for (int h = 0; h < kChPerThread; ++h) {
      const int c = c0 + h * kSegThreads;
      Kahan(acc[h], comp[h], c >= c_lo && c < c_hi ? part[int64_t{t} * 2 * C + c] : 0.0f);
    }
    const int te = min(n, (t + 1) * kSeg);  // segment t wholly this token, and the run goes on
    if (!(te < n && keys[te - 1] == tok && keys[te] == tok)) break;
  }
#pragma unroll
  for (int h = 0; h < kChPerThread; ++h) {
    const int c = c0 + h * kSegThreads;
    if (c >= c_lo && c < c_hi) dst[row + c - lo] += acc[h];
  }
}

// dwpe[t][c] += sum over b (in order) of dout[b][t][c].
template <typename T>
__global__ void EmbeddingBackwardWpeKernel(float* __restrict__ dwpe, const T* __restrict__ dout,
                                           int B, int seq_len, int C) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;  // t * C + c
  if (i >= int64_t{seq_len} * C) return;
  float acc = 0.0f;
  for (int b = 0; b < B; ++b) acc += ToFloat(dout[int64_t{b} * seq_len * C + i]);
  dwpe[i] += acc;
}

// Bits that hold every key in [0, V].
int KeyBits(int64_t V) {
  int bits = 1;
  while ((int64_t{1} << bits) <= V) ++bits;
  return bits;
}

constexpr size_t kAlign = 256;
size_t AlignUp(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }
// The segments' partial rows: two of C floats per segment of kSeg sorted rows.
size_t PartialBytes(int64_t n, int64_t C) {
  return static_cast<size_t>((n + kSeg - 1) / kSeg) * 2 * static_cast<size_t>(C) * sizeof(float);
}

// Scratch layout: keys in/out, positions in/out (n int32 each), then CUB's temporary storage.
struct Scratch {
  int32_t *keys_in, *keys_out, *pos_in, *pos_out;
  void* temp;
  size_t temp_bytes;
};

cudaError_t SortTempBytes(int n, int64_t V, size_t* bytes) {
  return cub::DeviceRadixSort::SortPairs(
      nullptr, *bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n, 0, KeyBits(V));
}

}  // namespace

namespace cuda {

Result<size_t> EmbeddingBackwardScratchBytes(int64_t B, int64_t seq_len, int64_t V, int64_t C) {
  const int64_t n = B * seq_len;
  if (B < 0 || seq_len < 0 || n > INT32_MAX || V < 1 || V >= INT32_MAX || C < 0 ||
      C > INT32_MAX) {
    return Status::InvalidArgument(StrCat("EmbeddingBackwardScratchBytes: B=", B, " T=", seq_len,
                                          " V=", V, " C=", C,
                                          ": need B*T < 2^31, 1 <= V < 2^31 - 1, 0 <= C < 2^31"));
  }
  size_t temp = 0;
  FP8RT_CUDA_TRY(SortTempBytes(static_cast<int>(n), V, &temp));
  return 4 * AlignUp(static_cast<size_t>(n) * sizeof(int32_t)) + AlignUp(temp) +
         AlignUp(PartialBytes(n, C));
}

template <typename T>
Status EmbeddingForward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                        int64_t seq_len, int64_t C, int64_t V, cudaStream_t stream) {
  if (B < 0 || seq_len < 0 || C < 0 || C > INT32_MAX || seq_len > INT32_MAX || V < 1 ||
      V > INT32_MAX) {
    return Status::InvalidArgument(StrCat("EmbeddingForward: B=", B, " T=", seq_len, " C=", C,
                                          " V=", V, ": need B, T, C >= 0, 1 <= V, all < 2^31"));
  }
  const int64_t n = B * seq_len * C;
  if (n == 0) return Status::Ok();
  if (!out || !tokens || !wte) {
    return Status::InvalidArgument("EmbeddingForward: out, tokens and wte must be non-null");
  }
  constexpr int kPack = 16 / sizeof(T);
  const bool vec = C % kPack == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(wte) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(wpe) % 16 == 0;
  const int pack = vec ? kPack : 1;
  const int64_t npack = n / pack;
  const unsigned blocks = static_cast<unsigned>((npack + 255) / 256);
  if (vec) {
    EmbeddingForwardKernel<T, kPack>
        <<<blocks, 256, 0, stream>>>(out, tokens, wte, wpe, npack, static_cast<int>(seq_len),
                                     static_cast<int>(C), static_cast<int>(V));
  } else {
    EmbeddingForwardKernel<T, 1>
        <<<blocks, 256, 0, stream>>>(out, tokens, wte, wpe, npack, static_cast<int>(seq_len),
                                     static_cast<int>(C), static_cast<int>(V));
  }
  FP8RT_CUDA_TRY_LAUNCH("EmbeddingForward");
  return Status::Ok();
}

namespace {

// Sorts the n positions by token in the scratch, then adds each token's rows to the window
// [lo, lo + count) of the table's flat elements (dst[e - lo]).
template <typename T>
Status AddTokenRows(float* dst, int64_t lo, int64_t count, const T* dout, const int32_t* tokens,
                    int n, int C, int V, void* scratch, size_t scratch_bytes,
                    cudaStream_t stream, const char* op) {
  size_t temp_bytes = 0;
  FP8RT_CUDA_TRY(SortTempBytes(n, V, &temp_bytes));
  const size_t slot = AlignUp(static_cast<size_t>(n) * sizeof(int32_t));
  const size_t need = 4 * slot + AlignUp(temp_bytes) + AlignUp(PartialBytes(n, C));
  if (scratch == nullptr || scratch_bytes < need ||
      reinterpret_cast<uintptr_t>(scratch) % kAlign != 0) {
    return Status::InvalidArgument(StrCat(op, ": scratch of ", scratch_bytes, " bytes; need ",
                                          need, " bytes, 256-byte aligned"));
  }
  char* base = static_cast<char*>(scratch);
  Scratch s{reinterpret_cast<int32_t*>(base),
            reinterpret_cast<int32_t*>(base + slot),
            reinterpret_cast<int32_t*>(base + 2 * slot),
            reinterpret_cast<int32_t*>(base + 3 * slot),
            base + 4 * slot,
            temp_bytes};
  EmbeddingKeysKernel<<<(n + 255) / 256, 256, 0, stream>>>(s.keys_in, s.pos_in, tokens, n, V);
  FP8RT_CUDA_TRY_LAUNCH(op);
  FP8RT_CUDA_TRY(cub::DeviceRadixSort::SortPairs(s.temp, s.temp_bytes, s.keys_in, s.keys_out,
                                                 s.pos_in, s.pos_out, n, 0, KeyBits(V), stream));
  float* part = reinterpret_cast<float*>(base + 4 * slot + AlignUp(temp_bytes));
  const dim3 grid(static_cast<unsigned>((n + kSeg - 1) / kSeg),
                  static_cast<unsigned>((C + kChunk - 1) / kChunk));
  EmbeddingSegmentKernel<T><<<grid, kSegThreads, 0, stream>>>(dst, part, dout, s.keys_out,
                                                              s.pos_out, n, C, V, lo, lo + count);
  EmbeddingJoinKernel<<<grid, kSegThreads, 0, stream>>>(dst, part, s.keys_out, n, C, V, lo,
                                                         lo + count);
  FP8RT_CUDA_TRY_LAUNCH(op);
  return Status::Ok();
}

}  // namespace

template <typename T>
Status EmbeddingBackward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, int64_t B,
                         int64_t seq_len, int64_t C, int64_t V, void* scratch, size_t scratch_bytes,
                         cudaStream_t stream) {
  const int64_t n = B * seq_len;
  if (B < 0 || seq_len < 0 || C < 0 || C > INT32_MAX || n > INT32_MAX || V < 1 || V >= INT32_MAX) {
    return Status::InvalidArgument(StrCat("EmbeddingBackward: B=", B, " T=", seq_len, " C=", C,
                                          " V=", V,
                                          ": need B, T, C >= 0, B*T < 2^31, 1 <= V < 2^31 - 1"));
  }
  if (n == 0 || C == 0) return Status::Ok();
  // (dwte may be null: the position table alone)
  if (!dout || !tokens) {
    return Status::InvalidArgument("EmbeddingBackward: dout and tokens must be non-null");
  }
  const int ni = static_cast<int>(n), ci = static_cast<int>(C), vi = static_cast<int>(V);
  if (dwte != nullptr) {
    FP8RT_RETURN_IF_ERROR(AddTokenRows(dwte, 0, V * C, dout, tokens, ni, ci, vi, scratch,
                                       scratch_bytes, stream, "EmbeddingBackward"));
  }
  const int64_t wpe_elems = dwpe == nullptr ? 0 : seq_len * C;
  if (wpe_elems > 0) {
    EmbeddingBackwardWpeKernel<T><<<static_cast<unsigned>((wpe_elems + 255) / 256), 256, 0, stream>>>(
        dwpe, dout, static_cast<int>(B), static_cast<int>(seq_len), ci);
    FP8RT_CUDA_TRY_LAUNCH("EmbeddingBackward");
  }
  return Status::Ok();
}

template <typename T>
Status EmbeddingBackwardSlice(float* dst, int64_t lo, int64_t count, const T* dout,
                              const int32_t* tokens, int64_t n, int64_t C, int64_t V,
                              void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  if (n < 0 || C < 0 || C > INT32_MAX || n > INT32_MAX || V < 1 || V >= INT32_MAX || lo < 0 ||
      count < 0) {
    return Status::InvalidArgument(StrCat("EmbeddingBackwardSlice: n=", n, " C=", C, " V=", V,
                                          " window [", lo, ", ", lo + count,
                                          "): need n, C >= 0, n < 2^31, 1 <= V < 2^31 - 1, "
                                          "lo >= 0 and count >= 0"));
  }
  if (n == 0 || C == 0 || count == 0) return Status::Ok();
  if (!dst || !dout || !tokens) {
    return Status::InvalidArgument("EmbeddingBackwardSlice: dst, dout and tokens must be non-null");
  }
  return AddTokenRows(dst, lo, count, dout, tokens, static_cast<int>(n), static_cast<int>(C),
                      static_cast<int>(V), scratch, scratch_bytes, stream,
                      "EmbeddingBackwardSlice");
}

template Status EmbeddingForward<float>(float*, const int32_t*, const float*, const float*, int64_t,
                                        int64_t, int64_t, int64_t, cudaStream_t);
template Status EmbeddingForward<bf16>(bf16*, const int32_t*, const bf16*, const bf16*, int64_t,
                                       int64_t, int64_t, int64_t, cudaStream_t);
template Status EmbeddingBackward<float>(float*, float*, const float*, const int32_t*, int64_t,
                                         int64_t, int64_t, int64_t, void*, size_t, cudaStream_t);
template Status EmbeddingBackward<bf16>(float*, float*, const bf16*, const int32_t*, int64_t,
                                        int64_t, int64_t, int64_t, void*, size_t, cudaStream_t);
template Status EmbeddingBackwardSlice<float>(float*, int64_t, int64_t, const float*,
                                              const int32_t*, int64_t, int64_t, int64_t, void*,
                                              size_t, cudaStream_t);
template Status EmbeddingBackwardSlice<bf16>(float*, int64_t, int64_t, const bf16*, const int32_t*,
                                             int64_t, int64_t, int64_t, void*, size_t,
                                             cudaStream_t);

}  // namespace cuda
}  // namespace fp8rt
