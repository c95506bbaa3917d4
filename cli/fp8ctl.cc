// fp8ctl (cli/fp8ctl.h): flags -> one or a few HTTP calls -> a table, JSON or an id.
#include "cli/fp8ctl.h"

#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli/fp8ctl_view.h"
#include "cli/local_daemon.h"
#include "common/config_paths.h"
#include "common/strict_yaml.h"
#include "net/http_client.h"

namespace fp8rt::fp8ctl {
namespace {

namespace fs = std::filesystem;

struct Conn {
  std::string server, token;
};

int ExitFor(int http) {
  if (http >= 200 && http < 300) return kOk;
  if (http == 401 || http == 403) return kAuth;
  if (http == 404) return kNotFound;
  if (http >= 400 && http < 500 && http != 429) return kBadInput;
  return kServerError;
}

// The config file's server and token (empty when there is no file).
Status ReadConfigFile(std::string* server, std::string* token) {
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  const char* home = std::getenv("HOME");
  if ((xdg == nullptr || *xdg == 0) && home == nullptr) return Status::Ok();
  const fs::path path = (xdg != nullptr && *xdg != 0 ? fs::path(xdg) : fs::path(home) / ".config") /
                        "fp8ctl" / "config";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::Ok();
  if ((st.st_mode & 077) != 0) {
    return Status(StatusCode::kPermissionDenied, StrCat(path.string(), " holds a token and must be readable by "
                                           "its owner only (chmod 600 it)"));
  }
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  FP8RT_ASSIGN_OR_RETURN(strict::Value v, strict::Parse(text, path.string()));
  return strict::ReadFields(v, path.string(),
                            {{"server", strict::String(server)}, {"token", strict::String(token)}});
}

// One API call. On an HTTP error or a transport failure, prints why and returns the exit code.
int Call(const Conn& c, const std::string& method, const std::string& target,
         const std::string& body, json* reply, std::ostream& err) {
  net::HttpRequest r;
  r.method = method, r.target = target, r.body = body;
  if (!c.token.empty()) r.headers["authorization"] = "Bearer " + c.token;
  auto res = net::HttpCall(c.server, r);
  if (!res.ok()) {
    err << "fp8ctl: " << res.status().message() << "\n";
    return res.status().code() == StatusCode::kInvalidArgument ? kBadInput : kUnreachable;
  }
  const json j = json::parse(res->body, nullptr, false);
  if (res->status >= 300) {
    const std::string why = !j.is_discarded() && j.is_object() && j.contains("error")
                                ? j["error"].get<std::string>()
                                : res->body;
    err << "fp8ctl: " << why << " (HTTP " << res->status << ")\n";
    return ExitFor(res->status);
  }
  if (j.is_discarded()) {
    err << "fp8ctl: the server's answer is not JSON: " << res->body.substr(0, 200) << "\n";
    return kServerError;
  }
  *reply = j;
  return kOk;
}

// The token and URL a local `fp8d --standalone` wrote, for a user who gave neither.
void LocalDaemon(std::string* server, std::string* token) {
  const fs::path dir = cli::DefaultStandaloneDataDir();
  auto read = [](const fs::path& p) {
    std::ifstream in(p);
    std::string s((std::istreambuf_iterator<char>(in)), {});
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  };
  if (server->empty()) *server = read(dir / "server");
  if (token->empty()) *token = read(dir / "token");
}

// A training config's relative paths (common/config_paths.h), made absolute against the config
// file's directory (the config travels inside the job; the files must exist at that path on the
// nodes).
void AbsoluteDataPaths(json* config, const std::string& file) {
  AbsoluteConfigPaths(config, fs::absolute(fs::path(file)).parent_path());
}

}  // namespace

int Main(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"fp8ctl: submit and follow fp8rt training jobs (docs/API.md)"};
  app.require_subcommand(1);
  app.fallthrough();  // --server, --token and --json may come after the verb too
  Conn c;
  bool as_json = false;
  app.add_option("--server", c.server, "scheduler URL, e.g. http://host:8080 (or FP8CTL_SERVER)");
  app.add_option("--token", c.token, "API token (or FP8CTL_TOKEN, or the config file)");
  app.add_flag("--json", as_json, "print JSON instead of tables");

