// Connecting the ranks of a job: launch -> failure monitor -> rendezvous -> communicator.
#include "comm/world.h"

#include <unistd.h>

#include <csignal>

#include "comm/backends.h"

namespace fp8rt::comm {
namespace {

std::string HostName() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace

World::~World() {
  comm_.reset();
  rendezvous_.reset();
  if (mpi_) MpiFinalize();
}

std::vector<PeerInfo> World::peers() const {
  if (rendezvous_) return rendezvous_->peers();
  return {PeerInfo{0, HostName(), static_cast<int>(::getpid())}};
}

Result<std::unique_ptr<World>> World::Init(const LaunchInfo& launch, const WorldOptions& o) {
  std::unique_ptr<World> w(new World());
  w->launch_ = launch;
  if (launch.launcher == Launcher::kSingle) {
    w->comm_ = NewSelfCommunicator(o.gpu);
    return w;
  }
  if (o.cpu_backend != "auto" && o.cpu_backend != "mpi" && o.cpu_backend != "gloo") {
    return Status::InvalidArgument(
        StrCat("cpu backend '", o.cpu_backend, "' is not one of: auto, mpi, gloo"));
  }
  // A peer that dies while this rank writes to its socket must be an error (EPIPE) that the
  // failure monitor reports with the peer's name, not a SIGPIPE that kills this rank silently.
  std::signal(SIGPIPE, SIG_IGN);
  FailureMonitor::Options mo;
  mo.rank = launch.rank;
  mo.timeout = o.timeout;
  w->monitor_ = std::make_unique<FailureMonitor>(mo);

  Rendezvous::Options ro;
  ro.rank = launch.rank;
  ro.world_size = launch.world_size;
  ro.timeout = o.timeout;
  ro.job = launch.job;
  ro.master_addr = launch.master_addr;
  ro.master_port = launch.master_port;
  const bool mpirun = launch.launcher == Launcher::kMpirun;
  if (mpirun) {
    // mpirun gives no address: rank 0 serves where it runs and tells the others through MPI.
    FP8RT_RETURN_IF_ERROR(MpiInit());
    w->mpi_ = true;
    if (ro.master_addr.empty()) ro.master_addr = HostName();
    if (launch.rank == 0) {
      ro.on_listening = [addr = ro.master_addr](int port) {
        std::string where = StrCat(addr, " ", port);
        return MpiBroadcastBytes(&where);
      };
    } else {
      std::string where;
      FP8RT_RETURN_IF_ERROR(MpiBroadcastBytes(&where));
      const size_t space = where.rfind(' ');
      ro.master_addr = where.substr(0, space);
      ro.master_port = std::stoi(where.substr(space + 1));
    }
  }
  FP8RT_ASSIGN_OR_RETURN(w->rendezvous_, Rendezvous::Start(ro, w->monitor_.get()));
  // A rank on the CPU among GPU ranks (or the reverse) would wait in collectives the others never
  // join: refuse it here, naming it.
  FP8RT_RETURN_IF_ERROR(
      w->rendezvous_->Agree("collective backend", o.gpu ? "GPU buffers (NCCL)" : "CPU buffers"));

  if (o.gpu) {
    Rendezvous* r = w->rendezvous_.get();
    ShareBytes share = [r, mpirun, rank = launch.rank](const std::string& key,
                                                       std::string* bytes) -> Status {
      if (mpirun) return MpiBroadcastBytes(bytes);  // the NCCL id over MPI under mpirun
      if (rank == 0) return r->Set(key, *bytes);
      FP8RT_ASSIGN_OR_RETURN(*bytes, r->Get(key));
      return Status::Ok();
    };
    FP8RT_ASSIGN_OR_RETURN(w->comm_, NewNcclCommunicator(launch.rank, launch.world_size, "world",
                                                         share, w->monitor_.get()));
    return w;
  }
  const bool use_mpi = o.cpu_backend == "mpi" || (o.cpu_backend == "auto" && mpirun);
  if (use_mpi) {
    if (!mpirun) {
      return Status::InvalidArgument(
          "the mpi cpu backend needs ranks started by mpirun; use gloo (or auto)");
    }
    FP8RT_ASSIGN_OR_RETURN(w->comm_, NewMpiCommunicator(w->monitor_.get()));
  } else {
    FP8RT_ASSIGN_OR_RETURN(
        w->comm_, NewGlooCommunicator(w->rendezvous_.get(), w->rendezvous_->local_address(),
                                      "gloo/world", launch.rank, launch.world_size, o.timeout,
                                      w->monitor_.get()));
  }
  return w;
}

Status World::Finish() {
  if (!rendezvous_) return Status::Ok();
  return rendezvous_->Finish();
}

}  // namespace fp8rt::comm
