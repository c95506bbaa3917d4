// Timing, buffers, the copy ceiling and the table printer.
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench/bench.h"
#include "common/cuda_check.h"

namespace fp8rt::bench {
namespace {

__device__ __forceinline__ float Hash01(uint64_t i, uint64_t seed) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<float>((x >> 40) & 0xFFFFFF) / 16777216.0f;
}

__global__ void FillKernel(float* d, size_t n, float lo, float hi, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    d[i] = lo + (hi - lo) * Hash01(i, seed);
  }
}

__global__ void FillBf16Kernel(__nv_bfloat16* d, size_t n, float lo, float hi, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    d[i] = __float2bfloat16_rn(lo + (hi - lo) * Hash01(i, seed));
  }
}

}  // namespace

double MedianMs(Context& ctx, const std::function<void()>& fn) {
  // Warm up by time as well as by count: five calls of a 20 us kernel keep the GPU busy for only
  // 0.1 ms, and on the H200 a short memory-bound kernel timed that soon after the GPU sat idle
  // (allocations, fills) ran slower: LayerNorm's forward at 68% of copy in a run of the
  // elementwise rows alone against 74% in the full table, where the GEMM rows run first. With
  // this warm-up the elementwise rows alone measure 75% (2026-11-22, H200). Calls go in batches of
  // four between synchronisations (so at least 8 when ctx.warmup is 5), which keeps the GPU busy
  // apart from one host round trip per batch. PairedMedianMs (the GEMM rows) warms up by count:
  // its calls take 0.05-1.6 ms each.
  FP8RT_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  const auto start = std::chrono::steady_clock::now();
  for (int calls = 0;;) {
    for (int i = 0; i < 4; ++i, ++calls) fn();
    FP8RT_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    const std::chrono::duration<double, std::milli> busy = std::chrono::steady_clock::now() - start;
    if (calls >= ctx.warmup && busy.count() >= ctx.warmup_ms) break;
  }
  std::vector<cudaEvent_t> ev(2 * ctx.repeats);
  for (auto& e : ev) FP8RT_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < ctx.repeats; ++i) {
    FP8RT_CUDA_CHECK(cudaEventRecord(ev[2 * i], ctx.stream));
    fn();
    FP8RT_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], ctx.stream));
  }
  FP8RT_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  FP8RT_CUDA_CHECK(cudaGetLastError());
  std::vector<float> ms(ctx.repeats);
  for (int i = 0; i < ctx.repeats; ++i) {
    FP8RT_CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void* DeviceAlloc(size_t bytes) {
  void* p = nullptr;
  FP8RT_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}
void DeviceFree(void* p) { FP8RT_CUDA_CHECK(cudaFree(p)); }

void FillUniform(float* d, size_t n, float lo, float hi, uint64_t seed, cudaStream_t s) {
  FillKernel<<<1024, 256, 0, s>>>(d, n, lo, hi, seed);
  FP8RT_CUDA_CHECK(cudaGetLastError());
}
void FillUniformBf16(void* d, size_t n, float lo, float hi, uint64_t seed, cudaStream_t s) {
  FillBf16Kernel<<<1024, 256, 0, s>>>(static_cast<__nv_bfloat16*>(d), n, lo, hi, seed);
  FP8RT_CUDA_CHECK(cudaGetLastError());
}

void MeasureCopyCeiling(Context& ctx) {
  const size_t bytes = size_t{2} << 30;  // 2 GiB each way: far past the L2
  void* a = DeviceAlloc(bytes);
  void* b = DeviceAlloc(bytes);
  FillUniform(static_cast<float*>(a), bytes / 4, -1, 1, 1, ctx.stream);
  const double ms = MedianMs(ctx, [&] {
    FP8RT_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, ctx.stream));
  });
  ctx.copy_gbps = 2.0 * bytes / (ms * 1e-3) / 1e9;
  ctx.rows.push_back({"ceiling: d2d copy", "2 GiB", ms, ctx.copy_gbps, "GB/s", ctx.copy_gbps,
                      "copy", "", true});
  DeviceFree(a);
  DeviceFree(b);
}

void PrintTable(const Context& ctx) {
  std::printf("\n| op | shape | median ms | achieved | %% of ceiling | target |\n");
  std::printf("|---|---|---:|---:|---:|---|\n");
  int missed = 0;
  for (const Row& r : ctx.rows) {
    const double pct = r.ceiling > 0 ? 100.0 * r.value / r.ceiling : 0;
    std::printf("| %s | %s | %.4f | %.1f %s | %.1f%% of %s | %s%s |\n", r.op.c_str(),
                r.shape.c_str(), r.median_ms, r.value, r.unit.c_str(), pct,
                r.ceiling_name.c_str(), r.target.c_str(),
                r.target.empty() ? "" : (r.target_met ? " (met)" : " (MISSED)"));
    if (!r.target.empty() && !r.target_met) ++missed;
  }
  std::printf("\ntargets missed: %d\n", missed);
}

}  // namespace fp8rt::bench