  std::string file, name, precision;
  int nodes = 0, gpus = 0, priority = 0;
  bool wait = false, has_priority = false;
  int64_t wait_poll_ms = 1000;
  auto* submit = app.add_subcommand("submit", "submit a training config or a job spec");
  submit->add_option("FILE", file, "configs/*.yaml (a training config) or a job spec")->required();
  submit->add_option("--name", name, "job name (default: the config's name)");
  submit->add_option("--nodes", nodes, "nodes")->check(CLI::Range(1, 4096));
  submit->add_option("--gpus", gpus, "GPUs (or CPU slots) per node")->check(CLI::Range(1, 1024));
  submit->add_option("--precision", precision, "fp8, bf16 or fp32")
      ->check(CLI::IsMember({"fp8", "bf16", "fp32"}));
  submit->add_option("--priority", priority, "priority (higher first)")
      ->each([&](const std::string&) { has_priority = true; });
  submit->add_flag("--wait", wait, "follow the job and exit with its outcome");
  submit->add_option("--poll-ms", wait_poll_ms, "--wait's polling period")->check(CLI::Range(10, 60000));
  app.add_subcommand("list", "your jobs (all jobs for an admin)");
  int64_t id = 0;
  auto* status = app.add_subcommand("status", "one job");
  status->add_option("ID", id, "job id")->required();
  bool watch = false, hold = false;
  status->add_flag("--watch,-w", watch, "follow it until it ends (redrawn on a terminal)");
  status->add_option("--poll-ms", wait_poll_ms, "--watch's polling period")->check(CLI::Range(10, 60000));
  auto* cancel = app.add_subcommand("cancel", "cancel a job");
  cancel->add_option("ID", id, "job id")->required();
  auto* preempt = app.add_subcommand(
      "preempt", "checkpoint a running job and stop it; it is requeued (--hold: until resume)");
  preempt->add_option("ID", id, "job id")->required();
  preempt->add_flag("--hold", hold, "keep it PREEMPTED until `fp8ctl resume`");
  auto* resume = app.add_subcommand("resume", "requeue a job preempted with --hold");
  resume->add_option("ID", id, "job id")->required();
  int rank = 0;
  int64_t tail = -1;
  bool follow = false;
  auto* logs = app.add_subcommand("logs", "a rank's output, as its node uploads it");
  logs->add_option("ID", id, "job id")->required();
  logs->add_option("--rank", rank, "which rank (default 0)")->check(CLI::Range(0, 999999));
  logs->add_option("--tail", tail, "only the last N lines")->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  logs->add_flag("-f,--follow", follow, "keep printing new output until the job ends");
  logs->add_option("--poll-ms", wait_poll_ms, "--follow's polling period")->check(CLI::Range(10, 60000));
  auto* events = app.add_subcommand("events", "a job's state transitions");
  events->add_option("ID", id, "job id")->required();
  app.add_subcommand("nodes", "the cluster's nodes, their GPUs and jobs");
  std::string node_id, drain_reason;
  auto* drain = app.add_subcommand(
      "drain", "admin: no new jobs on a node; its running jobs checkpoint and move elsewhere");
  drain->add_option("NODE", node_id, "node id")->required();
  drain->add_option("--reason", drain_reason, "why (shown by `fp8ctl nodes`)");
  auto* undrain = app.add_subcommand("undrain", "admin: make a drained node schedulable again");
  undrain->add_option("NODE", node_id, "node id")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    out << app.help();
    return kOk;
  } catch (const CLI::ParseError& e) {
    err << "fp8ctl: " << e.what() << "\n";
    return kBadInput;
  }

  std::string cfg_server, cfg_token;
  if (c.server.empty() || c.token.empty()) {
    const Status s = ReadConfigFile(&cfg_server, &cfg_token);
    if (!s.ok()) {
      err << "fp8ctl: " << s.message() << "\n";
      return s.code() == StatusCode::kPermissionDenied ? kAuth : kBadInput;
    }
  }
  const char* env_server = std::getenv("FP8CTL_SERVER");
  const char* env_token = std::getenv("FP8CTL_TOKEN");
  if (c.server.empty()) c.server = env_server ? env_server : cfg_server;
  if (c.token.empty()) c.token = env_token ? env_token : cfg_token;
  // Nothing given: a local fp8d --standalone's own server and token.
  if (c.server.empty() && c.token.empty()) LocalDaemon(&c.server, &c.token);
  if (c.server.empty()) c.server = "http://127.0.0.1:8080";

  const std::string cmd = app.get_subcommands()[0]->get_name();
  json reply;
  if (cmd == "submit") {
    std::ifstream in(file);
    if (!in) {
      err << "fp8ctl: cannot read '" << file << "'\n";
      return kBadInput;
    }
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    auto parsed = strict::Parse(text, file);
    if (!parsed.ok() || parsed->kind != strict::Kind::kMap) {
      err << "fp8ctl: " << (parsed.ok() ? file + " is not a mapping" : parsed.status().message())
          << "\n";
      return kBadInput;
    }
    json doc = json::parse(strict::ToJson(*parsed));
    json spec;
    if (doc.contains("model") || doc.contains("train") || doc.contains("data")) {
      // A training config: it travels inside the job.
      spec["name"] = doc.contains("name") && doc["name"].is_string()
                         ? doc["name"]
                         : json(fs::path(file).stem().string());
      AbsoluteDataPaths(&doc, file);
      spec["config"] = doc;
    } else {
      spec = doc;  // a job spec
    }
    if (!name.empty()) spec["name"] = name;
    if (nodes > 0) spec["nodes"] = nodes;
    if (gpus > 0) spec["gpus_per_node"] = gpus;
    if (!precision.empty()) spec["precision"] = precision;
    if (has_priority) spec["priority"] = priority;
    if (int rc = Call(c, "POST", "/v1/jobs", spec.dump(), &reply, err); rc != kOk) return rc;
    const int64_t job = reply.at("id").get<int64_t>();
    if (as_json) {
      out << View(reply).dump() << "\n";
    } else {
      out << job << "\n";
    }
    if (!wait) return kOk;
    id = job;
    watch = true;
  }
  if (cmd == "status" || (cmd == "submit" && watch)) {
    // One look, or (--watch, submit --wait) until the job ends: state changes and progress as
    // lines (stderr for submit, whose stdout is the id), or a redrawn block on a terminal.
    std::ostream& show = cmd == "submit" ? err : out;
    const bool tty = cmd == "status" && !as_json && ::isatty(STDOUT_FILENO) && &out == &std::cout;
    std::string last_state, last_progress;
    int drawn = 0;
    while (true) {
      if (int rc = Call(c, "GET", StrCat("/v1/jobs/", id), "", &reply, err); rc != kOk) return rc;
      const json v = View(reply);
      const std::string state = Str(v, "state");
      if (as_json && cmd == "status") {
        out << v.dump() << "\n";
      } else if (tty && watch) {
        std::ostringstream block;
        PrintStatus(v, block);
        const std::string text = block.str();
        for (int i = 0; i < drawn; ++i) out << "\x1b[1A\x1b[2K";
        out << text << std::flush;
        drawn = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
      } else if (!watch) {
        PrintStatus(v, out);
      } else {
        // A state change, then the progress while it runs; at the end the last progress first.
        const std::string prog = ProgressLine(v);
        const bool show_prog = (state == "RUNNING" || Terminal(state)) && prog != last_progress &&
                               !v["progress"]["step"].is_null();
        if (show_prog && Terminal(state)) show << "job " << id << ": " << prog << "\n";
        if (state != last_state) {
          show << "job " << id << ": " << state << " (" << Str(v, "reason") << ")\n";
        }
        if (show_prog && !Terminal(state)) show << "job " << id << ": " << prog << "\n";
        if (show_prog) last_progress = prog;
      }
      last_state = state;
      if (!watch) return kOk;
      if (Terminal(state)) return state == "COMPLETED" ? kOk : kJobFailed;
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_poll_ms));
    }
  }
  if (cmd == "list") {
    if (int rc = Call(c, "GET", "/v1/jobs", "", &reply, err); rc != kOk) return rc;
    json jobs = json::array();
    for (const auto& j : reply.at("jobs")) jobs.push_back(View(j));
    if (as_json) {
      out << jobs.dump() << "\n";
      return kOk;
    }
    out << std::left << std::setw(6) << "ID" << std::setw(20) << "NAME" << std::setw(10) << "USER"
        << std::setw(11) << "STATE" << std::setw(10) << "PRECISION" << std::setw(6) << "AGE"
        << "REASON\n";
    for (const auto& j : jobs) {
      out << std::left << std::setw(6) << j["id"].get<int64_t>() << std::setw(20) << Str(j, "name")
          << std::setw(10) << Str(j, "user") << std::setw(11) << Str(j, "state") << std::setw(10)
          << (Str(j, "precision").empty() ? "-" : Str(j, "precision")) << std::setw(6)
          << Age(j.value("submitted_at", int64_t{0})) << Str(j, "reason") << "\n";
    }
    return kOk;
  }
  if (cmd == "cancel" || cmd == "preempt" || cmd == "resume") {
    const std::string body = cmd == "preempt" && hold ? R"({"hold": true})" : "";
    if (int rc = Call(c, "POST", StrCat("/v1/jobs/", id, "/", cmd), body, &reply, err); rc != kOk) {
      return rc;
    }
    if (as_json) {
      out << View(reply).dump() << "\n";
    } else {
      out << "job " << id << ": " << Str(reply, "state") << " (" << Str(reply, "reason") << ")\n";
    }
    return kOk;
  }
  if (cmd == "logs") {
    size_t printed = 0;
    bool first = true;
    while (true) {
      const std::string query = StrCat("/v1/jobs/", id, "/logs?rank=", rank,
                                       first && tail >= 0 ? StrCat("&tail=", tail) : "");
      if (int rc = Call(c, "GET", query, "", &reply, err); rc != kOk) return rc;
      const std::string text = reply.value("text", std::string());
      if (as_json) {
        out << reply.dump() << "\n";
        return kOk;
      }
      if (first) {
        out << text;
        if (follow && tail >= 0) {
          // Followed from here on: the whole log's length is what has been shown.
          if (int rc = Call(c, "GET", StrCat("/v1/jobs/", id, "/logs?rank=", rank), "", &reply, err);
              rc != kOk) {
            return rc;
          }
          printed = reply.value("text", std::string()).size();
        } else {
          printed = text.size();
        }
      } else {
        out << (text.size() >= printed ? text.substr(printed) : text);  // shorter: it was cut
        printed = text.size();
      }
      out << std::flush;
      first = false;
      if (!follow) return kOk;
      json job;
      if (int rc = Call(c, "GET", StrCat("/v1/jobs/", id), "", &job, err); rc != kOk) return rc;
      if (Terminal(Str(job, "state"))) {
        // One more read: what the last heartbeat brought.
        std::this_thread::sleep_for(std::chrono::milliseconds(wait_poll_ms));
        if (int rc = Call(c, "GET", StrCat("/v1/jobs/", id, "/logs?rank=", rank), "", &reply, err);
            rc != kOk) {
          return rc;
        }
        const std::string last = reply.value("text", std::string());
        if (last.size() > printed) out << last.substr(printed);
        return kOk;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_poll_ms));
    }
  }
  if (cmd == "events") {
    if (int rc = Call(c, "GET", StrCat("/v1/jobs/", id, "/events"), "", &reply, err); rc != kOk) {
      return rc;
    }
    if (as_json) {
      out << reply.at("events").dump() << "\n";
      return kOk;
    }
    for (const auto& e : reply.at("events")) {
      out << e.value("time", int64_t{0}) << "  " << Str(e, "from") << " -> " << Str(e, "to")
          << "  " << Str(e, "reason") << "\n";
    }
    return kOk;
  }
  if (cmd == "drain" || cmd == "undrain") {
    const std::string body =
        cmd == "drain" && !drain_reason.empty() ? json{{"reason", drain_reason}}.dump() : "";
    if (int rc = Call(c, "POST", StrCat("/v1/nodes/", node_id, "/", cmd), body, &reply, err);
        rc != kOk) {
      return rc;
    }
    const json& n = reply.at("node");
    if (as_json) {
      out << n.dump() << "\n";
    } else {
      const auto jobs = n.value("jobs", json::array());
      out << "node " << node_id << ": " << Str(n, "state")
          << (cmd == "drain" && !jobs.empty()
                  ? StrCat(" (", jobs.size(), " job(s) checkpointing to move: ", jobs.dump(), ")")
                  : "")
          << "\n";
    }
    return kOk;
  }
  // nodes
  if (int rc = Call(c, "GET", "/v1/nodes", "", &reply, err); rc != kOk) return rc;
  if (as_json) {
    out << reply.at("nodes").dump() << "\n";
    return kOk;
  }
  out << std::left << std::setw(20) << "NODE" << std::setw(10) << "STATE" << std::setw(24) << "GPUS"
      << "JOBS\n";
  for (const auto& n : reply.at("nodes")) {
    std::map<std::string, int> kinds;
    for (const auto& g : n.value("gpus", json::array())) ++kinds[Str(g, "name")];
    std::string gpus_text;
    for (const auto& [k, count] : kinds) gpus_text += StrCat(gpus_text.empty() ? "" : ", ", count, "x", k);
    std::string jobs_text;
    for (const auto& j : n.value("jobs", json::array())) {
      jobs_text += StrCat(jobs_text.empty() ? "" : ",", j.get<int64_t>());
    }
    out << std::left << std::setw(20) << Str(n, "id") << std::setw(10) << Str(n, "state")
        << std::setw(24) << (gpus_text.empty() ? "-" : gpus_text)
        << (jobs_text.empty() ? "-" : jobs_text)
        << (n.value("drained", false) ? StrCat("  (drained: ", Str(n, "drain_reason"), ")") : "")
        << "\n";
  }
  return kOk;
}

}  // namespace fp8rt::fp8ctl
