// The scheduler HTTP API: token auth, the transport-free handler (rate limit with an injected
// clock) and the real Beast server on 127.0.0.1 over a RocksDB store in a temp dir, driven by a
// small Beast client. After every refused request the store is checked unchanged.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "net/http_server.h"
#include "scheduler/api.h"
#include "scheduler/auth.h"
#include "scheduler/scheduler.h"
#include "scheduler/store.h"
#include "tests/common/job_files.h"
#include "tests/common/temp_dir.h"

namespace fp8rt::sched {
namespace {

namespace fs = std::filesystem;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
using net::HttpServer;
using net::HttpServerOptions;

constexpr char kAlice[] = "alice-token-1";
constexpr char kBob[] = "bob-token-2";
constexpr char kAdmin[] = "root-token-3";
constexpr char kNode[] = "node-token-4";
constexpr char kSpec[] =
    R"({"name": "train-1", "config_path": "configs/gpt.yaml", "nodes": 1, "gpus_per_node": 8})";

std::string TokensYaml() {
  return StrCat("admin:\n  - {name: root, sha256: ", HashToken(kAdmin), "}\n",
                "node:\n  - {name: node-1, sha256: ", HashToken(kNode), "}\n",
                "user:\n  - {name: alice, sha256: ", HashToken(kAlice), "}\n",
                "  - {name: bob, sha256: ", HashToken(kBob), "}\n");
}

TokenAuth Tokens() {
  auto t = TokenAuth::Parse(TokensYaml());
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : TokenAuth();
}

// Everything a client can change: every job and every job's event log.
std::string Snapshot(const JobStore& store) {
  auto jobs = store.List();
  EXPECT_TRUE(jobs.ok());
  if (!jobs.ok()) return "";
  std::string s;
  for (const Job& j : *jobs) {
    s += JobToJson(j) + "\n";
    auto ev = store.Events(j.id);
    EXPECT_TRUE(ev.ok());
    if (ev.ok()) {
      for (const Event& e : *ev) s += EventToJson(e) + "\n";
    }
  }
  return s;
}

HttpRequest Req(const std::string& method, const std::string& target, const std::string& token,
                const std::string& body = "") {
  HttpRequest r{method, target, {}, body};
  if (!token.empty()) r.headers["authorization"] = StrCat("Bearer ", token);
  return r;
}

// ---- auth ----

TEST(SchedulerHttpAuth, HashTokenIsSha256Hex) {
  EXPECT_EQ(HashToken("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(HashToken(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(SchedulerHttpAuth, AuthenticatesEachRoleAndRefusesTheRest) {
  const TokenAuth auth = Tokens();
  ASSERT_EQ(auth.entries().size(), 4u);

  auto a = auth.Authenticate(StrCat("Bearer ", kAlice));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->role, Role::kUser);
  EXPECT_EQ(a->name, "alice");
  EXPECT_EQ(a->token_sha256, HashToken(kAlice));
  auto r = auth.Authenticate(StrCat("Bearer ", kAdmin));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->role, Role::kAdmin);
  EXPECT_EQ(r->name, "root");
  auto n = auth.Authenticate(StrCat("Bearer ", kNode));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->role, Role::kNode);
  EXPECT_EQ(n->name, "node-1");

  for (const std::string& h :
       std::vector<std::string>{"", "Bearer ", "Basic abc", StrCat("Bearer x", kAlice), kAlice,
                                StrCat("Bearer ", HashToken(kAlice))}) {
    auto bad = auth.Authenticate(h);
    ASSERT_FALSE(bad.ok()) << "'" << h << "'";
    EXPECT_EQ(bad.status().code(), StatusCode::kUnauthenticated);
  }
}

TEST(SchedulerHttpAuth, ParseRefusesBadFilesByName) {
  auto unknown = TokenAuth::Parse("users: []");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("'users'"), std::string::npos);
  auto plain = TokenAuth::Parse("user: [{name: alice, sha256: alice-token-1}]");
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.status().message().find("user[0].sha256"), std::string::npos)
      << plain.status().message();
  auto dup = TokenAuth::Parse(StrCat("user: [{name: a, sha256: ", HashToken("t"),
                                     "}]\nadmin: [{name: b, sha256: ", HashToken("t"), "}]"));
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("twice"), std::string::npos);
  auto field = TokenAuth::Parse(StrCat("node: [{name: n, sha256: ", HashToken("t"), ", x: 1}]"));
  ASSERT_FALSE(field.ok());
  EXPECT_NE(field.status().message().find("'node[0].x'"), std::string::npos)
      << field.status().message();
  auto json_ok = TokenAuth::Parse(
      StrCat(R"({"user": [{"name": "alice", "sha256": ")", HashToken(kAlice), "\"}]}"));
  ASSERT_TRUE(json_ok.ok()) << json_ok.status().ToString();
  EXPECT_TRUE(json_ok->Authenticate(StrCat("Bearer ", kAlice)).ok());
}

