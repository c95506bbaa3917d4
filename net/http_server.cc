// Boost.Beast server: Listener accepts (up to the connection cap, backing off on errors), each
// Session (plain TCP or TLS) reads a request (parser with body and header limits, timeout before
// the read), hands it to the handler and writes the answer; do_/on_ pairs.
#include "net/http_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/version.hpp>
#include <cctype>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <type_traits>

namespace fp8rt::net {
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
  std::fprintf(stderr, "fp8rt http: %s: %s\n", what, ec.message().c_str());
}

// Logs the first of a run of like events and stays quiet while they keep coming, so that an
// incident (descriptors exhausted, the connection cap reached) is one line however many times
// it recurs. A run ends after `quiet` without one.
class IncidentLog {
 public:
  explicit IncidentLog(std::chrono::seconds quiet) : quiet_(quiet) {}
  // True if this event starts a new incident (and should be logged).
  bool Starts() {
    const auto now = std::chrono::steady_clock::now();
    const bool starts = !seen_ || now - last_ > quiet_;
    seen_ = true;
    last_ = now;
    return starts;
  }

 private:
  std::chrono::seconds quiet_;
  bool seen_ = false;
  std::chrono::steady_clock::time_point last_;
};

class Listener;

// Stream: beast::tcp_stream (plain HTTP) or TlsStream (HTTPS: a handshake first, a TLS shutdown
// last).
template <class Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

 public:
  // `listener` is told when the session ends (it counts open connections).
  Session(tcp::socket&& socket, HttpHandler* handler, const HttpServerOptions& options,
          std::shared_ptr<Listener> listener) requires(!kTls)
      : stream_(std::move(socket)), handler_(handler), options_(options), listener_(std::move(listener)) {}
  Session(tcp::socket&& socket, ssl::context& ctx, HttpHandler* handler, const HttpServerOptions& options,
          std::shared_ptr<Listener> listener) requires(kTls)
      : stream_(std::move(socket), ctx),
        handler_(handler),
        options_(options),
        listener_(std::move(listener)) {}
  ~Session();

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
    parser_->body_limit(handler_->max_body_bytes());
    parser_->header_limit(static_cast<std::uint32_t>(options_.max_header_bytes));
    beast::get_lowest_layer(stream_).expires_after(options_.read_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::OnRead, this->shared_from_this()));
  }

  void OnRead(beast::error_code ec, std::size_t) {
    if (ec == http::error::body_limit) {
      // Answer 413 and close: the rest of the body is never read.
      return Refuse(handler_->BodyTooLarge(), parser_->get().version());
    }
    if (ec == http::error::header_limit) return Refuse(HeaderTooLarge(), 11);
    if (ec) return Fail(ec, "read");
    const http::request<http::string_body>& req = parser_->get();
    if (req.target().size() > options_.max_target_bytes) {
      return Refuse(UrlTooLong(req.target().size()), req.version());
    }
    size_t fields = 0;
    for (auto it = req.begin(); it != req.end(); ++it) ++fields;
    if (fields > options_.max_header_fields) {
      return Refuse(
          handler_->TransportError(431, StrCat("request has ", fields, " header fields; at most ",
                                           options_.max_header_fields, " are allowed")),
          req.version());
    }
    head_ = req.method() == http::verb::head;
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
    const HttpResponse resp = handler_->Handle(r);
    Send(resp.status, resp.content_type, resp.body, req.keep_alive(), req.version(), resp.headers);
  }

  // The header (request line included) outgrew max_header_bytes: 414 if the request line alone
  // did (the parser never got a whole one), else 431.
  HttpResponse HeaderTooLarge() {
    if (parser_->get().target().empty()) return UrlTooLong(buffer_.size());
    return handler_->TransportError(431, StrCat("request header fields are larger than ",
                                            options_.max_header_bytes, " bytes in all"));
  }
  HttpResponse UrlTooLong(size_t at_least) {
    return handler_->TransportError(
        414, StrCat("request URL is longer than ", options_.max_target_bytes, " bytes (", at_least,
                    " or more)"));
  }
  // Answers an error and closes the connection (lingering to drain what the client still sends,
  // so that it reads the answer instead of a reset).
  void Refuse(const HttpResponse& resp, unsigned version) {
    head_ = false;
    Send(resp.status, resp.content_type, resp.body, /*keep_alive=*/false, version, resp.headers);
  }

  void Send(int status, const std::string& content_type, std::string body, bool keep_alive,
            unsigned version, const std::map<std::string, std::string>& headers = {}) {
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(status), version == 0 ? 11 : version);
    res->set(http::field::server, "fp8rt");
    res->set(http::field::content_type, content_type);
    for (const auto& [name, value] : headers) res->set(name, value);
    res->keep_alive(keep_alive);
    if (head_) {
      // HEAD: the length the GET body would have, and no body, so the connection stays in step.
      res->content_length(body.size());
    } else {
      res->body() = std::move(body);
      res->prepare_payload();
    }
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
        DoLinger();
      }
      return;
    }
    DoRead();
  }

  // Reads and drops what the client still sends (up to 1 MiB, for up to 2 s) until it closes:
  // closing with unread data would reset the connection, and the client could lose the answer.
  void DoLinger() {
    if constexpr (!kTls) {
      if (lingered_ >= (1 << 20)) return;
      if (!linger_buf_) linger_buf_ = std::make_unique<std::array<char, 16384>>();
      stream_.expires_after(std::chrono::seconds(2));
      stream_.async_read_some(asio::buffer(*linger_buf_), [self = this->shared_from_this()](
                                                              beast::error_code ec, std::size_t n) {
        if (ec) return;
        self->lingered_ += n;
        self->DoLinger();
      });
    }
  }

  Stream stream_;
  beast::flat_buffer buffer_;
  HttpHandler* handler_;
  const HttpServerOptions& options_;
  std::shared_ptr<Listener> listener_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<void> response_;
  bool head_ = false;  // the request being answered is a HEAD
  std::unique_ptr<std::array<char, 16384>> linger_buf_;
  size_t lingered_ = 0;
};

