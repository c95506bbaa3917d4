// fp8rt_comm_bench: one rank of a collective benchmark over comm::Communicator, in nccl-tests
// terms, started like fp8train (mpirun, srun or the FP8RT_* environment). --gpu: device buffers
// and NCCL; otherwise host buffers and Open MPI / Gloo. Rank 0 prints two tables:
//  1. all-reduce (sum), reduce-scatter and all-gather, float32, sizes from --min-bytes to
//     --max-bytes doubling: time per op (median over --reps blocks of --iters ops), algbw =
//     size / time and busbw = algbw x 2(n-1)/n (all-reduce) or (n-1)/n (the others), where size
//     is the whole buffer (nccl-tests' convention);
//  2. the amax reduction: ONE MAX all-reduce of every FP8 tensor's amax (--amax-floats floats)
//     against one collective per tensor (--amax-tensors all-reduces), what fp8train does against
//     what a per-tensor scheme would.
// Never in CI (label bench); docs/PERFORMANCE.md has the runs.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "comm/world.h"
#include "common/exit_codes.h"

#if FP8RT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace fp8rt::comm {
namespace {

bool g_gpu = false;
void* g_stream = nullptr;

void* Alloc(size_t bytes) {
#if FP8RT_WITH_CUDA
  if (g_gpu) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;
    cudaMemset(p, 0, bytes);
    return p;
  }
#endif
  return std::calloc(1, bytes);
}
void Free(void* p) {
#if FP8RT_WITH_CUDA
  if (g_gpu) {
    cudaFree(p);
    return;
  }
#endif
  std::free(p);
}
void Sync() {
#if FP8RT_WITH_CUDA
  if (g_gpu) cudaStreamSynchronize(static_cast<cudaStream_t>(g_stream));
#endif
}

// Median over `reps` blocks of the time per call of `iters` calls of `op`, in microseconds.
template <typename Op>
double TimeUs(Communicator& c, int reps, int iters, Op&& op) {
  for (int i = 0; i < 2; ++i) op();  // warm-up (NCCL connects lazily)
  Sync();
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    (void)c.Barrier(g_stream, "bench barrier");
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) op();
    Sync();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                     .count() /
                 iters);
  }
  std::sort(us.begin(), us.end());
  // Every rank reports its median; the slowest rank's is the collective's time.
  double med = us[us.size() / 2];
  void* buf = Alloc(sizeof(float));
  float v = static_cast<float>(med);
#if FP8RT_WITH_CUDA
  if (g_gpu) cudaMemcpy(buf, &v, sizeof v, cudaMemcpyHostToDevice);
#endif
  if (!g_gpu) std::memcpy(buf, &v, sizeof v);
  (void)c.AllReduce(buf, buf, 1, DataType::kFloat32, ReduceOp::kMax, g_stream, "bench time");
  Sync();
#if FP8RT_WITH_CUDA
  if (g_gpu) cudaMemcpy(&v, buf, sizeof v, cudaMemcpyDeviceToHost);
#endif
  if (!g_gpu) std::memcpy(&v, buf, sizeof v);
  Free(buf);
  return v;
}

