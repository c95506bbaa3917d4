// fp8rt_comm_check: one rank of a collective test, started by mpirun, srun or the FP8RT_*
// environment. Runs every collective of comm::Communicator on the world and on DP/TP-like
// sub-groups, with awkward counts and every data type, checks every result exactly, then (with
// --fail) makes one rank die or hang so that the others can show that they end, naming it.
// Exit 0: all checks passed; 1: a wrong result (printed); 4: a peer failed (the monitor's exit).
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstring>
#include <iostream>
#include <thread>
#include <vector>

#include "comm/world.h"
#include "common/exit_codes.h"

#if FP8RT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace fp8rt::comm {
namespace {

bool g_gpu = false;

// Host <-> the communicator's buffers (device memory with --gpu).
struct Buf {
  size_t bytes = 0;
  void* p = nullptr;
  explicit Buf(size_t n) : bytes(n) {
#if FP8RT_WITH_CUDA
    if (g_gpu) {
      if (cudaMalloc(&p, n == 0 ? 1 : n) != cudaSuccess) std::abort();
      return;
    }
#endif
    p = std::malloc(n == 0 ? 1 : n);
  }
  ~Buf() {
#if FP8RT_WITH_CUDA
    if (g_gpu) {
      cudaFree(p);
      return;
    }
#endif
    std::free(p);
  }
  template <typename T>
  void Put(const std::vector<T>& v) {
#if FP8RT_WITH_CUDA
    if (g_gpu) {
      cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
      return;
    }
#endif
    std::memcpy(p, v.data(), v.size() * sizeof(T));
  }
  template <typename T>
  std::vector<T> Get(size_t n, size_t offset = 0) {
    std::vector<T> v(n);
#if FP8RT_WITH_CUDA
    if (g_gpu) {
      cudaDeviceSynchronize();
      cudaMemcpy(v.data(), static_cast<char*>(p) + offset * sizeof(T), n * sizeof(T),
                 cudaMemcpyDeviceToHost);
      return v;
    }
#endif
    std::memcpy(v.data(), static_cast<char*>(p) + offset * sizeof(T), n * sizeof(T));
    return v;
  }
};

int g_failures = 0;

template <typename T>
void Expect(const std::vector<T>& got, const std::vector<T>& want, const std::string& what,
            int rank) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      std::cerr << "comm_check: rank " << rank << ": " << what << ": element " << i << " is "
                << +got[i] << ", expected " << +want[i] << "\n";
      ++g_failures;
      return;
    }
  }
}

// A collective's Status: a failure counts and is printed.
void Ok(const Status& s, int rank) {
  if (s.ok()) return;
  std::cerr << "comm_check: rank " << rank << ": " << s.ToString() << "\n";
  ++g_failures;
}

