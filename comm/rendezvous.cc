// The TCP rendezvous: length-prefixed frames over one connection per rank to rank 0; rank 0 runs a
// poll() loop that serves the key-value store and watches every connection.
#include "comm/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace fp8rt::comm {
namespace {

using Clock = std::chrono::steady_clock;

enum Type : uint8_t { kHello = 1, kRefuse, kReady, kSet, kGet, kValue, kFail, kBye, kDone };

// ---- frames: [u32 length (big endian)][u8 type][payload]; payload fields are [u32 len][bytes] ----

void PutString(std::string* out, const std::string& s) {
  const uint32_t n = htonl(static_cast<uint32_t>(s.size()));
  out->append(reinterpret_cast<const char*>(&n), 4);
  out->append(s);
}

bool GetString(const std::string& in, size_t* at, std::string* s) {
  if (*at + 4 > in.size()) return false;
  uint32_t n = 0;
  std::memcpy(&n, in.data() + *at, 4);
  n = ntohl(n);
  if (*at + 4 + n > in.size()) return false;
  s->assign(in, *at + 4, n);
  *at += 4 + n;
  return true;
}

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool SendFrame(int fd, Type t, const std::vector<std::string>& fields) {
  std::string payload;
  for (const auto& f : fields) PutString(&payload, f);
  std::string frame(4, '\0');
  const uint32_t n = htonl(static_cast<uint32_t>(payload.size() + 1));
  std::memcpy(frame.data(), &n, 4);
  frame.push_back(static_cast<char>(t));
  frame += payload;
  return WriteAll(fd, frame.data(), frame.size());
}

constexpr uint32_t kMaxFrame = 64 << 20;

// Reads one frame; false on EOF, error or a malformed frame.
bool RecvFrame(int fd, Type* t, std::vector<std::string>* fields) {
  uint32_t n = 0;
  if (!ReadAll(fd, reinterpret_cast<char*>(&n), 4)) return false;
  n = ntohl(n);
  if (n < 1 || n > kMaxFrame) return false;
  std::string body(n, '\0');
  if (!ReadAll(fd, body.data(), n)) return false;
  *t = static_cast<Type>(static_cast<uint8_t>(body[0]));
  fields->clear();
  size_t at = 1;
  std::string s;
  while (at < body.size()) {
    if (!GetString(body, &at, &s)) return false;
    fields->push_back(std::move(s));
  }
  return true;
}

void SetRecvTimeout(int fd, std::chrono::milliseconds t) {
  struct timeval tv {};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

// A dead host (no FIN) is noticed by TCP keepalive in about 25 s.
void KeepAlive(int fd) {
  int on = 1, idle = 10, intvl = 5, cnt = 3;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

std::string HostName() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

int ToInt(const std::string& s) {
  try {
    return std::stoi(s);
  } catch (const std::exception&) {
    return -1;
  }
}

std::string Where(const PeerInfo& p) {
  return StrCat("rank ", p.rank, " (", p.host.empty() ? "?" : p.host, ", pid ", p.pid, ")");
}

}  // namespace

struct Rendezvous::Impl {
  Options o;
  FailureMonitor* monitor = nullptr;
  std::vector<PeerInfo> peers;
  int port = 0;

  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::string> kv;  // rank 0: the store; others: values received
  bool done = false;                      // the job ended in order
  std::string failed;                     // set when a peer failed (no monitor: tests)
  int wake[2] = {-1, -1};                 // rank 0: wakes the poll loop to stop
  std::thread thread;

  // rank 0
  int listen_fd = -1;
  struct Conn {
    int fd = -1;
    bool bye = false;
    bool open = true;
  };
  std::map<int, Conn> conns;                      // by rank
  std::map<std::string, std::set<int>> waiting;   // key -> ranks waiting for it
  std::mutex write_mu;
  bool self_bye = false;
  // other ranks
  int fd = -1;

  ~Impl() {
    if (thread.joinable()) {
      if (wake[1] >= 0) {
        char c = 0;
        ssize_t ignored = ::write(wake[1], &c, 1);
        (void)ignored;
      }
      if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
      thread.join();
    }
    for (auto& [r, c] : conns) {
      if (c.fd >= 0) ::close(c.fd);
    }
    if (listen_fd >= 0) ::close(listen_fd);
    if (fd >= 0) ::close(fd);
    for (int w : wake) {
      if (w >= 0) ::close(w);
    }
  }

  // A peer is gone: fail through the monitor, or (tests) remember it.
  void PeerLost(const std::string& why) {
    if (monitor != nullptr) {
      if (monitor->disarmed()) return;
      monitor->Fail(why);
    }
    std::lock_guard<std::mutex> lock(mu);
    if (failed.empty()) failed = why;
    cv.notify_all();
  }

  Status Serve();
  void ServeLoop();
  Status Join();
  void ReadLoop();
  void Answer(const std::string& key, const std::string& value);
};

// ---- rank 0 ----

Status Rendezvous::Impl::Serve() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port_s = std::to_string(o.master_port);
  // Listen on every address of the family master_addr resolves to.
  int family = AF_INET;
  if (!o.master_addr.empty() && ::getaddrinfo(o.master_addr.c_str(), nullptr, &hints, &res) == 0) {
    family = res->ai_family;
    ::freeaddrinfo(res);
  }
  listen_fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd < 0) return Status::IOError(StrCat("rendezvous: socket: ", std::strerror(errno)));
  int on = 1;
  ::setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_any;
    a->sin6_port = htons(static_cast<uint16_t>(o.master_port));
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    a->sin_port = htons(static_cast<uint16_t>(o.master_port));
    len = sizeof *a;
  }
  if (::bind(listen_fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    return Status::IOError(StrCat("rendezvous: rank 0 cannot listen on port ", o.master_port,
                                  " (FP8RT_MASTER_PORT): ", std::strerror(errno)));
  }
  if (::listen(listen_fd, 1024) != 0) {
    return Status::IOError(StrCat("rendezvous: listen: ", std::strerror(errno)));
  }
  len = sizeof ss;
  ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
  port = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                  : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  peers.assign(o.world_size, PeerInfo{});
  peers[0] = {0, HostName(), static_cast<int>(::getpid())};
  if (o.on_listening) FP8RT_RETURN_IF_ERROR(o.on_listening(port));

  const auto deadline = Clock::now() + o.timeout;
  while (static_cast<int>(conns.size()) < o.world_size - 1) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{listen_fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      std::string missing;
      for (int r = 1; r < o.world_size; ++r) {
        if (!conns.count(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      return Status::Unavailable(StrCat("rendezvous: after ", o.timeout.count() / 1000,
                                        " s, rank(s) ", missing, " of ", o.world_size,
                                        " never connected to rank 0 on port ", port));
    }
    const int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    KeepAlive(c);
    SetRecvTimeout(c, std::chrono::milliseconds(10'000));
    Type t;
    std::vector<std::string> f;
    auto refuse = [&](const std::string& why) {
      SendFrame(c, kRefuse, {why});
      ::close(c);
    };
    if (!RecvFrame(c, &t, &f) || t != kHello || f.size() != 5) {
      refuse("not a rendezvous hello");
      continue;
    }
    const int r = ToInt(f[1]), world = ToInt(f[2]);
    if (f[0] != o.job) {
      refuse(StrCat("job '", f[0], "' is not this rendezvous's job '", o.job, "'"));
      continue;
    }
    if (world != o.world_size) {
      refuse(StrCat("world size ", world, " differs from rank 0's ", o.world_size));
      continue;
    }
    if (r < 1 || r >= o.world_size || conns.count(r)) {
      refuse(StrCat("rank ", r, conns.count(r) ? " is already connected" : " is out of range"));
      continue;
    }
    SetRecvTimeout(c, std::chrono::milliseconds(0));
    conns[r].fd = c;
    peers[r] = {r, f[3], ToInt(f[4])};
  }
  std::vector<std::string> table;
  for (const PeerInfo& p : peers) {
    table.push_back(std::to_string(p.rank));
    table.push_back(p.host);
    table.push_back(std::to_string(p.pid));
  }
  for (auto& [r, c] : conns) {
    if (!SendFrame(c.fd, kReady, table)) {
      return Status::Unavailable(StrCat("rendezvous: ", Where(peers[r]), " left before the start"));
    }
  }
  if (::pipe2(wake, O_CLOEXEC) != 0) return Status::IOError("rendezvous: pipe");
  thread = std::thread([this] { ServeLoop(); });
  return Status::Ok();
}

// Sends `key`'s value to every rank waiting for it and wakes local waiters. Holds mu.
void Rendezvous::Impl::Answer(const std::string& key, const std::string& value) {
  auto it = waiting.find(key);
  if (it != waiting.end()) {
    std::lock_guard<std::mutex> w(write_mu);
    for (int r : it->second) SendFrame(conns[r].fd, kValue, {key, value});
    waiting.erase(it);
  }
  cv.notify_all();
}

void Rendezvous::Impl::ServeLoop() {
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<int> ranks;
    fds.push_back({wake[0], POLLIN, 0});
    ranks.push_back(-1);
    for (auto& [r, c] : conns) {
      if (!c.open) continue;
      fds.push_back({c.fd, POLLIN, 0});
      ranks.push_back(r);
    }
    if (fds.size() == 1) return;  // every rank said goodbye
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents != 0) return;  // stop
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const int r = ranks[i];
      Conn& c = conns[r];
      Type t;
      std::vector<std::string> f;
      if (!RecvFrame(c.fd, &t, &f)) {
        c.open = false;
        if (c.bye) continue;  // left after saying goodbye
        const std::string why = StrCat(Where(peers[r]), " exited or lost its connection");
        {
          std::lock_guard<std::mutex> w(write_mu);
          for (auto& [o_r, o_c] : conns) {
            if (o_r != r && o_c.open) SendFrame(o_c.fd, kFail, {std::to_string(r), why});
          }
        }
        PeerLost(why);
        continue;
      }
      std::unique_lock<std::mutex> lock(mu);
      if (t == kSet && f.size() == 2) {
        kv.emplace(f[0], f[1]);
        Answer(f[0], kv[f[0]]);
      } else if (t == kGet && f.size() == 1) {
        auto it = kv.find(f[0]);
        if (it != kv.end()) {
          std::lock_guard<std::mutex> w(write_mu);
          SendFrame(c.fd, kValue, {it->first, it->second});
        } else {
          waiting[f[0]].insert(r);
        }
      } else if (t == kBye) {
        c.bye = true;
      }
      bool all = self_bye;
      for (auto& [o_r, o_c] : conns) all = all && o_c.bye;
      if (all && !done) {
        done = true;
        std::lock_guard<std::mutex> w(write_mu);
        for (auto& [o_r, o_c] : conns) SendFrame(o_c.fd, kDone, {});
        cv.notify_all();
      }
    }
  }
}

// ---- other ranks ----

Status Rendezvous::Impl::Join() {
  const auto deadline = Clock::now() + o.timeout;
  std::string last_error = "no attempt";
  while (Clock::now() < deadline) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int g = ::getaddrinfo(o.master_addr.c_str(), std::to_string(o.master_port).c_str(),
                                &hints, &res);
    if (g != 0) {
      last_error = ::gai_strerror(g);
    } else {
      for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
        const int s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (s < 0) continue;
        if (::connect(s, a->ai_addr, a->ai_addrlen) == 0) {
          fd = s;
        } else {
          last_error = std::strerror(errno);
          ::close(s);
        }
      }
      ::freeaddrinfo(res);
    }
    if (fd >= 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0 may not be up yet
  }
  const std::string at = StrCat(o.master_addr, ":", o.master_port);
  if (fd < 0) {
    return Status::Unavailable(StrCat("rendezvous: rank ", o.rank, " could not reach rank 0 at ",
                                      at, " within ", o.timeout.count() / 1000,
                                      " s (FP8RT_MASTER_ADDR / FP8RT_MASTER_PORT): ", last_error));
  }
  KeepAlive(fd);
  if (!SendFrame(fd, kHello,
                 {o.job, std::to_string(o.rank), std::to_string(o.world_size), HostName(),
                  std::to_string(::getpid())})) {
    return Status::Unavailable(StrCat("rendezvous: rank 0 at ", at, " closed the connection"));
  }
  SetRecvTimeout(fd, o.timeout);
  Type t;
  std::vector<std::string> f;
  if (!RecvFrame(fd, &t, &f)) {
    return Status::Unavailable(StrCat("rendezvous: rank ", o.rank, " did not hear from rank 0 at ",
                                      at, " (the other ranks did not all arrive, or rank 0 left)"));
  }
  if (t == kRefuse) {
    return Status::InvalidArgument(StrCat("rendezvous: rank 0 at ", at, " refused rank ", o.rank,
                                          ": ", f.empty() ? "?" : f[0]));
  }
  if (t != kReady || f.size() != 3u * o.world_size) {
    return Status::Unavailable(StrCat("rendezvous: unexpected answer from ", at));
  }
  SetRecvTimeout(fd, std::chrono::milliseconds(0));
  for (int r = 0; r < o.world_size; ++r) {
    peers.push_back({ToInt(f[3 * r]), f[3 * r + 1], ToInt(f[3 * r + 2])});
  }
  thread = std::thread([this] { ReadLoop(); });
  return Status::Ok();
}