// Accepts connections while fewer than `cap` are open. At the cap it stops accepting (the kernel
// queues new connections in the listen backlog) until a session ends; a failing accept() (out of
// descriptors, say) is retried after a backoff of 10 ms doubling to 1 s, never at once. Each
// incident is logged once.
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  // `tls`: serve HTTPS with this context (it must outlive the listener); nullptr: plain HTTP.
  Listener(asio::io_context& ioc, tcp::acceptor&& acceptor, HttpHandler* handler,
           const HttpServerOptions& options, ssl::context* tls, size_t cap)
      : ioc_(ioc),
        acceptor_(std::move(acceptor)),
        timer_(ioc),
        handler_(handler),
        options_(options),
        tls_(tls),
        cap_(cap) {}

  void Run() { MaybeAccept(); }
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    beast::error_code ignored;
    acceptor_.close(ignored);
    timer_.cancel();
  }
  // A session ended: accept again if the cap had stopped it.
  void SessionEnded() {
    std::lock_guard<std::mutex> lock(mu_);
    --open_;
    if (!closed_) asio::post(ioc_, [self = shared_from_this()] { self->MaybeAccept(); });
  }

 private:
  void MaybeAccept() {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || accepting_ || backing_off_) return;
    if (open_ >= cap_) {
      if (cap_log_.Starts()) {
        std::fprintf(stderr,
                     "fp8rt http: connection limit %zu reached; new connections wait in "
                     "the listen backlog until one closes (--max-connections)\n",
                     cap_);
      }
      return;
    }
    accepting_ = true;
    acceptor_.async_accept(asio::make_strand(ioc_),
                           beast::bind_front_handler(&Listener::OnAccept, shared_from_this()));
  }

  void OnAccept(beast::error_code ec, tcp::socket socket) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      accepting_ = false;
      if (closed_ || ec == asio::error::operation_aborted) return;
      if (ec) {
        ++failures_;
        if (failures_ == 1) {
          failing_since_ = std::chrono::steady_clock::now();
          logged_failure_ = accept_log_.Starts();
          if (logged_failure_) {
            std::fprintf(stderr,
                         "fp8rt http: accept failed: %s (%zu connections open); "
                         "retrying after a backoff of 10 ms doubling to 1 s\n",
                         ec.message().c_str(), open_);
          }
        }
        backoff_ = std::min(backoff_ * 2, std::chrono::milliseconds(1000));
        backing_off_ = true;
        timer_.expires_after(backoff_);
        timer_.async_wait([self = shared_from_this()](beast::error_code) {
          {
            std::lock_guard<std::mutex> lock(self->mu_);
            self->backing_off_ = false;
          }
          self->MaybeAccept();
        });
        return;
      }
      if (failures_ > 0 && logged_failure_) {
        const auto s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - failing_since_)
                .count();
        std::fprintf(stderr,
                     "fp8rt http: accept works again after %lld failed attempts in "
                     "%.1f s\n",
                     static_cast<long long>(failures_), s);
      }
      failures_ = 0;
      backoff_ = std::chrono::milliseconds(5);
      ++open_;
    }
    if (tls_ != nullptr) {
      std::make_shared<Session<TlsStream>>(std::move(socket), *tls_, handler_, options_,
                                           shared_from_this())
          ->Run();
    } else {
      std::make_shared<Session<beast::tcp_stream>>(std::move(socket), handler_, options_,
                                                   shared_from_this())
          ->Run();
    }
    MaybeAccept();
  }

  asio::io_context& ioc_;
  tcp::acceptor acceptor_;
  asio::steady_timer timer_;
  HttpHandler* handler_;
  const HttpServerOptions& options_;
  ssl::context* tls_;
  const size_t cap_;

  std::mutex mu_;
  bool closed_ = false;
  bool accepting_ = false;    // an async_accept is outstanding
  bool backing_off_ = false;  // waiting out a backoff after a failed accept
  size_t open_ = 0;           // sessions alive
  int64_t failures_ = 0;      // consecutive failed accepts
  bool logged_failure_ = false;
  std::chrono::steady_clock::time_point failing_since_;
  std::chrono::milliseconds backoff_{5};
  IncidentLog accept_log_{std::chrono::seconds(10)};
  IncidentLog cap_log_{std::chrono::seconds(10)};
};