TEST(SchedulerHttpAuth, LoadReadsAFileAndNamesAMissingOne) {
  const fs::path path =
      fs::temp_directory_path() / StrCat("fp8rt_http_tokens_", ::getpid(), ".yaml");
  {
    std::ofstream out(path);
    out << TokensYaml();
  }
  auto auth = TokenAuth::Load(path.string());
  fs::remove(path);
  ASSERT_TRUE(auth.ok()) << auth.status().ToString();
  auto bob = auth->Authenticate(StrCat("Bearer ", kBob));
  ASSERT_TRUE(bob.ok());
  EXPECT_EQ(bob->name, "bob");
  auto missing = TokenAuth::Load(path.string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kIOError);
  EXPECT_NE(missing.status().message().find(path.string()), std::string::npos);
}

// ---- the handler, without sockets ----

TEST(SchedulerHttpApi, RateLimitPerTokenWithInjectedClock) {
  auto store = NewMemoryJobStore();
  double now = 1000;
  test::TempDir files;
  test::WriteJobFiles(files.str());
  ApiOptions opt = test::RootedAt(files.str());
  opt.rate_per_s = 1;
  opt.burst = 2;
  auto sched = Scheduler::Open(store.get(), {}, 1000);
  ASSERT_TRUE(sched.ok());
  Api api(
      sched->get(), store.get(), Tokens(), [&now] { return now; }, opt);

  EXPECT_EQ(api.Handle(Req("POST", "/v1/jobs", kAlice, kSpec)).status, 201);
  EXPECT_EQ(api.Handle(Req("GET", "/v1/jobs", kAlice)).status, 200);
  const std::string before = Snapshot(*store);
  HttpResponse limited = api.Handle(Req("POST", "/v1/jobs", kAlice, kSpec));
  EXPECT_EQ(limited.status, 429);
  EXPECT_NE(json::parse(limited.body).at("error").get<std::string>().find("rate limit"),
            std::string::npos);
  EXPECT_EQ(limited.headers.at("Retry-After"), "1");
  EXPECT_EQ(Snapshot(*store), before);
  // Another token has its own bucket; health needs none.
  EXPECT_EQ(api.Handle(Req("GET", "/v1/jobs", kBob)).status, 200);
  EXPECT_EQ(api.Handle(Req("GET", "/v1/health", "")).status, 200);
  now += 0.5;  // half a token: still empty
  EXPECT_EQ(api.Handle(Req("GET", "/v1/jobs", kAlice)).status, 429);
  now += 0.6;
  EXPECT_EQ(api.Handle(Req("GET", "/v1/jobs", kAlice)).status, 200);
  EXPECT_EQ(api.Handle(Req("GET", "/v1/jobs", kAlice)).status, 429);
  now += 100;  // refills only up to the burst
  EXPECT_EQ(api.Handle(Req("GET", "/v1/jobs", kAlice)).status, 200);
  EXPECT_EQ(api.Handle(Req("GET", "/v1/jobs", kAlice)).status, 200);
  EXPECT_EQ(api.Handle(Req("GET", "/v1/jobs", kAlice)).status, 429);
}

