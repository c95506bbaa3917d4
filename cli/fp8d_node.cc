// fp8d's node half: --node (the node daemon of one machine) and --standalone (the scheduler and
// a node daemon in one process, with tokens of its own).
#include <pwd.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "cli/fp8d.h"
#include "common/atomic_file.h"
#include "common/text.h"
#include "scheduler/auth.h"

namespace fp8rt::fp8d {
namespace {

namespace fs = std::filesystem;

// A token file's token (its text less trailing whitespace); nullopt when it cannot be read.
std::optional<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string s((std::istreambuf_iterator<char>(in)), {});
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

Result<std::string> ReadToken(const std::string& path) {
  FP8RT_RETURN_IF_ERROR(CheckTokenFileMode(path, "--token-file"));
  const std::optional<std::string> t = ReadTokenFile(path);
  if (!t) return Status::InvalidArgument(StrCat("--token-file ", path, ": cannot be read"));
  if (t->empty()) return Status::InvalidArgument(StrCat("--token-file ", path, " is empty"));
  if (HasControlChars(*t)) {
    return Status::InvalidArgument(StrCat("--token-file ", path, " holds control characters"));
  }
  return *t;
}

std::string HostNodeId() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == 0) return "node";
  std::string id = host;
  for (char& c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '-';
  }
  return id.substr(0, 128);
}

// fp8train next to fp8d (an installed bundle), in the build tree (build/cli/fp8d ->
// build/runtime/fp8train), else on PATH.
Result<std::string> FindFp8train() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& p : {self.parent_path() / "fp8train",
                              self.parent_path().parent_path() / "runtime" / "fp8train"}) {
      if (::access(p.c_str(), X_OK) == 0) return p.string();
    }
  }
  if (const char* path = std::getenv("PATH")) {
    std::string dirs = path;
    size_t start = 0;
    while (start <= dirs.size()) {
      const size_t end = std::min(dirs.find(':', start), dirs.size());
      const fs::path p = fs::path(dirs.substr(start, end - start)) / "fp8train";
      if (end > start && ::access(p.c_str(), X_OK) == 0) return p.string();
      start = end + 1;
    }
  }
  return Status::InvalidArgument(
      "cannot find fp8train next to fp8d, in the build tree or on PATH; give --fp8train");
}

// 32 random bytes as hex.
Result<std::string> NewToken() {
  std::ifstream in("/dev/urandom", std::ios::binary);
  unsigned char b[32];
  if (!in.read(reinterpret_cast<char*>(b), sizeof b)) {
    return Status::IOError("cannot read /dev/urandom for a token");
  }
  static const char* hex = "0123456789abcdef";
  std::string t;
  for (unsigned char c : b) t += {hex[c >> 4], hex[c & 15]};
  return t;
}

// The token in `path` (refused when anyone but its owner may read it), made (mode 0600, created
// afresh: a link at the name is never followed) if there is none yet.
Result<std::string> TokenFile(const std::string& path) {
  FP8RT_RETURN_IF_ERROR(CheckTokenFileMode(path, "token file"));
  if (std::optional<std::string> old = ReadTokenFile(path); old && !old->empty()) return *old;
  FP8RT_ASSIGN_OR_RETURN(std::string t, NewToken());
  FP8RT_RETURN_IF_ERROR(WriteFileAtomic(path, t + "\n", 0600));
  return t;
}

std::string LocalUser() {
  if (const struct passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_name != nullptr) {
    return pw->pw_name;
  }
  const char* u = std::getenv("USER");
  return u != nullptr && *u != 0 ? u : "local";
}

}  // namespace

Result<node::DaemonOptions> NodeOptions(const Options& o) {
  node::DaemonOptions d;
  d.node_id = o.node_id.empty() ? HostNodeId() : o.node_id;
  d.address = o.address;
  d.scheduler_url = o.scheduler_url;
  if (!o.token_file.empty()) {
    FP8RT_ASSIGN_OR_RETURN(d.token, ReadToken(o.token_file));
  }
  d.data_dir = (fs::path(o.data_dir) / "node").string();
  d.checkpoint_root = o.checkpoint_root.empty() ? (fs::path(o.data_dir) / "checkpoints").string()
                                                : o.checkpoint_root;
  d.inputs = InputRootsOf(o).data_inputs;
  if (o.fp8train.empty()) {
    FP8RT_ASSIGN_OR_RETURN(d.fp8train, FindFp8train());
  } else {
    d.fp8train = o.fp8train;
  }
  node::InventoryOptions io;
  io.fake_gpus = o.fake_gpus;
  io.cpu_slots = o.cpu_slots;
  auto inv = node::DiscoverInventory(io);
  if (!inv.ok()) return Status::InvalidArgument(inv.status().message());
  d.inventory = std::move(inv).value();
  d.hang.k = o.hang_k;
  d.hang.floor = std::chrono::milliseconds(static_cast<int64_t>(o.hang_floor_s * 1000));
  d.stop_grace = std::chrono::milliseconds(static_cast<int64_t>(o.stop_grace_s * 1000));
  d.log = [](const std::string& line) { spdlog::info("{}", line); };
  std::string tightened;
  if (const Status made = CreatePrivateDirectories(d.data_dir, &tightened); !made.ok()) {
    return Status::IOError(StrCat("--data-dir ", made.message()));
  }
  if (!tightened.empty()) spdlog::warn("--data-dir {}", tightened);
  return d;
}

