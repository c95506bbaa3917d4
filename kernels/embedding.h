// Token + position embedding (GPT-2's encoder): the forward gather-add and its backward, a
// deterministic scatter-add of the output gradient into the two tables.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/stream.h"

namespace fp8rt {

// Semantics (CPU and CUDA):
//   EmbeddingForward:  out[b][t][:] = wte[tokens[b][t]][:] + wpe[t][:]  (sum in fp32, rounded once)
//   EmbeddingBackward: dwte[v][:] += sum over (b, t) with tokens[b][t] == v of dout[b][t][:]
//                      dwpe[t][:] += sum over b of dout[b][t][:]
//   EmbeddingBackwardSlice: the same dwte sum over n positions (no position table), added only
//                      to the flat elements e = v * C + c of a window [lo, lo + count):
//                      dst[e - lo] += sum over i with tokens[i] == v of dout[i][c]. With
//                      lo = 0, count = V * C it is EmbeddingBackward's dwte, bit for bit. Data
//                      parallelism uses it to add every rank's rows (gathered) to this rank's
//                      part of a table's reduced gradient (ZeRO-1) or to all of it.
// Shapes: out, dout (B, T, C); tokens (B, T); wte, dwte (V, C); wpe, dwpe (maxT, C) with T <= maxT
// (only the first T rows are read / accumulated). `seq_len` is T. wpe (forward) and dwpe
// (backward) may be null: the token embedding alone (llama, whose positions are rotary); dwte
// (backward) may be null: the position table alone.
//
// Token ids outside [0, V): the CPU reference returns InvalidArgument (it can look). The CUDA
// kernels cannot report without a host sync, so they never read out of bounds instead: forward
// writes a row of NaN for such a position (the loss turns NaN: loud, never silent), backward
// leaves dwte untouched for it (dwpe still receives its gradient).
//
// Determinism: the CUDA backward sorts positions by token (stable radix sort), sums each
// token's positions in increasing position order within segments of 32 sorted positions, then
// the segments' sums in order (compensated fp32 sums; a frequent token's run spans many
// segments), and adds the total to dwte once; dwpe sums b in increasing order. No float atomics:
// bit-identical run to run.

namespace cpu {
// Instantiated for T in {float, bf16, double}.
template <typename T>
Status EmbeddingForward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                        int64_t seq_len, int64_t C, int64_t V);
template <typename T>
Status EmbeddingBackward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, int64_t B,
                         int64_t seq_len, int64_t C, int64_t V);
template <typename T>
Status EmbeddingBackwardSlice(float* dst, int64_t lo, int64_t count, const T* dout,
                              const int32_t* tokens, int64_t n, int64_t C, int64_t V);
}  // namespace cpu

#if FP8RT_WITH_CUDA
namespace cuda {
// Scratch bytes EmbeddingBackward needs for B*T positions of width C: sort keys/values, CUB's
// temporary storage and the segments' partial sums. Asks CUB, whose temporary size depends on
// the current device, hence a Result.
Result<size_t> EmbeddingBackwardScratchBytes(int64_t B, int64_t seq_len, int64_t V, int64_t C);

// Instantiated for T in {float, bf16}. Device pointers.
template <typename T>
Status EmbeddingForward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                        int64_t seq_len, int64_t C, int64_t V, cudaStream_t stream);
// scratch: at least EmbeddingBackwardScratchBytes(B, seq_len, V, C) bytes, 256-byte aligned.
template <typename T>
Status EmbeddingBackward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, int64_t B,
                         int64_t seq_len, int64_t C, int64_t V, void* scratch, size_t scratch_bytes,
                         cudaStream_t stream);
// scratch: at least EmbeddingBackwardScratchBytes(n, 1, V, C) bytes, 256-byte aligned.
template <typename T>
Status EmbeddingBackwardSlice(float* dst, int64_t lo, int64_t count, const T* dout,
                              const int32_t* tokens, int64_t n, int64_t C, int64_t V,
                              void* scratch, size_t scratch_bytes, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace fp8rt
