// The scheduler API as a hostile or careless user meets it (issue 10): every item is tried against
// the real pieces (the Api over a Scheduler and a RocksDB store in a temp dir, the Beast server on
// loopback, the fp8d process) and must be refused with the right status, change nothing, and
// never take the API, the store or a restart down.
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "net/http_server.h"
#include "scheduler/api.h"
#include "scheduler/auth.h"
#include "scheduler/node.h"
#include "scheduler/scheduler.h"
#include "scheduler/store.h"
#include "tests/common/fp8d_process.h"
#include "tests/common/job_files.h"
#include "tests/common/temp_dir.h"

namespace fp8rt::sched {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
using net::HttpServer;
using net::HttpServerOptions;
using test::kAdmin;
using test::kAlice;
using test::kBob;
using test::kNode;
using test::SchedProcessTest;
using test::Slurp;

bool Has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TokenAuth Tokens() {
  auto t = TokenAuth::Parse(StrCat("admin: [{name: ops, sha256: ", HashToken(kAdmin), "}]\n",
                                   "node: [{name: daemons, sha256: ", HashToken(kNode), "}]\n",
                                   "user:\n  - {name: alice, sha256: ", HashToken(kAlice), "}\n",
                                   "  - {name: bob, sha256: ", HashToken(kBob), "}\n"));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : TokenAuth();
}

HttpRequest Req(const std::string& method, const std::string& target, const std::string& token,
                const std::string& body = "") {
  HttpRequest r{method, target, {}, body};
  if (!token.empty()) r.headers["authorization"] = StrCat("Bearer ", token);
  return r;
}

std::string ErrorOf(const HttpResponse& r) {
  return json::parse(r.body, nullptr, false).value("error", std::string());
}

constexpr char kRegister[] =
    R"({"id": "n1", "gpus": [{"name": "H100", "compute_capability": "9.0", "memory_gib": 80,
        "count": 8}]})";

// A RocksDB store in a temp dir with a Scheduler and the Api over both: what fp8d runs.
class HardeningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::WriteJobFiles(files_);
    Open();
  }

  // The Api's config directory and roots are files_ (test::WriteJobFiles) unless `api_options`
  // says otherwise.
  void Open(ApiOptions api_options = {}) {
    if (api_options.config_dir.empty()) api_options = test::RootedAt(files_, api_options);
    api_.reset();
    sched_.reset();
    store_.reset();
    auto s = OpenRocksDbJobStore(dir_.str() + "/jobs");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    auto sch = Scheduler::Open(store_.get(), SchedulerOptions{}, static_cast<int64_t>(now_));
    ASSERT_TRUE(sch.ok()) << sch.status().ToString();
    sched_ = std::move(sch).value();
    api_ = std::make_unique<Api>(
        sched_.get(), store_.get(), Tokens(), [this] { return now_; }, api_options);
  }
  void Close() {
    api_.reset();
    sched_.reset();
    store_.reset();
  }

  HttpResponse Call(const std::string& method, const std::string& target, const std::string& token,
                    const std::string& body = "") {
    return api_->Handle(Req(method, target, token, body));
  }

  // Every job with its events, as an admin sees them.
  std::string Snapshot() {
    HttpResponse list = Call("GET", "/v1/jobs", kAdmin);
    EXPECT_EQ(list.status, 200) << list.body;
    std::string s = list.body;
    for (const auto& j : json::parse(list.body, nullptr, false).value("jobs", json::array())) {
      s += Call("GET", StrCat("/v1/jobs/", j.at("id").get<int64_t>(), "/events"), kAdmin).body;
    }
    return s;
  }

  // Submits `body` as alice; expects 400 naming `says`, and nothing stored.
  void ExpectRefused(const std::string& body, const std::string& says, int status = 400,
                     const std::string& token = kAlice) {
    const std::string before = Snapshot();
    HttpResponse r = Call("POST", "/v1/jobs", token, body);
    EXPECT_EQ(r.status, status) << body << "\n" << r.body;
    EXPECT_TRUE(Has(ErrorOf(r), says)) << body << "\n" << r.body << "\nshould say: " << says;
    EXPECT_EQ(Snapshot(), before) << body;
  }

  test::TempDir dir_;
  const std::string files_ = dir_.str() + "/files";
  double now_ = 1'700'000'000;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<Scheduler> sched_;
  std::unique_ptr<Api> api_;
};

