// The ranks of one job, connected: the launch (comm/bootstrap.h), the rendezvous and its failure
// monitor, and the communicator over every rank for the model's buffers (NCCL on GPUs; MPI under
// mpirun, Gloo otherwise, on CPUs; nothing for a world of one).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/bootstrap.h"
#include "comm/communicator.h"
#include "comm/failure.h"
#include "comm/rendezvous.h"

namespace fp8rt::comm {

struct WorldOptions {
  bool gpu = false;  // the model's buffers are on the GPU (the current CUDA device): NCCL
  // Collective timeout (and how long ranks wait for each other at the start). Default: 600 s
  std::chrono::milliseconds timeout{600'000};
  // CPU backend: "auto" (MPI under mpirun, Gloo otherwise), "mpi" or "gloo". Default: auto
  std::string cpu_backend = "auto";
};

class World {
 public:
  static Result<std::unique_ptr<World>> Init(const LaunchInfo& launch, const WorldOptions& options);
  ~World();

  // Every rank, for the model's buffers (device_buffers() on GPUs).
  Communicator& comm() { return *comm_; }
  const LaunchInfo& launch() const { return launch_; }
  int rank() const { return launch_.rank; }
  int size() const { return launch_.world_size; }
  // Null for a world of one.
  FailureMonitor* monitor() { return monitor_.get(); }
  // Every rank's host and pid (a world of one: this process).
  std::vector<PeerInfo> peers() const;

  // Ends the job in order; every rank calls it last. After it, a peer leaving is not a failure.
  Status Finish();

 private:
  World() = default;
  LaunchInfo launch_;
  std::unique_ptr<FailureMonitor> monitor_;
  std::unique_ptr<Rendezvous> rendezvous_;
  std::unique_ptr<Communicator> comm_;
  bool mpi_ = false;
};

}  // namespace fp8rt::comm
