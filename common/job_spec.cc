// YAML/JSON -> JobSpec through the strict reader (types, ranges, document rules), and JobSpec ->
// canonical JSON for the job store.
#include "common/job_spec.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/text.h"

namespace fp8rt {
namespace {

using strict::Kind;
using strict::Value;

Status ValidateName(const std::string& name) {
  if (name.empty()) return Status::InvalidArgument("name is required");
  if (name.size() > kMaxJobNameBytes) {
    return Status::InvalidArgument(
        StrCat("name is ", name.size(), " characters long; at most ", kMaxJobNameBytes));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return Status::InvalidArgument(StrCat("name = '", Printable(name), "' has '",
                                            Printable(std::string(1, c)),
                                            "'; allowed: letters, digits, '.', '_', '-'"));
    }
  }
  return Status::Ok();
}

// `config`: the training config as a mapping, or (as older job stores wrote it) a string holding
// one. Errors start with "config: " and keep the YAML line.
strict::Reader ConfigReader(RunConfig* out) {
  return [out](const Value& v, const std::string& path) -> Status {
    Result<RunConfig> c = Status::InvalidArgument("");
    if (v.kind == Kind::kString) {
      FP8RT_ASSIGN_OR_RETURN(const Value inner, strict::Parse(v.text, path));
      c = ReadRunConfig(inner, path);
    } else if (v.kind == Kind::kMap) {
      c = ReadRunConfig(v, path);
    } else {
      return Status::InvalidArgument(
          StrCat(path, ": expected a mapping (the training config), or give config_path; got ",
                 strict::KindName(v.kind)));
    }
    if (!c.ok()) return Status(c.status().code(), StrCat(path, ": ", c.status().message()));
    *out = std::move(c).value();
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

Result<int> ParseComputeCapability(const Value& v, const std::string& path) {
  auto bad = [&] {
    return Status::InvalidArgument(
        StrCat(path, " = ", v.Describe(), " is not a compute capability like 8.0, 8.9 or 9.0"));
  };
  if ((v.kind == Kind::kInt && !v.overflow) || v.kind == Kind::kFloat) {
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

Status JobSpec::Validate() const {
  FP8RT_RETURN_IF_ERROR(ValidateName(name));
  // The config's parallel layout must fit the gang the spec asks for: fp8train would refuse it
  // on the node, after placement.
  const int ranks = total_gpus();
  const int tp = config.parallel.tp;
  if (ranks % tp != 0) {
    return Status::InvalidArgument(
        StrCat("config: parallel.tp = ", tp, " does not divide the job's ", ranks,
               " rank(s) (nodes = ", nodes, " x gpus_per_node = ", gpus_per_node, ")"));
  }
  if (config.parallel.dp != 0 && config.parallel.dp * tp != ranks) {
    return Status::InvalidArgument(
        StrCat("config: parallel.dp = ", config.parallel.dp, " x tp = ", tp, " is not the job's ",
               ranks, " rank(s) (nodes = ", nodes, " x gpus_per_node = ", gpus_per_node,
               "); leave dp at 0 to take them all"));
  }
  return Status::Ok();
}

Result<JobSpec> ReadJobSpec(const Value& root, SpecSource source) {
  if (root.kind == Kind::kNull) return Status::InvalidArgument("job spec is empty");
  if (root.kind != Kind::kMap) {
    return Status::InvalidArgument("job spec: expected a mapping of fields");
  }
  JobSpec s;
  std::string precision, fallback = "bf16";
  bool has_path = false, has_timeout = false;
  const Value* config = nullptr;
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
      {{"name", strict::String(&s.name, kMaxJobNameBytes)},
       {"config",
        [&config](const Value& v, const std::string&) {
          config = &v;  // read below, once the spec is known to be one
          return Status::Ok();
        }},
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
  const bool has_config = config != nullptr;
  if (source == SpecSource::kUser && has_config == has_path) {
    return Status::InvalidArgument(
        "exactly one of config (the training config, inline) and config_path is required");
  }
  if (source == SpecSource::kStored && !has_config) {
    return Status::InvalidArgument("config is required (a stored spec holds its config)");
  }
  if (has_path && s.config_path.empty()) {
    return Status::InvalidArgument("config_path = '' must name the training config file");
  }
  if (!precision.empty()) {
    FP8RT_ASSIGN_OR_RETURN(s.precision, ParsePrecision(precision));
  }
  FP8RT_ASSIGN_OR_RETURN(s.fallback, ParseFallback(fallback));
  if (has_timeout && s.fallback != Fallback::kWait) {
    return Status::InvalidArgument(
        StrCat("fallback_timeout_s is only allowed with fallback: wait (", "fallback is ",
               FallbackName(s.fallback), ")"));
  }
  if (has_config) {
    FP8RT_RETURN_IF_ERROR(ConfigReader(&s.config)(*config, "config"));
    FP8RT_RETURN_IF_ERROR(s.Validate());
  }
  return s;
}

Result<JobSpec> ParseJobSpec(const std::string& text, SpecSource source) {
  FP8RT_ASSIGN_OR_RETURN(const Value root, strict::Parse(text, "job spec"));
  return ReadJobSpec(root, source);
}

std::string JobSpec::ToJson(SpecSource as) const {
  nlohmann::ordered_json j;
  j["name"] = name;
  if (!config_path.empty()) j["config_path"] = config_path;
  if (config_path.empty() || as == SpecSource::kStored) {
    j["config"] = nlohmann::ordered_json::parse(RunConfigToJson(config));
  }
  j["nodes"] = nodes;
  j["gpus_per_node"] = gpus_per_node;
  j["gpu_types"] = gpu_types;
  j["min_compute_capability"] = FormatComputeCapability(min_compute_capability);
  j["min_memory_gib"] = min_memory_gib;
  if (precision) j["precision"] = PrecisionName(*precision);
  j["fallback"] = FallbackName(fallback);
  if (fallback == Fallback::kWait) j["fallback_timeout_s"] = fallback_timeout_s;
  j["priority"] = priority;
  j["preemptible"] = preemptible;
  j["checkpoint_interval"] = checkpoint_interval;
  j["max_restarts"] = max_restarts;
  j["allow_mixed_gpu_types"] = allow_mixed_gpu_types;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace fp8rt
