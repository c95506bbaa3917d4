// The CUDA backend of the model: bf16 activations for fp8 and bf16, float for fp32.
#include "runtime/gpt_impl.h"
#include "runtime/ops_cuda.h"

namespace fp8rt {

Result<std::unique_ptr<GptModel>> CreateCudaGpt(const ModelOptions& options, int device) {
  auto ops = std::make_unique<CudaOps>();
  FP8RT_RETURN_IF_ERROR(ops->Init(device, options.attention));
  if (options.precision == Precision::kFp32) {
    return gpt_detail::MakeGpt<CudaOps, float>(options, std::move(ops));
  }
  return gpt_detail::MakeGpt<CudaOps, bf16>(options, std::move(ops));
}

}  // namespace fp8rt