// ---- 1. NaN / Inf / out of range, the round trip, and a corrupt record ----

TEST_F(HardeningTest, Item1EveryNumberInASpecIsFiniteAndInRange) {
  const std::string base = R"("name": "p", "config_path": "c")";
  struct Case {
    std::string field_and_value, says;
  };
  for (const Case& c : std::vector<Case>{
           {R"("min_memory_gib": .nan)", "min_memory_gib = .nan is not a finite number"},
           {R"("min_memory_gib": .inf)", "min_memory_gib = .inf is not a finite number"},
           {R"("min_memory_gib": -.inf)", "min_memory_gib"},
           {R"("min_memory_gib": 1e999)", "min_memory_gib = 1e999 is not a finite number"},
           {R"("min_memory_gib": -1)", "min_memory_gib = -1 is out of range"},
           {R"("min_memory_gib": 1e300)", "min_memory_gib = 1e300 is out of range"},
           {R"("priority": .nan)", "priority"},
           {R"("priority": 2000000000)", "priority = 2000000000 is out of range"},
           {R"("nodes": 0)", "nodes = 0 is out of range"},
           {R"("nodes": 100000)", "nodes = 100000 is out of range"},
           {R"("gpus_per_node": 5000)", "gpus_per_node = 5000 is out of range"},
           {R"("checkpoint_interval": 0)", "checkpoint_interval = 0 is out of range"},
           {R"("max_restarts": 1000000)", "max_restarts = 1000000 is out of range"},
           {R"("fallback": "wait", "fallback_timeout_s": -1)", "fallback_timeout_s = -1"},
           {R"("min_compute_capability": .nan)", "min_compute_capability"},
       }) {
    ExpectRefused(StrCat("{", base, ", ", c.field_and_value, "}"), c.says);
  }
  // Nothing broke: listing and metrics still answer.
  EXPECT_EQ(Call("GET", "/v1/jobs", kAlice).status, 200);
  EXPECT_EQ(Call("GET", "/metrics", "").status, 200);
}

TEST_F(HardeningTest, Item1TheStoreNeverAcknowledgesARecordItCannotReadBack) {
  Job job;
  job.id = 1;
  job.owner = "alice";
  job.spec.name = "p";
  job.spec.config_path = "c";
  job.spec.config.data.train = {"/data/corpus.txt"};
  job.spec.min_memory_gib = std::nan("");  // what a lenient parser once let through
  const Event ev{1, 1, JobState::kPending, JobState::kPending, "submitted"};
  for (JobStore* store : {store_.get(), NewMemoryJobStore().release()}) {
    const Status put = store->Put(job, ev);
    EXPECT_FALSE(put.ok());
    EXPECT_TRUE(Has(put.message(), "would not read back")) << put.ToString();
    EXPECT_EQ(store->Get(1).status().code(), StatusCode::kNotFound);
    EXPECT_TRUE(store->List()->empty());
    EXPECT_TRUE(store->Events(1)->empty());
    if (store != store_.get()) delete store;
  }
}

// The stored record from the issue: min_memory_gib null, which does not parse back.
std::string CorruptRecord(const Job& good) {
  json j = json::parse(JobToJson(good));
  j["id"] = 2;
  j["spec"]["min_memory_gib"] = nullptr;
  j["state"] = "RUNNING";
  return j.dump();
}

