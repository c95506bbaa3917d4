// fp8ctl's verbs (cli/fp8ctl_verbs.h): flags -> one or a few HTTP calls -> a table, JSON or an id.
#include "cli/fp8ctl_verbs.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "cli/fp8ctl.h"
#include "cli/fp8ctl_view.h"
#include "common/job_spec.h"
#include "common/read_file.h"
#include "common/strict_yaml.h"
#include "common/text.h"
#include "net/http_client.h"

namespace fp8rt::fp8ctl {
namespace {

namespace fs = std::filesystem;

int ExitFor(int http) {
  if (http >= 200 && http < 300) return kOk;
  if (http == 401 || http == 403) return kAuth;
  if (http == 404) return kNotFound;
  if (http >= 400 && http < 500 && http != 429) return kBadInput;
  return kServerError;
}

// The job `file` describes, checked here first so that a mistake is named with the user's file
// and line before anything is sent: a training config (its inputs made absolute against the
// file's directory: the config travels inside the job) or a job spec. Flags override the file.
Result<JobSpec> ReadSubmission(const SubmitArgs& a) {
  const std::string& file = a.file;
  std::error_code ec;
  if (fs::is_directory(file, ec)) {
    return Status::InvalidArgument(
        StrCat(file, " is a directory; give a training config (configs/*.yaml) or a job spec"));
  }
  // The server's request limit (the spec it is sent in is about as large).
  auto text = ReadRegularFile(file, "file", {.max_bytes = kMaxConfigBytes});
  if (!text.ok()) {
    if (text.status().message().find(" are allowed") != std::string::npos) {
      return Status::InvalidArgument(StrCat(file, " is too large: the scheduler takes at most ",
                                            kMaxConfigBytes, " bytes (1 MiB)"));
    }
    return text.status();
  }
  FP8RT_ASSIGN_OR_RETURN(const strict::Value doc, strict::Parse(*text, file));
  if (doc.kind != strict::Kind::kMap) {
    return Status::InvalidArgument(StrCat(file,
                                          " is not a mapping: expected a training config "
                                          "(model, data, train, ...) or a job spec"));
  }
  const std::string dir = fs::absolute(fs::path(file)).parent_path().string();
  JobSpec spec;
  const bool config = doc.Find("model") || doc.Find("train") || doc.Find("data");
  if (config) {
    auto c = ReadRunConfig(doc, file);
    if (!c.ok()) return Status::InvalidArgument(StrCat(file, ": ", c.status().message()));
    spec.config = std::move(c).value();
    spec.name = doc.Find("name") != nullptr ? spec.config.name : fs::path(file).stem().string();
  } else {
    auto s = ReadJobSpec(doc, SpecSource::kUser);
    if (!s.ok()) return Status::InvalidArgument(StrCat(file, ": ", s.status().message()));
    spec = std::move(s).value();
  }
  if (spec.config_path.empty()) spec.config.ResolveInputs(dir);
  if (!a.name.empty()) spec.name = a.name;
  if (a.nodes > 0) spec.nodes = a.nodes;
  if (a.gpus > 0) spec.gpus_per_node = a.gpus;
  if (!a.precision.empty()) {
    FP8RT_ASSIGN_OR_RETURN(spec.precision, ParsePrecision(a.precision));
  }
  if (a.has_priority) spec.priority = a.priority;
  // (A config_path's file is the scheduler's to read; the rest is checked now.)
  const Status valid = spec.config_path.empty() ? spec.Validate() : Status::Ok();
  if (!valid.ok()) {
    return Status::InvalidArgument(StrCat(file,
                                          valid.message().rfind("name", 0) == 0 && config
                                              ? " (its name is the job's; or give --name)"
                                              : "",
                                          ": ", valid.message()));
  }
  return spec;
}

}  // namespace

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
    // The server's words (control characters made visible), whatever shape they came in.
    const json* e =
        !j.is_discarded() && j.is_object() && j.contains("error") ? &j["error"] : nullptr;
    const std::string why = e == nullptr ? res->body.substr(0, 500)
                            : e->is_string()
                                ? e->get<std::string>()
                                : e->dump(-1, ' ', false, json::error_handler_t::replace);
    err << "fp8ctl: " << Printable(why) << " (HTTP " << res->status << ")\n";
    return ExitFor(res->status);
  }
  if (j.is_discarded() || !j.is_object()) {
    err << "fp8ctl: the server's answer is not a JSON object: "
        << Printable(res->body.substr(0, 200)) << "\n";
    return kServerError;
  }
  *reply = j;
  return kOk;
}

