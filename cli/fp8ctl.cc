// fp8ctl (cli/fp8ctl.h): the command line, the server and token to use, and the verb to run
// (cli/fp8ctl_verbs.h).
#include "cli/fp8ctl.h"

#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cli/fp8ctl_verbs.h"
#include "cli/local_daemon.h"
#include "common/strict_yaml.h"
#include "common/text.h"
#include "common/version.h"

namespace fp8rt::fp8ctl {
namespace {

namespace fs = std::filesystem;

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

// What the command line asked for, beyond the connection.
struct Args {
  std::string file, name, precision, node_id, drain_reason;
  int nodes = 0, gpus = 0, priority = 0, rank = 0;
  bool wait = false, has_priority = false, watch = false, hold = false, follow = false;
  bool as_json = false;
  int64_t id = 0, tail = -1, poll_ms = 1000;
};

int Run(const std::string& cmd, const Conn& c, Args a, std::ostream& out, std::ostream& err) {
  if (cmd == "submit") {
    SubmitArgs s{a.file, a.name, a.precision, a.nodes, a.gpus, a.priority, a.has_priority};
    if (int rc = Submit(c, s, a.as_json, &a.id, out, err); rc != kOk || !a.wait) return rc;
    return ShowStatus(c, a.id, /*watch=*/true, /*from_submit=*/true, a.poll_ms, a.as_json, out,
                      err);
  }
  if (cmd == "status") return ShowStatus(c, a.id, a.watch, false, a.poll_ms, a.as_json, out, err);
  if (cmd == "list") return List(c, a.as_json, out, err);
  if (cmd == "cancel" || cmd == "preempt" || cmd == "resume") {
    return JobAction(c, cmd, a.id, a.hold, a.as_json, out, err);
  }
  if (cmd == "logs") {
    return Logs(c, {a.id, a.rank, a.tail, a.follow, a.poll_ms}, a.as_json, out, err);
  }
  if (cmd == "events") return Events(c, a.id, a.as_json, out, err);
  if (cmd == "drain" || cmd == "undrain") {
    return Drain(c, cmd, a.node_id, a.drain_reason, a.as_json, out, err);
  }
  return Nodes(c, a.as_json, out, err);
}

}  // namespace

int Main(int argc, char** argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"fp8ctl: submit and follow fp8rt training jobs (docs/API.md)"};
  app.name("fp8ctl");
  app.require_subcommand(1);
  app.set_version_flag("--version", VersionLine("fp8ctl"));
  app.fallthrough();  // --server, --token and --json may come after the verb too
  Conn c;
  Args args;
  app.add_option("--server", c.server, "scheduler URL, e.g. http://host:8080 (or FP8CTL_SERVER)");
  auto* token_flag = app.add_option(
      "--token", c.token, "API token (better: FP8CTL_TOKEN, or the config file; see below)");
  app.add_flag("--json", args.as_json, "print JSON instead of tables");
  std::string& file = args.file;
  std::string& name = args.name;
  std::string& precision = args.precision;
  int &nodes = args.nodes, &gpus = args.gpus, &priority = args.priority;
  bool &wait = args.wait, &has_priority = args.has_priority;
  int64_t& wait_poll_ms = args.poll_ms;
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
  int64_t& id = args.id;
  auto* status = app.add_subcommand("status", "one job");
  status->add_option("ID", id, "job id")->required();
  bool &watch = args.watch, &hold = args.hold;
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
  int& rank = args.rank;
  int64_t& tail = args.tail;
  bool& follow = args.follow;
  auto* logs = app.add_subcommand("logs", "a rank's output, as its node uploads it");
  logs->add_option("ID", id, "job id")->required();
  logs->add_option("--rank", rank, "which rank (default 0)")->check(CLI::Range(0, 999999));
  logs->add_option("--tail", tail, "only the last N lines")->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  logs->add_flag("-f,--follow", follow, "keep printing new output until the job ends");
  logs->add_option("--poll-ms", wait_poll_ms, "--follow's polling period")->check(CLI::Range(10, 60000));
  auto* events = app.add_subcommand("events", "a job's state transitions");
  events->add_option("ID", id, "job id")->required();
  app.add_subcommand("nodes", "the cluster's nodes, their GPUs and jobs");
  std::string &node_id = args.node_id, &drain_reason = args.drain_reason;
  auto* drain = app.add_subcommand(
      "drain", "admin: no new jobs on a node; its running jobs checkpoint and move elsewhere");
  drain->add_option("NODE", node_id, "node id")->required();
  drain->add_option("--reason", drain_reason, "why (shown by `fp8ctl nodes`)");
  auto* undrain = app.add_subcommand("undrain", "admin: make a drained node schedulable again");
  undrain->add_option("NODE", node_id, "node id")->required();
  // The verb: the first argument that is not an option (nor --server's or --token's value). None:
  // the help; one fp8ctl does not know: what it may have meant.
  std::string verb;
  for (int i = 1; i < argc && verb.empty(); ++i) {
    const std::string a = argv[i];
    if (a == "--server" || a == "--token") {
      ++i;
    } else if (a.empty() || a[0] != '-') {
      verb = a;
    }
  }
  std::vector<std::string> verbs;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    verbs.push_back(sub->get_name());
  }
  if (argc == 1) {
    err << app.help();
    return kBadInput;
  }
  if (!verb.empty() && std::find(verbs.begin(), verbs.end(), verb) == verbs.end()) {
    const std::string guess = Closest(verb, verbs);
    err << "fp8ctl: unknown command '" << Printable(verb) << "'"
        << (guess.empty() ? "" : StrCat("; did you mean '", guess, "'?"))
        << " (fp8ctl --help lists the commands)\n";
    return kBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    out << app.help();
    return kOk;
  } catch (const CLI::CallForVersion& e) {
    out << e.what() << "\n";
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
  if (HasControlChars(c.token)) {
    // A CR LF in a token would end the Authorization header and start another.
    err << "fp8ctl: the token holds control characters (from --token, FP8CTL_TOKEN or the "
           "config file); it is not sent\n";
    return kBadInput;
  }
  if (token_flag->count() > 0) {
    // As gh and kubectl say: a flag's value is in /proc/PID/cmdline and the shell's history.
    err << "fp8ctl: warning: --token shows the token to every user of this machine (the process "
           "list) and keeps it in your shell history; prefer FP8CTL_TOKEN or the config file "
           "(~/.config/fp8ctl/config, mode 0600)\n";
  }

  const std::string cmd = app.get_subcommands()[0]->get_name();
  try {
    return Run(cmd, c, args, out, err);
  } catch (const std::exception& e) {
    // An answer of a shape this fp8ctl does not know ({"jobs": 5}), say: an exit code, not an
    // abort.
    err << "fp8ctl: the server's answer is not what this fp8ctl expects (" << Printable(e.what())
        << "); is " << Printable(c.server) << " an fp8d of this version?\n";
    return kServerError;
  }
}

}  // namespace fp8rt::fp8ctl
