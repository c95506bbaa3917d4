// What a node offers: its GPUs as NVML reports them (loaded at run time, so fp8d runs where there
// is no driver), an injected list for tests (--fake-gpus / FP8D_FAKE_GPUS), or, with neither, a
// number of CPU slots. The node daemon registers this with the scheduler.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace fp8rt::node {

struct Gpu {
  int index = 0;               // NVML index (CUDA_VISIBLE_DEVICES numbering by PCI bus order)
  std::string name;            // "NVIDIA H100 80GB HBM3", or the fake's name
  int compute_capability = 0;  // 10 * major + minor (H100: 90)
  double memory_gib = 0;       // total
  double used_gib = 0;         // in use now (by any process)
  bool operator==(const Gpu&) const = default;
};

struct Inventory {
  std::vector<Gpu> gpus;  // empty on a CPU node
  int cpu_slots = 0;      // a CPU node's ranks at once (0 on a GPU node)
  std::string source;     // "nvml", "fake" or "cpu"
  std::string note;       // why this source (e.g. NVML's error on a machine without a driver)
};

// "4xA100:8.0" or "2xH100:9.0:80,1xL40S:8.9" (count x name : compute capability [: GiB]);
// InvalidArgument naming the entry otherwise.
Result<std::vector<Gpu>> ParseFakeGpus(const std::string& spec);

// The GPUs through NVML (libnvidia-ml.so.1, opened with dlopen). Unavailable, with the reason,
// when the library or a driver is missing or NVML fails.
Result<std::vector<Gpu>> DiscoverNvmlGpus();

struct InventoryOptions {
  std::string fake_gpus;  // --fake-gpus; else FP8D_FAKE_GPUS from the environment
  int cpu_slots = 0;      // a CPU node's slots; 0: the number of online CPUs
};
// The fake list if given, else NVML's GPUs, else a CPU node (with the reason in `note`).
Result<Inventory> DiscoverInventory(const InventoryOptions& options);

// Dirty GPUs: after a job ends on a GPU, its used memory must fall back to what it was when fp8d
// started (plus a margin) before the GPU is offered again; until then it is reported unhealthy.
class DirtyGpus {
 public:
  DirtyGpus(std::vector<double> baseline_used_gib, double margin_gib)
      : baseline_(std::move(baseline_used_gib)), margin_(margin_gib) {}
  // A job on these GPUs ended: check them from now on.
  void JobEnded(const std::vector<int>& gpus);
  // Whether any GPU still waits to be seen freed (then the caller reads NVML again).
  bool Pending() const { return !pending_.empty(); }
  // Judges the pending GPUs by `now` (their current readings, by index); a log line per change.
  std::vector<std::string> Update(const std::vector<Gpu>& now);
  std::vector<int> Dirty() const { return {dirty_.begin(), dirty_.end()}; }

 private:
  std::vector<double> baseline_;
  double margin_;
  std::set<int> pending_, dirty_;
};

}  // namespace fp8rt::node