TEST(SchedulerHttpApi, RoutesMethodsAndBodyLimit) {
  auto store = NewMemoryJobStore();
  ApiOptions opt;
  opt.max_body_bytes = 16;
  auto sched = Scheduler::Open(store.get(), {}, 5);
  ASSERT_TRUE(sched.ok());
  Api api(
      sched->get(), store.get(), Tokens(), [] { return 5.0; }, opt);
  EXPECT_EQ(api.Handle(Req("POST", "/v1/jobs", kAlice, kSpec)).status, 413);
  EXPECT_EQ(api.Handle(Req("GET", "/v2/jobs", kAlice)).status, 404);
  EXPECT_EQ(api.Handle(Req("GET", "/v1/jobs/abc", kAlice)).status, 404);
  EXPECT_EQ(api.Handle(Req("GET", "/v1/jobs/1/logs", kAlice)).status, 404);
  EXPECT_EQ(api.Handle(Req("GET", "/v1/jobs/7", kAlice)).status, 404);
  HttpResponse del = api.Handle(Req("DELETE", "/v1/jobs", kAlice));
  EXPECT_EQ(del.status, 405);
  EXPECT_EQ(del.headers.at("Allow"), "GET, HEAD, POST");
  EXPECT_EQ(api.Handle(Req("GET", "/v1/jobs/1/cancel", kAlice)).status, 405);
  EXPECT_EQ(api.Handle(Req("POST", "/v1/jobs/1", kAlice)).status, 405);
  EXPECT_EQ(api.Handle(Req("POST", "/v1/health", "")).status, 405);
  EXPECT_EQ(api.Handle(Req("GET", "/v1/jobs", kNode)).status, 403);
  EXPECT_EQ(Snapshot(*store), "");
  HttpResponse m = api.Handle(Req("GET", "/metrics", ""));
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("fp8rt_api_requests_total{code=\"404\"} 4"), std::string::npos) << m.body;
  EXPECT_NE(m.body.find("fp8rt_api_requests_total{code=\"413\"} 1"), std::string::npos);
  EXPECT_NE(m.body.find("fp8rt_jobs{state=\"PENDING\"} 0"), std::string::npos);
}

// ---- the real server over RocksDB ----

using test::TempDir;

struct Reply {
  int status = -1;
  std::string content_type;
  std::string body;
  std::string allow;  // the Allow header
  json Json() const { return json::parse(body, nullptr, /*allow_exceptions=*/false); }
};

class SchedulerHttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = OpenRocksDbJobStore(dir_.str() + "/jobs");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    StartServer({}, {});
  }
  void StartServer(ApiOptions api_options, const HttpServerOptions& server_options) {
    test::WriteJobFiles(dir_.str() + "/files");
    if (api_options.config_dir.empty())
      api_options = test::RootedAt(dir_.str() + "/files", api_options);
    server_.reset();
    api_.reset();
    sched_.reset();
    auto sched = Scheduler::Open(store_.get(), {}, static_cast<int64_t>(now_.load()));
    ASSERT_TRUE(sched.ok()) << sched.status().ToString();
    sched_ = std::move(sched).value();
    api_ = std::make_unique<Api>(
        sched_.get(), store_.get(), Tokens(), [this] { return now_.load(); }, api_options);
    server_ = std::make_unique<HttpServer>(api_.get(), server_options);
    const Status st = server_->Start(0);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_NE(server_->port(), 0);
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  // Sends `raw` bytes if given, else a request built from the rest; reads one response.
  Reply Send(const std::string& method, const std::string& target, const std::string& token,
             const std::string& body = "", const std::string& raw = "") {
    asio::io_context ioc;
    tcp::socket sock(ioc);
    beast::error_code ec;
    sock.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()), ec);
    if (ec) {
      ADD_FAILURE() << "connect: " << ec.message();
      return {};
    }
    if (!raw.empty()) {
      asio::write(sock, asio::buffer(raw), ec);
    } else {
      http::request<http::string_body> req{http::string_to_verb(method), target, 11};
      req.set(http::field::host, "127.0.0.1");
      if (!token.empty()) req.set(http::field::authorization, StrCat("Bearer ", token));
      req.body() = body;
      req.prepare_payload();
      http::write(sock, req, ec);
    }
    if (ec) {
      ADD_FAILURE() << "write: " << ec.message();
      return {};
    }
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(sock, buf, res, ec);
    if (ec) {
      ADD_FAILURE() << "read: " << ec.message();
      return {};
    }
    return {static_cast<int>(res.result_int()), std::string(res[http::field::content_type]),
            res.body(), std::string(res[http::field::allow])};
  }

  // Submits kSpec as `token` and returns the new job's id.
  int64_t Submit(const std::string& token) {
    Reply r = Send("POST", "/v1/jobs", token, kSpec);
    EXPECT_EQ(r.status, 201) << r.body;
    return r.Json().value("id", int64_t{-1});
  }

  std::string ErrorOf(const Reply& r) { return r.Json().value("error", std::string()); }

  TempDir dir_;
  std::atomic<double> now_{1'700'000'000.0};
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<Scheduler> sched_;
  std::unique_ptr<Api> api_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(SchedulerHttpServerTest, HealthNeedsNoToken) {
  Reply r = Send("GET", "/v1/health", "");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.Json(), json({{"status", "ok"}}));
  Reply wrong = Send("POST", StrCat("/v1/jobs/1/events"), kAlice);
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.allow, "GET, HEAD");
}

