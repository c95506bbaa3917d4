// fp8ctl's verbs, each one or a few calls of the scheduler's HTTP API (docs/API.md): cli/fp8ctl.cc
// parses the command line, finds the server and token and runs one of these. Each returns
// cli/fp8ctl.h's exit code, having printed why on `err` when it is not kOk.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

namespace fp8rt::fp8ctl {

using json = nlohmann::json;

// Where the scheduler is and the token to show it.
struct Conn {
  std::string server, token;
};

// One API call. On an HTTP error or a transport failure, prints why and returns the exit code.
int Call(const Conn& c, const std::string& method, const std::string& target,
         const std::string& body, json* reply, std::ostream& err);

struct SubmitArgs {
  std::string file;       // a training config or a job spec
  std::string name;       // --name; "" keeps the config's
  std::string precision;  // --precision; "" keeps the spec's
  int nodes = 0;          // --nodes; 0 keeps the spec's
  int gpus = 0;           // --gpus; 0 keeps the spec's
  int priority = 0;       // --priority, when has_priority
  bool has_priority = false;
};
// POST /v1/jobs; prints the new id (or the job, --json) and stores it in *id.
int Submit(const Conn& c, const SubmitArgs& a, bool as_json, int64_t* id, std::ostream& out,
           std::ostream& err);

// One look at a job, or (`watch`) follow it until it ends: state changes and progress as lines
// (on stderr when `from_submit`, whose stdout is the id), or a redrawn block on a terminal.
int ShowStatus(const Conn& c, int64_t id, bool watch, bool from_submit, int64_t poll_ms,
               bool as_json, std::ostream& out, std::ostream& err);
int List(const Conn& c, bool as_json, std::ostream& out, std::ostream& err);
// cancel, preempt (--hold) or resume.
int JobAction(const Conn& c, const std::string& verb, int64_t id, bool hold, bool as_json,
              std::ostream& out, std::ostream& err);

struct LogsArgs {
  int64_t id = 0;
  int rank = 0;
  int64_t tail = -1;  // -1: all
  bool follow = false;
  int64_t poll_ms = 1000;
};
int Logs(const Conn& c, const LogsArgs& a, bool as_json, std::ostream& out, std::ostream& err);
int Events(const Conn& c, int64_t id, bool as_json, std::ostream& out, std::ostream& err);
// drain (with `reason`) or undrain.
int Drain(const Conn& c, const std::string& verb, const std::string& node_id,
          const std::string& reason, bool as_json, std::ostream& out, std::ostream& err);
int Nodes(const Conn& c, bool as_json, std::ostream& out, std::ostream& err);

}  // namespace fp8rt::fp8ctl
