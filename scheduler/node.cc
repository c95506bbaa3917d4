// Strict JSON parsing of node registrations and heartbeats, and the JSON of commands and node
// records. Every error names the field, the value and what is allowed.
#include "scheduler/node.h"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace fp8rt::sched {
namespace {

using json = nlohmann::json;
using ordered = nlohmann::ordered_json;

Result<json> ParseObject(const std::string& body, const char* what) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    return Status::InvalidArgument(StrCat(what, " is not valid JSON: ", e.what()));
  }
  if (!j.is_object()) return Status::InvalidArgument(StrCat(what, ": expected a JSON object"));
  return j;
}

// Refuses any key of `j` not in `allowed`, by name.
Status OnlyKeys(const json& j, const std::string& where, const std::set<std::string>& allowed) {
  for (const auto& [key, value] : j.items()) {
    if (allowed.count(key)) continue;
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    return Status::InvalidArgument(StrCat(where, "unknown field '", key, "'; allowed: ", list));
  }
  return Status::Ok();
}

template <typename T>
Status Get(const json& j, const std::string& where, const char* key, T* out, bool required) {
  auto it = j.find(key);
  if (it == j.end()) {
    return required ? Status::InvalidArgument(StrCat(where, key, " is required")) : Status::Ok();
  }
  const char* want = std::is_same_v<T, bool>          ? "a boolean"
                     : std::is_same_v<T, std::string> ? "a string"
                     : std::is_integral_v<T>          ? "an integer"
                                                      : "a number";
  const bool ok = std::is_same_v<T, bool>          ? it->is_boolean()
                  : std::is_same_v<T, std::string> ? it->is_string()
                  : std::is_integral_v<T>          ? it->is_number_integer()
                                                   : it->is_number();
  if (!ok) return Status::InvalidArgument(StrCat(where, key, " = ", it->dump(), " is not ", want));
  *out = it->get<T>();
  return Status::Ok();
}

// "9.0" or 9.0 -> 90.
Result<int> ParseCc(const json& v, const std::string& where) {
  auto bad = [&] {
    return Status::InvalidArgument(StrCat(where, "compute_capability = ", v.dump(),
                                          " is not a compute capability like \"8.0\" or \"9.0\""));
  };
  double d = 0;
  if (v.is_number()) {
    d = v.get<double>();
  } else if (v.is_string()) {
    const std::string s = v.get<std::string>();
    const size_t dot = s.find('.');
    if (s.empty() || dot == 0 || (dot != std::string::npos && dot + 2 != s.size())) return bad();
    for (char c : s) {
      if (c != '.' && (c < '0' || c > '9')) return bad();
    }
    if (s.size() > 4) return bad();
    d = std::stod(s);
  } else {
    return bad();
  }
  const long cc = std::lround(d * 10);
  if (d <= 0 || cc > 999 || std::fabs(d * 10 - static_cast<double>(cc)) > 1e-6) return bad();
  return static_cast<int>(cc);
}

Result<std::vector<int>> ParseIndexList(const json& v, const std::string& field) {
  if (!v.is_array()) return Status::InvalidArgument(StrCat(field, ": expected a list of integers"));
  std::vector<int> out;
  for (const auto& e : v) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > 1'000'000) {
      return Status::InvalidArgument(
          StrCat(field, ": entry ", e.dump(), " is not a GPU index (an integer >= 0)"));
    }
    out.push_back(e.get<int>());
  }
  return out;
}

}  // namespace

const char* NodeStateName(NodeState s) {
  switch (s) {
    case NodeState::kReady:
      return "READY";
    case NodeState::kLost:
      return "LOST";
    case NodeState::kDraining:
      return "DRAINING";
  }
  return "?";
}

Result<NodeState> ParseNodeState(const std::string& s) {
  for (NodeState st : {NodeState::kReady, NodeState::kLost, NodeState::kDraining}) {
    if (s == NodeStateName(st)) return st;
  }
  return Status::InvalidArgument(
      StrCat("node state '", s, "' is not one of: READY, LOST, DRAINING"));
}

Status ValidateNodeId(const std::string& id) {
  if (id.empty() || id.size() > 128) {
    return Status::InvalidArgument(StrCat("id = '", id, "' must be 1 to 128 characters"));
  }
  if (id == "register") return Status::InvalidArgument("id = 'register' is reserved");
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return Status::InvalidArgument(
          StrCat("id = '", id, "' has '", c, "'; allowed: letters, digits, '.', '_', '-'"));
    }
  }
  return Status::Ok();
}

