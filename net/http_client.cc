// The blocking HTTP client (net/http_client.h).
#include "net/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>

namespace fp8rt::net {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Result<HttpEndpoint> ParseHttpUrl(const std::string& url) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(StrCat("server URL '", url, "': ", why,
                                          " (expected http://HOST:PORT)"));
  };
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0) return bad("https is not supported by this client yet");
  if (url.rfind(scheme, 0) != 0) return bad("not an http:// URL");
  std::string rest = url.substr(scheme.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos) return bad("a base URL has no path");
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("no host and port");
  HttpEndpoint e;
  e.host = rest.substr(0, colon);
  if (e.host.size() > 2 && e.host.front() == '[' && e.host.back() == ']') {
    e.host = e.host.substr(1, e.host.size() - 2);  // [::1]
  }
  const std::string port = rest.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos) {
    return bad(StrCat("port '", port, "' is not a number"));
  }
  const long p = std::stol(port);
  if (p < 1 || p > 65535) return bad(StrCat("port ", p, " is out of range"));
  e.port = static_cast<uint16_t>(p);
  return e;
}

Result<HttpResponse> HttpCall(const std::string& base_url, const HttpRequest& request,
                              const HttpClientOptions& options) {
  FP8RT_ASSIGN_OR_RETURN(const HttpEndpoint where, ParseHttpUrl(base_url));
  const std::string server = StrCat(where.host, ":", where.port);
  const auto seconds = [&] {
    return StrCat(static_cast<double>(options.timeout.count()) / 1000.0, " s");
  };
  http::request<http::string_body> req;
  req.method(http::string_to_verb(request.method));
  if (req.method() == http::verb::unknown) {
    return Status::InvalidArgument(StrCat("HTTP method '", request.method, "' is not known"));
  }
  req.target(request.target.empty() ? "/" : request.target);
  req.version(11);
  req.set(http::field::host, where.host);
  req.set(http::field::connection, "close");
  if (!request.body.empty()) req.set(http::field::content_type, "application/json");
  for (const auto& [name, value] : request.headers) {
    // A value with CR, LF or another control character would end the header and start another
    // (a token holding "\r\nX-Admin: 1"): refused, never sent.
    for (char c : name + value) {
      const auto u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\t') || u == 0x7f) {
        return Status::InvalidArgument(
            StrCat("HTTP header '", name, "' holds a control character; not sent"));
      }
    }
    req.set(name, value);
  }
  req.body() = request.body;
  req.prepare_payload();

  // Beast applies a tcp_stream's deadline to asynchronous operations only: each step is one
  // asynchronous operation run to completion, all under one deadline.
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  beast::error_code ec;
  auto run = [&]() {
    stream.expires_at(deadline);
    ioc.run();
    ioc.restart();
  };
  tcp::resolver resolver(ioc);
  const auto addresses = resolver.resolve(where.host, std::to_string(where.port), ec);
  if (ec) return Status::Unavailable(StrCat("cannot resolve ", where.host, ": ", ec.message()));
  stream.async_connect(addresses, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
  run();
  if (ec == beast::error::timeout) {
    return Status::Unavailable(StrCat("cannot connect to ", server, " within ", seconds()));
  }
  if (ec) return Status::Unavailable(StrCat("cannot connect to ", server, ": ", ec.message()));
  http::async_write(stream, req, [&](beast::error_code e, size_t) { ec = e; });
  run();
  if (ec == beast::error::timeout) {
    return Status::Unavailable(StrCat(server, " did not take the request within ", seconds()));
  }
  if (ec) return Status::Unavailable(StrCat("sending to ", server, " failed: ", ec.message()));
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(static_cast<std::uint64_t>(options.max_body_bytes));
  const Status too_large(StatusCode::kResourceExhausted,
                         StrCat("the answer from ", server, " is larger than ",
                                options.max_body_bytes, " bytes"));
  // The header first: a declared length over the limit is refused before the body is read.
  http::async_read_header(stream, buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
  run();
  if (!ec && parser.content_length() && *parser.content_length() > options.max_body_bytes) {
    return too_large;
  }
  if (!ec) {
    http::async_read(stream, buffer, parser, [&](beast::error_code e, size_t) { ec = e; });
    run();
  }
  if (ec == http::error::body_limit ||
      (!ec && parser.get().body().size() > options.max_body_bytes)) {
    return too_large;
  }
  if (ec == beast::error::timeout) {
    return Status::Unavailable(StrCat(server, " did not answer within ", seconds()));
  }
  if (ec) {
    return Status::Unavailable(StrCat("reading the answer from ", server, " failed: ",
                                      ec.message()));
  }
  const auto& res = parser.get();
  HttpResponse out;
  out.status = static_cast<int>(res.result_int());
  out.body = res.body();
  out.content_type.clear();
  for (const auto& field : res) {
    const std::string name = Lower(std::string(field.name_string()));
    if (name == "content-type") {
      out.content_type = std::string(field.value());
    } else {
      out.headers[name] = std::string(field.value());
    }
  }
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);  // the server may have closed first
  return out;
}

}  // namespace fp8rt::net
