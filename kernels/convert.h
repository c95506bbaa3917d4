// Converting FP32 buffers to BF16 and back: the gradient reduction in BF16
// (parallel.grad_reduce_dtype: bf16) packs each bucket before its collective and unpacks the sum;
// ZeRO-3 adds each micro-batch's reduced part (FP32 or BF16) into its FP32 gradient shard.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "kernels/dtype.h"
#include "kernels/stream.h"

namespace fp8rt {

// InvalidArgument (prefixed with op) unless n >= 0 and, when n > 0, both buffers are non-null.
Status ValidateConvert(const char* op, const void* out, const void* in, int64_t n);

namespace cpu {
// out[i] = bf16(in[i]) (round to nearest even; NaN stays NaN), i < n.
Status FloatToBf16(bf16* out, const float* in, int64_t n);
// out[i] = float(in[i]), exactly.
Status Bf16ToFloat(float* out, const bf16* in, int64_t n);
// ZeRO-3's gradient shards across micro-batches: out[i] = in[i] (add false) or out[i] + in[i]
// (add true), in FP32, from FP32 or BF16 `in` (a micro-batch's reduce-scattered part).
Status AccumulateShard(float* out, const float* in, int64_t n, bool add);
Status AccumulateShard(float* out, const bf16* in, int64_t n, bool add);
}  // namespace cpu

#if FP8RT_WITH_CUDA
namespace cuda {
// As the CPU versions (bit-identical), one launch each.
Status FloatToBf16(bf16* out, const float* in, int64_t n, cudaStream_t stream);
Status Bf16ToFloat(float* out, const bf16* in, int64_t n, cudaStream_t stream);
Status AccumulateShard(float* out, const float* in, int64_t n, bool add, cudaStream_t stream);
Status AccumulateShard(float* out, const bf16* in, int64_t n, bool add, cudaStream_t stream);
}  // namespace cuda
#endif

}  // namespace fp8rt
