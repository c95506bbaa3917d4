// The node's inventory (node/inventory.h): NVML through dlopen, fake lists, CPU slots.
#include "node/inventory.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <sstream>

namespace fp8rt::node {
namespace {

// The few NVML entry points used, with their C ABI (nvml.h; stable since the _v2 names).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct Nvml {
  nvmlReturn_t (*Init)();
  nvmlReturn_t (*Shutdown)();
  const char* (*ErrorString)(nvmlReturn_t);
  nvmlReturn_t (*GetCount)(unsigned int*);
  nvmlReturn_t (*GetHandle)(unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*GetName)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*GetCapability)(nvmlDevice_t, int*, int*);
  nvmlReturn_t (*GetMemory)(nvmlDevice_t, nvmlMemory_t*);
};

template <typename F>
bool Sym(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  return *fn != nullptr;
}

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

bool AllDigits(const std::string& s) {
  return !s.empty() && s.size() <= 6 && s.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

Result<std::vector<Gpu>> ParseFakeGpus(const std::string& spec) {
  std::vector<Gpu> out;
  std::stringstream all(spec);
  std::string entry;
  while (std::getline(all, entry, ',')) {
    entry = Trim(entry);
    auto bad = [&](const std::string& why) {
      return Status::InvalidArgument(StrCat("fake GPUs '", spec, "': entry '", entry, "' ", why,
                                            " (expected COUNTxNAME:MAJOR.MINOR[:GIB], e.g. "
                                            "4xA100:8.0)"));
    };
    const size_t x = entry.find('x');
    if (x == std::string::npos || !AllDigits(entry.substr(0, x))) return bad("has no count");
    const int count = std::stoi(entry.substr(0, x));
    if (count < 1 || count > 1024) return bad("has a count outside 1..1024");
    std::vector<std::string> f;
    std::stringstream rest(entry.substr(x + 1));
    for (std::string p; std::getline(rest, p, ':');) f.push_back(p);
    if (f.size() < 2 || f.size() > 3 || f[0].empty()) return bad("needs a name and a capability");
    const size_t dot = f[1].find('.');
    if (dot == std::string::npos || !AllDigits(f[1].substr(0, dot)) ||
        !AllDigits(f[1].substr(dot + 1)) || f[1].size() - dot != 2) {
      return bad(StrCat("has compute capability '", f[1], "', not MAJOR.MINOR"));
    }
    const int cc = std::stoi(f[1].substr(0, dot)) * 10 + std::stoi(f[1].substr(dot + 1));
    double gib = 80;
    if (f.size() == 3) {
      if (!AllDigits(f[2]) || std::stoi(f[2]) < 1) return bad(StrCat("has memory '", f[2], "'"));
      gib = std::stoi(f[2]);
    }
    for (int k = 0; k < count; ++k) {
      out.push_back({static_cast<int>(out.size()), f[0], cc, gib, 0.0});
    }
  }
  if (out.empty()) return Status::InvalidArgument(StrCat("fake GPUs '", spec, "' lists none"));
  return out;
}

Result<std::vector<Gpu>> DiscoverNvmlGpus() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return Status::Unavailable(StrCat("NVML: dlopen(\"libnvidia-ml.so.1\") failed: ",
                                      why != nullptr ? why : "unknown error"));
  }
  Nvml n{};
  const bool all = Sym(lib, "nvmlInit_v2", &n.Init) && Sym(lib, "nvmlShutdown", &n.Shutdown) &&
                   Sym(lib, "nvmlErrorString", &n.ErrorString) &&
                   Sym(lib, "nvmlDeviceGetCount_v2", &n.GetCount) &&
                   Sym(lib, "nvmlDeviceGetHandleByIndex_v2", &n.GetHandle) &&
                   Sym(lib, "nvmlDeviceGetName", &n.GetName) &&
                   Sym(lib, "nvmlDeviceGetCudaComputeCapability", &n.GetCapability) &&
                   Sym(lib, "nvmlDeviceGetMemoryInfo", &n.GetMemory);
  if (!all) {
    dlclose(lib);
    return Status::Unavailable("NVML: libnvidia-ml.so.1 lacks an entry point fp8d needs");
  }
  auto fail = [&](const char* what, nvmlReturn_t r) {
    return Status::Unavailable(StrCat("NVML: ", what, ": ", n.ErrorString(r)));
  };
  nvmlReturn_t r = n.Init();
  if (r != 0) {
    const Status s = fail("nvmlInit", r);
    dlclose(lib);
    return s;
  }
  std::vector<Gpu> out;
  Status s = Status::Ok();
  unsigned int count = 0;
  if ((r = n.GetCount(&count)) != 0) s = fail("nvmlDeviceGetCount", r);
  for (unsigned int i = 0; s.ok() && i < count; ++i) {
    nvmlDevice_t d = nullptr;
    char name[96] = {};
    int major = 0, minor = 0;
    nvmlMemory_t mem{};
    if ((r = n.GetHandle(i, &d)) != 0) {
      s = fail("nvmlDeviceGetHandleByIndex", r);
    } else if ((r = n.GetName(d, name, sizeof name)) != 0) {
      s = fail("nvmlDeviceGetName", r);
    } else if ((r = n.GetCapability(d, &major, &minor)) != 0) {
      s = fail("nvmlDeviceGetCudaComputeCapability", r);
    } else if ((r = n.GetMemory(d, &mem)) != 0) {
      s = fail("nvmlDeviceGetMemoryInfo", r);
    } else {
      out.push_back({static_cast<int>(i), name, major * 10 + minor,
                     static_cast<double>(mem.total) / (1 << 30),
                     static_cast<double>(mem.used) / (1 << 30)});
    }
  }
  n.Shutdown();
  dlclose(lib);
  if (!s.ok()) return s;
  return out;
}