Result<NodeRegistration> ParseNodeRegistration(const std::string& body) {
  FP8RT_ASSIGN_OR_RETURN(const json j, ParseObject(body, "node registration"));
  FP8RT_RETURN_IF_ERROR(OnlyKeys(j, "", {"id", "gpus"}));
  NodeRegistration r;
  FP8RT_RETURN_IF_ERROR(Get(j, "", "id", &r.id, true));
  FP8RT_RETURN_IF_ERROR(ValidateNodeId(r.id));
  auto gpus = j.find("gpus");
  if (gpus == j.end() || !gpus->is_array()) {
    return Status::InvalidArgument(
        "gpus: expected a list of {name, compute_capability, "
        "memory_gib, count, healthy} entries");
  }
  for (size_t i = 0; i < gpus->size(); ++i) {
    const json& e = (*gpus)[i];
    const std::string where = StrCat("gpus[", i, "].");
    if (!e.is_object()) return Status::InvalidArgument(StrCat("gpus[", i, "]: expected an object"));
    FP8RT_RETURN_IF_ERROR(
        OnlyKeys(e, where, {"name", "compute_capability", "memory_gib", "count", "healthy"}));
    GpuInfo g;
    int64_t count = 1;
    FP8RT_RETURN_IF_ERROR(Get(e, where, "name", &g.name, true));
    if (g.name.empty() || g.name.size() > 64) {
      return Status::InvalidArgument(StrCat(where, "name = '", g.name, "' must be 1 to 64 chars"));
    }
    if (!e.contains("compute_capability")) {
      return Status::InvalidArgument(StrCat(where, "compute_capability is required"));
    }
    FP8RT_ASSIGN_OR_RETURN(g.compute_capability, ParseCc(e.at("compute_capability"), where));
    FP8RT_RETURN_IF_ERROR(Get(e, where, "memory_gib", &g.memory_gib, true));
    if (!(g.memory_gib > 0)) {
      return Status::InvalidArgument(StrCat(where, "memory_gib = ", g.memory_gib, " must be > 0"));
    }
    FP8RT_RETURN_IF_ERROR(Get(e, where, "count", &count, false));
    if (count < 1 || count > 1024) {
      return Status::InvalidArgument(StrCat(where, "count = ", count, " must be 1 to 1024"));
    }
    FP8RT_RETURN_IF_ERROR(Get(e, where, "healthy", &g.healthy, false));
    r.gpus.insert(r.gpus.end(), count, g);
  }
  if (r.gpus.empty()) return Status::InvalidArgument("gpus: a node must have at least one GPU");
  if (r.gpus.size() > 1024) {
    return Status::InvalidArgument(StrCat("gpus: ", r.gpus.size(), " GPUs; at most 1024"));
  }
  return r;
}