TEST_F(SchedulerHttpServerTest, SubmitGetListAsUser) {
  Reply sub = Send("POST", "/v1/jobs", kAlice, kSpec);
  ASSERT_EQ(sub.status, 201) << sub.body;
  const json job = sub.Json();
  EXPECT_EQ(job.at("state"), "PENDING");
  EXPECT_EQ(job.at("owner"), "alice");
  EXPECT_EQ(job.at("spec").at("name"), "train-1");
  EXPECT_EQ(job.at("spec").at("gpus_per_node"), 8);
  const int64_t id = job.at("id").get<int64_t>();

  // Durable with its submit event by the time the 201 arrived.
  auto stored = store_->Get(id);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->owner, "alice");
  EXPECT_EQ(stored->state, JobState::kPending);
  EXPECT_EQ(stored->submitted_at, 1'700'000'000);
  auto events = store_->Events(id);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].to, JobState::kPending);

  Reply get = Send("GET", StrCat("/v1/jobs/", id), kAlice);
  ASSERT_EQ(get.status, 200);
  EXPECT_EQ(get.Json(), job);
  Reply list = Send("GET", "/v1/jobs", kAlice);
  ASSERT_EQ(list.status, 200);
  ASSERT_EQ(list.Json().at("jobs").size(), 1u);
  EXPECT_EQ(list.Json().at("jobs")[0], job);
  Reply ev = Send("GET", StrCat("/v1/jobs/", id, "/events"), kAlice);
  ASSERT_EQ(ev.status, 200);
  ASSERT_EQ(ev.Json().at("events").size(), 1u);
  EXPECT_EQ(ev.Json().at("events")[0].at("reason"), "submitted by alice");

  Reply metrics = Send("GET", "/metrics", "");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("fp8rt_jobs{state=\"PENDING\"} 1\n"), std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find("fp8rt_api_requests_total{code=\"201\"} 1\n"), std::string::npos);
}

TEST_F(SchedulerHttpServerTest, WrongOrMissingToken401StoresNothing) {
  for (const char* token : {"", "not-a-token"}) {
    Reply r = Send("POST", "/v1/jobs", token, kSpec);
    EXPECT_EQ(r.status, 401) << token;
    EXPECT_FALSE(ErrorOf(r).empty());
    EXPECT_EQ(Snapshot(*store_), "");
  }
  EXPECT_EQ(Send("GET", "/v1/jobs", "nope").status, 401);
  // A token's hash is not a token.
  EXPECT_EQ(Send("GET", "/v1/jobs", HashToken(kAlice)).status, 401);
  auto first = store_->NextJobId();  // no id was spent on refused submissions
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, 1);
}

