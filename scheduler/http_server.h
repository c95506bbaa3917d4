// The scheduler's HTTP/1.1 server: Boost.Beast on Asio, one session per connection, a timeout
// before every read, the body limit enforced by the parser (413), every error through one Fail(),
// optionally TLS (Boost.Asio SSL over OpenSSL). Requests are answered by Api::Handle; the server
// adds nothing but transport.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "scheduler/api.h"

namespace fp8rt::sched {

struct HttpServerOptions {
  std::string address = "127.0.0.1";                // Default: 127.0.0.1 (loopback only)
  std::chrono::milliseconds read_timeout{30'000};   // per read. Default: 30 s
  std::chrono::milliseconds write_timeout{30'000};  // per response. Default: 30 s
  int threads = 1;                                  // I/O threads, >= 1. Default: 1
  // PEM certificate chain and private key: both set serves HTTPS only (TLS 1.2+). Default: ""
  std::string tls_cert_file;
  std::string tls_key_file;
};

class HttpServer {
 public:
  // `api` must outlive the server; its options().max_body_bytes is the parser's body limit.
  explicit HttpServer(Api* api, HttpServerOptions options = {});
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds options.address:port (0: an ephemeral port; see port()), listens and starts the I/O
  // threads. FailedPrecondition while already started; InvalidArgument naming the file when the
  // TLS certificate or key cannot be loaded.
  Status Start(uint16_t port);
  // The bound port once Start succeeded; 0 before.
  uint16_t port() const { return port_; }
  // Stops accepting, drops open connections and joins the threads; port() is 0 again and Start
  // may be called anew. Idempotent.
  void Stop();

 private:
  struct Impl;
  Api* api_;
  HttpServerOptions options_;
  std::unique_ptr<Impl> impl_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
};

}  // namespace fp8rt::sched
