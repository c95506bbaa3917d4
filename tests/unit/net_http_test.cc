// net/: the HTTP client against the Beast server on loopback (and against sockets that refuse or
// never answer), with a handler of the test's own.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <string>

#include "net/http_client.h"
#include "net/http_server.h"

namespace fp8rt::net {
namespace {

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// Echoes what it got: method, target, the x-test header and the body.
class Echo final : public HttpHandler {
 public:
  HttpResponse Handle(const HttpRequest& r) override {
    HttpResponse out;
    out.status = r.target == "/missing" ? 404 : 200;
    out.content_type = "text/plain";
    auto h = r.headers.find("x-test");
    out.body = r.method + " " + r.target + " " + (h == r.headers.end() ? "-" : h->second) + " " +
               r.body;
    out.headers["x-answer"] = "42";
    return out;
  }
  size_t max_body_bytes() const override { return 1 << 20; }
  HttpResponse BodyTooLarge() override { return {413, "text/plain", "too large", {}}; }
  HttpResponse TransportError(int status, const std::string& m) override {
    return {status, "text/plain", m, {}};
  }
};

class NetHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start(0).ok());
    url_ = "http://127.0.0.1:" + std::to_string(server_.port());
  }
  Echo echo_;
  HttpServer server_{&echo_};
  std::string url_;
};

TEST_F(NetHttp, RequestsAndAnswersTravelWhole) {
  HttpRequest get;
  get.method = "GET", get.target = "/v1/x?y=1";
  get.headers["x-test"] = "hello";
  auto r = HttpCall(url_, get);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->content_type, "text/plain");
  EXPECT_EQ(r->body, "GET /v1/x?y=1 hello ");
  EXPECT_EQ(r->headers["x-answer"], "42");
  HttpRequest post;
  post.method = "POST", post.target = "/missing", post.body = std::string(300000, 'z');
  r = HttpCall(url_ + "/", post);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 404);  // an HTTP error status is an answer, not a failure
  EXPECT_EQ(r->body, "POST /missing - " + post.body);
}

TEST_F(NetHttp, AnAnswerOverTheLimitIsAnError) {
  HttpRequest post;
  post.method = "POST", post.target = "/", post.body = std::string(5000, 'a');
  HttpClientOptions o;
  o.max_body_bytes = 1000;
  auto r = HttpCall(url_, post, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Has(r.status().message(), "larger than 1000 bytes")) << r.status().message();
}

TEST(NetHttpClient, AServerThatIsNotThereOrDoesNotAnswerIsNamed) {
  namespace asio = boost::asio;
  asio::io_context ioc;
  // Nothing listens on a port that was just closed.
  asio::ip::tcp::acceptor closed(ioc, {asio::ip::make_address("127.0.0.1"), 0});
  const int dead = closed.local_endpoint().port();
  closed.close();
  HttpRequest get;
  get.method = "GET", get.target = "/";
  auto r = HttpCall("http://127.0.0.1:" + std::to_string(dead), get);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Has(r.status().message(), "cannot connect to 127.0.0.1:" + std::to_string(dead)))
      << r.status().message();
  // A listener that accepts (in the kernel's backlog) and never answers.
  asio::ip::tcp::acceptor mute(ioc, {asio::ip::make_address("127.0.0.1"), 0});
  HttpClientOptions o;
  o.timeout = std::chrono::milliseconds(300);
  const auto t0 = std::chrono::steady_clock::now();
  r = HttpCall("http://127.0.0.1:" + std::to_string(mute.local_endpoint().port()), get, o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Has(r.status().message(), "did not answer within 0.3 s")) << r.status().message();
  EXPECT_LT(s, 5.0);
}

TEST(NetHttpClient, UrlsThatAreNotHttpHostPortAreRefusedNamingThem) {
  for (const std::string bad : {"ftp://a:1", "http://", "http://host", "http://host:0",
                                "http://host:99999", "http://host:80/v1", "https://host:443",
                                "host:80"}) {
    auto e = ParseHttpUrl(bad);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Has(e.status().message(), "'" + bad + "'")) << e.status().message();
  }
  auto ok = ParseHttpUrl("http://[::1]:8080/");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->host, "::1");
  EXPECT_EQ(ok->port, 8080);
}

}  // namespace
}  // namespace fp8rt::net
