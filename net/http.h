// HTTP requests and responses as plain values, and the handler interface the server hands them to
// (scheduler::Api is one). Transport-free: net/http_server.h serves a handler over Boost.Beast,
// net/http_client.h sends requests.
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace fp8rt::net {

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string target;                          // "/v1/jobs/3?x=y"
  std::map<std::string, std::string> headers;  // names in lower case ("authorization")
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::map<std::string, std::string> headers;  // extra headers (Allow, Retry-After, ...)
};

// What answers a server's requests. Handle may be called from several threads.
class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // Never throws.
  virtual HttpResponse Handle(const HttpRequest& request) = 0;
  // Request bodies larger than this are refused by the server's parser before they are read.
  virtual size_t max_body_bytes() const = 0;
  // The answer to such a request (413).
  virtual HttpResponse BodyTooLarge() = 0;
  // An answer the transport gives on its own (414 URL too long, 431 headers too large).
  virtual HttpResponse TransportError(int status, const std::string& message) = 0;
};

}  // namespace fp8rt::net
