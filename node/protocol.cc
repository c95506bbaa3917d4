// The node daemon's messages (node/protocol.h), JSON through nlohmann.
#include "node/protocol.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace fp8rt::node {
namespace {

using json = nlohmann::ordered_json;

std::string CcText(int cc) { return StrCat(cc / 10, ".", cc % 10); }

}  // namespace

std::string RegistrationJson(const std::string& node_id, const std::string& address,
                             const Inventory& inventory) {
  json j;
  j["id"] = node_id;
  if (!address.empty()) j["address"] = address;
  json gpus = json::array();
  for (const Gpu& g : inventory.gpus) {
    gpus.push_back({{"name", g.name},
                    {"compute_capability", CcText(g.compute_capability)},
                    {"memory_gib", g.memory_gib > 0 ? g.memory_gib : 1.0}});
  }
  if (inventory.gpus.empty() && inventory.cpu_slots > 0) {
    gpus.push_back({{"name", "cpu"}, {"memory_gib", 1.0}, {"count", inventory.cpu_slots}});
  }
  j["gpus"] = std::move(gpus);
  return j.dump();
}

std::string HeartbeatJson(const std::vector<JobReport>& jobs, const std::vector<int>& unhealthy) {
  json arr = json::array();
  for (const JobReport& r : jobs) {
    json e;
    e["job_id"] = r.job_id;
    e["attempt"] = r.attempt;
    e["status"] = r.running ? "running" : "exited";
    if (!r.running) e["exit_code"] = r.exit_code;
    if (!r.running && r.failed_rank >= 0) e["failed_rank"] = r.failed_rank;
    if (!r.reason.empty()) e["reason"] = r.reason;
    if (!r.checkpoint_error.empty()) e["checkpoint_error"] = r.checkpoint_error;
    e["step"] = r.step;
    e["checkpoint_step"] = r.checkpoint_step;
    e["total_steps"] = r.total_steps;
    if (r.val_step >= 0) e["val_step"] = r.val_step;
    if (r.checkpoint_disk_bytes >= 0) e["checkpoint_disk_bytes"] = r.checkpoint_disk_bytes;
    if (!r.running && r.failed_age_s >= 0) e["failed_age_s"] = r.failed_age_s;
    if (r.startup_step >= 0) {
      e["startup_step"] = r.startup_step;
      e["startup_load_s"] = r.startup_load_s;
      e["startup_first_step_s"] = r.startup_first_step_s;
      e["startup_age_s"] = r.startup_age_s;
    }
    for (const auto& [key, v] : {std::pair<const char*, double>{"loss", r.loss},
                                 {"tokens_per_s", r.tokens_per_s},
                                 {"mfu", r.mfu},
                                 {"eta_s", r.eta_s},
                                 {"step_s", r.step_s},
                                 {"save_s", r.save_s},
                                 {"val_loss", r.val_loss}}) {
      if (v >= 0 && std::isfinite(v)) e[key] = v;
    }
    if (!r.logs.empty()) {
      json logs = json::object();
      for (const auto& [rank, text] : r.logs) logs[std::to_string(rank)] = text;
      e["logs"] = std::move(logs);
    }
    arr.push_back(std::move(e));
  }
  return json{{"jobs", arr}, {"unhealthy_gpus", unhealthy}}.dump();
}

Result<std::vector<Command>> ParseCommands(const std::string& body) {
  const auto root = nlohmann::json::parse(body, nullptr, false);
  if (root.is_discarded() || !root.is_object() || !root.contains("commands") ||
      !root["commands"].is_array()) {
    return Status::InvalidArgument(
        StrCat("heartbeat answer: expected {\"commands\": [...]}, got: ", body.substr(0, 200)));
  }
  std::vector<Command> out;
  const auto& cmds = root["commands"];
  for (size_t i = 0; i < cmds.size(); ++i) {
    const auto& c = cmds[i];
    const std::string where = StrCat("commands[", i, "]");
    Command cmd;
    try {
      const std::string action = c.at("action").get<std::string>();
      cmd.job_id = c.at("job_id").get<int64_t>();
      cmd.reason = c.value("reason", std::string());
      if (action == "stop") {
        cmd.kind = Command::Kind::kStop;
      } else if (action == "checkpoint") {
        cmd.kind = Command::Kind::kCheckpoint;
        cmd.grace_s = c.value("grace_s", 0.0);
      } else if (action == "start") {
        cmd.kind = Command::Kind::kStart;
        StartJob& s = cmd.start;
        s.attempt = c.at("attempt").get<int>();
        auto precision = ParsePrecision(c.at("precision").get<std::string>(), "precision");
        if (!precision.ok())
          return Status::InvalidArgument(StrCat(where, ".", precision.status().message()));
        s.precision = *precision;
        s.gpus = c.at("gpus").get<std::vector<int>>();
        s.node_rank = c.at("node_rank").get<int>();
        s.nodes = static_cast<int>(c.at("gang_nodes").size());
        s.master_addr = c.at("master_addr").get<std::string>();
        s.master_port = c.at("master_port").get<int>();
        s.resume_step = c.at("resume_step").get<int64_t>();
        // The spec with its typed config, read by the same reader the scheduler stored it with.
        auto spec = ParseJobSpec(c.at("spec").dump(), SpecSource::kStored);
        if (!spec.ok())
          return Status::InvalidArgument(StrCat(where, ".spec: ", spec.status().message()));
        s.spec = std::move(spec).value();
        if (s.gpus.empty() || s.nodes < 1 || s.node_rank < 0 || s.node_rank >= s.nodes) {
          return Status::InvalidArgument(
              StrCat(where, ": gpus, node_rank and gang_nodes do not describe a gang"));
        }
      } else {
        return Status::InvalidArgument(
            StrCat(where, ".action = '", action, "' is not one of: start, checkpoint, stop"));
      }
    } catch (const nlohmann::json::exception& e) {
      return Status::InvalidArgument(StrCat(where, ": ", e.what()));
    }
    out.push_back(std::move(cmd));
  }
  return out;
}

}  // namespace fp8rt::node
