// The CPU backend of the model: the kernels' CPU references. fp8 runs FP32 activations with
// every FP8 GEMM operand quantized and dequantized exactly as on a GPU (same scales, histories).
#include "runtime/gpt_impl.h"

namespace fp8rt {

Result<std::unique_ptr<GptModel>> CreateCpuGpt(const ModelOptions& options) {
  auto ops = std::make_unique<CpuOps>();
  if (options.precision == Precision::kBf16) {
    return gpt_detail::MakeGpt<CpuOps, bf16>(options, std::move(ops));
  }
  return gpt_detail::MakeGpt<CpuOps, float>(options, std::move(ops));
}

}  // namespace fp8rt

#if !FP8RT_WITH_CUDA
namespace fp8rt {
// A CPU-only build has no CUDA backend; --device cuda:K is refused before this is reached, so
// this only answers callers that skip QueryDevice.
Result<std::unique_ptr<GptModel>> CreateCudaGpt(const ModelOptions&, int device) {
  return Status::Unavailable(StrCat("cuda:", device, ": this build has no CUDA backend"));
}
}  // namespace fp8rt
#endif