void Rendezvous::Impl::ReadLoop() {
  for (;;) {
    Type t;
    std::vector<std::string> f;
    if (!RecvFrame(fd, &t, &f)) {
      bool ended;
      {
        std::lock_guard<std::mutex> lock(mu);
        ended = done;
      }
      if (!ended) PeerLost(StrCat(Where(peers[0]), " (the rendezvous host) exited or lost its "
                                  "connection"));
      return;
    }
    if (t == kFail && f.size() == 2) {
      PeerLost(f[1]);
      continue;
    }
    std::lock_guard<std::mutex> lock(mu);
    if (t == kValue && f.size() == 2) kv.emplace(f[0], f[1]);
    if (t == kDone) {
      done = true;
      cv.notify_all();
      return;
    }
    cv.notify_all();
  }
}

// ---- the interface ----

Result<std::unique_ptr<Rendezvous>> Rendezvous::Start(const Options& options,
                                                      FailureMonitor* monitor) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return Status::InvalidArgument(StrCat("rendezvous: rank ", options.rank,
                                          " is outside a world of ", options.world_size));
  }
  auto impl = std::make_unique<Impl>();
  impl->o = options;
  impl->monitor = monitor;
  if (options.rank == 0) {
    FP8RT_RETURN_IF_ERROR(impl->Serve());
  } else {
    FP8RT_RETURN_IF_ERROR(impl->Join());
  }
  return std::unique_ptr<Rendezvous>(new Rendezvous(std::move(impl)));
}

