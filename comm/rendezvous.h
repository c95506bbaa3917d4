// The rendezvous served by rank 0 over TCP: every rank connects to master_addr:master_port, says
// who it is, and gets the table of all ranks once everyone is in. The connections then carry a
// small key-value store (the NCCL unique id, Gloo's addresses) and stay open for the whole job as
// a liveness channel: when a rank's process dies its connection closes, rank 0 tells every other
// rank which one died, and each ends through its FailureMonitor naming it. A rank that loses rank
// 0 names rank 0. Finish() ends the job in order, so that closing connections is not a failure.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/failure.h"
#include "common/status.h"

namespace fp8rt::comm {

struct PeerInfo {
  int rank = 0;
  std::string host;  // gethostname() of the rank
  int pid = 0;
};

class Rendezvous {
 public:
  struct Options {
    std::string master_addr;  // where rank 0 listens (and every rank connects)
    int master_port = 0;      // 0 on rank 0: an ephemeral port (see port())
    int rank = 0;
    int world_size = 1;
    // Ranks wait this long for each other to arrive (and for keys to be set). Default: 300 s
    std::chrono::milliseconds timeout{300'000};
    // Every rank must present the same job string; a connection from another job is refused.
    std::string job;
    // Rank 0: called once it listens, with its port, before it waits for the others (under
    // mpirun this tells them where to connect). An error ends Start with it.
    std::function<Status(int port)> on_listening;
  };

  // Connects the world (rank 0 serves); returns once all world_size ranks are in. `monitor`
  // (may be null in tests) hears of dead peers.
  static Result<std::unique_ptr<Rendezvous>> Start(const Options& options,
                                                   FailureMonitor* monitor);
  ~Rendezvous();

  // A value every rank may read; set once per key.
  Status Set(const std::string& key, const std::string& value);
  // Waits (up to the timeout) until some rank has set `key`.
  Result<std::string> Get(const std::string& key);

  // Every rank must hold the same `value` of `what` (e.g. the collective backend): each sets its
  // own, rank 0 compares them all, the others compare theirs with rank 0's. InvalidArgument
  // naming the ranks, their hosts and values when they differ.
  Status Agree(const std::string& what, const std::string& value);

  const std::vector<PeerInfo>& peers() const;
  int port() const;  // rank 0: the port it serves on
  // This rank's address as the others reach it: the local end of its connection to rank 0
  // (rank 0: master_addr). Gloo listens there.
  std::string local_address() const;

  // Ends the job in order: waits (up to the timeout) until every rank has called Finish, then
  // closes. After it, a closed connection is not a failure.
  Status Finish();

  struct Impl;

 private:
  explicit Rendezvous(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8rt::comm