template <class Stream>
Session<Stream>::~Session() {
  listener_->SessionEnded();
}

// The connection cap for options.max_connections (0: from RLIMIT_NOFILE).
size_t ConnectionCap(const HttpServerOptions& o) {
  struct rlimit lim {};
  const bool have = ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY;
  const size_t fds = have ? static_cast<size_t>(lim.rlim_cur) : 65536;
  if (o.max_connections > 0) {
    if (o.max_connections + 64 > fds) {
      std::fprintf(stderr,
                   "fp8rt http: max_connections %zu is above what the open-files limit "
                   "(%zu) leaves after 64 for the rest; accept() may run out of descriptors "
                   "(it backs off)\n",
                   o.max_connections, fds);
    }
    return o.max_connections;
  }
  return std::clamp<size_t>(fds > 64 ? fds - 64 : 0, 16, 1024);
}

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
    return Status::InvalidArgument(
        StrCat("http server: TLS key file '", o.tls_key_file, "' cannot be used: ", ec.message()));
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

HttpServer::HttpServer(HttpHandler* handler, HttpServerOptions options)
    : handler_(handler), options_(std::move(options)) {}

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
  max_connections_ = ConnectionCap(options_);
  impl->listener =
      std::make_shared<Listener>(impl->ioc, std::move(acceptor), handler_, options_,
                                 impl->use_tls ? &impl->tls : nullptr, max_connections_);
  impl->listener->Run();
  impl_ = std::move(impl);
  for (int i = 0; i < options_.threads; ++i) {
    threads_.emplace_back([this] {
      try {
        impl_->ioc.run();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fp8rt http: I/O thread stopped: %s\n", e.what());
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
  max_connections_ = 0;
}

}  // namespace fp8rt::net