Rendezvous::Rendezvous(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Rendezvous::~Rendezvous() = default;

const std::vector<PeerInfo>& Rendezvous::peers() const { return impl_->peers; }

std::string Rendezvous::local_address() const {
  if (impl_->o.rank == 0 || impl_->fd < 0) return impl_->o.master_addr;
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(impl_->fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return impl_->o.master_addr;
  }
  char buf[INET6_ADDRSTRLEN] = {};
  const void* a = ss.ss_family == AF_INET6
                      ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr)
                      : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr);
  ::inet_ntop(ss.ss_family, a, buf, sizeof buf);
  return buf;
}
int Rendezvous::port() const { return impl_->port; }

Status Rendezvous::Set(const std::string& key, const std::string& value) {
  Impl& m = *impl_;
  if (m.o.rank == 0) {
    std::lock_guard<std::mutex> lock(m.mu);
    m.kv.emplace(key, value);
    m.Answer(key, m.kv[key]);
    return Status::Ok();
  }
  std::lock_guard<std::mutex> lock(m.mu);
  if (!SendFrame(m.fd, kSet, {key, value})) {
    return Status::Unavailable(StrCat("rendezvous: cannot reach rank 0 to set '", key, "'"));
  }
  return Status::Ok();
}

Result<std::string> Rendezvous::Get(const std::string& key) {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.mu);
  if (m.o.rank != 0 && !m.kv.count(key) && !SendFrame(m.fd, kGet, {key})) {
    return Status::Unavailable(StrCat("rendezvous: cannot reach rank 0 to get '", key, "'"));
  }
  const bool got = m.cv.wait_for(lock, m.o.timeout,
                                 [&] { return m.kv.count(key) > 0 || !m.failed.empty(); });
  if (!m.failed.empty()) return Status::Unavailable(StrCat("rendezvous: ", m.failed));
  if (!got) {
    return Status::Unavailable(StrCat("rendezvous: '", key, "' was not set within ",
                                      m.o.timeout.count() / 1000, " s"));
  }
  return m.kv.at(key);
}