namespace {

// Runs the node daemon on its own thread until a stop signal; returns its status.
Status RunDaemonUntilSignal(node::DaemonOptions d) {
  node::NodeDaemon daemon(d);
  FP8RT_ASSIGN_OR_RETURN(int killed, daemon.KillOrphans());
  if (killed > 0) spdlog::warn("killed {} rank(s) a previous fp8d left running", killed);
  std::cout << "fp8d: node " << d.node_id << " (" << d.inventory.source << ": "
            << (d.inventory.gpus.empty() ? StrCat(d.inventory.cpu_slots, " CPU slots")
                                         : StrCat(d.inventory.gpus.size(), " GPU(s)"))
            << (d.inventory.note.empty() ? "" : StrCat("; ", d.inventory.note)) << ") serving "
            << d.scheduler_url << std::endl;
  std::atomic<bool> stop{false};
  Status result;
  std::thread t([&] {
    result = daemon.Run(stop);
    if (!result.ok()) {
      // Wake the signal wait: the daemon cannot go on (a refused token, say).
      ::kill(::getpid(), SIGTERM);
    }
  });
  WaitForStopSignal();
  stop = true;
  t.join();
  return result;
}

}  // namespace

Status RunNode(const Options& o) {
  FP8RT_ASSIGN_OR_RETURN(node::DaemonOptions d, NodeOptions(o));
  return RunDaemonUntilSignal(std::move(d));
}

Status RunStandalone(const Options& given) {
  Options o = given;
  std::string tightened;
  if (const Status made = CreatePrivateDirectories(o.data_dir, &tightened); !made.ok()) {
    return Status::IOError(StrCat("--data-dir ", made.message()));
  }
  if (!tightened.empty()) spdlog::warn("--data-dir {}", tightened);
  const fs::path dir = o.data_dir;
  if (o.tokens_file.empty()) {
    // Tokens of its own: one for the local user (fp8ctl finds it) and one for its node half.
    FP8RT_ASSIGN_OR_RETURN(std::string user_token, TokenFile((dir / "token").string()));
    FP8RT_ASSIGN_OR_RETURN(std::string node_token, TokenFile((dir / "node-token").string()));
    const std::string tokens = StrCat("user: [{name: ", LocalUser(), ", sha256: ",
                                      sched::HashToken(user_token), "}]\nnode: [{name: local, sha256: ",
                                      sched::HashToken(node_token), "}]\n");
    o.tokens_file = (dir / "tokens.yaml").string();
    FP8RT_RETURN_IF_ERROR(WriteFileAtomic(o.tokens_file, tokens, 0600));
    o.token_file = (dir / "node-token").string();
  } else if (o.token_file.empty()) {
    return Status::InvalidArgument(
        "--standalone with --tokens needs --token-file: a node token from that file for the node "
        "half");
  }
  FP8RT_ASSIGN_OR_RETURN(std::unique_ptr<SchedulerService> service, SchedulerService::Start(o));
  const std::string url = StrCat("http://127.0.0.1:", service->port());
  FP8RT_RETURN_IF_ERROR(WriteFileAtomic((dir / "server").string(), url + "\n"));
  std::cout << "fp8d: standalone: scheduler on http://" << o.bind << ":" << service->port()
            << ", data dir " << o.data_dir << std::endl;
  if (!o.port_file.empty()) FP8RT_RETURN_IF_ERROR(WritePortFile(o.port_file, service->port()));
  o.scheduler_url = url;
  if (o.address.empty()) o.address = "127.0.0.1";
  auto d = NodeOptions(o);
  if (!d.ok()) {
    service->Stop();
    return d.status();
  }
  const Status s = RunDaemonUntilSignal(std::move(d).value());
  service->Stop();
  return s;
}

}  // namespace fp8rt::fp8d
