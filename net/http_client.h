// A small blocking HTTP/1.1 client (Boost.Beast): one request per connection, a deadline over
// connect + write + read, a limit on the answer's body. For the node daemon's heartbeats and
// fp8ctl; errors name the server and what failed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "net/http.h"

namespace fp8rt::net {

struct HttpClientOptions {
  // Connect, send and read the whole answer within this. Default: 10 s
  std::chrono::milliseconds timeout{10'000};
  // Larger answers are an error. Default: 64 MiB
  size_t max_body_bytes = size_t{64} << 20;
};

// Where a base URL points: "http://host:port" (a trailing "/" allowed; no path, no https yet).
struct HttpEndpoint {
  std::string host;
  uint16_t port = 0;
};
// InvalidArgument naming the URL when it is not of that form.
Result<HttpEndpoint> ParseHttpUrl(const std::string& url);

// Sends `request` (target, method, headers, body; Host, Content-Length and, with a body,
// Content-Type: application/json are added unless given) to the server at `base_url` and returns
// its answer, whatever the status. Errors: InvalidArgument (the URL), Unavailable (the server
// cannot be resolved or reached, closed the connection, or did not answer within the timeout;
// the message names it), ResourceExhausted (the answer's body is over the limit).
Result<HttpResponse> HttpCall(const std::string& base_url, const HttpRequest& request,
                              const HttpClientOptions& options = {});

}  // namespace fp8rt::net
