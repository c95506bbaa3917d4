// Grouped-query attention's key/value sharing (llama's n_kv_head < n_head): the fused QKV output
// with KV key/value heads expanded to one key/value head per query head, so every attention
// kernel (CPU, fp8rt's flash, cuDNN, GEMMs) runs it as multi-head attention; and the backward,
// each key/value head's gradient the sum over the query heads that share it.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/stream.h"

namespace fp8rt {

// Semantics (CPU and CUDA), M token rows, head size HS, NH query heads sharing KV key/value heads
// in groups of G = NH / KV (query head h reads key/value head h / G, as transformers' repeat_kv):
//   in (M, (NH + 2 KV) HS), rows [Q (NH heads) | K (KV heads) | V (KV heads)]
//   out (M, 3 NH HS), rows [Q | K expanded (NH heads) | V expanded (NH heads)]
//   GqaExpand:  out.Q = in.Q,  out.K[h] = in.K[h / G],  out.V[h] = in.V[h / G]
//   GqaReduce (the backward; dout of out's shape -> din of in's, overwritten):
//     din.Q = dout.Q,  din.K[k] = sum_{g < G} dout.K[k G + g],  the same for V
// The sums in FP32 on the GPU (FP64 in the CPU reference) over g in order, each output rounded
// once. No aliasing.

// Preconditions of both: M, NH, KV, HS >= 1 (M may be 0), KV divides NH, non-null buffers.
Status ValidateGqa(const char* op, const void* out, const void* in, int64_t M, int64_t NH,
                   int64_t KV, int64_t HS);

namespace cpu {
// Instantiated for T in {float, bf16, double}.
template <typename T>
Status GqaExpand(T* out, const T* in, int64_t M, int64_t NH, int64_t KV, int64_t HS);
template <typename T>
Status GqaReduce(T* din, const T* dout, int64_t M, int64_t NH, int64_t KV, int64_t HS);
}  // namespace cpu

#if FP8RT_WITH_CUDA
namespace cuda {
// Instantiated for T in {float, bf16}. Device pointers.
template <typename T>
Status GqaExpand(T* out, const T* in, int64_t M, int64_t NH, int64_t KV, int64_t HS,
                 cudaStream_t stream);
template <typename T>
Status GqaReduce(T* din, const T* dout, int64_t M, int64_t NH, int64_t KV, int64_t HS,
                 cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace fp8rt