int Submit(const Conn& c, const SubmitArgs& a, bool as_json, int64_t* id, std::ostream& out,
           std::ostream& err) {
  json reply;
  auto spec = ReadSubmission(a);
  if (!spec.ok()) {
    err << "fp8ctl: " << Printable(spec.status().message(), "\n") << "\n";
    return kBadInput;  // nothing was sent
  }
  const std::string body = spec->ToJson(SpecSource::kUser);
  if (body.size() > kMaxConfigBytes) {
    err << "fp8ctl: the job spec is " << body.size() << " bytes; the scheduler takes at most "
        << kMaxConfigBytes << " (1 MiB)\n";
    return kBadInput;
  }
  if (int rc = Call(c, "POST", "/v1/jobs", body, &reply, err); rc != kOk) return rc;
  *id = reply.at("id").get<int64_t>();
  if (as_json) {
    out << View(reply).dump() << "\n";
  } else {
    out << *id << "\n";
  }
  return kOk;
}

int ShowStatus(const Conn& c, int64_t id, bool watch, bool from_submit, int64_t poll_ms,
               bool as_json, std::ostream& out, std::ostream& err) {
  json reply;
  std::ostream& show = from_submit ? err : out;
  const bool tty = !from_submit && !as_json && ::isatty(STDOUT_FILENO) && &out == &std::cout;
  std::string last_state, last_progress;
  int drawn = 0;
  while (true) {
    if (int rc = Call(c, "GET", StrCat("/v1/jobs/", id), "", &reply, err); rc != kOk) return rc;
    const json v = View(reply);
    const std::string state = Str(v, "state");
    if (as_json && !from_submit) {
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
        show << "job " << id << ": " << Printable(state) << " (" << Shown(v, "reason") << ")\n";
      }
      if (show_prog && !Terminal(state)) show << "job " << id << ": " << prog << "\n";
      if (show_prog) last_progress = prog;
    }
    last_state = state;
    if (!watch) return kOk;
    if (Terminal(state)) return state == "COMPLETED" ? kOk : kJobFailed;
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
}

int List(const Conn& c, bool as_json, std::ostream& out, std::ostream& err) {
  json reply;
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
    out << std::left << std::setw(6) << j["id"].get<int64_t>() << std::setw(20) << Shown(j, "name")
        << std::setw(10) << Shown(j, "user") << std::setw(11) << Shown(j, "state") << std::setw(10)
        << (Str(j, "precision").empty() ? "-" : Shown(j, "precision")) << std::setw(6)
        << Age(j.value("submitted_at", int64_t{0})) << Shown(j, "reason") << "\n";
  }
  return kOk;
}

int JobAction(const Conn& c, const std::string& verb, int64_t id, bool hold, bool as_json,
              std::ostream& out, std::ostream& err) {
  json reply;
  const std::string& cmd = verb;
  const std::string body = cmd == "preempt" && hold ? R"({"hold": true})" : "";
  if (int rc = Call(c, "POST", StrCat("/v1/jobs/", id, "/", cmd), body, &reply, err); rc != kOk) {
    return rc;
  }
  if (!reply.contains("state") || !reply["state"].is_string()) {
    err << "fp8ctl: the server's answer is not a job (no state)\n";
    return kServerError;
  }
  if (as_json) {
    out << View(reply).dump() << "\n";
  } else {
    out << "job " << id << ": " << Shown(reply, "state") << " (" << Shown(reply, "reason") << ")\n";
  }
  return kOk;
}

