// The rank supervisor (node/supervisor.h).
#include "node/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include "common/exit_codes.h"

extern char** environ;

namespace fp8rt::node {
namespace {

// The daemon's environment with `extra` on top (a NAME in both takes extra's value).
std::vector<std::string> MergedEnv(const std::vector<std::string>& extra) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv;
  }
  for (const std::string& kv : extra) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv;
  }
  std::vector<std::string> out;
  for (auto& [name, kv] : env) out.push_back(std::move(kv));
  return out;
}

int CodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

std::vector<RankProcess> GangProcesses(const GangLaunch& g) {
  const int per_node = g.gpus.empty() ? g.cpu_ranks : static_cast<int>(g.gpus.size());
  std::vector<RankProcess> out;
  for (int k = 0; k < per_node; ++k) {
    RankProcess r;
    r.rank = g.node_rank * per_node + k;
    r.argv = {g.fp8train,
              "--config",
              g.config_path,
              "--device",
              g.gpus.empty() ? "cpu" : "auto",
              "--checkpoint-dir",
              g.checkpoint_dir,
              "--metrics",
              g.metrics_path};
    if (g.attempt >= 0) r.argv.insert(r.argv.end(), {"--attempt", std::to_string(g.attempt)});
    for (const std::string& root : g.inputs.roots)
      r.argv.insert(r.argv.end(), {"--data-root", root});
    for (const std::string& p : g.inputs.private_paths) {
      r.argv.insert(r.argv.end(), {"--private-dir", p});
    }
    if (g.resume) r.argv.push_back("--resume");
    r.env = {StrCat("FP8RT_RANK=", r.rank),
             StrCat("FP8RT_WORLD_SIZE=", per_node * g.nodes),
             // One GPU visible per rank: it is cuda:0 to the rank.
             StrCat("FP8RT_LOCAL_RANK=", g.gpus.empty() ? k : 0),
             StrCat("FP8RT_MASTER_ADDR=", g.master_addr),
             StrCat("FP8RT_MASTER_PORT=", g.master_port),
             StrCat("FP8RT_JOB_ID=", g.job_id)};
    if (!g.gpus.empty()) r.env.push_back(StrCat("CUDA_VISIBLE_DEVICES=", g.gpus[k]));
    r.log_path = StrCat(g.log_dir, "/rank-", r.rank, ".log");
    out.push_back(std::move(r));
  }
  return out;
}

Result<std::unique_ptr<Gang>> Gang::Start(std::vector<RankProcess> ranks) {
  std::unique_ptr<Gang> g(new Gang());
  for (RankProcess& r : ranks) {
    if (r.argv.empty()) return Status::InvalidArgument(StrCat("rank ", r.rank, " has no program"));
    // Everything the child needs is built before fork: between fork and exec it only calls
    // async-signal-safe functions.
    std::vector<std::string> env = MergedEnv(r.env);
    std::vector<char*> a, e;
    for (auto& s : r.argv) a.push_back(s.data());
    a.push_back(nullptr);
    for (auto& s : env) e.push_back(s.data());
    e.push_back(nullptr);
    const int fd = ::open(r.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      return Status::IOError(StrCat("rank ", r.rank, ": cannot open its log '", r.log_path,
                                    "': ", std::strerror(errno)));
    }
    // An exec failure is reported through a close-on-exec pipe: nothing read means exec worked.
    int pipefd[2];
    if (::pipe2(pipefd, O_CLOEXEC) != 0) {
      ::close(fd);
      return Status::IOError(StrCat("rank ", r.rank, ": pipe: ", std::strerror(errno)));
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      // The rank dies with the daemon that started it (SIGKILL when the forking thread's process
      // goes): a killed daemon leaves no rank running on, writing into the job's directories
      // after the scheduler has requeued it. If the daemon is gone already, so is the rank.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(128 + SIGKILL);
      // A daemon blocks SIGTERM/SIGINT to wait for them on one thread; the mask (and ignored
      // signals) survive exec, so the trainer would never see the SIGTERM that asks it to
      // checkpoint. It starts with none blocked and default dispositions.
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      for (int sig : {SIGTERM, SIGINT, SIGPIPE, SIGUSR1}) ::signal(sig, SIG_DFL);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execve(a[0], a.data(), e.data());
      const int err = errno;
      (void)!::write(pipefd[1], &err, sizeof err);
      ::_exit(127);
    }
    ::close(fd);
    ::close(pipefd[1]);
    if (pid < 0) {
      ::close(pipefd[0]);
      return Status::IOError(StrCat("rank ", r.rank, ": fork: ", std::strerror(errno)));
    }
    ::setpgid(pid, pid);  // (also in the child: whichever runs first)
    int err = 0;
    const ssize_t got = ::read(pipefd[0], &err, sizeof err);
    ::close(pipefd[0]);
    g->ranks_.push_back({r.rank, pid, true, 0});
    if (got == static_cast<ssize_t>(sizeof err)) {
      return Status::InvalidArgument(StrCat("rank ", r.rank, ": cannot run '", r.argv[0],
                                            "': ", std::strerror(err)));
      // (~Gang reaps it and kills the ranks already started)
    }
  }
  return g;
}