uint16_t Bf16(float f) {  // exact for the small integers used here
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

// The collectives of one group; `tag` names it in messages. Values depend on (rank, i) so that a
// misplaced element shows.
void CheckGroup(Communicator& c, const std::string& tag) {
  const int R = c.rank(), N = c.size();
  void* stream = nullptr;
  for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, size_t{65537}}) {
    const std::string at = StrCat(tag, " count ", count);
    {  // float sum / max / min, in place and not
      std::vector<float> mine(count);
      for (size_t i = 0; i < count; ++i) mine[i] = static_cast<float>((R + 1) * (i % 97 + 1));
      std::vector<float> sum(count), mx(count), mn(count);
      for (size_t i = 0; i < count; ++i) {
        for (int r = 0; r < N; ++r) sum[i] += static_cast<float>((r + 1) * (i % 97 + 1));
        mx[i] = static_cast<float>(N * (i % 97 + 1));
        mn[i] = static_cast<float>(i % 97 + 1);
      }
      Buf a(count * 4), b(count * 4);
      a.Put(mine);
      Ok(c.AllReduce(a.p, b.p, count, DataType::kFloat32, ReduceOp::kSum, stream, "check sum"), R);
      Expect(b.Get<float>(count), sum, at + " float sum", R);
      Ok(c.AllReduce(a.p, a.p, count, DataType::kFloat32, ReduceOp::kMax, stream, "check max"), R);
      Expect(a.Get<float>(count), mx, at + " float max (in place)", R);
      a.Put(mine);
      Ok(c.AllReduce(a.p, a.p, count, DataType::kFloat32, ReduceOp::kMin, stream, "check min"), R);
      Expect(a.Get<float>(count), mn, at + " float min (in place)", R);
    }
    {  // int32 and uint64 sums, bf16 sum
      std::vector<int32_t> i32(count, R + 1);
      std::vector<uint64_t> u64(count, (uint64_t{1} << 40) + R);
      std::vector<uint16_t> bf(count, Bf16(static_cast<float>(R + 1)));
      Buf a(count * 4), b(count * 8), d(count * 2);
      a.Put(i32), b.Put(u64), d.Put(bf);
      Ok(c.AllReduce(a.p, a.p, count, DataType::kInt32, ReduceOp::kSum, stream, "check int32"), R);
      Ok(c.AllReduce(b.p, b.p, count, DataType::kUint64, ReduceOp::kSum, stream, "check uint64"),
         R);
      Ok(c.AllReduce(d.p, d.p, count, DataType::kBFloat16, ReduceOp::kSum, stream, "check bf16"),
         R);
      Expect(a.Get<int32_t>(count), std::vector<int32_t>(count, N * (N + 1) / 2), at + " int32", R);
      Expect(b.Get<uint64_t>(count),
             std::vector<uint64_t>(count, N * (uint64_t{1} << 40) + uint64_t(N * (N - 1) / 2)),
             at + " uint64", R);
      Expect(d.Get<uint16_t>(count),
             std::vector<uint16_t>(count, Bf16(static_cast<float>(N * (N + 1) / 2))), at + " bf16",
             R);
    }
    {  // all-gather (out of place, in place), reduce-scatter (out, in), broadcast
      std::vector<float> mine(count), all(count * N);
      for (size_t i = 0; i < count; ++i) mine[i] = static_cast<float>(R * 100000 + i);
      for (int r = 0; r < N; ++r) {
        for (size_t i = 0; i < count; ++i) all[r * count + i] = static_cast<float>(r * 100000 + i);
      }
      Buf a(count * 4), g(count * N * 4);
      a.Put(mine);
      Ok(c.AllGather(a.p, g.p, count, DataType::kFloat32, stream, "check all-gather"), R);
      Expect(g.Get<float>(count * N), all, at + " all-gather", R);
      std::vector<float> seeded(count * N, -1.f);
      std::copy(mine.begin(), mine.end(), seeded.begin() + R * count);
      g.Put(seeded);
      Ok(c.AllGather(static_cast<char*>(g.p) + R * count * 4, g.p, count, DataType::kFloat32,
                     stream, "check all-gather in place"),
         R);
      Expect(g.Get<float>(count * N), all, at + " all-gather in place", R);

      // reduce-scatter: every rank sends all = (r*100000 + j); block R of the sum.
      std::vector<float> want(count);
      for (size_t i = 0; i < count; ++i) {
        want[i] = static_cast<float>(N) * static_cast<float>(R * 100000 + i);
      }
      g.Put(all);
      Ok(c.ReduceScatter(g.p, a.p, count, DataType::kFloat32, ReduceOp::kSum, stream,
                         "check reduce-scatter"),
         R);
      Expect(a.Get<float>(count), want, at + " reduce-scatter", R);
      g.Put(all);
      Ok(c.ReduceScatter(g.p, static_cast<char*>(g.p) + R * count * 4, count, DataType::kFloat32,
                         ReduceOp::kSum, stream, "check reduce-scatter in place"),
         R);
      Expect(g.Get<float>(count, R * count), want, at + " reduce-scatter in place", R);

      const int root = N - 1;
      std::vector<float> from_root(count);
      for (size_t i = 0; i < count; ++i) from_root[i] = static_cast<float>(root * 7 + i);
      a.Put(R == root ? from_root : std::vector<float>(count, 0.f));
      Ok(c.Broadcast(a.p, count, DataType::kFloat32, root, stream, "check broadcast"), R);
      Expect(a.Get<float>(count), from_root, at + " broadcast", R);
    }
  }
  Ok(c.Barrier(stream, "check barrier"), R);
}

}  // namespace
}  // namespace fp8rt::comm

