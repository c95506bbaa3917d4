// YAML/JSON -> JobSpec through the strict reader (types, ranges, document rules), and JobSpec ->
// canonical JSON for the job store.
#include "scheduler/job_spec.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace fp8rt::sched {
namespace {

using strict::Kind;
using strict::Value;

Status ValidateName(const std::string& name) {
  if (name.empty()) return Status::InvalidArgument("name is required");
  if (name.size() > 128) {
    return Status::InvalidArgument(StrCat("name = '", name, "' is longer than 128 characters"));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return Status::InvalidArgument(
          StrCat("name = '", name, "' has '", c, "'; allowed: letters, digits, '.', '_', '-'"));
    }
  }
  return Status::Ok();
}

Result<Fallback> ParseFallback(const std::string& s) {
  if (s == "bf16") return Fallback::kBf16;
  if (s == "wait") return Fallback::kWait;
  if (s == "fail") return Fallback::kFail;
  return Status::InvalidArgument(StrCat("fallback = '", s, "' is not one of: bf16, wait, fail"));
}

// `config` is a mapping (the inline trainer config) or a string holding one (as ToJson writes
// it); either way it is kept as canonical JSON text, which the trainer's YAML reader reads.
strict::Reader ConfigReader(std::string* out) {
  return [out](const Value& v, const std::string& path) -> Status {
    if (v.kind == Kind::kString) {
      FP8RT_ASSIGN_OR_RETURN(const Value inner, strict::Parse(v.text, path));
      if (inner.kind != Kind::kMap) {
        return Status::InvalidArgument(
            StrCat(path, ": expected a mapping (the trainer config) or use config_path"));
      }
      *out = strict::ToJson(inner);
      return Status::Ok();
    }
    if (v.kind != Kind::kMap) {
      return Status::InvalidArgument(
          StrCat(path, ": expected a mapping (the trainer config) or use config_path"));
    }
    *out = strict::ToJson(v);
    return Status::Ok();
  };
}

strict::Reader GpuTypesReader(std::vector<std::string>* out) {
  return [out](const Value& v, const std::string& path) -> Status {
    if (v.kind != Kind::kSeq) {
      return Status::InvalidArgument(
          StrCat(path, ": expected a list of GPU names, e.g. [H100, H200]"));
    }
    if (v.items.size() > kMaxGpuTypes) {
      return Status::InvalidArgument(
          StrCat(path, ": ", v.items.size(), " entries; at most ", kMaxGpuTypes));
    }
    out->clear();
    for (size_t i = 0; i < v.items.size(); ++i) {
      std::string name;
      const std::string where = StrCat(path, "[", i, "]");
      FP8RT_RETURN_IF_ERROR(strict::String(&name, 64)(v.items[i], where));
      if (name.empty()) return Status::InvalidArgument(StrCat(where, ": a GPU name is empty"));
      out->push_back(std::move(name));
    }
    return Status::Ok();
  };
}

}  // namespace

const char* FallbackName(Fallback f) {
  switch (f) {
    case Fallback::kBf16:
      return "bf16";
    case Fallback::kWait:
      return "wait";
    case Fallback::kFail:
      return "fail";
  }
  return "?";
}

Result<int> ParseComputeCapability(const Value& v, const std::string& path) {
  auto bad = [&] {
    return Status::InvalidArgument(
        StrCat(path, " = ", v.Describe(), " is not a compute capability like 8.0, 8.9 or 9.0"));
  };
  if (v.kind == Kind::kInt || v.kind == Kind::kFloat) {
    if (!std::isfinite(v.f) || v.f < 0 || v.f >= 100) return bad();
    const long cc = std::lround(v.f * 10);
    if (std::fabs(v.f * 10 - static_cast<double>(cc)) > 1e-6) return bad();
    return static_cast<int>(cc);
  }
  if (v.kind != Kind::kString) return bad();
  // "8.9" -> 89, "9" -> 90. Minor versions are one digit on every NVIDIA GPU so far.
  const std::string& s = v.text;
  const size_t dot = s.find('.');
  const std::string major = s.substr(0, dot);
  const std::string minor = dot == std::string::npos ? "0" : s.substr(dot + 1);
  auto digits = [](const std::string& d, size_t max_len) {
    if (d.empty() || d.size() > max_len) return false;
    for (char c : d) {
      if (c < '0' || c > '9') return false;
    }
    return true;
  };
  if (!digits(major, 2) || !digits(minor, 1)) return bad();
  return std::stoi(major) * 10 + std::stoi(minor);
}

Status CheckConfigPath(const std::string& path, const std::vector<std::string>& roots) {
  namespace fs = std::filesystem;
  const fs::path p = fs::path(path).lexically_normal();
  if (p.is_relative()) {
    if (p.empty() || *p.begin() == "..") {
      return Status::InvalidArgument(
          StrCat("config_path = '", path,
                 "' leaves the node's config directory (it starts with '..' once '..' and '.' "
                 "are resolved)"));
    }
    return Status::Ok();
  }
  std::string list;
  for (const std::string& root : roots) {
    fs::path r = fs::path(root).lexically_normal();
    if (r.has_filename() == false && r.has_parent_path()) r = r.parent_path();  // "dir/" -> "dir"
    list += (list.empty() ? "" : ", ") + r.string();
    if (!r.is_absolute()) continue;
    auto [ri, pi] = std::mismatch(r.begin(), r.end(), p.begin(), p.end());
    if (ri == r.end() && pi != p.end()) return Status::Ok();
  }
  return Status::InvalidArgument(
      StrCat("config_path = '", path, "' is outside the allowed roots (",
             list.empty() ? "none: give a path relative to the node's config directory" : list,
             "); fp8d --config-root DIR allows absolute paths under DIR"));
}

