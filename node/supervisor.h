// The rank supervisor: runs a gang's local ranks as processes (each in its own process group,
// stdout and stderr to a per-rank log file), tells when they end, ends the whole gang when one
// rank fails, and stops them in order: SIGTERM (fp8train checkpoints and exits 3), then SIGKILL
// to the group of a rank still there after the grace period. Processes only: argv, environment,
// signals, exit codes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/input_paths.h"
#include "common/status.h"

namespace fp8rt::node {

struct RankProcess {
  int rank = 0;                   // the job-wide rank (for messages)
  std::vector<std::string> argv;  // argv[0]: the program's path
  std::vector<std::string> env;   // "NAME=value", added to (or replacing) the daemon's own
  std::string log_path;           // stdout and stderr, appended
};

// What became of one rank: still running, or its exit code (128 + signal when a signal ended it).
struct RankOutcome {
  int rank = 0;
  pid_t pid = 0;
  bool running = true;
  int code = 0;
};

// One node's share of a job: which fp8train, which config, where its files go, and where the
// gang's rank 0 serves the rendezvous (comm/README.md's FP8RT_* contract).
struct GangLaunch {
  std::string fp8train;        // the trainer's path
  std::string job_id;          // FP8RT_JOB_ID, and the logs' names
  std::string config_path;     // the training config (written by the daemon, with the
                               // precision the scheduler decided)
  std::string checkpoint_dir;  // the job's; --resume is passed when `resume`
  int attempt = -1;            // --attempt (the checkpoint fence); -1: not passed
  InputRules inputs;           // --data-root / --private-dir: where the config's inputs may lie
  bool resume = false;
  std::string log_dir;         // rank-<r>.log for each local rank
  std::string metrics_path;    // rank 0 writes it (the others are given it and write nothing)
  std::vector<int> gpus;       // this node's GPUs for the job, one rank each; empty: CPU ranks
  int cpu_ranks = 0;           // ranks on this node when `gpus` is empty
  int node_rank = 0;           // this node's index in the gang
  int nodes = 1;               // nodes in the gang, each with as many ranks as this one
  std::string master_addr;     // rank 0's host (the gang's first node)
  int master_port = 0;
};
// The processes of this node's ranks: rank = node_rank * per_node + k, FP8RT_RANK /
// FP8RT_WORLD_SIZE / FP8RT_LOCAL_RANK / FP8RT_MASTER_ADDR / FP8RT_MASTER_PORT / FP8RT_JOB_ID, on
// a GPU node CUDA_VISIBLE_DEVICES = that rank's GPU (so it sees one, as cuda:0) and --device
// auto, on a CPU node --device cpu.
std::vector<RankProcess> GangProcesses(const GangLaunch& g);

class Gang {
 public:
  // Starts every rank; if one cannot be started, the ones started are killed and the error
  // names the rank.
  static Result<std::unique_ptr<Gang>> Start(std::vector<RankProcess> ranks);
  ~Gang();  // kills what is still running (SIGKILL to each rank's group) and reaps it
  Gang(const Gang&) = delete;
  Gang& operator=(const Gang&) = delete;

  // Reaps ranks that ended. When one ended with a non-zero code while others run, the others are
  // stopped (SIGTERM, SIGKILL after `grace`): a gang lives or dies whole. Returns every rank's
  // outcome.
  std::vector<RankOutcome> Poll(std::chrono::milliseconds grace);
  // True once every rank has ended (after Poll).
  bool Done() const;
  // The rank whose failure ended the gang (-1: none): the first seen to end with a non-zero code,
  // or rather one that did not exit 4 (kExitPeerFailure: it lost a peer, a consequence).
  int first_failed_rank() const { return first_failed_; }
  // SIGTERM to every running rank, then SIGKILL to the process group of each rank still running
  // after `grace`; returns when all have ended.
  std::vector<RankOutcome> Stop(std::chrono::milliseconds grace);

  // The same without waiting, for a daemon that supervises many gangs from one loop: SIGTERM now;
  // Tick() sends SIGKILL to the groups still running once `grace` has passed.
  void Terminate(std::chrono::milliseconds grace);
  // SIGKILL to every running rank's process group now (a hung gang cannot act on SIGTERM).
  void Kill();
  // Reaps without blocking, enforces Terminate's deadline, and Terminate(grace)s the others when a
  // rank failed. Returns every rank's outcome.
  std::vector<RankOutcome> Tick(std::chrono::milliseconds grace);
  bool terminating() const { return kill_at_.has_value(); }
  const std::vector<RankOutcome>& ranks() const { return ranks_; }

 private:
  Gang() = default;
  void Reap(bool block_until_all, std::chrono::steady_clock::time_point deadline);
  std::vector<RankOutcome> ranks_;
  int first_failed_ = -1;
  int failed_code_ = 0;
  std::optional<std::chrono::steady_clock::time_point> kill_at_;
};

}  // namespace fp8rt::node
