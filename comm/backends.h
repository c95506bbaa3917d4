// The backends behind Communicator, for comm/world.cc and the tests; the trainer only sees
// Communicator and World.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/failure.h"
#include "comm/rendezvous.h"

namespace fp8rt::comm {

// Open MPI over MPI_COMM_WORLD (the caller has called MPI_Init). Errors return (MPI_ERRORS_RETURN)
// and end the rank through `monitor`, naming the collective.
Result<std::unique_ptr<Communicator>> NewMpiCommunicator(FailureMonitor* monitor);
// MPI_Init_thread (once per process) / MPI_Finalize.
Status MpiInit();
void MpiFinalize();
// Broadcasts `bytes` from rank 0 of MPI_COMM_WORLD (the rendezvous address, the NCCL id).
Status MpiBroadcastBytes(std::string* bytes);

// Gloo over TCP: `address` is this rank's address the others can reach; keys under `prefix` in
// the rendezvous's store. Ops time out after `timeout`.
Result<std::unique_ptr<Communicator>> NewGlooCommunicator(Rendezvous* rendezvous,
                                                          const std::string& address,
                                                          const std::string& prefix, int rank,
                                                          int size,
                                                          std::chrono::milliseconds timeout,
                                                          FailureMonitor* monitor);

// Hands the NCCL unique id from the group's rank 0 (which fills `id`) to the others (which
// receive it in `id`), through the rendezvous or MPI.
using ShareBytes = std::function<Status(const std::string& key, std::string* id)>;

// NCCL on the current CUDA device, a non-blocking communicator (so that a failing peer leads to
// ncclCommAbort, not a hang); `monitor` gets the abort hook.
Result<std::unique_ptr<Communicator>> NewNcclCommunicator(int rank, int size,
                                                          const std::string& name,
                                                          ShareBytes share,
                                                          FailureMonitor* monitor);
}  // namespace fp8rt::comm