TEST_F(HardeningTest, Item1OneUnreadableRecordIsSetAsideAndTheRestWorks) {
  // Job 1 through the API, job 2 written straight into RocksDB as the lenient parser once stored
  // it, and job 3 through the API after that.
  ASSERT_EQ(Call("POST", "/v1/jobs", kAlice, R"({"name": "good", "config_path": "c"})").status,
            201);
  const Job good = *store_->Get(1);
  Close();
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_.str() + "/jobs", &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put({}, "job/0000000000000002", CorruptRecord(good)).ok());
    ASSERT_TRUE(db->Put({}, "meta/last_job_id", "2").ok());
  }
  Open();  // the scheduler starts on it
  ASSERT_NE(api_, nullptr);
  ASSERT_EQ(Call("POST", "/v1/jobs", kAlice, R"({"name": "later", "config_path": "c"})").status,
            201);

  HttpResponse list = Call("GET", "/v1/jobs", kAlice);
  ASSERT_EQ(list.status, 200) << list.body;
  const json jobs = json::parse(list.body).at("jobs");
  ASSERT_EQ(jobs.size(), 3u) << list.body;
  EXPECT_EQ(jobs[1].at("id"), 2);
  EXPECT_EQ(jobs[1].at("state"), "FAILED");
  EXPECT_TRUE(Has(jobs[1].at("reason").get<std::string>(), "unreadable")) << jobs[1];
  EXPECT_TRUE(Has(jobs[1].at("reason").get<std::string>(), "min_memory_gib")) << jobs[1];
  HttpResponse events = Call("GET", "/v1/jobs/2/events", kAlice);
  ASSERT_EQ(events.status, 200) << events.body;
  EXPECT_TRUE(Has(events.body, "set aside")) << events.body;
  EXPECT_EQ(Call("GET", "/metrics", "").status, 200);
  EXPECT_EQ(Call("POST", "/v1/jobs/1/cancel", kAlice).status, 200);
  EXPECT_EQ(Call("POST", "/v1/jobs/2/cancel", kAlice).status, 409);  // FAILED is terminal

  // The unreadable bytes are kept for a human to look at.
  Close();
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_.str() + "/jobs", &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  std::string kept;
  ASSERT_TRUE(db->Get({}, "corrupt/job/0000000000000002", &kept).ok());
  EXPECT_EQ(kept, CorruptRecord(good));
}

TEST_F(SchedProcessTest, Item1Fp8dStartsOnADataDirWithAnUnreadableRecordAndSaysWhich) {
  Start();
  ASSERT_EQ(Req("POST", "/v1/jobs", kAlice, R"({"name": "good", "config_path": "c"})").status, 201);
  proc_.Kill(SIGKILL);
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), data_ + "/jobs", &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    std::string good;
    ASSERT_TRUE(db->Get({}, "job/0000000000000001", &good).ok());
    ASSERT_TRUE(db->Put({}, "job/0000000000000002", CorruptRecord(*JobFromJson(good))).ok());
  }
  Start();
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_TRUE(Has(Slurp(log_), "job/0000000000000002")) << Slurp(log_);
  EXPECT_TRUE(Has(Slurp(log_), "set aside")) << Slurp(log_);
  test::Reply list = Req("GET", "/v1/jobs", kAdmin);
  EXPECT_EQ(list.status, 200) << list.body;
  EXPECT_EQ(list.Json().at("jobs").size(), 2u) << list.body;
  proc_.Signal(SIGTERM);
  EXPECT_EQ(proc_.Wait(), 0) << Slurp(log_);
}

// ---- 2. descriptor exhaustion ----

