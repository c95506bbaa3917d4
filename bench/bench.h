// Kernel benchmark harness: CUDA-event timing (median of repeats after warm-up), the ceilings
// measured in the same run, and the one table every kernel family adds rows to.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <string>
#include <vector>

namespace fp8rt::bench {

struct Row {
  std::string op;
  std::string shape;
  double median_ms = 0;
  double value = 0;        // achieved TFLOP/s or GB/s
  std::string unit;        // "TFLOP/s" or "GB/s"
  double ceiling = 0;      // the ceiling this row is compared with, same unit
  std::string ceiling_name;
  std::string target;      // e.g. ">= 80% of copy" or "within 3% of raw"; empty if none
  bool target_met = true;
};

struct Context {
  cudaStream_t stream = nullptr;
  int warmup = 5;         // warm-up calls before timing, at least...
  double warmup_ms = 10;  // ...and for at least this wall time (see MedianMs)
  int repeats = 20;
  double copy_gbps = 0;          // device-to-device copy, bytes read + written per second
  double raw_fp8_tflops = 0;     // raw heuristic-best cuBLASLt FP8 8192^3, BF16 out
  double raw_bf16_tflops = 0;    // raw heuristic-best cuBLASLt BF16 8192^3
  std::vector<Row> rows;
  std::string filter;            // only families whose name contains this (empty: all)
  bool Wants(const std::string& family) const {
    return filter.empty() || family.find(filter) != std::string::npos;
  }
};

// Median time in milliseconds of fn() on ctx.stream, after at least ctx.warmup calls and
// ctx.warmup_ms of warm-up; each repeat is timed with its own pair of events.
double MedianMs(Context& ctx, const std::function<void()>& fn);

// Rotating set of identical-size device buffers, so repeats do not measure the L2 cache.
void* DeviceAlloc(size_t bytes);
void DeviceFree(void* p);
// Fills with uniform random values in [lo, hi) (never zeros: zeros run faster than real data).
void FillUniform(float* d, size_t n, float lo, float hi, uint64_t seed, cudaStream_t s);
void FillUniformBf16(void* d, size_t n, float lo, float hi, uint64_t seed, cudaStream_t s);

// Families. Each adds its rows (and may set ceilings).
void MeasureCopyCeiling(Context& ctx);
void BenchGemm(Context& ctx);          // sets raw_*_tflops, then the wrapper rows
void BenchQuantize(Context& ctx);      // quantize+amax(+transpose), dequantize, scaling update
void BenchElementwise(Context& ctx);   // layernorm, gelu, softmax-xent, adamw, ...
void BenchAttention(Context& ctx);
void BenchFp8Attention(Context& ctx);  // family "fp8-attention" (cuDNN FP8 beside cuDNN BF16)

void PrintTable(const Context& ctx);

}  // namespace fp8rt::bench
