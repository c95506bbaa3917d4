// How a rank learns who it is and where its peers meet: from Open MPI's mpirun, from Slurm's
// srun, or from the FP8RT_* environment that the node daemon (or a person) sets. The contract
// is in comm/README.md; every variable is read here and nowhere else.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace fp8rt::comm {

enum class Launcher {
  kSingle,  // no launcher: a world of one
  kEnv,     // FP8RT_RANK / FP8RT_WORLD_SIZE / FP8RT_LOCAL_RANK / FP8RT_MASTER_ADDR / _PORT
  kMpirun,  // Open MPI's mpirun (OMPI_COMM_WORLD_*); the CPU collectives use MPI
  kSrun,    // a Slurm job step (SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID, ...)
};
const char* LauncherName(Launcher l);  // "single", "env", "mpirun", "srun"

struct LaunchInfo {
  Launcher launcher = Launcher::kSingle;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // index among this host's ranks: picks the GPU
  // Where rank 0 serves the rendezvous (comm/rendezvous.h). Under mpirun the address is found
  // through MPI instead and these may be empty / 0.
  std::string master_addr;
  int master_port = 0;
  // Every rank of one job presents the same string to the rendezvous, which refuses strays:
  // FP8RT_JOB_ID (env), "slurm-<job>.<step>" (srun), "" (mpirun, single).
  std::string job;
};

// Reads the launch from `env` (name=value strings; the process environment when empty). Precedence:
// FP8RT_RANK (explicit, the daemon's contract) > OMPI_COMM_WORLD_RANK (mpirun) >
// SLURM_STEP_NUM_TASKS (srun) > a world of one. Inconsistent values (a rank outside the world,
// a missing master address) are refused naming the variable.
Result<LaunchInfo> DetectLaunch(const std::vector<std::string>& env = {});

// Expands a Slurm host list ("node[01-03,7],gpu5") into names ("node01", "node02", "node03",
// "node7", "gpu5").
Result<std::vector<std::string>> ExpandSlurmHostList(const std::string& list);

// The rendezvous port of a Slurm step when FP8RT_MASTER_PORT is not set: 12000 + (job id * 16 +
// step id) % 20000, the same on every rank of the step. Below 32768, where Linux's ephemeral
// ports start (ip_local_port_range 32768-60999 by default), so that no outgoing connection on
// the node holds it (CI once found job 3353's port 33648, under the old base 20000, taken).
int SlurmDefaultPort(long job_id, long step_id);

}  // namespace fp8rt::comm