Gang::~Gang() {
  for (RankOutcome& r : ranks_) {
    if (r.running) ::kill(-r.pid, SIGKILL);
  }
  Reap(true, std::chrono::steady_clock::time_point::max());
}

void Gang::Reap(bool block_until_all, std::chrono::steady_clock::time_point deadline) {
  while (true) {
    bool any_running = false;
    for (RankOutcome& r : ranks_) {
      if (!r.running) continue;
      int status = 0;
      const pid_t got = ::waitpid(r.pid, &status, WNOHANG);
      if (got == r.pid) {
        r.running = false;
        r.code = CodeOf(status);
        // A rank that exits 4 lost a peer: the cause is the peer, when it is seen.
        if (r.code != 0 && (first_failed_ < 0 || (failed_code_ == kExitPeerFailure &&
                                                  r.code != kExitPeerFailure))) {
          first_failed_ = r.rank;
          failed_code_ = r.code;
        }
      } else if (got < 0 && errno == ECHILD) {
        r.running = false;
        r.code = -1;
      } else {
        any_running = true;
      }
    }
    if (!block_until_all || !any_running || std::chrono::steady_clock::now() >= deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool Gang::Done() const {
  for (const RankOutcome& r : ranks_) {
    if (r.running) return false;
  }
  return true;
}

std::vector<RankOutcome> Gang::Poll(std::chrono::milliseconds grace) {
  Reap(false, {});
  if (first_failed_ >= 0 && !Done()) return Stop(grace);
  return ranks_;
}

std::vector<RankOutcome> Gang::Stop(std::chrono::milliseconds grace) {
  for (RankOutcome& r : ranks_) {
    if (r.running) ::kill(r.pid, SIGTERM);
  }
  Reap(true, std::chrono::steady_clock::now() + grace);
  for (RankOutcome& r : ranks_) {
    if (r.running) ::kill(-r.pid, SIGKILL);
  }
  Reap(true, std::chrono::steady_clock::time_point::max());
  return ranks_;
}

void Gang::Terminate(std::chrono::milliseconds grace) {
  if (kill_at_) return;
  for (RankOutcome& r : ranks_) {
    if (r.running) ::kill(r.pid, SIGTERM);
  }
  kill_at_ = std::chrono::steady_clock::now() + grace;
}

void Gang::Kill() {
  for (RankOutcome& r : ranks_) {
    if (r.running) ::kill(-r.pid, SIGKILL);
  }
  kill_at_ = std::chrono::steady_clock::now();
}

std::vector<RankOutcome> Gang::Tick(std::chrono::milliseconds grace) {
  Reap(false, {});
  if (first_failed_ >= 0 && !Done()) Terminate(grace);
  if (kill_at_ && std::chrono::steady_clock::now() >= *kill_at_) {
    for (RankOutcome& r : ranks_) {
      if (r.running) ::kill(-r.pid, SIGKILL);
    }
    Reap(false, {});
  }
  return ranks_;
}

}  // namespace fp8rt::node