std::string Bytes(size_t b) {
  if (b >= (size_t{1} << 30)) return std::to_string(b >> 30) + " GiB";
  if (b >= (size_t{1} << 20)) return std::to_string(b >> 20) + " MiB";
  if (b >= (size_t{1} << 10)) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

int Main(int argc, char** argv) {
  CLI::App app{"fp8rt_comm_bench: collective benchmark (one rank; start with mpirun/srun/env)"};
  size_t min_bytes = size_t{1} << 20, max_bytes = size_t{1} << 30;
  int reps = 5, iters = 10, amax_tensors = 200, amax_floats = 2048;
  std::string backend = "auto";
  app.add_flag("--gpu", g_gpu, "device buffers (cuda:<local rank>) and NCCL");
  app.add_option("--backend", backend, "CPU backend: auto, mpi, gloo");
  app.add_option("--min-bytes", min_bytes, "smallest buffer (default 1 MiB)");
  app.add_option("--max-bytes", max_bytes, "largest buffer (default 1 GiB)");
  app.add_option("--reps", reps, "timed blocks per size (median reported; default 5)");
  app.add_option("--iters", iters, "ops per timed block (default 10)");
  app.add_option("--amax-tensors", amax_tensors, "per-tensor amax collectives (default 200)");
  app.add_option("--amax-floats", amax_floats, "floats in the fused amax buffer (default 2048)");
  CLI11_PARSE(app, argc, argv);

  auto launch = DetectLaunch();
  if (!launch.ok()) {
    std::fprintf(stderr, "fp8rt_comm_bench: %s\n", launch.status().ToString().c_str());
    return kExitUsage;
  }
#if FP8RT_WITH_CUDA
  if (g_gpu) {
    cudaSetDevice(launch->local_rank);
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    g_stream = s;
  }
#else
  if (g_gpu) {
    std::fprintf(stderr, "fp8rt_comm_bench: --gpu needs a CUDA build\n");
    return kExitUsage;
  }
#endif
  WorldOptions wo;
  wo.gpu = g_gpu;
  wo.cpu_backend = backend;
  auto world = World::Init(*launch, wo);
  if (!world.ok()) {
    std::fprintf(stderr, "fp8rt_comm_bench: %s\n", world.status().ToString().c_str());
    return kExitPeerFailure;
  }
  Communicator& c = (*world)->comm();
  const int n = c.size();
  const bool lead = c.rank() == 0;
  if (lead) {
    std::printf("fp8rt_comm_bench: %d rank(s), backend %s (%s buffers), median of %d x %d ops\n\n",
                n, c.backend(), g_gpu ? "GPU" : "host", reps, iters);
    std::printf("| op | size | time us | algbw GB/s | busbw GB/s |\n|---|---:|---:|---:|---:|\n");
  }
  void* a = Alloc(max_bytes);
  void* b = Alloc(max_bytes);
  if (a == nullptr || b == nullptr) {
    std::fprintf(stderr, "fp8rt_comm_bench: cannot allocate 2 x %zu bytes\n", max_bytes);
    return kExitError;
  }
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    const size_t count = bytes / 4;
    const size_t per_rank = count / static_cast<size_t>(n);
    struct Row {
      const char* op;
      double factor;
      std::function<void()> run;
    };
    const std::vector<Row> rows = {
        {"all-reduce", 2.0 * (n - 1) / n,
         [&] { (void)c.AllReduce(a, a, count, DataType::kFloat32, ReduceOp::kSum, g_stream, "bench all-reduce"); }},
        {"reduce-scatter", 1.0 * (n - 1) / n,
         [&] { (void)c.ReduceScatter(a, b, per_rank, DataType::kFloat32, ReduceOp::kSum, g_stream, "bench reduce-scatter"); }},
        {"all-gather", 1.0 * (n - 1) / n,
         [&] { (void)c.AllGather(a, b, per_rank, DataType::kFloat32, g_stream, "bench all-gather"); }},
    };
    for (const Row& r : rows) {
      const double us = TimeUs(c, reps, iters, r.run);
      const double algbw = static_cast<double>(bytes) / (us * 1e3);
      if (lead) {
        std::printf("| %s | %s | %.1f | %.2f | %.2f |\n", r.op, Bytes(bytes).c_str(), us, algbw,
                    algbw * r.factor);
      }
    }
    if (bytes > max_bytes / 2) break;
  }
  // The amax reduction: one fused MAX all-reduce vs one per tensor.
  const size_t per_tensor = std::max<size_t>(1, static_cast<size_t>(amax_floats / amax_tensors));
  const double fused = TimeUs(c, reps, iters, [&] {
    (void)c.AllReduce(a, a, static_cast<size_t>(amax_floats), DataType::kFloat32, ReduceOp::kMax,
                      g_stream, "bench fused amax");
  });
  const double separate = TimeUs(c, reps, 1, [&] {
    for (int t = 0; t < amax_tensors; ++t) {
      (void)c.AllReduce(static_cast<float*>(a) + t * per_tensor,
                        static_cast<float*>(a) + t * per_tensor, per_tensor, DataType::kFloat32,
                        ReduceOp::kMax, g_stream, "bench per-tensor amax");
    }
  });
  if (lead) {
    std::printf("\n| amax reduction | collectives | time us |\n|---|---:|---:|\n");
    std::printf("| fused (fp8train): %d floats, MAX | 1 | %.1f |\n", amax_floats, fused);
    std::printf("| one per tensor: %d x %zu floats, MAX | %d | %.1f |\n", amax_tensors, per_tensor,
                amax_tensors, separate);
  }
  Free(a);
  Free(b);
  (void)(*world)->Finish();
  return kExitOk;
}

}  // namespace
}  // namespace fp8rt::comm

int main(int argc, char** argv) { return fp8rt::comm::Main(argc, argv); }
