// The real `fp8d --scheduler` process over loopback: SIGKILL at random points of a stream of
// submissions, cancels and daemon heartbeats, 20 restarts on the same data dir, every
// acknowledged job present in a state its acknowledged history allows; auth and bad input
// refused with the right status and nothing changed; usage errors; HTTPS with a self-signed
// certificate made here with the OpenSSL API; clean exit on SIGTERM.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <signal.h>
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
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "common/status.h"
#include "scheduler/auth.h"
#include "tests/common/fp8d_process.h"
#include "tests/common/temp_dir.h"

namespace fp8rt::sched {
namespace {

namespace fs = std::filesystem;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

using test::Call;
using test::Fp8dProcess;
using test::kAdmin;
using test::kAlice;
using test::kBob;
using test::kNode;
using test::Reply;
using test::SchedProcessTest;
using test::Slurp;

constexpr char kRegister[] =
    R"({"id": "n1", "gpus": [{"name": "H100", "compute_capability": "9.0", "memory_gib": 80,
        "count": 8}]})";

// What the test knows of a job from acknowledged answers: the states it may be in now.
using States = std::set<std::string>;

// A daemon-side operation applied to each possible state.
States Apply(const States& s, const std::map<std::string, std::string>& edges) {
  States out;
  for (const auto& st : s) {
    auto e = edges.find(st);
    out.insert(e == edges.end() ? st : e->second);
  }
  return out;
}

