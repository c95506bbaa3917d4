// Device discovery and the precision fallback rules.
#include "runtime/device.h"

#if FP8RT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace fp8rt {

double Bf16PeakFlops(const std::string& n) {
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  if (has("H100") || has("H200") || has("H800") || has("GH200")) return 989e12;
  if (has("B200")) return 2250e12;
  if (has("A100") || has("A800")) return 312e12;
  if (has("L40S")) return 362e12;
  if (has("L40") || has("RTX 6000 Ada")) return 181e12;
  if (has("L4")) return 121e12;
  if (has("A10")) return 125e12;
  return 0;
}

Result<DeviceInfo> QueryDevice(const std::string& spec) {
  DeviceInfo d;
  if (spec == "cpu") return d;
  if (spec.rfind("cuda:", 0) != 0 || spec.size() == 5 ||
      spec.find_first_not_of("0123456789", 5) != std::string::npos) {
    return Status::InvalidArgument(
        StrCat("--device '", spec, "' is not one of: cpu, cuda:K (K a device index)"));
  }
  const int k = std::stoi(spec.substr(5));
#if FP8RT_WITH_CUDA
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    return Status::Unavailable(StrCat("--device ", spec, ": no CUDA device (",
                                      e != cudaSuccess ? cudaGetErrorString(e) : "count is 0",
                                      ")"));
  }
  if (k >= count) {
    return Status::InvalidArgument(
        StrCat("--device ", spec, ": only ", count, " CUDA device(s), indices 0..", count - 1));
  }
  cudaDeviceProp p{};
  e = cudaGetDeviceProperties(&p, k);
  if (e != cudaSuccess) return Status::Unavailable(cudaGetErrorString(e));
  d.is_cpu = false;
  d.ordinal = k;
  d.compute_capability = p.major * 10 + p.minor;
  d.name = p.name;
  d.bf16_peak_flops = Bf16PeakFlops(d.name);
  return d;
#else
  (void)k;
  return Status::Unavailable(
      StrCat("--device ", spec, ": this fp8train was built without CUDA (CPU-only build)"));
#endif
}

Status UseDevice(const DeviceInfo& device) {
  if (device.is_cpu) return Status::Ok();
#if FP8RT_WITH_CUDA
  const cudaError_t e = cudaSetDevice(device.ordinal);
  if (e != cudaSuccess) {
    return Status::Unavailable(StrCat("cuda:", device.ordinal, ": ", cudaGetErrorString(e)));
  }
  return Status::Ok();
#else
  return Status::Unavailable(StrCat("cuda:", device.ordinal, ": this build has no CUDA backend"));
#endif
}

double DeviceMemoryUsedBytes(const DeviceInfo& d) {
  if (d.is_cpu) return 0;
#if FP8RT_WITH_CUDA
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
  return static_cast<double>(total_b - free_b);
#else
  return 0;
#endif
}

Result<PrecisionDecision> DecidePrecision(const PrecisionRequest& request, ScalingMode scaling,
                                          const DeviceInfo& d) {
  return fp8rt::DecidePrecision(request, scaling, d.is_cpu ? 0 : d.compute_capability, d.name,
                                /*fallback_allowed=*/true);
}

}  // namespace fp8rt
