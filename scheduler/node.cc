// Node registrations and heartbeats through the strict reader (common/strict_yaml.h), and the JSON
// of commands and node records. Every error names the field, the value and what is allowed.
#include "scheduler/node.h"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/text.h"

namespace fp8rt::sched {
namespace {

using json = nlohmann::json;
using ordered = nlohmann::ordered_json;

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

using strict::Kind;
using strict::Value;

// At most this many GPUs per node, and GPU indices below it.
constexpr int64_t kMaxNodeGpus = 1024;

strict::Reader IndexList(std::vector<int>* out) {
  return [out](const Value& v, const std::string& path) -> Status {
    if (v.kind != Kind::kSeq) return strict::WrongKind(v, path, "a list of GPU indices");
    if (static_cast<int64_t>(v.items.size()) > kMaxNodeGpus) {
      return Status::InvalidArgument(
          StrCat(path, ": ", v.items.size(), " entries; at most ", kMaxNodeGpus));
    }
    out->clear();
    for (size_t i = 0; i < v.items.size(); ++i) {
      int g = 0;
      FP8RT_RETURN_IF_ERROR(
          strict::Integer(&g, 0, kMaxNodeGpus - 1)(v.items[i], StrCat(path, "[", i, "]")));
      out->push_back(g);
    }
    return Status::Ok();
  };
}

// {"0": "text", "1": "..."}: rank -> output, each at most 64 KiB.
strict::Reader LogsReader(std::map<int, std::string>* out) {
  return [out](const Value& v, const std::string& path) -> Status {
    if (v.kind != Kind::kMap) return strict::WrongKind(v, path, "a mapping of rank to text");
    for (const auto& [key, text] : v.fields) {
      const std::string where = StrCat(path, ".", key);
      int rank = -1;
      for (char c : key) {
        if (c < '0' || c > '9' || key.size() > 7) return Status::InvalidArgument(StrCat(where, ": not a rank"));
      }
      if (key.empty()) return Status::InvalidArgument(StrCat(path, ": an empty rank"));
      rank = std::stoi(key);
      if (text.kind != Kind::kString) return strict::WrongKind(text, where, "a string");
      if (text.text.size() > (size_t{64} << 10)) {
        return Status::InvalidArgument(StrCat(where, ": ", text.text.size(), " bytes; at most 65536"));
      }
      (*out)[rank] = text.text;
    }
    return Status::Ok();
  };
}

// Reads the object `v` with `readers`, then refuses it if a key of `required` is missing.
Status ReadObject(const Value& v, const std::string& where,
                  const std::vector<std::pair<std::string, strict::Reader>>& readers,
                  std::initializer_list<const char*> required) {
  if (v.kind != Kind::kMap) {
    return Status::InvalidArgument(
        StrCat(where.empty() ? "the body" : where, ": expected an object"));
  }
  FP8RT_RETURN_IF_ERROR(strict::ReadFields(v, where, readers));
  for (const char* key : required) {
    if (v.Find(key) == nullptr) {
      return Status::InvalidArgument(StrCat(strict::Join(where, key), " is required"));
    }
  }
  return Status::Ok();
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
  FP8RT_ASSIGN_OR_RETURN(const Value root, strict::Parse(body, "node registration"));
  NodeRegistration r;
  const Value* gpus = nullptr;
  FP8RT_RETURN_IF_ERROR(ReadObject(root, "",
                                   {{"id", strict::String(&r.id, 128)},
                                    {"address", strict::String(&r.address, 255)},
                                    {"gpus",
                                     [&gpus](const Value& v, const std::string&) {
                                       gpus = &v;
                                       return Status::Ok();
                                     }}},
                                   {"id", "gpus"}));
  FP8RT_RETURN_IF_ERROR(ValidateNodeId(r.id));
  // Shown by fp8ctl and used as a host name: no control characters, no spaces.
  for (char c : r.address) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) {
      return Status::InvalidArgument(
          StrCat("address = '", Printable(r.address),
                 "' is not a host name or an IP address (it holds a control character, a space "
                 "or a byte outside ASCII)"));
    }
  }
  if (gpus->kind != Kind::kSeq) {
    return Status::InvalidArgument(
        "gpus: expected a list of {name, compute_capability, memory_gib, count, healthy} "
        "entries");
  }
  // Every entry is read and the total checked before any entry is expanded into `count` GPUs.
  std::vector<std::pair<GpuInfo, int64_t>> entries;
  int64_t total = 0;
  for (size_t i = 0; i < gpus->items.size(); ++i) {
    const std::string where = StrCat("gpus[", i, "]");
    GpuInfo g;
    int64_t count = 1;
    bool has_cc = false;
    const strict::Reader cc = [&g, &has_cc](const Value& v, const std::string& path) -> Status {
      FP8RT_ASSIGN_OR_RETURN(g.compute_capability, ParseComputeCapability(v, path));
      has_cc = true;
      return Status::Ok();
    };
    FP8RT_RETURN_IF_ERROR(ReadObject(gpus->items[i], where,
                                     {{"name", strict::String(&g.name, 64)},
                                      {"compute_capability", cc},
                                      {"memory_gib", strict::Number(&g.memory_gib, 0, 1 << 20)},
                                      {"count", strict::Integer(&count, 1, kMaxNodeGpus)},
                                      {"healthy", strict::Bool(&g.healthy)}},
                                     {"name", "memory_gib"}));
    if (g.name.empty()) return Status::InvalidArgument(StrCat(where, ".name must not be empty"));
    if (HasControlChars(g.name)) {
      return Status::InvalidArgument(
          StrCat(where, ".name = '", Printable(g.name), "' holds control characters"));
    }
    const bool cpu = g.name == kCpuSlotName;
    if (cpu && has_cc && g.compute_capability != 0) {
      return Status::InvalidArgument(
          StrCat(where, ": CPU slots (name cpu) have no compute_capability"));
    }
    if (!cpu && !has_cc) {
      return Status::InvalidArgument(StrCat(where, ".compute_capability is required"));
    }
    if (!cpu && g.compute_capability <= 0) {
      return Status::InvalidArgument(
          StrCat(where, ".compute_capability must be above 0 (only CPU slots, name cpu, have none)"));
    }
    if (!(g.memory_gib > 0)) {
      return Status::InvalidArgument(StrCat(where, ".memory_gib = ", g.memory_gib, " must be > 0"));
    }
    total += count;
    entries.emplace_back(std::move(g), count);
  }
  if (total == 0) return Status::InvalidArgument("gpus: a node must have at least one GPU");
  if (total > kMaxNodeGpus) {
    return Status::InvalidArgument(
        StrCat("gpus: ", total, " GPUs in total; a node may register at most ", kMaxNodeGpus));
  }
  r.gpus.reserve(total);
  for (const auto& [g, count] : entries) r.gpus.insert(r.gpus.end(), count, g);
  return r;
}

