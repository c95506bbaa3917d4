// fp8rt_kernel_bench: one table of op, shape, median time, achieved rate and % of the ceiling
// measured in this same run. Usage: fp8rt_kernel_bench [--filter FAMILY] [--repeats N]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench/bench.h"
#include "common/cuda_check.h"

int main(int argc, char** argv) {
  fp8rt::bench::Context ctx;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--filter" && i + 1 < argc) {
      ctx.filter = argv[++i];
    } else if (a == "--repeats" && i + 1 < argc) {
      ctx.repeats = std::atoi(argv[++i]);
      if (ctx.repeats < 1) {
        std::fprintf(stderr, "--repeats must be >= 1, got %s\n", argv[i]);
        return 2;
      }
    } else {
      std::fprintf(stderr, "unknown argument '%s'\nusage: %s [--filter FAMILY] [--repeats N]\n",
                   a.c_str(), argv[0]);
      return 2;
    }
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("no CUDA device: kernel benchmark skipped\n");
    return 0;
  }
  cudaDeviceProp prop{};
  FP8RT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs, %.0f GiB)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0);
  FP8RT_CUDA_CHECK(cudaStreamCreate(&ctx.stream));
  fp8rt::bench::MeasureCopyCeiling(ctx);
  if (ctx.Wants("gemm")) fp8rt::bench::BenchGemm(ctx);
  if (ctx.Wants("quantize")) fp8rt::bench::BenchQuantize(ctx);
  if (ctx.Wants("elementwise")) fp8rt::bench::BenchElementwise(ctx);
  if (ctx.Wants("attention")) fp8rt::bench::BenchAttention(ctx);
  if (ctx.Wants("fp8-attention")) fp8rt::bench::BenchFp8Attention(ctx);
  fp8rt::bench::PrintTable(ctx);
  FP8RT_CUDA_CHECK(cudaStreamDestroy(ctx.stream));
  return 0;
}