TEST_F(SchedulerHttpServerTest, OtherUsersJob403AndAdminSeesAll) {
  const int64_t a = Submit(kAlice);
  const int64_t b = Submit(kBob);
  const std::string before = Snapshot(*store_);
  for (const auto& [method, target] : std::vector<std::pair<std::string, std::string>>{
           {"GET", StrCat("/v1/jobs/", a)},
           {"GET", StrCat("/v1/jobs/", a, "/events")},
           {"POST", StrCat("/v1/jobs/", a, "/cancel")}}) {
    Reply r = Send(method, target, kBob);
    EXPECT_EQ(r.status, 403) << method << " " << target;
    EXPECT_NE(ErrorOf(r).find("another user"), std::string::npos);
    EXPECT_EQ(Snapshot(*store_), before);
  }
  Reply bob = Send("GET", "/v1/jobs", kBob);
  ASSERT_EQ(bob.status, 200);
  ASSERT_EQ(bob.Json().at("jobs").size(), 1u);
  EXPECT_EQ(bob.Json().at("jobs")[0].at("id"), b);

  Reply all = Send("GET", "/v1/jobs", kAdmin);
  ASSERT_EQ(all.status, 200);
  ASSERT_EQ(all.Json().at("jobs").size(), 2u);
  EXPECT_EQ(all.Json().at("jobs")[0].at("owner"), "alice");
  EXPECT_EQ(all.Json().at("jobs")[1].at("owner"), "bob");
  EXPECT_EQ(Send("GET", StrCat("/v1/jobs/", a), kAdmin).status, 200);
  Reply missing = Send("GET", "/v1/jobs/999", kAdmin);
  EXPECT_EQ(missing.status, 404);
  EXPECT_NE(ErrorOf(missing).find("999"), std::string::npos);
  // Node tokens are not for the jobs API.
  EXPECT_EQ(Send("POST", "/v1/jobs", kNode, kSpec).status, 403);
  EXPECT_EQ(Snapshot(*store_), before);
}

TEST_F(SchedulerHttpServerTest, MalformedBodyAndUnknownField400) {
  Reply malformed = Send("POST", "/v1/jobs", kAlice, R"({"name": "x", "nodes": )");
  EXPECT_EQ(malformed.status, 400);
  EXPECT_NE(ErrorOf(malformed).find("not valid YAML or JSON"), std::string::npos) << malformed.body;
  EXPECT_NE(ErrorOf(malformed).find("line 1"), std::string::npos) << malformed.body;
  EXPECT_EQ(Snapshot(*store_), "");

  Reply unknown =
      Send("POST", "/v1/jobs", kAlice, R"({"name": "x", "config_path": "c.yaml", "gpus": 8})");
  EXPECT_EQ(unknown.status, 400);
  EXPECT_NE(ErrorOf(unknown).find("gpus"), std::string::npos) << unknown.body;
  EXPECT_EQ(Snapshot(*store_), "");

  Reply bad_value =
      Send("POST", "/v1/jobs", kAlice, R"({"name": "x", "config_path": "c.yaml", "nodes": 0})");
  EXPECT_EQ(bad_value.status, 400);
  EXPECT_NE(ErrorOf(bad_value).find("nodes"), std::string::npos) << bad_value.body;
  EXPECT_EQ(Snapshot(*store_), "");
}

TEST_F(SchedulerHttpServerTest, OversizedBody413FromTheParser) {
  // Only the headers go out: the parser refuses on Content-Length alone, before any body.
  const std::string raw =
      StrCat("POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n", "Authorization: Bearer ", kAlice,
             "\r\n", "Content-Length: ", (1 << 20) + 1, "\r\n\r\n");
  Reply r = Send("", "", "", "", raw);
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(ErrorOf(r).find("1048576"), std::string::npos) << r.body;
  EXPECT_EQ(Snapshot(*store_), "");
  // The server is still serving, and counted the refusal.
  EXPECT_EQ(Send("GET", "/v1/health", "").status, 200);
  EXPECT_NE(Send("GET", "/metrics", "").body.find("fp8rt_api_requests_total{code=\"413\"} 1\n"),
            std::string::npos);
}

