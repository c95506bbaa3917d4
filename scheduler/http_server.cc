// Boost.Beast server: Listener accepts, each Session (plain TCP or TLS) reads a request (parser
// with body limit, timeout before the read), hands it to Api::Handle and writes the answer;
// do_/on_ pairs.
#include "scheduler/http_server.h"

#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/version.hpp>
#include <cctype>
#include <cstdio>
#include <exception>
#include <map>
#include <optional>
#include <type_traits>

namespace fp8rt::sched {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
namespace ssl = asio::ssl;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// The one place connection errors go. Peers closing, timeouts and shutdown are normal.
void Fail(beast::error_code ec, const char* what) {
  if (ec == asio::error::operation_aborted || ec == http::error::end_of_stream ||
      ec == beast::error::timeout || ec == asio::error::eof ||
      ec == asio::error::connection_reset || ec == ssl::error::stream_truncated) {
    return;
  }
  std::fprintf(stderr, "fp8rt scheduler http: %s: %s\n", what, ec.message().c_str());
}

// Stream: beast::tcp_stream (plain HTTP) or TlsStream (HTTPS: a handshake first, a TLS shutdown
// last).
template <class Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

 public:
  Session(tcp::socket&& socket, Api* api, const HttpServerOptions& options)
    requires(!kTls)
      : stream_(std::move(socket)), api_(api), options_(options) {}
  Session(tcp::socket&& socket, ssl::context& ctx, Api* api, const HttpServerOptions& options)
    requires(kTls)
      : stream_(std::move(socket), ctx), api_(api), options_(options) {}

  void Run() {
    asio::dispatch(stream_.get_executor(),
                   beast::bind_front_handler(&Session::Start, this->shared_from_this()));
  }

 private:
  void Start() {
    if constexpr (kTls) {
      beast::get_lowest_layer(stream_).expires_after(options_.read_timeout);
      stream_.async_handshake(
          ssl::stream_base::server,
          beast::bind_front_handler(&Session::OnHandshake, this->shared_from_this()));
    } else {
      DoRead();
    }
  }

  void OnHandshake(beast::error_code ec) {
    if (ec) return Fail(ec, "tls handshake");
    DoRead();
  }

  void DoRead() {
    parser_.emplace();
    parser_->body_limit(api_->options().max_body_bytes);
    beast::get_lowest_layer(stream_).expires_after(options_.read_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::OnRead, this->shared_from_this()));
  }

  void OnRead(beast::error_code ec, std::size_t) {
    if (ec == http::error::body_limit) {
      // Answer 413 and close: the rest of the body is never read.
      const HttpResponse resp = api_->BodyTooLarge();
      Send(resp.status, resp.content_type, resp.body, /*keep_alive=*/false,
           parser_->get().version(), resp.headers);
      return;
    }
    if (ec) return Fail(ec, "read");
    const http::request<http::string_body>& req = parser_->get();
    HttpRequest r;
    r.method = std::string(req.method_string());
    r.target = std::string(req.target());
    for (const auto& f : req) {
      std::string name(f.name_string());
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      r.headers[name] = std::string(f.value());
    }
    r.body = req.body();
    const HttpResponse resp = api_->Handle(r);
    Send(resp.status, resp.content_type, resp.body, req.keep_alive(), req.version(), resp.headers);
  }

  void Send(int status, const std::string& content_type, std::string body, bool keep_alive,
            unsigned version, const std::map<std::string, std::string>& headers = {}) {
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(status), version == 0 ? 11 : version);
    res->set(http::field::server, "fp8rt-scheduler");
    res->set(http::field::content_type, content_type);
    for (const auto& [name, value] : headers) res->set(name, value);
    res->keep_alive(keep_alive);
    res->body() = std::move(body);
    res->prepare_payload();
    response_ = res;
    beast::get_lowest_layer(stream_).expires_after(options_.write_timeout);
    http::async_write(
        stream_, *res,
        beast::bind_front_handler(&Session::OnWrite, this->shared_from_this(), res->need_eof()));
  }

  void OnWrite(bool close, beast::error_code ec, std::size_t) {
    if (ec) return Fail(ec, "write");
    response_.reset();
    if (close) {
      if constexpr (kTls) {
        beast::get_lowest_layer(stream_).expires_after(options_.write_timeout);
        stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) {});
      } else {
        beast::error_code ignored;
        stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      }
      return;
    }
    DoRead();
  }

  Stream stream_;
  beast::flat_buffer buffer_;
  Api* api_;
  const HttpServerOptions& options_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<void> response_;
};

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  // `tls`: serve HTTPS with this context (it must outlive the listener); nullptr: plain HTTP.
  Listener(asio::io_context& ioc, tcp::acceptor&& acceptor, Api* api,
           const HttpServerOptions& options, ssl::context* tls)
      : ioc_(ioc), acceptor_(std::move(acceptor)), api_(api), options_(options), tls_(tls) {}

  void Run() { DoAccept(); }
  void Close() {
    beast::error_code ignored;
    acceptor_.close(ignored);
  }

 private:
  void DoAccept() {
    acceptor_.async_accept(asio::make_strand(ioc_),
                           beast::bind_front_handler(&Listener::OnAccept, shared_from_this()));
  }

  void OnAccept(beast::error_code ec, tcp::socket socket) {
    if (ec) {
      Fail(ec, "accept");
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    } else {
      if (tls_ != nullptr) {
        std::make_shared<Session<TlsStream>>(std::move(socket), *tls_, api_, options_)->Run();
      } else {
        std::make_shared<Session<beast::tcp_stream>>(std::move(socket), api_, options_)->Run();
      }
    }
    DoAccept();
  }

  asio::io_context& ioc_;
  tcp::acceptor acceptor_;
  Api* api_;
  const HttpServerOptions& options_;
  ssl::context* tls_;
};