int Logs(const Conn& c, const LogsArgs& a, bool as_json, std::ostream& out, std::ostream& err) {
  json reply;
  const int64_t id = a.id;
  const int rank = a.rank;
  const int64_t tail = a.tail;
  const bool follow = a.follow;
  const int64_t wait_poll_ms = a.poll_ms;
  size_t printed = 0;
  bool first = true;
  while (true) {
    const std::string query = StrCat("/v1/jobs/", id, "/logs?rank=", rank,
                                     first && tail >= 0 ? StrCat("&tail=", tail) : "");
    if (int rc = Call(c, "GET", query, "", &reply, err); rc != kOk) return rc;
    if (!reply.contains("text") || !reply["text"].is_string()) {
      err << "fp8ctl: the server's answer is not a log (no text)\n";
      return kServerError;
    }
    const std::string text = reply["text"].get<std::string>();
    if (as_json) {
      out << reply.dump() << "\n";
      return kOk;
    }
    if (first) {
      out << Printable(text, "\n\t");
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
      // (shorter: it was cut)
      out << Printable(text.size() >= printed ? text.substr(printed) : text, "\n\t");
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
      if (last.size() > printed) out << Printable(last.substr(printed), "\n\t");
      return kOk;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_poll_ms));
  }
}

int Events(const Conn& c, int64_t id, bool as_json, std::ostream& out, std::ostream& err) {
  json reply;
  if (int rc = Call(c, "GET", StrCat("/v1/jobs/", id, "/events"), "", &reply, err); rc != kOk) {
    return rc;
  }
  if (as_json) {
    out << reply.at("events").dump() << "\n";
    return kOk;
  }
  for (const auto& e : reply.at("events")) {
    out << e.value("time", int64_t{0}) << "  " << Shown(e, "from") << " -> " << Shown(e, "to")
        << "  " << Shown(e, "reason") << "\n";
  }
  return kOk;
}

int Drain(const Conn& c, const std::string& verb, const std::string& node_id,
          const std::string& drain_reason, bool as_json, std::ostream& out, std::ostream& err) {
  json reply;
  const std::string& cmd = verb;
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
    out << "node " << node_id << ": " << Shown(n, "state")
        << (cmd == "drain" && !jobs.empty()
                ? StrCat(" (", jobs.size(), " job(s) checkpointing to move: ", jobs.dump(), ")")
                : "")
        << "\n";
  }
  return kOk;
}

int Nodes(const Conn& c, bool as_json, std::ostream& out, std::ostream& err) {
  json reply;
  if (int rc = Call(c, "GET", "/v1/nodes", "", &reply, err); rc != kOk) return rc;
  if (as_json) {
    out << reply.at("nodes").dump() << "\n";
    return kOk;
  }
  out << std::left << std::setw(20) << "NODE" << std::setw(10) << "STATE" << std::setw(24) << "GPUS"
      << "JOBS\n";
  for (const auto& n : reply.at("nodes")) {
    std::map<std::string, int> kinds;
    for (const auto& g : n.value("gpus", json::array())) ++kinds[Shown(g, "name")];
    std::string gpus_text;
    for (const auto& [k, count] : kinds)
      gpus_text += StrCat(gpus_text.empty() ? "" : ", ", count, "x", k);
    std::string jobs_text;
    for (const auto& j : n.value("jobs", json::array())) {
      jobs_text += StrCat(jobs_text.empty() ? "" : ",", j.get<int64_t>());
    }
    out << std::left << std::setw(20) << Shown(n, "id") << std::setw(10) << Shown(n, "state")
        << std::setw(24) << (gpus_text.empty() ? "-" : gpus_text)
        << (jobs_text.empty() ? "-" : jobs_text)
        << (n.value("drained", false) ? StrCat("  (drained: ", Shown(n, "drain_reason"), ")") : "")
        << "\n";
  }
  return kOk;
}

}  // namespace fp8rt::fp8ctl