Result<Inventory> DiscoverInventory(const InventoryOptions& options) {
  Inventory inv;
  std::string fake = options.fake_gpus;
  if (fake.empty()) {
    if (const char* e = std::getenv("FP8D_FAKE_GPUS")) fake = e;
  }
  if (!fake.empty()) {
    FP8RT_ASSIGN_OR_RETURN(inv.gpus, ParseFakeGpus(fake));
    inv.source = "fake";
    inv.note = StrCat("fake GPUs: ", fake);
    return inv;
  }
  auto nvml = DiscoverNvmlGpus();
  if (nvml.ok() && !nvml->empty()) {
    inv.gpus = std::move(*nvml);
    inv.source = "nvml";
    return inv;
  }
  inv.source = "cpu";
  inv.note = nvml.ok() ? "NVML reports no GPUs" : nvml.status().message();
  if (options.cpu_slots < 0) {
    return Status::InvalidArgument(StrCat("cpu slots ", options.cpu_slots, " must be >= 0"));
  }
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  inv.cpu_slots = options.cpu_slots > 0 ? options.cpu_slots : static_cast<int>(online > 0 ? online : 1);
  return inv;
}

void DirtyGpus::JobEnded(const std::vector<int>& gpus) {
  for (int g : gpus) {
    if (g >= 0 && static_cast<size_t>(g) < baseline_.size()) pending_.insert(g);
  }
}

std::vector<std::string> DirtyGpus::Update(const std::vector<Gpu>& now) {
  std::vector<std::string> lines;
  for (auto it = pending_.begin(); it != pending_.end();) {
    const int g = *it;
    if (static_cast<size_t>(g) >= now.size()) {
      ++it;
      continue;
    }
    const double used = now[g].used_gib;
    if (used > baseline_[g] + margin_) {
      if (dirty_.insert(g).second) {
        lines.push_back(StrCat("GPU ", g, " is dirty: ", used, " GiB in use after its job ended (",
                               baseline_[g], " GiB when fp8d started); not offered until freed"));
      }
      ++it;
    } else {
      if (dirty_.erase(g) > 0) lines.push_back(StrCat("GPU ", g, " is free again"));
      it = pending_.erase(it);
    }
  }
  return lines;
}

}  // namespace fp8rt::node