Result<HeartbeatRequest> ParseHeartbeat(const std::string& body) {
  FP8RT_ASSIGN_OR_RETURN(const Value root, strict::Parse(body, "heartbeat"));
  HeartbeatRequest hb;
  const Value* jobs = nullptr;
  std::vector<int> unhealthy;
  FP8RT_RETURN_IF_ERROR(ReadObject(root, "",
                                   {{"jobs",
                                     [&jobs](const Value& v, const std::string&) {
                                       jobs = &v;
                                       return Status::Ok();
                                     }},
                                    {"unhealthy_gpus", IndexList(&unhealthy)}},
                                   {}));
  if (root.Find("unhealthy_gpus") != nullptr) hb.unhealthy_gpus = std::move(unhealthy);
  if (jobs == nullptr) return hb;
  if (jobs->kind != Kind::kSeq) return strict::WrongKind(*jobs, "jobs", "a list of job reports");
  std::set<int64_t> seen;
  for (size_t i = 0; i < jobs->items.size(); ++i) {
    const Value& e = jobs->items[i];
    const std::string where = StrCat("jobs[", i, "]");
    JobReport r;
    std::string status;
    FP8RT_RETURN_IF_ERROR(ReadObject(
        e, where,
        {{"job_id", strict::Integer(&r.job_id, 1)},
         {"status", strict::String(&status, 64)},
         {"exit_code", strict::Integer(&r.exit_code, -1024, 1024)},
         {"step", strict::Integer(&r.progress.step, -1)},
         {"checkpoint_step", strict::Integer(&r.checkpoint_step, -1)},
         {"attempt", strict::Integer(&r.attempt, -1)},
         {"failed_rank", strict::Integer(&r.failed_rank, -1)},
         {"reason", strict::String(&r.reason, 4096)},
         {"total_steps", strict::Integer(&r.progress.total_steps, -1)},
         {"loss", strict::Number(&r.progress.loss, -1, 1e30)},
         {"tokens_per_s", strict::Number(&r.progress.tokens_per_s, -1, 1e15)},
         {"mfu", strict::Number(&r.progress.mfu, -1, 100)},
         {"eta_s", strict::Number(&r.progress.eta_s, -1, 1e12)},
         {"step_s", strict::Number(&r.progress.step_s, -1, 1e9)},
         {"save_s", strict::Number(&r.progress.save_s, -1, 1e9)},
         {"val_loss", strict::Number(&r.progress.val_loss, -1, 1e30)},
         {"val_step", strict::Integer(&r.progress.val_step, -1)},
         {"checkpoint_error", strict::String(&r.progress.checkpoint_error, 1024)},
         {"checkpoint_disk_bytes", strict::Integer(&r.progress.checkpoint_disk_bytes, -1)},
         {"failed_age_s", strict::Number(&r.failed_age_s, 0, 1e9)},
         {"startup_step", strict::Integer(&r.startup.step, 0)},
         {"startup_load_s", strict::Number(&r.startup.load_s, 0, 1e9)},
         {"startup_first_step_s", strict::Number(&r.startup.first_step_s, 0, 1e9)},
         {"startup_age_s", strict::Number(&r.startup.age_s, 0, 1e9)},
         {"logs", LogsReader(&r.logs)}},
        {"job_id", "status"}));
    const bool startup = r.startup.step >= 0;
    if (startup != (r.startup.age_s >= 0) || startup != (r.startup.load_s >= 0) ||
        startup != (r.startup.first_step_s >= 0)) {
      return Status::InvalidArgument(
          StrCat(where,
                 ": startup_step, startup_load_s, startup_first_step_s and startup_age_s go "
                 "together (all or none)"));
    }
    if (!seen.insert(r.job_id).second) {
      return Status::InvalidArgument(StrCat(where, ".job_id = ", r.job_id, " is reported twice"));
    }
    if (status == "running") {
      r.status = RankStatus::kRunning;
      if (e.Find("exit_code") != nullptr) {
        return Status::InvalidArgument(
            StrCat(where, ".exit_code is only allowed with status exited"));
      }
    } else if (status == "exited") {
      r.status = RankStatus::kExited;
      if (e.Find("exit_code") == nullptr) {
        return Status::InvalidArgument(StrCat(where, ".exit_code is required"));
      }
    } else {
      return Status::InvalidArgument(
          StrCat(where, ".status = '", status, "' is not one of: running, exited"));
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
    j["attempt"] = c.attempt;
    j["master_addr"] = c.master_addr;
    j["master_port"] = c.master_port;
    j["spec"] = ordered::parse(c.spec.ToJson());
  }
  if (c.kind == CommandKind::kCheckpoint) j["grace_s"] = c.grace_s;
  j["reason"] = c.reason;
  return j.dump();
}

std::string NodeToJson(const NodeInfo& n, bool with_jobs) {
  ordered j;
  j["id"] = n.id;
  if (!n.address.empty()) j["address"] = n.address;
  j["state"] = NodeStateName(n.state);
  j["last_heartbeat"] = n.last_heartbeat;
  j["drained"] = n.drained;
  if (!n.drain_reason.empty()) j["drain_reason"] = n.drain_reason;
  if (with_jobs) {  // the jobs holding its GPUs, ascending
    std::set<int64_t> jobs;
    for (int64_t id : n.gpu_job) {
      if (id != kNoJob) jobs.insert(id);
    }
    j["jobs"] = std::vector<int64_t>(jobs.begin(), jobs.end());
  }
  ordered gpus = ordered::array();
  for (size_t i = 0; i < n.gpus.size(); ++i) {
    const GpuInfo& g = n.gpus[i];
    ordered e = {{"name", g.name}};
    if (g.compute_capability > 0) {
      e["compute_capability"] = FormatComputeCapability(g.compute_capability);
    }
    e["memory_gib"] = g.memory_gib;
    e["healthy"] = g.healthy;
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
    n.address = j.value("address", std::string());
    n.drained = j.value("drained", false);
    n.drain_reason = j.value("drain_reason", std::string());
    for (const auto& g : j.at("gpus")) {
      GpuInfo gi;
      gi.name = g.at("name").get<std::string>();
      if (gi.name != kCpuSlotName || g.contains("compute_capability")) {
        auto cc = ParseCc(g.at("compute_capability"), "");
        if (!cc.ok()) {
          return Status::Corruption(StrCat("node ", n.id, ": ", cc.status().message()));
        }
        gi.compute_capability = *cc;
      }
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
