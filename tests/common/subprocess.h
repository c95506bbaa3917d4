// Test helper: run programs as real processes (their own process group, output captured to a
// file, a deadline after which the whole group is killed), alone or several at once.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace fp8rt::test {

struct ProcessResult {
  int code = -1;       // exit code, 128 + signal, or -1 if it was killed at the deadline
  bool timed_out = false;
  std::string output;  // stdout and stderr together
  double seconds = 0;
};

class Process {
 public:
  // Starts argv[0] with `env_extra` ("NAME=value") added to this process's environment.
  Process(const std::vector<std::string>& argv, const std::vector<std::string>& env_extra,
          const std::string& log)
      : log_(log) {
    std::vector<std::string> args = argv, env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.insert(env.end(), env_extra.begin(), env_extra.end());
    std::vector<char*> a, e;
    for (auto& s : args) a.push_back(s.data());
    a.push_back(nullptr);
    for (auto& s : env) e.push_back(s.data());
    e.push_back(nullptr);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    start_ = std::chrono::steady_clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execve(a[0], a.data(), e.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);
    ::close(fd);
  }
  ~Process() {
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  Process(Process&& o) noexcept : pid_(o.pid_), log_(std::move(o.log_)), start_(o.start_) {
    o.pid_ = -1;
  }

  // SIGKILLs the process itself (not its group), as a crash would end it.
  void Kill() { Signal(SIGKILL); }
  void Signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }

  // Waits until `deadline`; past it the process group is killed and timed_out set.
  ProcessResult Wait(std::chrono::steady_clock::time_point deadline) {
    ProcessResult r;
    int status = 0;
    while (true) {
      const pid_t w = ::waitpid(pid_, &status, WNOHANG);
      if (w == pid_) break;
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(-pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        r.timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // Whatever the process left in its group (mpirun's children) goes too.
    ::kill(-pid_, SIGKILL);
    pid_ = -1;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    r.code = r.timed_out ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::ifstream in(log_);
    r.output.assign(std::istreambuf_iterator<char>(in), {});
    return r;
  }

 private:
  pid_t pid_ = -1;
  std::string log_;
  std::chrono::steady_clock::time_point start_;
};

// Runs one program to completion (or `timeout`).
inline ProcessResult RunProcess(const std::vector<std::string>& argv,
                                const std::vector<std::string>& env_extra,
                                const std::string& log, std::chrono::seconds timeout) {
  Process p(argv, env_extra, log);
  return p.Wait(std::chrono::steady_clock::now() + timeout);
}

// mpirun -np N with what it needs in CI (root, oversubscription, loopback TCP only).
inline std::vector<std::string> MpirunArgs(int n) {
  std::vector<std::string> a = {"/usr/bin/mpirun", "-np", std::to_string(n), "--oversubscribe",
                                "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo",
                                "--mca", "oob_tcp_if_include", "lo"};
  if (::getuid() == 0) a.push_back("--allow-run-as-root");
  return a;
}

// A free TCP port on loopback (bound, read, closed: good enough for a test that binds it next).
inline int FreePort() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

}  // namespace fp8rt::test
