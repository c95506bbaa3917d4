// An HTTP/1.1 server: Boost.Beast on Asio, one session per connection, a timeout before every
// read, the body limit enforced by the parser (413), URL and header limits (414, 431), HEAD
// answered without a body, a cap on open connections, accept() errors backed off and logged once
// per incident, every error through one Fail(), optionally TLS (Boost.Asio SSL over OpenSSL).
// Requests are answered by an HttpHandler (the scheduler's Api, ...); the server adds nothing but
// transport.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "net/http.h"

namespace fp8rt::net {

struct HttpServerOptions {
  std::string address = "127.0.0.1";                // Default: 127.0.0.1 (loopback only)
  std::chrono::milliseconds read_timeout{30'000};   // per read. Default: 30 s
  std::chrono::milliseconds write_timeout{30'000};  // per response. Default: 30 s
  int threads = 1;                                  // I/O threads, >= 1. Default: 1
  // Open connections at most; at the cap the server stops accepting (new connections wait in
  // the kernel's listen backlog) until one closes. 0: as many as RLIMIT_NOFILE leaves after 64
  // descriptors for the job store and the rest, at least 16 and at most 1024. Default: 0
  size_t max_connections = 0;
  size_t max_header_bytes =
      16 * 1024;  // request line + header fields, else 431/414. Default: 16 KiB
  size_t max_target_bytes = 8 * 1024;  // the URL, else 414. Default: 8 KiB
  size_t max_header_fields = 100;      // header fields, else 431. Default: 100
  // PEM certificate chain and private key: both set serves HTTPS only (TLS 1.2+). Default: ""
  std::string tls_cert_file;
  std::string tls_key_file;
};

class HttpServer {
 public:
  // `handler` must outlive the server; its max_body_bytes() is the parser's body limit.
  explicit HttpServer(HttpHandler* handler, HttpServerOptions options = {});
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds options.address:port (0: an ephemeral port; see port()), listens and starts the I/O
  // threads. FailedPrecondition while already started; InvalidArgument naming the file when the
  // TLS certificate or key cannot be loaded.
  Status Start(uint16_t port);
  // The bound port once Start succeeded; 0 before.
  uint16_t port() const { return port_; }
  // The connection cap in force (options.max_connections, or what 0 worked out to); 0 before
  // Start.
  size_t max_connections() const { return max_connections_; }
  // Stops accepting, drops open connections and joins the threads; port() is 0 again and Start
  // may be called anew. Idempotent.
  void Stop();

 private:
  struct Impl;
  HttpHandler* handler_;
  HttpServerOptions options_;
  std::unique_ptr<Impl> impl_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
  size_t max_connections_ = 0;
};

}  // namespace fp8rt::net