Result<JobSpec> ParseJobSpec(const std::string& text) {
  FP8RT_ASSIGN_OR_RETURN(const Value root, strict::Parse(text, "job spec"));
  if (root.kind == Kind::kNull) return Status::InvalidArgument("job spec is empty");
  if (root.kind != Kind::kMap) {
    return Status::InvalidArgument("job spec: expected a mapping of fields");
  }

  JobSpec s;
  std::string precision = "fp8", fallback = "bf16";
  bool has_config = false, has_path = false, has_timeout = false;
  auto flag = [](bool* seen, strict::Reader r) -> strict::Reader {
    return [seen, r = std::move(r)](const Value& v, const std::string& path) {
      *seen = true;
      return r(v, path);
    };
  };
  const strict::Reader cc = [&s](const Value& v, const std::string& path) -> Status {
    FP8RT_ASSIGN_OR_RETURN(s.min_compute_capability, ParseComputeCapability(v, path));
    return Status::Ok();
  };
  FP8RT_RETURN_IF_ERROR(strict::ReadFields(
      root, "",
      {{"name", strict::String(&s.name, 1024)},
       {"config", flag(&has_config, ConfigReader(&s.config_yaml))},
       {"config_path", flag(&has_path, strict::String(&s.config_path, kMaxConfigPath))},
       {"nodes", strict::Integer(&s.nodes, 1, kMaxNodes)},
       {"gpus_per_node", strict::Integer(&s.gpus_per_node, 1, kMaxGpusPerNode)},
       {"gpu_types", GpuTypesReader(&s.gpu_types)},
       {"min_compute_capability", cc},
       {"min_memory_gib", strict::Number(&s.min_memory_gib, 0, kMaxMemoryGib)},
       {"precision", strict::String(&precision, 64)},
       {"fallback", strict::String(&fallback, 64)},
       {"fallback_timeout_s",
        flag(&has_timeout, strict::Integer(&s.fallback_timeout_s, 0, kMaxFallbackTimeoutS))},
       {"priority", strict::Integer(&s.priority, -kMaxPriority, kMaxPriority)},
       {"preemptible", strict::Bool(&s.preemptible)},
       {"checkpoint_interval", strict::Integer(&s.checkpoint_interval, 1, kMaxCheckpointInterval)},
       {"max_restarts", strict::Integer(&s.max_restarts, 0, kMaxRestarts)},
       {"allow_mixed_gpu_types", strict::Bool(&s.allow_mixed_gpu_types)}}));

  FP8RT_RETURN_IF_ERROR(ValidateName(s.name));
  if (has_config == has_path) {
    return Status::InvalidArgument(
        "exactly one of config (inline trainer config) and config_path is required");
  }
  if (has_path && s.config_path.empty()) {
    return Status::InvalidArgument("config_path = '' must name the trainer config file");
  }
  FP8RT_ASSIGN_OR_RETURN(s.precision, ParsePrecision(precision));
  FP8RT_ASSIGN_OR_RETURN(s.fallback, ParseFallback(fallback));
  if (has_timeout && s.fallback != Fallback::kWait) {
    return Status::InvalidArgument(
        StrCat("fallback_timeout_s is only allowed with fallback: wait (", "fallback is ",
               FallbackName(s.fallback), ")"));
  }
  return s;
}

bool UsesBlockScaling(const JobSpec& s) {
  // (Cheap, every tick: the canonical JSON has the key and the value quoted; "block_size" is not
  // "block".)
  if (s.config_yaml.find("\"scaling\"") == std::string::npos ||
      s.config_yaml.find("\"block\"") == std::string::npos) {
    return false;
  }
  const nlohmann::json c = nlohmann::json::parse(s.config_yaml, nullptr, /*allow_exceptions=*/false);
  if (!c.is_object()) return false;
  const auto fp8 = c.find("fp8");
  if (fp8 == c.end() || !fp8->is_object()) return false;
  const auto scaling = fp8->find("scaling");
  return scaling != fp8->end() && scaling->is_string() && scaling->get<std::string>() == "block";
}

std::string JobSpec::ToJson() const {
  nlohmann::ordered_json j;
  j["name"] = name;
  if (!config_path.empty()) {
    j["config_path"] = config_path;
  } else {
    j["config"] = config_yaml;
  }
  j["nodes"] = nodes;
  j["gpus_per_node"] = gpus_per_node;
  j["gpu_types"] = gpu_types;
  j["min_compute_capability"] = FormatComputeCapability(min_compute_capability);
  j["min_memory_gib"] = min_memory_gib;
  j["precision"] = PrecisionName(precision);
  j["fallback"] = FallbackName(fallback);
  if (fallback == Fallback::kWait) j["fallback_timeout_s"] = fallback_timeout_s;
  j["priority"] = priority;
  j["preemptible"] = preemptible;
  j["checkpoint_interval"] = checkpoint_interval;
  j["max_restarts"] = max_restarts;
  j["allow_mixed_gpu_types"] = allow_mixed_gpu_types;
  return j.dump();
}

}  // namespace fp8rt::sched
