// Which device fp8train runs on, and the precision decision: fp8 needs compute capability >= 8.9,
// bf16 >= 8.0; below that the run falls back (bf16, then fp32) with the reason recorded. On the
// CPU, fp8 is emulated (FP32 math on quantize-dequantized operands) and bf16 runs as asked.
#pragma once

#include <string>

#include "common/status.h"
#include "common/train_config.h"

namespace fp8rt {

struct DeviceInfo {
  bool is_cpu = true;
  int ordinal = -1;              // CUDA device index
  int compute_capability = 0;    // major * 10 + minor
  std::string name = "cpu";
  double bf16_peak_flops = 0;    // dense BF16 peak for MFU; 0 when unknown
};

// "cpu" or "cuda:K". Fails with the reason when the device does not exist.
Result<DeviceInfo> QueryDevice(const std::string& spec);

// The precision a run gets on `device` (common/precision.h's rule; a GPU that cannot run the
// request falls back, saying why).
Result<PrecisionDecision> DecidePrecision(const PrecisionRequest& request, ScalingMode scaling,
                                          const DeviceInfo& device);

// Makes `device` the calling thread's current CUDA device (before NCCL connects); nothing on the CPU.
Status UseDevice(const DeviceInfo& device);

// Bytes in use on the device (total - free, all processes); 0 on the CPU or on error.
double DeviceMemoryUsedBytes(const DeviceInfo& device);

// Dense BF16 tensor-core peak by GPU name (H100/H200 989 TFLOP/s, A100 312, ...); 0 if unknown.
double Bf16PeakFlops(const std::string& gpu_name);

}  // namespace fp8rt