// CPU seconds (user + system) the process has used so far.
double CpuSeconds(pid_t pid) {
  std::ifstream in(StrCat("/proc/", pid, "/stat"));
  std::string all((std::istreambuf_iterator<char>(in)), {});
  std::istringstream rest(all.substr(all.rfind(')') + 2));
  std::vector<std::string> f((std::istream_iterator<std::string>(rest)), {});
  if (f.size() < 13) return -1;
  return (std::stod(f[11]) + std::stod(f[12])) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

size_t CountLines(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

// Opens `n` idle connections to the port (they send nothing).
std::vector<std::unique_ptr<tcp::socket>> OpenIdle(asio::io_context& ioc, uint16_t port, int n) {
  std::vector<std::unique_ptr<tcp::socket>> socks;
  for (int i = 0; i < n; ++i) {
    auto s = std::make_unique<tcp::socket>(ioc);
    beast::error_code ec;
    s->connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
    if (!ec) socks.push_back(std::move(s));
  }
  return socks;
}

TEST_F(SchedProcessTest, Item2DescriptorExhaustionBacksOffAndLogsOncePerIncident) {
  // --max-connections above what the limit allows: accept() itself runs out of descriptors.
  Start({"--max-connections", "1000"}, 64);
  ASSERT_FALSE(HasFatalFailure());
  asio::io_context ioc;
  const double cpu0 = CpuSeconds(proc_.pid());
  auto idle = OpenIdle(ioc, port_, 100);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const double cpu = CpuSeconds(proc_.pid()) - cpu0;
  const std::string log = Slurp(log_);
  EXPECT_LT(cpu, 0.3) << "the server spun on failing accept() calls";
  EXPECT_GE(CountLines(log, "accept"), 1u) << log;
  EXPECT_LE(CountLines(log, "accept"), 3u) << "one line per incident, not per retry:\n"
                                           << log.substr(0, 4000);
  idle.clear();  // the clients go; the server accepts again
  test::Reply r;
  for (int i = 0; i < 100 && r.status != 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    r = Req("GET", "/v1/health", "");
  }
  EXPECT_EQ(r.status, 200) << Slurp(log_);
  proc_.Signal(SIGTERM);
  EXPECT_EQ(proc_.Wait(), 0) << Slurp(log_);
}

TEST_F(SchedProcessTest, Item2ConnectionCapPausesAcceptingUntilOneCloses) {
  Start({"--max-connections", "8"}, 0);
  ASSERT_FALSE(HasFatalFailure());
  asio::io_context ioc;
  const double cpu0 = CpuSeconds(proc_.pid());
  auto idle = OpenIdle(ioc, port_, 8);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // The ninth connection is queued by the kernel, not served, until one of the eight closes.
  std::atomic<int> status{0};
  std::thread ninth([&] { status = Req("GET", "/v1/health", "").status; });
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  EXPECT_EQ(status.load(), 0) << "a ninth connection was served past --max-connections 8";
  idle.pop_back();
  ninth.join();
  EXPECT_EQ(status.load(), 200);
  EXPECT_LT(CpuSeconds(proc_.pid()) - cpu0, 0.3);
  EXPECT_EQ(CountLines(Slurp(log_), "connection limit"), 1u) << Slurp(log_);
  idle.clear();
  proc_.Signal(SIGTERM);
  EXPECT_EQ(proc_.Wait(), 0) << Slurp(log_);
}

// ---- 3. rate limits keyed by the principal, the table bounded ----

TEST_F(HardeningTest, Item3MadeUpNodeIdsShareTheTokensBucket) {
  ApiOptions ao;
  ao.rate_per_s = 1;
  ao.burst = 3;
  Open(ao);
  int limited = 0, answered = 0;
  for (int i = 0; i < 200; ++i) {
    const int s = Call("POST", StrCat("/v1/nodes/made-up-", i, "/heartbeat"), kNode, "{}").status;
    (s == 429 ? limited : answered)++;
  }
  EXPECT_EQ(answered, 3);
  EXPECT_EQ(limited, 197);
}

TEST_F(HardeningTest, Item3RegisteredNodesKeepTheirOwnBucketAndTheTableIsBounded) {
  ApiOptions ao;
  ao.rate_per_s = 1;
  ao.burst = 3;
  Open(ao);
  ASSERT_EQ(Call("POST", "/v1/nodes/register", kNode, kRegister).status, 200);
  for (int i = 0; i < 5000; ++i) {
    now_ += 10;  // every bucket refills: nothing is limited, yet nothing may grow without bound
    Call("POST", StrCat("/v1/nodes/made-up-", i, "/heartbeat"), kNode, "{}");
    Call("GET", StrCat("/v1/jobs?i=", i), i % 2 ? kAlice : kBob);
  }
  // Spent the shared bucket; n1's own is untouched.
  for (int i = 0; i < 3; ++i) Call("POST", "/v1/nodes/made-up/heartbeat", kNode, "{}");
  EXPECT_EQ(Call("POST", "/v1/nodes/made-up/heartbeat", kNode, "{}").status, 429);
  EXPECT_EQ(Call("POST", "/v1/nodes/n1/heartbeat", kNode, "{}").status, 200);
  HttpResponse m = Call("GET", "/metrics", "");
  const size_t at = m.body.find("\nfp8rt_api_rate_limit_buckets ");
  ASSERT_NE(at, std::string::npos) << m.body;
  EXPECT_LE(std::stoi(m.body.substr(at + 30)), 4) << m.body;  // node, n1, alice, bob
}

// ---- 4. registration totals before allocation ----

TEST_F(HardeningTest, Item4RegistrationChecksTheGpuTotalBeforeAllocating) {
  // 14,000 entries of count 1024: 14M GPUs once expanded (about 800 MB of GpuInfo).
  std::string body = R"({"id": "big", "gpus": [)";
  for (int i = 0; i < 14000; ++i) {
    body += StrCat(i ? "," : "",
                   R"({"name":"H","compute_capability":"9.0","memory_gib":1,"count":1024})");
  }
  body += "]}";
  ASSERT_LT(body.size(), size_t{1} << 20);
  // In a child with 256 MiB more address space than it has now: expanding first runs out of it.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::ifstream statm("/proc/self/statm");
    size_t pages = 0;
    statm >> pages;
    const rlim_t limit = pages * ::sysconf(_SC_PAGESIZE) + (rlim_t{256} << 20);
    const struct rlimit lim = {limit, limit};
    ::setrlimit(RLIMIT_AS, &lim);
    int code = 3;
    try {
      auto r = ParseNodeRegistration(body);
      code = !r.ok() && Has(r.status().message(), "14336000 GPUs") ? 0 : 1;
    } catch (...) {
      code = 2;  // std::bad_alloc: it expanded first
    }
    ::_exit(code);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "1: wrong answer, 2: ran out of memory expanding the counts";
  HttpResponse r = Call("POST", "/v1/nodes/register", kNode,
                        R"({"id": "n", "gpus": [{"name": "H", "compute_capability": "9.0",
                            "memory_gib": 1, "count": 1000}, {"name": "H",
                            "compute_capability": "9.0", "memory_gib": 1, "count": 25}]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(Has(ErrorOf(r), "1025 GPUs")) << r.body;
}

// ---- 5-8. the spec reader ----

TEST_F(HardeningTest, Item5ANonScalarKeyIs400) {
  ExpectRefused(R"({"name":"x","config_path":"c",[a]: 1})", "keys must be strings");
}

TEST_F(HardeningTest, Item6DuplicateKeysAreRefusedNamingTheKey) {
  ExpectRefused(R"({"name":"a","name":"b","config_path":"c"})", "duplicate key 'name'");
  ExpectRefused(R"({"name":"a","config_path":"c","priority":0,"priority":1000})",
                "duplicate key 'priority'");
  ExpectRefused("name: a\nconfig_path: c\nname: b\n", "duplicate key 'name' at line 3");
}

TEST_F(HardeningTest, Item7QuotedNumbersAndBooleansAreRefused) {
  ExpectRefused(R"({"name":"a","config_path":"c","nodes":"2"})",
                "nodes = \"2\" is a string; expected an integer");
  ExpectRefused(R"({"name":"a","config_path":"c","preemptible":"false"})",
                "preemptible = \"false\" is a string; expected a boolean (true or false)");
  ExpectRefused(R"({"name":"a","config_path":"c","min_memory_gib":"8"})", "min_memory_gib");
  ExpectRefused("name: a\nconfig_path: c\npreemptible: yes\n", "preemptible = yes is a string");
}

TEST_F(HardeningTest, Item8SurrogatePairEscapesAreValidJson) {
  // What Python's json.dumps writes for a rocket in a GPU type.
  HttpResponse r =
      Call("POST", "/v1/jobs", kAlice,
           R"({"name": "emoji", "config_path": "c", "gpu_types": ["H100\ud83d\ude80"]})");
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(store_->Get(1)->spec.gpu_types, std::vector<std::string>{"H100\xF0\x9F\x9A\x80"});
  // A lone surrogate is not valid, and says so.
  HttpResponse lone = Call("POST", "/v1/jobs", kAlice,
                           R"({"name": "e", "config_path": "c", "gpu_types": ["\ud83d"]})");
  EXPECT_EQ(lone.status, 400) << lone.body;
}

// ---- 9-10. the HTTP server: over-long requests, HEAD ----

class HardeningServerTest : public HardeningTest {
 protected:
  void SetUp() override {
    HardeningTest::SetUp();
    server_ = std::make_unique<HttpServer>(api_.get());
    ASSERT_TRUE(server_->Start(0).ok());
  }
  void TearDown() override { server_->Stop(); }

  tcp::socket Connect(asio::io_context& ioc) {
    tcp::socket sock(ioc);
    sock.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server_->port()));
    struct timeval tv {
      10, 0
    };
    ::setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return sock;
  }

  // Writes `raw` (ignoring a reset: the server may answer before reading it all) and reads one
  // response; status -1 if none came.
  std::pair<int, std::string> Raw(const std::string& raw) {
    asio::io_context ioc;
    tcp::socket sock = Connect(ioc);
    beast::error_code ec;
    asio::write(sock, asio::buffer(raw), ec);
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(sock, buf, res, ec);
    if (ec) return {-1, ec.message()};
    return {static_cast<int>(res.result_int()), res.body()};
  }

  std::unique_ptr<HttpServer> server_;
};

