// fp8rt_data_bench (CPU): the training data loader (runtime/data.h) in tokens per second per rank
// from the page cache, against what a GPU step needs; and a rank's host memory over a 4 GiB and a
// 40 GiB dataset (sparse llm.c shards: holes read as id 0). docs/PERFORMANCE.md "Data loading".
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "runtime/data.h"

namespace fp8rt {
namespace {

namespace fs = std::filesystem;

// /proc/self/status's VmRSS, RssAnon and RssFile in MiB.
struct Rss {
  double total = 0, anon = 0, file = 0;
};
Rss ReadRss() {
  Rss r;
  std::ifstream in("/proc/self/status");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key) {
    if (key == "VmRSS:" || key == "RssAnon:" || key == "RssFile:") {
      in >> kb >> unit;
      (key == "VmRSS:" ? r.total : key == "RssAnon:" ? r.anon : r.file) = kb / 1024;
    } else {
      std::getline(in, unit);
    }
  }
  return r;
}

// An llm.c uint16 shard of `tokens` ids: random ids (written) or holes (sparse).
void WriteShard(const std::string& path, uint64_t tokens, bool sparse, uint32_t seed) {
  const auto header = ShardHeader(2, static_cast<int64_t>(tokens));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(header.data()), sizeof header);
  if (!sparse) {
    std::mt19937 rng(seed);
    std::vector<uint16_t> buf(1 << 20);
    for (uint64_t done = 0; done < tokens; done += buf.size()) {
      const uint64_t n = std::min<uint64_t>(buf.size(), tokens - done);
      for (uint64_t i = 0; i < n; ++i) buf[i] = static_cast<uint16_t>(rng() % 50257);
      out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(n * 2));
    }
  }
  out.close();
  if (sparse) fs::resize_file(path, sizeof header + tokens * 2);
}

struct Measured {
  double tokens_per_s = 0;
  double open_s = 0;
  Rss before, after;
  uint64_t windows = 0;
};

// Opens `dir` (a directory of shards), then draws `batches` (B, T) batches.
Measured Run(const std::string& dir, int B, int T, int batches) {
  Measured m;
  m.before = ReadRss();
  const auto t0 = std::chrono::steady_clock::now();
  auto data = TokenDataset::Load(std::vector<std::string>{dir}, "tokens", "data.train");
  if (!data.ok()) {
    std::fprintf(stderr, "data_bench: %s\n", data.status().ToString().c_str());
    std::exit(1);
  }
  data->set_vocab_size(50257);
  DataLoader loader(&*data, B, T, 1337);
  if (!loader.Init().ok()) std::exit(1);
  std::vector<int32_t> x(static_cast<size_t>(B) * T), y(x.size());
  if (!loader.NextBatch(x.data(), y.data()).ok()) std::exit(1);  // (the epoch's permutation)
  m.open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.windows = loader.num_windows();
  const auto t1 = std::chrono::steady_clock::now();
  for (int b = 0; b < batches; ++b) {
    if (const Status s = loader.NextBatch(x.data(), y.data()); !s.ok()) {
      std::fprintf(stderr, "data_bench: %s\n", s.ToString().c_str());
      std::exit(1);
    }
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  m.tokens_per_s = static_cast<double>(batches) * B * T / sec;
  m.after = ReadRss();
  return m;
}

// Run() in a child process, so that each measurement starts from the same empty process.
Measured InChild(const std::string& dir, int B, int T, int batches) {
  int fds[2];
  if (::pipe(fds) != 0) std::exit(1);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const Measured m = Run(dir, B, T, batches);
    if (::write(fds[1], &m, sizeof m) != sizeof m) ::_exit(1);
    ::_exit(0);
  }
  ::close(fds[1]);
  Measured m;
  if (::read(fds[0], &m, sizeof m) != sizeof m) std::exit(1);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return m;
}

}  // namespace
}  // namespace fp8rt

int main(int argc, char** argv) {
  using namespace fp8rt;
  CLI::App app{"fp8rt_data_bench: data loader throughput and host memory"};
  std::string dir = "/tmp/fp8rt_data_bench";
  int B = 4, T = 2048, batches = 2000;
  double cached_gib = 1, need = 650e3;
  app.add_option("--dir", dir, "where the shards are written (sparse ones take no space)");
  app.add_option("-B,--batch", B, "micro-batch")->capture_default_str();
  app.add_option("-T,--seq", T, "sequence length")->capture_default_str();
  app.add_option("--batches", batches, "batches drawn per measurement")->capture_default_str();
  app.add_option("--cached-gib", cached_gib, "size of the written (page-cached) dataset")
      ->capture_default_str();
  app.add_option("--need", need, "tokens/s a rank's GPU consumes (gpt2-124m on one H200)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  namespace fs = std::filesystem;
  fs::remove_all(dir);
  // Shards of 2^30 tokens (2 GiB of uint16 ids) at most.
  constexpr uint64_t kShardTokens = uint64_t{1} << 30;
  auto make = [&](const std::string& name, double gib, bool sparse) {
    const std::string d = dir + "/" + name;
    fs::create_directories(d);
    uint64_t left = static_cast<uint64_t>(gib * (uint64_t{1} << 30) / 2);
    for (int k = 0; left > 0; ++k) {
      const uint64_t n = std::min(left, kShardTokens);
      char file[32];
      std::snprintf(file, sizeof file, "/shard_%04d.bin", k);
      WriteShard(d + file, n, sparse, static_cast<uint32_t>(k));
      left -= n;
    }
    return d;
  };
  std::printf("fp8rt_data_bench: B %d x T %d, %d batches per row, %ld CPU(s)\n", B, T, batches,
              ::sysconf(_SC_NPROCESSORS_ONLN));
  // Throughput from the page cache: a written dataset, read once first.
  const std::string cached = make("cached", cached_gib, false);
  InChild(cached, B, T, batches);  // warm the page cache
  std::vector<double> rates;
  for (int i = 0; i < 5; ++i) rates.push_back(InChild(cached, B, T, batches).tokens_per_s);
  std::sort(rates.begin(), rates.end());
  const double median = rates[2];
  std::printf(
      "\n| dataset | tokens/s per rank (median of 5) | needed | ratio | goal |\n"
      "|---|---:|---:|---:|---:|\n| %.1f GiB, page cache | %.3g | %.3g | %.1fx | 20x |\n",
      cached_gib, median, need, median / need);
  // Host memory over 4 GiB and 40 GiB (sparse).
  std::printf(
      "\n| dataset | shards | windows | open + first batch (s) | RSS after %d batches "
      "(MiB) | of it anonymous | of it file pages |\n|---|---:|---:|---:|---:|---:|---:|\n",
      batches);
  double rss[2] = {0, 0};
  int row = 0;
  for (double gib : {4.0, 40.0}) {
    const std::string d = make(std::to_string(static_cast<int>(gib)) + "gib", gib, true);
    const Measured m = InChild(d, B, T, batches);
    size_t shards = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(d)) ++shards;
    std::printf("| %.0f GiB (sparse) | %zu | %llu | %.2f | %.1f | %.1f | %.1f |\n", gib, shards,
                static_cast<unsigned long long>(m.windows), m.open_s, m.after.total, m.after.anon,
                m.after.file);
    rss[row++] = m.after.total;
  }
  std::printf("\nRSS difference 40 GiB - 4 GiB: %.1f MiB (goal: within 64 MiB)\n", rss[1] - rss[0]);
  fs::remove_all(dir);
  return 0;
}
