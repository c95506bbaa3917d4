// A build without CUDA has no NCCL: GPU ranks cannot be created (QueryDevice refuses them first).
#include "comm/backends.h"

namespace fp8rt::comm {

Result<std::unique_ptr<Communicator>> NewNcclCommunicator(int, int, const std::string& name,
                                                          ShareBytes, FailureMonitor*) {
  return Status::Unavailable(StrCat("nccl: this build has no CUDA, so no NCCL (group ", name, ")"));
}

}  // namespace fp8rt::comm