Status Rendezvous::Agree(const std::string& what, const std::string& value) {
  const int rank = impl_->o.rank, n = impl_->o.world_size;
  auto key = [&](int r) { return StrCat("agree/", what, "/", r); };
  auto host = [&](int r) {
    for (const PeerInfo& p : peers()) {
      if (p.rank == r) return p.host;
    }
    return std::string("?");
  };
  FP8RT_RETURN_IF_ERROR(Set(key(rank), value));
  std::string differ;
  for (int r = rank == 0 ? 1 : 0; r < (rank == 0 ? n : 1); ++r) {
    FP8RT_ASSIGN_OR_RETURN(const std::string theirs, Get(key(r)));
    if (theirs != value) {
      differ += StrCat(differ.empty() ? "" : ", ", "rank ", r, " (", host(r), ") ", theirs);
    }
  }
  if (differ.empty()) return Status::Ok();
  return Status::InvalidArgument(StrCat("every rank must use the same ", what, ": rank ", rank,
                                        " (", host(rank), ") uses ", value, ", ", differ));
}

Status Rendezvous::Finish() {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.mu);
  if (m.o.world_size == 1) return Status::Ok();
  if (m.o.rank == 0) {
    m.self_bye = true;
    bool all = true;
    for (auto& [r, c] : m.conns) all = all && c.bye;
    if (all && !m.done) {
      m.done = true;
      std::lock_guard<std::mutex> w(m.write_mu);
      for (auto& [r, c] : m.conns) SendFrame(c.fd, kDone, {});
    }
  } else if (!SendFrame(m.fd, kBye, {})) {
    return Status::Unavailable("rendezvous: rank 0 is gone before the end");
  }
  const bool ok = m.cv.wait_for(lock, m.o.timeout, [&] { return m.done || !m.failed.empty(); });
  if (m.monitor != nullptr) m.monitor->Disarm();
  if (!m.failed.empty()) return Status::Unavailable(StrCat("rendezvous: ", m.failed));
  if (!ok) return Status::Unavailable("rendezvous: not every rank reached the end");
  return Status::Ok();
}

}  // namespace fp8rt::comm
