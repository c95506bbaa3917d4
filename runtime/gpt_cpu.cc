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