TEST_F(SchedProcessTest, Kill9TwentyTimesLosesNoAcknowledgedJobOrTransition) {
  Start();
  ASSERT_EQ(Req("POST", "/v1/nodes/register", kNode, kRegister).status, 200);
  std::mt19937 rng(20261122);
  std::map<int64_t, States> expect;       // every acknowledged job
  std::map<int64_t, std::string> daemon;  // jobs the fake daemon runs: "running" / "exited"
  std::set<int64_t> exit_ok;              // running reports acknowledged: may finish
  int restarts = 0, ops = 0, acked = 0, unknown = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);

  // A scheduler tick may place PENDING jobs at any moment.
  auto closure = [](States s) {
    if (s.count("PENDING")) s.insert("SCHEDULED");
    return s;
  };
  while (restarts < 20 && std::chrono::steady_clock::now() < deadline) {
    // The killer: SIGKILL after a random 50..300 ms of traffic.
    std::uniform_int_distribution<int> kill_after(50, 300);
    std::thread killer([this, ms = kill_after(rng)] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      proc_.Signal(SIGKILL);
    });
    while (true) {
      ++ops;
      const int op = std::uniform_int_distribution<int>(0, 99)(rng);
      Reply r;
      if (op < 40) {  // submit
        const bool alice = op % 2 == 0;
        r = Req(
            "POST", "/v1/jobs", alice ? kAlice : kBob,
            StrCat(R"({"name": "k)", ops, R"(", "config_path": "c.yaml", "gpus_per_node": 1})"));
        if (r.status == 201) expect[r.Json().at("id").get<int64_t>()] = closure({"PENDING"});
      } else if (op < 85) {  // heartbeat with the daemon's reports
        if (!exit_ok.empty() && op < 60) {
          auto it = exit_ok.begin();
          std::advance(it, std::uniform_int_distribution<size_t>(0, exit_ok.size() - 1)(rng));
          daemon[*it] = "exited";
          exit_ok.erase(it);
        }
        json reports = json::array();
        for (const auto& [id, st] : daemon) {
          json rep = {{"job_id", id}, {"status", st}};
          if (st == "exited") rep["exit_code"] = 0;
          reports.push_back(rep);
        }
        r = Req("POST", "/v1/nodes/n1/heartbeat", kNode, json{{"jobs", reports}}.dump());
        const bool ok = r.status == 200;
        for (const auto& [id, st] : daemon) {
          if (!expect.count(id)) continue;
          const States after =
              st == "running"
                  ? Apply(expect[id], {{"SCHEDULED", "RUNNING"}})
                  : Apply(expect[id], {{"SCHEDULED", "COMPLETED"}, {"RUNNING", "COMPLETED"}});
          if (ok) {
            expect[id] = after;
          } else {
            expect[id].insert(after.begin(), after.end());
          }
          if (ok && st == "running" && expect[id] == States{"RUNNING"}) exit_ok.insert(id);
        }
        if (ok) {
          const json answer = r.Json();
          for (const auto& c : answer.at("commands")) {
            const int64_t id = c.at("job_id").get<int64_t>();
            if (c.at("action") == "start") daemon[id] = "running";
            if (c.at("action") == "stop") {
              daemon.erase(id);
              exit_ok.erase(id);
            }
            // A start is only sent for a durable SCHEDULED job.
            if (c.at("action") == "start" && expect.count(id)) {
              EXPECT_TRUE(expect[id].count("SCHEDULED")) << "job " << id;
              expect[id] = {"SCHEDULED"};
            }
          }
        }
      } else if (op < 95 && !expect.empty()) {  // cancel (as admin)
        auto it = expect.begin();
        std::advance(it, std::uniform_int_distribution<size_t>(0, expect.size() - 1)(rng));
        const int64_t id = it->first;
        r = Req("POST", StrCat("/v1/jobs/", id, "/cancel"), kAdmin);
        const States after =
            Apply(it->second,
                  {{"PENDING", "CANCELLED"}, {"SCHEDULED", "CANCELLED"}, {"RUNNING", "CANCELLED"}});
        if (r.status == 200) {
          EXPECT_TRUE(it->second.count("PENDING") || it->second.count("SCHEDULED") ||
                      it->second.count("RUNNING"))
              << "job " << id;
          it->second = {"CANCELLED"};
          exit_ok.erase(id);
        } else if (r.status == 409) {  // it was terminal already: unchanged
          it->second.erase("PENDING");
          it->second.erase("SCHEDULED");
          it->second.erase("RUNNING");
          EXPECT_FALSE(it->second.empty()) << "job " << id << " was not in a terminal state";
        } else if (r.status < 0) {
          it->second.insert(after.begin(), after.end());
        }
      } else {
        r = Req("GET", "/v1/jobs", kAlice);
      }
      for (auto& [id, s] : expect) s = closure(s);
      if (r.status < 0) {
        ++unknown;
        break;  // killed
      }
      ++acked;
    }
    killer.join();
    EXPECT_EQ(proc_.Wait(), 128 + SIGKILL) << Slurp(log_);
    ++restarts;
    Start();
    if (HasFatalFailure()) return;
  }
  ASSERT_EQ(restarts, 20) << "only " << restarts << " restarts in the time limit";

  // After the last restart: every acknowledged job is there, in a state its history allows, and
  // its event log ends in that state.
  Reply all = Req("GET", "/v1/jobs", kAdmin);
  ASSERT_EQ(all.status, 200);
  std::map<int64_t, std::string> got;
  const json all_jobs = all.Json();
  for (const auto& j : all_jobs.at("jobs")) {
    got[j.at("id").get<int64_t>()] = j.at("state").get<std::string>();
  }
  int checked = 0;
  for (const auto& [id, allowed] : expect) {
    ASSERT_TRUE(got.count(id)) << "acknowledged job " << id << " is gone";
    std::string list;
    for (const auto& s : allowed) list += s + " ";
    EXPECT_TRUE(allowed.count(got[id]))
        << "job " << id << " is " << got[id] << "; allowed: " << list;
    // (A tick may place the job between two reads: its state read before and after the events
    // must agree for the comparison to mean anything.)
    json events;
    std::string now;
    for (int attempt = 0; attempt < 10; ++attempt) {
      auto state = [&] {
        Reply j = Req("GET", StrCat("/v1/jobs/", id), kAdmin);
        return j.status == 200 ? j.Json().at("state").get<std::string>() : std::string("?");
      };
      const std::string before = state();
      Reply ev = Req("GET", StrCat("/v1/jobs/", id, "/events"), kAdmin);
      ASSERT_EQ(ev.status, 200);
      events = ev.Json().at("events");
      now = state();
      if (now == before) break;
    }
    ASSERT_FALSE(events.empty());
    EXPECT_TRUE(allowed.count(now)) << "job " << id << " is now " << now << "; allowed: " << list;
    EXPECT_EQ(events.front().at("to"), "PENDING");
    EXPECT_EQ(events.back().at("to"), now) << "job " << id;
    for (size_t i = 1; i < events.size(); ++i) {
      EXPECT_EQ(events[i].at("from"), events[i - 1].at("to")) << "job " << id;
    }
    ++checked;
  }
  EXPECT_GT(checked, 50);
  // The daemon's running jobs are still RUNNING once it reports them to the new process.
  json reports = json::array();
  for (const auto& [id, st] : daemon) {
    json rep = {{"job_id", id}, {"status", st}};
    if (st == "exited") rep["exit_code"] = 0;
    reports.push_back(rep);
  }
  ASSERT_EQ(Req("POST", "/v1/nodes/n1/heartbeat", kNode, json{{"jobs", reports}}.dump()).status,
            200);
  for (const auto& [id, st] : daemon) {
    Reply j = Req("GET", StrCat("/v1/jobs/", id), kAdmin);
    if (st == "running" && got[id] == "RUNNING") {
      EXPECT_EQ(j.Json().at("state"), "RUNNING") << "job " << id;
    }
  }
  std::map<std::string, int> by_state;
  for (const auto& [id, st] : got) ++by_state[st];
  std::cout << "[ kill -9 ] " << restarts << " restarts, " << ops << " operations (" << acked
            << " answered, " << unknown << " cut by the kill), " << checked
            << " acknowledged jobs checked; final states:";
  for (const auto& [st, n] : by_state) std::cout << " " << st << "=" << n;
  std::cout << "\n";
  // The stream must have exercised every transition the daemon drives, not just submissions.
  EXPECT_GT(by_state["COMPLETED"], 0);
  EXPECT_GT(by_state["CANCELLED"], 0);
  EXPECT_GT(by_state["RUNNING"] + by_state["COMPLETED"], 8);
  proc_.Signal(SIGTERM);
  EXPECT_EQ(proc_.Wait(), 0) << Slurp(log_);
}