int main(int argc, char** argv) {
  using namespace fp8rt;
  using namespace fp8rt::comm;
  CLI::App app{"fp8rt_comm_check: checks every collective on the ranks of this launch"};
  std::string backend = "auto", fail = "none";
  int timeout_ms = 60000, fail_rank = 1, iterations = 40;
  app.add_flag("--gpu", g_gpu, "buffers on the GPU (local rank's device): NCCL");
  app.add_option("--backend", backend, "CPU backend: auto, mpi, gloo");
  app.add_option("--timeout-ms", timeout_ms, "collective timeout");
  app.add_option("--fail", fail, "none, kill (rank --fail-rank SIGKILLs itself mid-loop) or hang")
      ->check(CLI::IsMember({"none", "kill", "hang"}));
  app.add_option("--fail-rank", fail_rank, "the rank that fails");
  app.add_option("--iterations", iterations, "all-reduces in the loop after the checks");
  CLI11_PARSE(app, argc, argv);

  auto launch = DetectLaunch();
  if (!launch.ok()) {
    std::cerr << "comm_check: " << launch.status().ToString() << "\n";
    return kExitUsage;
  }
#if FP8RT_WITH_CUDA
  if (g_gpu) cudaSetDevice(launch->local_rank);
#endif
  WorldOptions wo;
  wo.gpu = g_gpu;
  wo.cpu_backend = backend;
  wo.timeout = std::chrono::milliseconds(timeout_ms);
  auto world = World::Init(*launch, wo);
  if (!world.ok()) {
    std::cerr << "comm_check: rank " << launch->rank << ": " << world.status().ToString() << "\n";
    return kExitError;
  }
  Communicator& c = (*world)->comm();
  const int R = c.rank(), N = c.size();
  CheckGroup(c, "world");
  if (N % 2 == 0) {  // a DP x TP grid of (N/2) x 2: rank = dp * 2 + tp
    auto dp = c.Split(R % 2, R / 2, "dp");
    auto tp = c.Split(R / 2, R % 2, "tp");
    if (!dp.ok() || !tp.ok()) {
      std::cerr << "comm_check: rank " << R
                << ": split failed: " << (!dp.ok() ? dp.status() : tp.status()).ToString() << "\n";
      return kExitError;
    }
    if ((*dp)->size() != N / 2 || (*dp)->rank() != R / 2 || (*tp)->size() != 2 ||
        (*tp)->rank() != R % 2) {
      std::cerr << "comm_check: rank " << R << ": wrong sub-group ranks\n";
      ++g_failures;
    }
    CheckGroup(**dp, "dp");
    CheckGroup(**tp, "tp");
  }
  // The loop a failing rank leaves: the others must end with an error naming it, not hang.
  Buf x(4096 * 4);
  x.Put(std::vector<float>(4096, 1.f));
  for (int it = 0; it < iterations; ++it) {
    if (fail != "none" && R == fail_rank && it == iterations / 2) {
      std::cerr << "comm_check: rank " << R << ": failing now (" << fail << ")" << std::endl;
      if (fail == "kill") std::raise(SIGKILL);
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    Ok(c.AllReduce(x.p, x.p, 4096, DataType::kFloat32, ReduceOp::kMax, nullptr, "loop all-reduce"),
       R);
  }
  if (g_failures > 0) {
    std::cerr << "comm_check: rank " << R << ": " << g_failures << " wrong result(s)\n";
    return kExitError;
  }
  const Status s = (*world)->Finish();
  if (!s.ok()) {
    std::cerr << "comm_check: rank " << R << ": finish: " << s.ToString() << "\n";
    return kExitError;
  }
  std::cout << "comm_check: rank " << R << " of " << N << " (" << c.backend() << ", "
            << LauncherName(launch->launcher) << ") OK" << std::endl;
  return kExitOk;
}
