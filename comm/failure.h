// Failures are errors, never hangs. The FailureMonitor of a rank knows what the rank is waiting
// for (a collective, or the step that holds enqueued GPU collectives) and since when; a watchdog
// thread ends the process when that wait outlives the collective timeout, and the rendezvous
// (comm/rendezvous.h) ends it when a peer dies. Either way the message names this rank, the
// peer (when known) and the collective, the abort hooks run (ncclCommAbort, so kernels waiting
// on a dead peer let go), and the process exits with kExitPeerFailure.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/exit_codes.h"

namespace fp8rt::comm {

class FailureMonitor {
 public:
  struct Options {
    int rank = 0;
    // A collective (or a step's wait for its enqueued collectives) taking longer fails the job.
    // Default: 600 s
    std::chrono::milliseconds timeout{600'000};
    // How long abort hooks may take before the process exits anyway. Default: 10 s
    std::chrono::milliseconds abort_grace{10'000};
    int exit_code = kExitPeerFailure;
  };

  explicit FailureMonitor(Options options);
  ~FailureMonitor();  // stops the watchdog (the process did not fail)
  FailureMonitor(const FailureMonitor&) = delete;
  FailureMonitor& operator=(const FailureMonitor&) = delete;

  // Marks a wait: from construction to destruction the rank is in `what`. Nested scopes report
  // the innermost; the timeout counts from the outermost.
  class Scope {
   public:
    Scope(FailureMonitor* m, std::string what);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    FailureMonitor* m_;
    std::string prev_;
  };

  // The collective most recently started on this rank (for messages about GPU work that runs
  // after the call returned).
  void NoteEnqueued(const std::string& what);

  // Runs on failure, in order, before the exit (e.g. ncclCommAbort).
  void AddAbortHook(std::function<void()> hook);

  // A peer is gone (or a wait timed out): reports `reason` with what this rank was doing, runs
  // the abort hooks, exits. Never returns. Thread-safe; the first failure wins.
  [[noreturn]] void Fail(const std::string& reason);

  // The job is ending in order: the rendezvous stops treating a closed peer as a failure.
  void Disarm() { disarmed_ = true; }
  bool disarmed() const { return disarmed_; }

  int rank() const { return options_.rank; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  // What this rank is in now ("" if nothing), with the last enqueued collective.
  std::string Describe() const;

 private:
  void Watch();

  Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string current_;
  std::string last_enqueued_;
  int depth_ = 0;
  std::chrono::steady_clock::time_point since_;
  std::vector<std::function<void()>> hooks_;
  std::atomic<bool> failing_{false};
  std::atomic<bool> disarmed_{false};
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace fp8rt::comm