// The TLS context from the options' PEM files; errors name the file.
Status LoadTls(const HttpServerOptions& o, ssl::context* ctx) {
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return Status::InvalidArgument(
        "http server: TLS needs both a certificate file and a key file (one is missing)");
  }
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                   ssl::context::single_dh_use);
  beast::error_code ec;
  if (ctx->use_certificate_chain_file(o.tls_cert_file, ec); ec) {
    return Status::InvalidArgument(StrCat("http server: TLS certificate file '", o.tls_cert_file,
                                          "' cannot be used: ", ec.message()));
  }
  if (ctx->use_private_key_file(o.tls_key_file, ssl::context::pem, ec); ec) {
    return Status::InvalidArgument(StrCat("http server: TLS key file '", o.tls_key_file,
                                          "' cannot be used: ", ec.message()));
  }
  return Status::Ok();
}

}  // namespace

struct HttpServer::Impl {
  explicit Impl(int threads) : ioc(threads), tls(ssl::context::tls_server) {}
  asio::io_context ioc;
  ssl::context tls;
  bool use_tls = false;
  std::shared_ptr<Listener> listener;
};

HttpServer::HttpServer(Api* api, HttpServerOptions options)
    : api_(api), options_(std::move(options)) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start(uint16_t port) {
  if (impl_) return Status::FailedPrecondition("http server: Start was already called");
  if (options_.threads < 1) {
    return Status::InvalidArgument(
        StrCat("http server: threads = ", options_.threads, " must be >= 1"));
  }
  beast::error_code ec;
  const auto address = asio::ip::make_address(options_.address, ec);
  if (ec) {
    return Status::InvalidArgument(StrCat("http server: address = '", options_.address,
                                          "' is not an IPv4 or IPv6 address: ", ec.message()));
  }
  auto impl = std::make_unique<Impl>(options_.threads);
  if (!options_.tls_cert_file.empty() || !options_.tls_key_file.empty()) {
    FP8RT_RETURN_IF_ERROR(LoadTls(options_, &impl->tls));
    impl->use_tls = true;
  }
  tcp::acceptor acceptor(impl->ioc);
  const tcp::endpoint endpoint(address, port);
  if (acceptor.open(endpoint.protocol(), ec); ec) {
    return Status::IOError(StrCat("http server: open: ", ec.message()));
  }
  if (acceptor.set_option(asio::socket_base::reuse_address(true), ec); ec) {
    return Status::IOError(StrCat("http server: set reuse_address: ", ec.message()));
  }
  if (acceptor.bind(endpoint, ec); ec) {
    return Status::IOError(
        StrCat("http server: bind ", options_.address, ":", port, ": ", ec.message()));
  }
  if (acceptor.listen(asio::socket_base::max_listen_connections, ec); ec) {
    return Status::IOError(StrCat("http server: listen: ", ec.message()));
  }
  const tcp::endpoint bound = acceptor.local_endpoint(ec);
  if (ec) return Status::IOError(StrCat("http server: local_endpoint: ", ec.message()));
  port_ = bound.port();
  impl->listener = std::make_shared<Listener>(impl->ioc, std::move(acceptor), api_, options_,
                                              impl->use_tls ? &impl->tls : nullptr);
  impl->listener->Run();
  impl_ = std::move(impl);
  for (int i = 0; i < options_.threads; ++i) {
    threads_.emplace_back([this] {
      try {
        impl_->ioc.run();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fp8rt scheduler http: I/O thread stopped: %s\n", e.what());
      }
    });
  }
  return Status::Ok();
}

void HttpServer::Stop() {
  if (!impl_) return;
  impl_->ioc.stop();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  // No thread runs the io_context any more: close the acceptor, then destroying the io_context
  // destroys the pending handlers and with them every session and its socket.
  impl_->listener->Close();
  impl_.reset();
  port_ = 0;
}

}  // namespace fp8rt::sched