TEST_F(SchedulerHttpServerTest, CancelTwiceSecondIs409) {
  const int64_t id = Submit(kAlice);
  now_ = now_.load() + 10;
  Reply first = Send("POST", StrCat("/v1/jobs/", id, "/cancel"), kAlice);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(first.Json().at("state"), "CANCELLED");
  auto stored = store_->Get(id);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->state, JobState::kCancelled);
  EXPECT_EQ(stored->updated_at, 1'700'000'010);

  const std::string before = Snapshot(*store_);
  Reply second = Send("POST", StrCat("/v1/jobs/", id, "/cancel"), kAlice);
  EXPECT_EQ(second.status, 409);
  EXPECT_NE(ErrorOf(second).find("CANCELLED -> CANCELLED"), std::string::npos) << second.body;
  EXPECT_EQ(Snapshot(*store_), before);

  Reply ev = Send("GET", StrCat("/v1/jobs/", id, "/events"), kAlice);
  ASSERT_EQ(ev.status, 200);
  ASSERT_EQ(ev.Json().at("events").size(), 2u);
  EXPECT_EQ(ev.Json().at("events")[1].at("from"), "PENDING");
  EXPECT_EQ(ev.Json().at("events")[1].at("to"), "CANCELLED");
}

TEST_F(SchedulerHttpServerTest, StopThenStartAgainOnANewPort) {
  server_->Stop();
  EXPECT_EQ(server_->port(), 0);
  const Status st = server_->Start(0);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_FALSE(server_->Start(0).ok());  // already started
  EXPECT_EQ(Send("GET", "/v1/health", "").status, 200);
}

TEST_F(SchedulerHttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  asio::io_context ioc;
  tcp::socket sock(ioc);
  beast::error_code ec;
  sock.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()), ec);
  ASSERT_FALSE(ec) << ec.message();
  beast::flat_buffer buf;
  for (int i = 0; i < 3; ++i) {
    http::request<http::string_body> req{http::verb::post, "/v1/jobs", 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::authorization, StrCat("Bearer ", kAlice));
    req.body() = kSpec;
    req.prepare_payload();
    http::write(sock, req, ec);
    ASSERT_FALSE(ec) << ec.message();
    http::response<http::string_body> res;
    http::read(sock, buf, res, ec);
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(res.result_int(), 201u);
    EXPECT_TRUE(res.keep_alive());
    EXPECT_EQ(json::parse(res.body()).at("id"), i + 1);
  }
}

TEST_F(SchedulerHttpServerTest, ReadTimeoutClosesAnIdleConnection) {
  HttpServerOptions so;
  so.read_timeout = std::chrono::milliseconds(200);
  StartServer({}, so);
  asio::io_context ioc;
  tcp::socket sock(ioc);
  beast::error_code ec;
  sock.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()), ec);
  ASSERT_FALSE(ec) << ec.message();
  const auto start = std::chrono::steady_clock::now();
  char byte;
  const size_t n = sock.read_some(asio::buffer(&byte, 1), ec);  // sends nothing, waits
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(n, 0u);
  EXPECT_TRUE(ec) << "the server should have closed the idle connection";
  EXPECT_GE(waited, std::chrono::milliseconds(150));
  EXPECT_LT(waited, std::chrono::seconds(10));
}

TEST_F(SchedulerHttpServerTest, ConcurrentSubmissionsGetDistinctIds) {
  ApiOptions ao;
  ao.burst = 1000;
  HttpServerOptions so;
  so.threads = 4;
  StartServer(ao, so);
  constexpr int kClients = 6, kEach = 5;
  std::vector<std::thread> clients;
  std::atomic<int> created{0};
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; i < kEach; ++i) {
        if (Send("POST", "/v1/jobs", c % 2 ? kAlice : kBob, kSpec).status == 201) ++created;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(created.load(), kClients * kEach);
  auto jobs = store_->List();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), static_cast<size_t>(kClients * kEach));
  for (size_t i = 0; i < jobs->size(); ++i) {
    EXPECT_EQ((*jobs)[i].id, static_cast<int64_t>(i + 1));
    auto ev = store_->Events((*jobs)[i].id);
    ASSERT_TRUE(ev.ok());
    EXPECT_EQ(ev->size(), 1u);
  }
}

}  // namespace
}  // namespace fp8rt::sched