Result<HeartbeatRequest> ParseHeartbeat(const std::string& body) {
  FP8RT_ASSIGN_OR_RETURN(const json j, ParseObject(body, "heartbeat"));
  FP8RT_RETURN_IF_ERROR(OnlyKeys(j, "", {"jobs", "unhealthy_gpus"}));
  HeartbeatRequest hb;
  if (auto u = j.find("unhealthy_gpus"); u != j.end()) {
    FP8RT_ASSIGN_OR_RETURN(hb.unhealthy_gpus, ParseIndexList(*u, "unhealthy_gpus"));
  }
  auto jobs = j.find("jobs");
  if (jobs == j.end()) return hb;
  if (!jobs->is_array()) return Status::InvalidArgument("jobs: expected a list of job reports");
  std::set<int64_t> seen;
  for (size_t i = 0; i < jobs->size(); ++i) {
    const json& e = (*jobs)[i];
    const std::string where = StrCat("jobs[", i, "].");
    if (!e.is_object()) return Status::InvalidArgument(StrCat("jobs[", i, "]: expected an object"));
    FP8RT_RETURN_IF_ERROR(
        OnlyKeys(e, where, {"job_id", "status", "exit_code", "step", "checkpoint_step"}));
    JobReport r;
    std::string status;
    FP8RT_RETURN_IF_ERROR(Get(e, where, "job_id", &r.job_id, true));
    if (r.job_id <= 0) {
      return Status::InvalidArgument(StrCat(where, "job_id = ", r.job_id, " must be > 0"));
    }
    if (!seen.insert(r.job_id).second) {
      return Status::InvalidArgument(StrCat(where, "job_id = ", r.job_id, " is reported twice"));
    }
    FP8RT_RETURN_IF_ERROR(Get(e, where, "status", &status, true));
    if (status == "running") {
      r.status = RankStatus::kRunning;
      if (e.contains("exit_code")) {
        return Status::InvalidArgument(
            StrCat(where, "exit_code is only allowed with status exited"));
      }
    } else if (status == "exited") {
      r.status = RankStatus::kExited;
      FP8RT_RETURN_IF_ERROR(Get(e, where, "exit_code", &r.exit_code, true));
    } else {
      return Status::InvalidArgument(
          StrCat(where, "status = '", status, "' is not one of: running, exited"));
    }
    FP8RT_RETURN_IF_ERROR(Get(e, where, "step", &r.step, false));
    FP8RT_RETURN_IF_ERROR(Get(e, where, "checkpoint_step", &r.checkpoint_step, false));
    if (r.step < -1 || r.checkpoint_step < -1) {
      return Status::InvalidArgument(StrCat(where, "step and checkpoint_step must be >= -1"));
    }
    hb.jobs.push_back(r);
  }
  return hb;
}

const char* CommandKindName(CommandKind k) {
  switch (k) {
    case CommandKind::kStart:
      return "start";
    case CommandKind::kCheckpoint:
      return "checkpoint";
    case CommandKind::kStop:
      return "stop";
  }
  return "?";
}

std::string CommandToJson(const NodeCommand& c) {
  ordered j;
  j["action"] = CommandKindName(c.kind);
  j["job_id"] = c.job_id;
  if (c.kind == CommandKind::kStart) {
    j["precision"] = PrecisionName(c.precision);
    j["gpus"] = c.gpus;
    j["node_rank"] = c.node_rank;
    j["gang_nodes"] = c.gang_nodes;
    j["resume_step"] = c.resume_step;
    j["spec"] = ordered::parse(c.spec.ToJson());
  }
  j["reason"] = c.reason;
  return j.dump();
}

std::string NodeToJson(const NodeInfo& n, bool with_jobs) {
  ordered j;
  j["id"] = n.id;
  j["state"] = NodeStateName(n.state);
  j["last_heartbeat"] = n.last_heartbeat;
  ordered gpus = ordered::array();
  for (size_t i = 0; i < n.gpus.size(); ++i) {
    const GpuInfo& g = n.gpus[i];
    ordered e = {{"name", g.name},
                 {"compute_capability", FormatComputeCapability(g.compute_capability)},
                 {"memory_gib", g.memory_gib},
                 {"healthy", g.healthy}};
    if (with_jobs) e["job_id"] = i < n.gpu_job.size() ? n.gpu_job[i] : kNoJob;
    gpus.push_back(std::move(e));
  }
  j["gpus"] = std::move(gpus);
  return j.dump();
}

Result<NodeInfo> NodeFromJson(const std::string& text) {
  NodeInfo n;
  std::string state;
  try {
    const json j = json::parse(text);
    n.id = j.at("id").get<std::string>();
    state = j.at("state").get<std::string>();
    n.last_heartbeat = j.at("last_heartbeat").get<int64_t>();
    for (const auto& g : j.at("gpus")) {
      GpuInfo gi;
      gi.name = g.at("name").get<std::string>();
      auto cc = ParseCc(g.at("compute_capability"), "");
      if (!cc.ok()) return Status::Corruption(StrCat("node ", n.id, ": ", cc.status().message()));
      gi.compute_capability = *cc;
      gi.memory_gib = g.at("memory_gib").get<double>();
      gi.healthy = g.at("healthy").get<bool>();
      n.gpus.push_back(std::move(gi));
    }
  } catch (const json::exception& e) {
    return Status::Corruption(StrCat("node record is not valid: ", e.what()));
  }
  auto st = ParseNodeState(state);
  if (!st.ok()) return Status::Corruption(st.status().message());
  n.state = *st;
  n.gpu_job.assign(n.gpus.size(), kNoJob);
  return n;
}

}  // namespace fp8rt::sched
