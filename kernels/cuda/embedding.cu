// Token + position embedding on the GPU. Forward: one 16-byte vector per thread. Backward:
// positions are radix-sorted by token (CUB, stable), then one block per run of equal tokens sums
// that token's rows in increasing position order: deterministic, no float atomics.
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

// Block i handles the run of equal keys that starts at sorted index i (other blocks exit): the
// channels of the run's row that fall in the window [lo, hi) of dwte's flat elements, kCh per
// thread at a time, each summed over the run's rows in sorted (= position) order into dst[e - lo].
// A frequent token has a run of thousands of rows, and its block alone sets the kernel's time:
// so the loop over the run reads kU rows' keys, positions and values before it adds them (in
// order), and every channel of a thread runs its own sum, instead of one load chain per row and
// channel.
template <typename T, int kCh, int kU>
__global__ void EmbeddingBackwardWteKernel(float* __restrict__ dst, const T* __restrict__ dout,
                                           const int32_t* __restrict__ keys,
                                           const int32_t* __restrict__ positions, int n, int C,
                                           int V, int64_t lo, int64_t hi) {
  const int start = blockIdx.x;
  const int32_t tok = keys[start];
  if (tok >= V || (start > 0 && keys[start - 1] == tok)) return;
  const int64_t row = int64_t{tok} * C;
  const int c_lo = static_cast<int>(max(int64_t{0}, min(int64_t{C}, lo - row)));
  const int c_hi = static_cast<int>(max(int64_t{0}, min(int64_t{C}, hi - row)));
  const int stride = static_cast<int>(blockDim.x);
  for (int c0 = c_lo + static_cast<int>(threadIdx.x); c0 < c_hi; c0 += stride * kCh) {
    // Compensated (Kahan) sums: a plain fp32 running sum over thousands of rows would drift
    // ~sqrt(count) ulps from the exact value.
    float acc[kCh], comp[kCh];
#pragma unroll
    for (int h = 0; h < kCh; ++h) acc[h] = comp[h] = 0.0f;
    for (int k = start;; k += kU) {
      bool in[kU];
      int64_t at[kU];
#pragma unroll
      for (int j = 0; j < kU; ++j) {
        in[j] = k + j < n && keys[k + j] == tok;  // (sorted: once out, out for good)
        at[j] = in[j] ? int64_t{positions[k + j]} * C : 0;
      }
      float v[kU][kCh];
#pragma unroll
      for (int j = 0; j < kU; ++j) {
#pragma unroll
        for (int h = 0; h < kCh; ++h) {
          const int c = c0 + h * stride;
          v[j][h] = in[j] && c < c_hi ? ToFloat(dout[at[j] + c]) : 0.0f;
        }
      }
#pragma unroll
      for (int j = 0; j < kU; ++j) {
        if (!in[j]) break;
#pragma unroll
        for (int h = 0; h < kCh; ++h) {
          const float y = v[j][h] - comp[h];
          const float t = acc[h] + y;
          comp[h] = (t - acc[h]) - y;
          acc[h] = t;
        }
      }
      if (!in[kU - 1]) break;
    }
#pragma unroll
    for (int h = 0; h < kCh; ++h) {
      const int c = c0 + h * stride;
      if (c < c_hi) dst[row + c - lo] += acc[h];
    }
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

Result<size_t> EmbeddingBackwardScratchBytes(int64_t B, int64_t seq_len, int64_t V) {
  const int64_t n = B * seq_len;
  if (B < 0 || seq_len < 0 || n > INT32_MAX || V < 1 || V >= INT32_MAX) {
    return Status::InvalidArgument(StrCat("EmbeddingBackwardScratchBytes: B=", B, " T=", seq_len,
                                          " V=", V, ": need B*T < 2^31 and 1 <= V < 2^31 - 1"));
  }
  size_t temp = 0;
  FP8RT_CUDA_TRY(SortTempBytes(static_cast<int>(n), V, &temp));
  return 4 * AlignUp(static_cast<size_t>(n) * sizeof(int32_t)) + AlignUp(temp);
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
  const size_t need = 4 * slot + AlignUp(temp_bytes);
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
  const int threads = C >= 256 ? 256 : (C + 31) / 32 * 32;
  EmbeddingBackwardWteKernel<T, 8, 8>
      <<<n, threads, 0, stream>>>(dst, dout, s.keys_out, s.pos_out, n, C, V, lo, lo + count);
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
