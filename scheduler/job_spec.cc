// YAML/JSON -> JobSpec with strict fields, and JobSpec -> canonical JSON for the job store.
#include "scheduler/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <type_traits>

namespace fp8rt::sched {
namespace {

using Handler = std::function<Status(const YAML::Node&, const std::string& field)>;

template <typename T>
Handler Scalar(T* out) {
  return [out](const YAML::Node& n, const std::string& field) -> Status {
    if (!n.IsScalar()) return Status::InvalidArgument(StrCat(field, ": expected a scalar"));
    try {
      *out = n.as<T>();
    } catch (const YAML::Exception&) {
      return Status::InvalidArgument(StrCat(field, " = '", n.Scalar(), "' is not a valid ",
                                            std::is_same_v<T, bool> ? "boolean (true or false)"
                                            : std::is_integral_v<T> ? "integer"
                                            : std::is_floating_point_v<T> ? "number"
                                                                          : "string"));
    }
    return Status::Ok();
  };
}

Status AtLeast(const char* field, int64_t v, int64_t lo) {
  if (v < lo) return Status::InvalidArgument(StrCat(field, " = ", v, " must be >= ", lo));
  return Status::Ok();
}

// "8.9" -> 89, "9" -> 90. Minor versions are one digit on every NVIDIA GPU so far.
Result<int> ParseComputeCapability(const std::string& s) {
  auto bad = [&] {
    return Status::InvalidArgument(StrCat("min_compute_capability = '", s,
                                          "' is not a compute capability like 8.0, 8.9 or 9.0"));
  };
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

// `config` is a mapping (inline trainer config) or a string holding one (as ToJson writes it).
Status ReadConfig(const YAML::Node& n, std::string* out) {
  YAML::Node map = n;
  if (n.IsScalar()) {
    try {
      map = YAML::Load(n.Scalar());
    } catch (const YAML::Exception& e) {
      return Status::InvalidArgument(StrCat("config: the string is not valid YAML: ", e.what()));
    }
  }
  if (!map.IsMap()) {
    return Status::InvalidArgument(
        "config: expected a mapping (the trainer config) or use config_path");
  }
  YAML::Emitter e;
  e << map;
  *out = e.c_str();
  return Status::Ok();
}

Status ReadGpuTypes(const YAML::Node& n, std::vector<std::string>* out) {
  if (!n.IsSequence()) {
    return Status::InvalidArgument("gpu_types: expected a list of GPU names, e.g. [H100, H200]");
  }
  out->clear();
  for (const auto& e : n) {
    if (!e.IsScalar() || e.Scalar().empty()) {
      return Status::InvalidArgument("gpu_types: every entry must be a non-empty GPU name");
    }
    out->push_back(e.Scalar());
  }
  return Status::Ok();
}

}  // namespace

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp8:
      return "fp8";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp32:
      return "fp32";
  }
  return "?";
}

Result<Precision> ParsePrecision(const std::string& s) {
  if (s == "fp8") return Precision::kFp8;
  if (s == "bf16") return Precision::kBf16;
  if (s == "fp32") return Precision::kFp32;
  return Status::InvalidArgument(StrCat("precision = '", s, "' is not one of: fp8, bf16, fp32"));
}

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

std::string FormatComputeCapability(int cc) { return StrCat(cc / 10, ".", cc % 10); }

Result<JobSpec> ParseJobSpec(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(StrCat("job spec is not valid YAML or JSON: ", e.what()));
  }
  if (root.IsNull()) return Status::InvalidArgument("job spec is empty");
  if (!root.IsMap()) return Status::InvalidArgument("job spec: expected a mapping of fields");

  JobSpec s;
  std::string precision = "fp8", fallback = "bf16", cc = "0.0";
  bool has_config = false, has_path = false, has_timeout = false;
  const std::map<std::string, Handler> handlers = {
      {"name", Scalar(&s.name)},
      {"config",
       [&](const YAML::Node& n, const std::string&) {
         has_config = true;
         return ReadConfig(n, &s.config_yaml);
       }},
      {"config_path",
       [&](const YAML::Node& n, const std::string& f) {
         has_path = true;
         return Scalar(&s.config_path)(n, f);
       }},
      {"nodes", Scalar(&s.nodes)},
      {"gpus_per_node", Scalar(&s.gpus_per_node)},
      {"gpu_types",
       [&](const YAML::Node& n, const std::string&) { return ReadGpuTypes(n, &s.gpu_types); }},
      {"min_compute_capability", Scalar(&cc)},
      {"min_memory_gib", Scalar(&s.min_memory_gib)},
      {"precision", Scalar(&precision)},
      {"fallback", Scalar(&fallback)},
      {"fallback_timeout_s",
       [&](const YAML::Node& n, const std::string& f) {
         has_timeout = true;
         return Scalar(&s.fallback_timeout_s)(n, f);
       }},
      {"priority", Scalar(&s.priority)},
      {"preemptible", Scalar(&s.preemptible)},
      {"checkpoint_interval", Scalar(&s.checkpoint_interval)},
      {"max_restarts", Scalar(&s.max_restarts)},
      {"allow_mixed_gpu_types", Scalar(&s.allow_mixed_gpu_types)},
  };
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    auto it = handlers.find(key);
    if (it == handlers.end()) {
      std::string allowed;
      for (const auto& h : handlers) allowed += (allowed.empty() ? "" : ", ") + h.first;
      return Status::InvalidArgument(StrCat("unknown field '", key, "'; allowed: ", allowed));
    }
    FP8RT_RETURN_IF_ERROR(it->second(kv.second, key));
  }

  FP8RT_RETURN_IF_ERROR(ValidateName(s.name));
  if (has_config == has_path) {
    return Status::InvalidArgument(
        "exactly one of config (inline trainer config) and config_path is required");
  }
  if (has_path && s.config_path.empty()) {
    return Status::InvalidArgument("config_path = '' must name the trainer config file");
  }
  FP8RT_RETURN_IF_ERROR(AtLeast("nodes", s.nodes, 1));
  FP8RT_RETURN_IF_ERROR(AtLeast("gpus_per_node", s.gpus_per_node, 1));
  FP8RT_ASSIGN_OR_RETURN(s.min_compute_capability, ParseComputeCapability(cc));
  if (s.min_memory_gib < 0) {
    return Status::InvalidArgument(StrCat("min_memory_gib = ", s.min_memory_gib, " must be >= 0"));
  }
  FP8RT_ASSIGN_OR_RETURN(s.precision, ParsePrecision(precision));
  FP8RT_ASSIGN_OR_RETURN(s.fallback, ParseFallback(fallback));
  if (has_timeout && s.fallback != Fallback::kWait) {
    return Status::InvalidArgument(
        StrCat("fallback_timeout_s is only allowed with fallback: wait (", "fallback is ",
               FallbackName(s.fallback), ")"));
  }
  FP8RT_RETURN_IF_ERROR(AtLeast("fallback_timeout_s", s.fallback_timeout_s, 0));
  FP8RT_RETURN_IF_ERROR(AtLeast("checkpoint_interval", s.checkpoint_interval, 1));
  FP8RT_RETURN_IF_ERROR(AtLeast("max_restarts", s.max_restarts, 0));
  return s;
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
