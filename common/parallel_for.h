// ParallelFor: fn(i) for i in [0, n) on up to hardware_concurrency threads, interleaved (thread t
// takes i = t, t + nt, ...), when there is enough work to pay for the threads (about 4M units of
// work_per_item per thread); on the calling thread otherwise. fn must be safe to run concurrently
// for different i.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace fp8rt {

template <typename Fn>
void ParallelFor(int64_t n, double work_per_item, const Fn& fn) {
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t nt =
      std::min<int64_t>({hw, n, static_cast<int64_t>(n * work_per_item / (1 << 22)) + 1});
  if (nt <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < nt; ++t) {
    pool.emplace_back([&, t] {
      for (int64_t i = t; i < n; i += nt) fn(i);
    });
  }
  for (auto& th : pool) th.join();
}

}  // namespace fp8rt