TEST_F(SchedProcessTest, AuthAndBadInputGetTheRightStatusAndChangeNothing) {
  Start();
  ASSERT_EQ(Req("POST", "/v1/nodes/register", kNode, kRegister).status, 200);
  const char* spec = R"({"name": "a", "config_path": "c.yaml", "gpus_per_node": 2})";
  Reply a = Req("POST", "/v1/jobs", kAlice, spec);
  ASSERT_EQ(a.status, 201) << a.body;
  const int64_t alice_job = a.Json().at("id").get<int64_t>();
  ASSERT_EQ(Req("POST", "/v1/jobs", kBob, spec).status, 201);
  // Let the loop place both, so the snapshot below is settled.
  for (int i = 0;
       i < 500 && Req("GET", "/metrics", "").body.find("fp8rt_jobs{state=\"SCHEDULED\"} 2\n") ==
                      std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::string before = Snapshot();
  ASSERT_EQ(Req("GET", StrCat("/v1/jobs/", alice_job), kAlice).Json().at("state"), "SCHEDULED");

  struct Case {
    const char* what;
    std::string method, target, token, body, raw;
    int status;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"wrong token", "POST", "/v1/jobs", "not-a-token", spec, "", 401, "unknown token"},
      {"no token", "GET", "/v1/jobs", "", "", "", 401, "missing Authorization"},
      {"other user's job", "GET", StrCat("/v1/jobs/", alice_job), kBob, "", "", 403,
       "another user"},
      {"other user's cancel", "POST", StrCat("/v1/jobs/", alice_job, "/cancel"), kBob, "", "", 403,
       "another user"},
      {"malformed JSON", "POST", "/v1/jobs", kAlice, R"({"name": "x", "nodes": )", "", 400,
       "not valid YAML or JSON"},
      {"unknown field", "POST", "/v1/jobs", kAlice,
       R"({"name": "x", "config_path": "c.yaml", "gpus": 8})", "", 400, "unknown field 'gpus'"},
      {"oversized body", "", "", "", "",
       StrCat("POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ", kAlice,
              "\r\nContent-Length: ", (1 << 20) + 1, "\r\n\r\n"),
       413, "larger than the limit"},
      {"node token on jobs", "POST", "/v1/jobs", kNode, spec, "", 403, "node tokens"},
      {"user heartbeat", "POST", "/v1/nodes/n1/heartbeat", kAlice, "{}", "", 403,
       "only node tokens"},
      {"malformed heartbeat", "POST", "/v1/nodes/n1/heartbeat", kNode, "{\"jobs\": [", "", 400,
       "not valid YAML or JSON"},
      {"unknown heartbeat field", "POST", "/v1/nodes/n1/heartbeat", kNode, R"({"gpus": []})", "",
       400, "unknown field 'gpus'"},
  };
  for (const Case& c : cases) {
    Reply r = Call(port_, c.method, c.target, c.token, c.body, c.raw);
    EXPECT_EQ(r.status, c.status) << c.what << ": " << r.body;
    EXPECT_NE(r.Json().value("error", std::string()).find(c.says), std::string::npos)
        << c.what << ": " << r.body;
    EXPECT_EQ(Snapshot(), before) << c.what;
  }
  // And after a kill -9 and a restart, still exactly the same.
  const std::string before_kill = Snapshot(false);
  proc_.Kill(SIGKILL);
  Start();
  EXPECT_EQ(Snapshot(false), before_kill);
}

