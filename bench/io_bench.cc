// fp8rt_io_bench: what a checkpoint's write costs on this machine. CRC-32C in GB/s (the byte-at-a-
// time table checkpoints used before, slice-by-8, and SSE4.2's crc32 that they use now), and,
// with --dir, the checkpoint writer's own pattern (64 MiB writes, then fsync) in GB/s, to set
// beside `dd oflag=direct` on the same disk. docs/PERFORMANCE.md "Checkpoints".
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/crc32c.h"

namespace {

using Clock = std::chrono::steady_clock;

// The checksum before: one table lookup per byte (common/crc32c.cc until the SSE4.2 path).
uint32_t Crc32cByteTable(const void* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

template <typename F>
double GbPerS(const std::vector<uint8_t>& buf, F crc, uint32_t* out) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    *out = crc(buf.data(), buf.size(), 0);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(buf.size()) / s / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fp8rt_io_bench: CRC-32C and checkpoint-write throughput"};
  double crc_gib = 1, write_gib = 4;
  std::string dir;
  app.add_option("--crc-gib", crc_gib, "bytes checksummed per row (default 1 GiB)");
  app.add_option("--dir", dir, "also write --write-gib GiB here as a checkpoint does, then fsync");
  app.add_option("--write-gib", write_gib, "default 4");
  CLI11_PARSE(app, argc, argv);

  std::vector<uint8_t> buf(static_cast<size_t>(crc_gib * (1 << 30)));
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  uint32_t a = 0, b = 0, c = 0;
  const double byte_table = GbPerS(buf, Crc32cByteTable, &a);
  const double slice8 = GbPerS(buf, fp8rt::Crc32cPortable, &b);
  const double now = GbPerS(buf, fp8rt::Crc32c, &c);
  std::printf("| CRC-32C | GB/s | checksum |\n|---|---:|---|\n");
  std::printf("| byte table (before) | %.2f | %08x |\n", byte_table, a);
  std::printf("| slice-by-8 (fallback) | %.2f | %08x |\n", slice8, b);
  std::printf("| %s (now) | %.2f | %08x |\n", fp8rt::Crc32cImplementation(), now, c);
  if (a != b || b != c) {
    std::fprintf(stderr, "checksums differ\n");
    return 1;
  }
  if (dir.empty()) return 0;
  const std::string path = dir + "/fp8rt_io_bench.bin";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::perror(path.c_str());
    return 1;
  }
  std::vector<uint8_t> chunk(size_t{64} << 20, 7);
  const auto chunks = static_cast<int64_t>(write_gib * 16);
  const auto t0 = Clock::now();
  uint32_t crc = 0;
  for (int64_t i = 0; i < chunks; ++i) {
    crc = fp8rt::Crc32c(chunk.data(), chunk.size(), crc);
    if (::write(fd, chunk.data(), chunk.size()) != static_cast<ssize_t>(chunk.size())) {
      std::perror("write");
      return 1;
    }
  }
  const double written = std::chrono::duration<double>(Clock::now() - t0).count();
  ::fsync(fd);
  const double synced = std::chrono::duration<double>(Clock::now() - t0).count();
  ::close(fd);
  ::unlink(path.c_str());
  const double bytes = static_cast<double>(chunks) * static_cast<double>(chunk.size());
  std::printf("\n| checkpoint write (64 MiB writes + CRC, then fsync) | GB/s |\n|---|---:|\n");
  std::printf("| %.1f GiB to the page cache | %.2f |\n| written and fsynced | %.2f |\n",
              bytes / (1 << 30), bytes / written / 1e9, bytes / synced / 1e9);
  return 0;
}