TEST_F(HardeningServerTest, Item9OverLongUrlsAndHeadersGet414And431WithAJsonError) {
  const std::string host = "Host: 127.0.0.1\r\n";
  const auto [url_status, url_body] =
      Raw(StrCat("GET /v1/jobs/", std::string(100'000, 'a'), " HTTP/1.1\r\n", host, "\r\n"));
  EXPECT_EQ(url_status, 414) << url_body;
  EXPECT_TRUE(Has(json::parse(url_body, nullptr, false).value("error", ""), "URL")) << url_body;

  const auto [hdr_status, hdr_body] = Raw(
      StrCat("GET /v1/health HTTP/1.1\r\n", host, "X-Big: ", std::string(65'536, 'b'), "\r\n\r\n"));
  EXPECT_EQ(hdr_status, 431) << hdr_body;
  EXPECT_TRUE(Has(json::parse(hdr_body, nullptr, false).value("error", ""), "header")) << hdr_body;

  std::string many = StrCat("GET /v1/health HTTP/1.1\r\n", host);
  for (int i = 0; i < 5000; ++i) many += StrCat("X-H", i, ": v\r\n");
  const auto [many_status, many_body] = Raw(many + "\r\n");
  EXPECT_EQ(many_status, 431) << many_body;

  // Still serving, and the refusals were counted.
  EXPECT_EQ(Raw(StrCat("GET /v1/health HTTP/1.1\r\n", host, "\r\n")).first, 200);
  const std::string metrics = Raw(StrCat("GET /metrics HTTP/1.1\r\n", host, "\r\n")).second;
  EXPECT_TRUE(Has(metrics, "fp8rt_api_requests_total{code=\"414\"} 1")) << metrics;
  EXPECT_TRUE(Has(metrics, "fp8rt_api_requests_total{code=\"431\"} 2")) << metrics;
}

TEST_F(HardeningServerTest, Item10HeadAnswersWithoutABodyAndKeepsTheConnectionInStep) {
  asio::io_context ioc;
  tcp::socket sock = Connect(ioc);
  beast::flat_buffer buf;
  auto exchange = [&](http::verb verb, const std::string& target, const std::string& token) {
    http::request<http::empty_body> req{verb, target, 11};
    req.set(http::field::host, "127.0.0.1");
    if (!token.empty()) req.set(http::field::authorization, StrCat("Bearer ", token));
    http::write(sock, req);
    http::response_parser<http::string_body> p;
    p.skip(verb == http::verb::head);  // a HEAD response has no body, whatever its length says
    http::read(sock, buf, p);
    return p.release();
  };
  const auto get = exchange(http::verb::get, "/v1/health", "");
  const auto head = exchange(http::verb::head, "/v1/health", "");
  EXPECT_EQ(head.result_int(), 200u);
  EXPECT_EQ(head[http::field::content_length], std::to_string(get.body().size()));
  // HEAD where only POST exists: 405, still no body.
  const auto refused = exchange(http::verb::head, "/v1/jobs/1/cancel", kAlice);
  EXPECT_EQ(refused.result_int(), 405u);
  EXPECT_TRUE(Has(std::string(refused[http::field::allow]), "POST"));
  // The connection is in step: the next answer is the next request's, not a stray body.
  const auto after = exchange(http::verb::get, "/v1/health", "");
  EXPECT_EQ(after.result_int(), 200u);
  EXPECT_EQ(after.body(), get.body());
  // No byte is left over on the connection.
  EXPECT_EQ(buf.size(), 0u);
}

// ---- also decided: config paths, YAML anchors, priorities ----

TEST_F(HardeningTest, ConfigPathsOutsideTheAllowedRootsAreRefusedAtSubmit) {
  for (const char* path :
       {"../../etc/shadow", "/etc/shadow", "configs/../../x.yaml", "a/../../b"}) {
    ExpectRefused(StrCat(R"({"name": "x", "config_path": ")", path, "\"}"),
                  "is outside the config roots");
  }
  EXPECT_EQ(
      Call("POST", "/v1/jobs", kAlice, R"({"name": "x", "config_path": "configs/a.yaml"})").status,
      201);
  // A --config-root besides the config directory: absolute paths under it, nothing beside it.
  const std::string srv = dir_.str() + "/srv/fp8rt/configs";
  test::WriteJobFiles(srv);
  std::filesystem::create_directories(dir_.str() + "/srv/fp8rt/configs-evil");
  std::ofstream(dir_.str() + "/srv/fp8rt/configs-evil/a.yaml") << "x: 1\n";
  ApiOptions ao = test::RootedAt(files_);
  ao.config_inputs.roots.push_back(srv);
  ao.data_inputs.roots.push_back(srv);
  Open(ao);
  EXPECT_EQ(Call("POST", "/v1/jobs", kAlice,
                 StrCat(R"({"name": "x", "config_path": ")", srv, "/configs/gpt.yaml\"}"))
                .status,
            201);
  ExpectRefused(StrCat(R"({"name": "x", "config_path": ")", srv, "/../../../etc/shadow\"}"),
                "is outside the config roots");
  ExpectRefused(
      StrCat(R"({"name": "x", "config_path": ")", dir_.str(), "/srv/fp8rt/configs-evil/a.yaml\"}"),
      "is outside the config roots");
}

TEST_F(HardeningTest, YamlAnchorsAndAliasesAreRefusedInSpecs) {
  ExpectRefused("name: &n x\nconfig_path: *n\n", "anchors and aliases are refused");
  std::string laughs = "name: x\nconfig:\n  a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (char c = 'b'; c <= 'i'; ++c) {
    const char p = static_cast<char>(c - 1);
    laughs += StrCat("  ", c, ": &", c, " [*", p, ", *", p, ", *", p, ", *", p, ", *", p, ", *", p,
                     ", *", p, ", *", p, ", *", p, "]\n");
  }
  ExpectRefused(laughs, "anchors and aliases are refused");
}

TEST_F(HardeningTest, UsersMaySetPrioritiesUpToTheLimitAndAdminsAbove) {
  EXPECT_EQ(
      Call("POST", "/v1/jobs", kAlice, R"({"name": "a", "config_path": "c", "priority": 100})")
          .status,
      201);
  ExpectRefused(R"({"name": "a", "config_path": "c", "priority": 101})",
                "priority = 101 is above 100, the most a user may set", 403);
  EXPECT_EQ(
      Call("POST", "/v1/jobs", kAdmin, R"({"name": "a", "config_path": "c", "priority": 5000})")
          .status,
      201);
  EXPECT_EQ(
      Call("POST", "/v1/jobs", kAlice, R"({"name": "a", "config_path": "c", "priority": -50})")
          .status,
      201);
}

}  // namespace
}  // namespace fp8rt::sched