TEST_F(SchedProcessTest, UsageErrorsExitTwoAndSigtermExitsZero) {
  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {{"--node", "--data-dir", data_}, "--node needs --scheduler URL --token-file"},
           {{"--node", "--standalone"}, "excludes"},
           {{"--scheduler", "http://x:1", "--port", "0"}, "takes a URL only with --node"},
           {{"--daemon"}, "--daemon"},
           {{"--scheduler", "--bogus"}, "--bogus"},
           {{"--scheduler", "--port", "0", "--data-dir", data_}, "--tokens"},
           {{}, "choose a mode"},
           {{"--scheduler", "--port", "0", "--data-dir", data_, "--tokens", dir_.str() + "/none"},
            "none"},
           {{"--scheduler", "--port", "0", "--data-dir", data_, "--tokens", tokens_, "--tls-cert",
             tokens_, "--tls-key", tokens_},
            "TLS certificate file"},
       }) {
    fs::remove(log_);
    proc_.Spawn(c.args, log_);
    EXPECT_EQ(proc_.Wait(), 2) << Slurp(log_);
    EXPECT_NE(Slurp(log_).find(c.says), std::string::npos) << Slurp(log_);
  }
  Start();
  EXPECT_EQ(Req("GET", "/v1/health", "").status, 200);
  proc_.Signal(SIGINT);
  EXPECT_EQ(proc_.Wait(), 0) << Slurp(log_);
}

// A self-signed P-256 certificate for 127.0.0.1, PEM, made with the OpenSSL API.
void MakeSelfSigned(const std::string& cert_path, const std::string& key_path) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  ASSERT_NE(key, nullptr);
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -60);
  X509_gmtime_adj(X509_getm_notAfter(x), 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
  for (const auto& [nid, value] : std::vector<std::pair<int, const char*>>{
           {NID_basic_constraints, "critical,CA:TRUE"}, {NID_subject_alt_name, "IP:127.0.0.1"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    ASSERT_NE(ext, nullptr);
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  }
  ASSERT_GT(X509_sign(x, key, EVP_sha256()), 0);
  FILE* f = std::fopen(cert_path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  PEM_write_X509(f, x);
  std::fclose(f);
  f = std::fopen(key_path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  X509_free(x);
  EVP_PKEY_free(key);
}

TEST_F(SchedProcessTest, ServesHttpsWithASelfSignedCertificate) {
  const std::string cert = dir_.str() + "/cert.pem", key = dir_.str() + "/key.pem";
  MakeSelfSigned(cert, key);
  if (HasFatalFailure()) return;
  Start({"--tls-cert", cert, "--tls-key", key});
  EXPECT_NE(Slurp(log_).find("https://127.0.0.1:"), std::string::npos) << Slurp(log_);

  ssl::context trusting(ssl::context::tls_client);
  trusting.load_verify_file(cert);
  trusting.set_verify_mode(ssl::verify_peer);
  Reply health = Call(port_, "GET", "/v1/health", "", "", "", &trusting);
  EXPECT_EQ(health.status, 200);
  Reply sub = Call(port_, "POST", "/v1/jobs", kAlice, R"({"name": "tls", "config_path": "c.yaml"})",
                   "", &trusting);
  EXPECT_EQ(sub.status, 201) << sub.body;
  EXPECT_EQ(Call(port_, "GET", "/v1/jobs", "wrong", "", "", &trusting).status, 401);
  // A client that does not trust the certificate is refused, and plain HTTP gets no answer.
  ssl::context strict(ssl::context::tls_client);
  strict.set_verify_mode(ssl::verify_peer);
  EXPECT_EQ(Call(port_, "GET", "/v1/health", "", "", "", &strict).status, -1);
  EXPECT_EQ(Req("GET", "/v1/health", "").status, -1);
  proc_.Signal(SIGTERM);
  EXPECT_EQ(proc_.Wait(), 0) << Slurp(log_);
}

}  // namespace
}  // namespace fp8rt::sched
