// Test helpers for the real fp8d process over loopback: one HTTP request per call (optionally
// TLS or raw bytes), the process itself (spawn with an optional open-files limit, signal, wait),
// and reading a file. Shared by the scheduler's process and hardening tests.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "scheduler/auth.h"
#include "tests/common/job_files.h"
#include "tests/common/temp_dir.h"

extern char** environ;

namespace fp8rt::test {

namespace fp8d_process_detail {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
}  // namespace fp8d_process_detail
using namespace fp8d_process_detail;
namespace fs = std::filesystem;

// The tokens of the tokens file SchedProcessTest writes.
inline constexpr char kAdmin[] = "admin-token";
inline constexpr char kNode[] = "node-token";
inline constexpr char kAlice[] = "alice-token";
inline constexpr char kBob[] = "bob-token";

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Reply {
  int status = -1;  // -1: no answer (connection refused, reset, closed)
  std::string body;
  json Json() const { return json::parse(body, nullptr, /*allow_exceptions=*/false); }
};

// One HTTP/1.1 request on a fresh connection, optionally over TLS; `raw` bytes instead if given.
inline Reply Call(uint16_t port, const std::string& method, const std::string& target,
                  const std::string& token, const std::string& body = "",
                  const std::string& raw = "", ssl::context* tls = nullptr) {
  asio::io_context ioc;
  beast::error_code ec;
  tcp::socket sock(ioc);
  sock.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
  if (ec) return {};
  struct timeval tv {
    10, 0
  };  // a hung server fails the test instead of hanging it
  ::setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, "127.0.0.1");
  if (!token.empty()) req.set(http::field::authorization, StrCat("Bearer ", token));
  req.body() = body;
  req.prepare_payload();
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  if (tls != nullptr) {
    beast::ssl_stream<tcp::socket&> stream(sock, *tls);
    stream.handshake(ssl::stream_base::client, ec);
    if (ec) return {};
    http::write(stream, req, ec);
    if (!ec) http::read(stream, buf, res, ec);
  } else {
    if (raw.empty()) {
      http::write(sock, req, ec);
    } else {
      asio::write(sock, asio::buffer(raw), ec);
    }
    if (!ec) http::read(sock, buf, res, ec);
  }
  if (ec) return {};
  return {static_cast<int>(res.result_int()), res.body()};
}

// The program a process test runs: `built` (the build tree's), or the one of that name in
// $FP8RT_TEST_BIN_DIR when it is set (to run a test against another build's binaries, e.g. to
// show that it fails on the commit before a fix).
inline std::string TestBinary(const char* name, const char* built) {
  const char* dir = std::getenv("FP8RT_TEST_BIN_DIR");
  return dir != nullptr && *dir != 0 ? StrCat(dir, "/", name) : std::string(built);
}

class Fp8dProcess {
 public:
  ~Fp8dProcess() { Kill(SIGKILL); }

  // Starts fp8d with `args` after the binary; stdout and stderr to `log`. `max_open_files` > 0
  // sets the child's RLIMIT_NOFILE (as `ulimit -n` would).
  void Spawn(const std::vector<std::string>& args, const std::string& log,
             rlim_t max_open_files = 0) {
    std::vector<std::string> all = {TestBinary("fp8d", FP8D_PATH)};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << log;
    pid_ = ::fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {  // the child: only async-signal-safe calls until exec
      if (max_open_files > 0) {
        const struct rlimit lim = {max_open_files, max_open_files};
        ::setrlimit(RLIMIT_NOFILE, &lim);
      }
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execve(argv[0], argv.data(), environ);
      ::_exit(127);
    }
    ::close(fd);
  }
  pid_t pid() const { return pid_; }
  // Exit code, or 128 + signal.
  int Wait() {
    if (pid_ <= 0) return exit_code_;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void Kill(int sig) {
    if (pid_ > 0) {
      ::kill(pid_, sig);
      Wait();
    }
  }
  void Signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  bool running() const { return pid_ > 0; }
  // False once the process has exited (it is reaped; Wait then returns its code).
  bool Alive() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return true;
    pid_ = -1;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return false;
  }

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
};

class SchedProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokens_ = dir_.str() + "/tokens.yaml";
    std::ofstream(tokens_) << "admin: [{name: ops, sha256: " << sched::HashToken(kAdmin) << "}]\n"
                           << "node: [{name: daemons, sha256: " << sched::HashToken(kNode) << "}]\n"
                           << "user:\n  - {name: alice, sha256: " << sched::HashToken(kAlice)
                           << "}\n"
                           << "  - {name: bob, sha256: " << sched::HashToken(kBob) << "}\n";
    data_ = dir_.str() + "/data";
    port_file_ = dir_.str() + "/port";
    log_ = dir_.str() + "/fp8d.log";
    files_ = dir_.str() + "/files";
    WriteJobFiles(files_);
  }

  // Starts the scheduler on an ephemeral port and waits until it has written it.
  // `max_open_files` > 0 runs it under that RLIMIT_NOFILE.
  void Start(std::vector<std::string> extra = {}, rlim_t max_open_files = 0) {
    fs::remove(port_file_);
    std::vector<std::string> args = {
        "--scheduler", "--port", "0", "--data-dir", data_, "--tokens", tokens_, "--port-file",
        port_file_, "--rate-limit", "100000", "--rate-burst", "100000", "--tick-interval-ms", "20",
        // Jobs' files: config paths under files_ (test::WriteJobFiles), inputs anywhere in the
        // test's directory but fp8d's own state.
        "--config-dir", files_, "--data-root", dir_.str()};
    args.insert(args.end(), extra.begin(), extra.end());
    proc_.Spawn(args, log_, max_open_files);
    for (int i = 0; i < 1000 && !fs::exists(port_file_) && proc_.Alive(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(fs::exists(port_file_)) << Slurp(log_);
    port_ = static_cast<uint16_t>(std::stoi(Slurp(port_file_)));
  }

  Reply Req(const std::string& method, const std::string& target, const std::string& token,
            const std::string& body = "") {
    return Call(port_, method, target, token, body);
  }

  // Everything a client can see: every job with its events, and the nodes (with their last
  // heartbeat times unless `heartbeat_times` is false: a restart starts them afresh).
  std::string Snapshot(bool heartbeat_times = true) {
    Reply jobs = Req("GET", "/v1/jobs", kAdmin);
    EXPECT_EQ(jobs.status, 200);
    std::string s = jobs.body;
    const json list = jobs.Json();
    for (const auto& j : list.at("jobs")) {
      s += Req("GET", StrCat("/v1/jobs/", j.at("id").get<int64_t>(), "/events"), kAdmin).body;
    }
    json nodes = Req("GET", "/v1/nodes", kAdmin).Json();
    if (!heartbeat_times) {
      for (auto& n : nodes.at("nodes")) n.erase("last_heartbeat");
    }
    return s + nodes.dump();
  }

  TempDir dir_;
  std::string tokens_, data_, port_file_, log_, files_;
  Fp8dProcess proc_;
  uint16_t port_ = 0;
};

}  // namespace fp8rt::test
