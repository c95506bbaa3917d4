// The node daemon's loop (node/daemon.h).
#include "node/daemon.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/atomic_file.h"
#include "common/checkpoint_fence.h"
#include "common/exit_codes.h"
#include "net/http_client.h"

namespace fp8rt::node {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double EpochSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A TCP port nothing listens on now (the kernel's pick), for a one-node gang's rendezvous.
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

// The start time of `pid` (field 22 of /proc/pid/stat), to tell a process from a later one that
// got its pid; "" when it is gone.
std::string StartTime(pid_t pid) {
  const std::string stat = ReadFile(StrCat("/proc/", pid, "/stat"));
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && in >> field; ++i) {
  }
  return field;
}

// Whether `pid` has exited but not been reaped (its parent, a killed daemon, is gone, and nothing
// reaped it yet): there is nothing left of it to stop.
bool Zombie(pid_t pid) {
  const std::string stat = ReadFile(StrCat("/proc/", pid, "/stat"));
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

// The last non-empty line of a log (its last 4 KiB), for a failure's reason.
std::string LastLine(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const auto size = static_cast<int64_t>(in.tellg());
  const int64_t from = std::max<int64_t>(0, size - 4096);
  in.seekg(from);
  std::string tail((std::istreambuf_iterator<char>(in)), {});
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
  const size_t nl = tail.rfind('\n');
  std::string line = nl == std::string::npos ? tail : tail.substr(nl + 1);
  if (line.size() > 300) line = line.substr(0, 300) + "...";
  return line;
}

}  // namespace

namespace {
std::vector<double> UsedAtStart(const Inventory& inv) {
  std::vector<double> out;
  if (inv.source == "nvml") {
    for (const Gpu& g : inv.gpus) out.push_back(g.used_gib);
  }
  return out;
}
}  // namespace

NodeDaemon::NodeDaemon(DaemonOptions o)
    : o_(std::move(o)), dirty_(UsedAtStart(o_.inventory), o_.dirty_gib) {
  if (o_.address.empty()) o_.address = o_.node_id;
  if (o_.checkpoint_root.empty())
    o_.checkpoint_root = (fs::path(o_.data_dir) / "checkpoints").string();
}

NodeDaemon::~NodeDaemon() {
  runs_.clear();  // each Gang kills and reaps its ranks
  RecordRanks();
}

void NodeDaemon::Log(const std::string& line) const {
  if (o_.log) {
    o_.log(line);
  } else {
    std::cerr << "fp8d: " << line << std::endl;
  }
}

Result<int> NodeDaemon::KillOrphans() {
  const std::string path = (fs::path(o_.data_dir) / "ranks.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return 0;
  const json j = json::parse(ReadFile(path), nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    return Status::Corruption(StrCat(path, " is not the list of ranks fp8d writes; remove it"));
  }
  int killed = 0;
  for (const auto& r : j) {
    const pid_t pid = r.value("pid", 0);
    if (pid <= 0 || StartTime(pid) != r.value("start", std::string("-"))) continue;
    ::kill(-pid, SIGKILL);
    // (A rank dies with the daemon that started it: normally only its unreaped remains are here.)
    if (Zombie(pid)) continue;
    ::kill(pid, SIGKILL);
    ++killed;
    Log(StrCat("killed rank ", r.value("rank", -1), " of job ", r.value("job", int64_t{0}),
               " (pid ", pid, ") left by a previous fp8d; the scheduler requeues the job"));
  }
  fs::remove(path, ec);
  recorded_.clear();
  return killed;
}

void NodeDaemon::RecordRanks() {
  json j = json::array();
  for (const auto& [id, run] : runs_) {
    if (!run.gang) continue;
    for (const RankOutcome& r : run.gang->ranks()) {
      if (r.running) {
        j.push_back({{"job", id}, {"rank", r.rank}, {"pid", r.pid}, {"start", StartTime(r.pid)}});
      }
    }
  }
  const std::string text = j.dump();
  if (text == recorded_ || o_.data_dir.empty()) return;
  const Status s = WriteFileAtomic((fs::path(o_.data_dir) / "ranks.json").string(), text);
  if (!s.ok()) Log(StrCat("cannot record the running ranks: ", s.ToString()));
  recorded_ = text;
}

int64_t NodeDaemon::LatestCheckpoint(const std::string& dir) {
  std::string name = ReadFile((fs::path(dir) / "LATEST").string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.rfind("step_", 0) != 0 || name.size() <= 5) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

Status NodeDaemon::Register() {
  net::HttpRequest r;
  r.method = "POST";
  r.target = "/v1/nodes/register";
  r.headers["authorization"] = "Bearer " + o_.token;
  r.body = RegistrationJson(o_.node_id, o_.address, o_.inventory);
  FP8RT_ASSIGN_OR_RETURN(net::HttpResponse res, net::HttpCall(o_.scheduler_url, r));
  const json j = json::parse(res.body, nullptr, false);
  const std::string why = !j.is_discarded() && j.is_object() && j.contains("error")
                              ? j["error"].get<std::string>()
                              : res.body.substr(0, 200);
  if (res.status == 401 || res.status == 403) {
    return Status(StatusCode::kUnauthenticated,
                  StrCat("the scheduler refused this node's token: ", why));
  }
  if (res.status != 200) {
    return Status::InvalidArgument(StrCat("registration refused (HTTP ", res.status, "): ", why));
  }
  if (j.contains("heartbeat_interval_s") && j["heartbeat_interval_s"].is_number_integer()) {
    heartbeat_ = std::chrono::seconds(std::max<int64_t>(1, j["heartbeat_interval_s"].get<int64_t>()));
  }
  Log(StrCat("registered as ", o_.node_id, " with ", o_.scheduler_url, " (",
             o_.inventory.gpus.empty() ? StrCat(o_.inventory.cpu_slots, " CPU slots")
                                       : StrCat(o_.inventory.gpus.size(), " GPU(s)"),
             ", ", o_.inventory.source, "); heartbeat every ",
             std::chrono::duration_cast<std::chrono::seconds>(heartbeat_).count(), " s"));
  return Status::Ok();
}

Status NodeDaemon::Heartbeat() {
  CheckDirtyGpus();
  std::vector<JobReport> reports;
  for (auto& [id, run] : runs_) {
    JobReport r;
    r.job_id = id;
    r.attempt = run.attempt;
    r.running = !run.exited;
    r.exit_code = run.exit_code;
    r.failed_rank = run.failed_rank;
    r.reason = run.reason;
    if (run.exited && run.exit_code != 0 && run.failed_at) {
      r.failed_age_s = std::max(
          0.0,
          std::chrono::duration<double>(std::chrono::system_clock::now() - *run.failed_at).count());
    }
    r.step = run.progress.step;
    r.checkpoint_step = LatestCheckpoint(run.checkpoint_dir);
    r.total_steps = run.total_steps;
    if (run.progress.step >= 0) {
      r.loss = run.progress.loss_not_finite ? -1 : run.progress.loss;
      r.tokens_per_s = run.progress.tokens_per_s;
      r.mfu = run.progress.mfu;
      const double per_step = run.hang.MedianStepSeconds();
      if (per_step > 0) r.step_s = per_step;
      r.save_s = run.progress.checkpoint_s;
      r.checkpoint_error = run.progress.checkpoint_error;
      r.checkpoint_disk_bytes = run.progress.checkpoint_disk_bytes;
      r.val_loss = run.progress.val_loss;
      r.val_step = run.progress.val_step;
      if (const Progress::Startup& st = run.progress.startup; st.step >= 0) {
        r.startup_step = st.step;
        r.startup_load_s = st.load_s;
        r.startup_first_step_s = st.first_step_s;
        r.startup_age_s = std::max(0.0, EpochSeconds() - st.at);
      }
      if (per_step > 0 && run.total_steps > run.progress.step) {
        r.eta_s = per_step * static_cast<double>(run.total_steps - run.progress.step);
      }
    }
    reports.push_back(std::move(r));
  }
  // The ranks' new output (valid UTF-8 is not required of a log: bytes that are not are replaced),
  // at most 64 KiB a rank per heartbeat; what the scheduler took is not sent again.
  std::map<int64_t, std::map<int, uint64_t>> sending;
  {
    size_t i = 0;
    for (auto& [id, run] : runs_) {
      for (const auto& [rank, path] : run.logs) {
        std::ifstream in(path, std::ios::binary);
        if (!in) continue;
        in.seekg(0, std::ios::end);
        const auto size = static_cast<uint64_t>(in.tellg());
        uint64_t from = run.log_sent[rank];
        if (size < from) from = 0;
        if (size == from) continue;
        const uint64_t n = std::min<uint64_t>(size - from, 64 << 10);
        std::string text(n, '\0');
        in.seekg(static_cast<std::streamoff>(from));
        in.read(text.data(), static_cast<std::streamsize>(n));
        for (char& c : text) {
          if (static_cast<unsigned char>(c) >= 0x80 || (c < 0x20 && c != '\n' && c != '\t')) c = '?';
        }
        reports[i].logs[rank] = std::move(text);
        sending[id][rank] = from + n;
      }
      ++i;
    }
  }
  net::HttpRequest req;
  req.method = "POST";
  req.target = StrCat("/v1/nodes/", o_.node_id, "/heartbeat");
  req.headers["authorization"] = "Bearer " + o_.token;
  req.body = HeartbeatJson(reports, dirty_.Dirty());
  FP8RT_ASSIGN_OR_RETURN(net::HttpResponse res, net::HttpCall(o_.scheduler_url, req));
  if (res.status == 404) {
    // The scheduler does not know this node (a fresh job store): register again.
    Log("the scheduler does not know this node; registering again");
    return Register();
  }
  if (res.status != 200) {
    return Status::Unavailable(
        StrCat("heartbeat answered HTTP ", res.status, ": ", res.body.substr(0, 300)));
  }
  for (const auto& [id, ranks] : sending) {
    auto it = runs_.find(id);
    if (it == runs_.end()) continue;
    for (const auto& [rank, offset] : ranks) it->second.log_sent[rank] = offset;
  }
  FP8RT_ASSIGN_OR_RETURN(std::vector<Command> commands, ParseCommands(res.body));
  for (const Command& c : commands) Apply(c);
  return Status::Ok();
}

std::chrono::milliseconds NodeDaemon::GraceFor(const JobRun& run) const {
  return StopGrace(o_.stop_grace, run.progress.checkpoint_s);
}

void NodeDaemon::Apply(const Command& c) {
  auto it = runs_.find(c.job_id);
  switch (c.kind) {
    case Command::Kind::kStart:
      if (it != runs_.end() && it->second.attempt == c.start.attempt) return;  // running it
      if (it != runs_.end()) {
        Log(StrCat("job ", c.job_id, ": attempt ", it->second.attempt, " replaced by attempt ",
                   c.start.attempt));
        runs_.erase(it);  // kills what is left of the old attempt
      }
      Start(c.job_id, c.start);
      return;
    case Command::Kind::kCheckpoint:
      if (it == runs_.end() || it->second.exited || !it->second.gang) return;
      if (!it->second.gang->terminating()) {
        // At least the grace the scheduler allows (the job's measured save time).
        const auto grace =
            std::max(GraceFor(it->second),
                     std::chrono::milliseconds(static_cast<int64_t>(c.grace_s * 1000)));
        Log(StrCat("job ", c.job_id, ": checkpoint and stop within ", grace.count() / 1000.0,
                   " s (", c.reason, ")"));
        it->second.gang->Terminate(grace);
      }
      return;
    case Command::Kind::kStop:
      if (it == runs_.end()) return;
      if (it->second.exited || !it->second.gang) {
        runs_.erase(it);
        return;
      }
      if (!it->second.forget) Log(StrCat("job ", c.job_id, ": stop (", c.reason, ")"));
      it->second.forget = true;
      it->second.gang->Terminate(GraceFor(it->second));
      return;
  }
}

void NodeDaemon::Start(int64_t job_id, const StartJob& s) {
  JobRun& run = runs_[job_id];
  run.id = job_id;
  run.attempt = s.attempt;
  run.gpus = s.gpus;
  run.hang = HangDetector(o_.hang);
  const fs::path dir = fs::path(o_.data_dir) / "jobs" / std::to_string(job_id);
  run.dir = dir.string();
  run.checkpoint_dir = (fs::path(o_.checkpoint_root) / std::to_string(job_id)).string();
  auto fail = [&](const std::string& why) {
    Log(StrCat("job ", job_id, ": cannot start: ", why));
    run.exited = true;
    run.exit_code = kExitUsage;
    run.reason = StrCat("cannot start: ", why);
  };
  std::error_code ec;
  for (const std::string& d : {(dir / "logs").string(), run.checkpoint_dir}) {
    if (const Status made = CreatePrivateDirectories(d); !made.ok()) return fail(made.message());
  }
  // The checkpoint directory is this attempt's from now on: an earlier attempt's ranks that still
  // run somewhere (a lost node on shared storage) can no longer commit there.
  if (const Status fenced = RaiseCheckpointFence(run.checkpoint_dir, s.attempt); !fenced.ok()) {
    return fail(fenced.message());
  }

  // The job's typed training config, as the scheduler validated and stored it (its input paths
  // absolute and confined there; fp8train confines them again, to this node's roots). Written
  // next to the logs with what the scheduler decided: the precision, the checkpoint interval.
  RunConfig cfg = s.spec.config;
  cfg.precision = s.precision;
  if (cfg.train.checkpoint_every == 0 && s.spec.checkpoint_interval > 0) {
    cfg.train.checkpoint_every = static_cast<int>(
        std::min<int64_t>(s.spec.checkpoint_interval, std::numeric_limits<int>::max()));
  }
  run.total_steps = cfg.train.total_steps;
  run.checkpoint_every = cfg.train.checkpoint_every;
  const std::string config_path = (dir / "config.json").string();
  const Status w = WriteFileAtomic(config_path, RunConfigToJson(cfg) + "\n", 0600);
  if (!w.ok()) return fail(w.ToString());

  GangLaunch g;
  g.fp8train = o_.fp8train;
  g.job_id = std::to_string(job_id);
  g.config_path = config_path;
  g.inputs = o_.inputs;
  g.attempt = s.attempt;
  g.checkpoint_dir = run.checkpoint_dir;
  g.resume = LatestCheckpoint(run.checkpoint_dir) >= 0;
  g.log_dir = (dir / "logs").string();
  g.metrics_path = (dir / "metrics.jsonl").string();
  if (o_.inventory.source == "nvml") {
    g.gpus = s.gpus;
  } else {
    g.cpu_ranks = static_cast<int>(s.gpus.size());  // CPU slots (or a fake inventory's GPUs)
  }
  g.node_rank = s.node_rank;
  g.nodes = s.nodes;
  g.master_addr = s.nodes == 1 ? "127.0.0.1" : s.master_addr;
  g.master_port = s.master_port > 0 ? s.master_port : FreePort();
  // The metrics of this attempt only (a resumed run appends from its checkpoint step on).
  fs::remove(g.metrics_path, ec);
  run.tail = std::make_unique<MetricsTail>(g.metrics_path);
  std::vector<RankProcess> procs = GangProcesses(g);
  for (const RankProcess& p : procs) {
    // Output of earlier attempts was sent with their heartbeats.
    run.logs[p.rank] = p.log_path;
    run.log_sent[p.rank] = fs::exists(p.log_path, ec) ? fs::file_size(p.log_path, ec) : 0;
  }
  auto gang = Gang::Start(std::move(procs));
  if (!gang.ok()) return fail(gang.status().message());
  run.gang = std::move(gang).value();
  Log(StrCat("job ", job_id, " attempt ", s.attempt, ": started ranks ",
             s.node_rank * static_cast<int>(s.gpus.size()), "..",
             (s.node_rank + 1) * static_cast<int>(s.gpus.size()) - 1, " (",
             PrecisionName(s.precision),
             g.resume ? StrCat(", resuming from step ", LatestCheckpoint(run.checkpoint_dir)) : "",
             "); logs in ", g.log_dir));
  RecordRanks();
}

void NodeDaemon::Supervise(JobRun* run) {
  if (run->exited || !run->gang) return;
  const auto now = Clock::now();
  run->gang->Tick(GraceFor(*run));
  if (!run->failed_at && run->gang->first_failed_rank() >= 0) {
    run->failed_at = std::chrono::system_clock::now();
  }
  const int64_t before = run->progress.step;
  const double saved_before = run->progress.checkpoint_s;
  const int64_t busy_before = run->progress.busy_lines;
  const bool stepped = run->tail->Poll(&run->progress);
  if (run->progress.checkpoint_s > saved_before) {
    run->hang.set_save_time(
        std::chrono::milliseconds(static_cast<int64_t>(run->progress.checkpoint_s * 1000) + 1));
  }
  if (stepped) {
    const int64_t step = run->progress.step;
    const int64_t ce = run->checkpoint_every;
    const int64_t stride = before >= 0 ? std::max<int64_t>(1, step - before) : 1;
    run->hang.Observe(step, now, ce > 0 && step / ce != (step + stride) / ce);
  }
  // Busy lines after the last step line: the trainer is starting, evaluating or waiting for a
  // checkpoint, and got on with it.
  if (run->progress.busy_lines > busy_before && !run->progress.busy.empty()) {
    run->hang.Busy(run->progress.busy, now);
  }
  if (!run->gang->terminating() && !run->gang->Done()) {
    if (run->progress.loss_not_finite) {
      run->reason = StrCat("the loss is NaN/inf at step ", run->progress.step);
      run->exit_code = kExitNonFinite;
      run->failed_at = std::chrono::system_clock::now();
      Log(StrCat("job ", run->id, ": ", run->reason, "; stopping its ranks"));
      run->gang->Kill();
    } else if (auto hung = run->hang.Hung(now)) {
      run->reason = *hung;
      // (the failure began at the trainer's last progress)
      run->failed_at = std::chrono::system_clock::now() -
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(
                           now - run->hang.LastProgress().value_or(now));
      Log(StrCat("job ", run->id, ": ", *hung, "; killing the gang"));
      run->gang->Kill();
    }
  }
  if (!run->gang->Done()) return;
  run->exited = true;
  const int failed = run->gang->first_failed_rank();
  int code = 0;
  for (const RankOutcome& r : run->gang->ranks()) {
    if (r.rank == failed) {
      code = r.code;
      break;
    }
    code = std::max(code, r.code);
  }
  if (run->exit_code == kExitNonFinite) {
    code = kExitNonFinite;
  } else if (failed >= 0 && run->reason.empty()) {
    const std::string last = LastLine(StrCat(run->dir, "/logs/rank-", failed, ".log"));
    run->reason = StrCat("rank ", failed, " exited with code ", code, last.empty() ? "" : ": ", last);
    if (code == kExitNonFinite) run->reason += " (NaN/inf loss)";
  }
  run->exit_code = code;
  run->failed_rank = failed;
  if (code != 0 && !run->failed_at) run->failed_at = std::chrono::system_clock::now();
  Log(StrCat("job ", run->id, ": ranks ended, exit code ", code,
             run->reason.empty() ? "" : StrCat(" (", run->reason, ")")));
  if (o_.inventory.source == "nvml") dirty_.JobEnded(run->gpus);
}

void NodeDaemon::CheckDirtyGpus() {
  if (!dirty_.Pending()) return;
  auto gpus = DiscoverNvmlGpus();
  if (!gpus.ok()) return;
  for (const std::string& line : dirty_.Update(*gpus)) Log(line);
}

Status NodeDaemon::Run(const std::atomic<bool>& stop) {
  // Registration first: a wrong token ends the daemon; an absent scheduler is waited for.
  while (!stop.load()) {
    const Status s = Register();
    if (s.ok()) break;
    if (s.code() == StatusCode::kUnauthenticated || s.code() == StatusCode::kInvalidArgument) {
      return s;
    }
    Log(StrCat("cannot register yet: ", s.message(), "; retrying"));
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  auto next_beat = Clock::now();
  bool reported_failure = false;
  while (!stop.load()) {
    bool ended = false;  // a gang ended in this pass: the scheduler hears of it now
    for (auto& [id, run] : runs_) {
      const bool was = run.exited;
      Supervise(&run);
      ended = ended || (!was && run.exited);
    }
    for (auto it = runs_.begin(); it != runs_.end();) {
      it = it->second.forget && it->second.exited ? runs_.erase(it) : std::next(it);
    }
    RecordRanks();
    if (ended || Clock::now() >= next_beat) {
      const Status s = Heartbeat();
      if (!s.ok() && !reported_failure) Log(StrCat("heartbeat failed: ", s.message()));
      if (s.ok() && reported_failure) Log("heartbeats go through again");
      reported_failure = !s.ok();
      // After an end the scheduler places the job again (here or elsewhere) within a tick: ask
      // for the start command a second later, not a whole interval.
      next_beat = Clock::now() +
                  (ended ? std::min<std::chrono::milliseconds>(heartbeat_, std::chrono::seconds(1))
                         : heartbeat_);
    }
    std::this_thread::sleep_for(o_.loop);
  }
  // Shutting down: the trainers checkpoint on SIGTERM and exit 3; SIGKILL after the grace.
  auto longest = o_.stop_grace;
  for (auto& [id, run] : runs_) {
    if (!run.gang || run.exited) continue;
    const auto grace = GraceFor(run);
    if (grace > o_.stop_grace) {
      Log(StrCat("job ", id, ": its checkpoint took ", run.progress.checkpoint_s,
                 " s to commit; waiting up to ", grace.count() / 1000.0, " s for it to stop"));
    }
    run.gang->Terminate(grace);
    longest = std::max(longest, grace);
  }
  const auto deadline = Clock::now() + longest + std::chrono::seconds(1);
  while (Clock::now() < deadline) {
    bool all = true;
    for (auto& [id, run] : runs_) {
      Supervise(&run);
      all = all && (run.exited || !run.gang);
    }
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  RecordRanks();
  (void)Heartbeat();  // best effort: the scheduler learns the ranks stopped
  return Status::Ok();
}

}  // namespace fp8rt::node
