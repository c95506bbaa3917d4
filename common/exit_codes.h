// Process exit codes, defined once for fp8train, fp8d and fp8ctl (each program's README lists
// the ones it uses).
#pragma once

namespace fp8rt {

inline constexpr int kExitOk = 0;           // done (fp8train: reached --steps / total_steps)
inline constexpr int kExitError = 1;        // a runtime failure; the message is on stderr
inline constexpr int kExitUsage = 2;        // a bad flag, config, spec or checkpoint: nothing ran
inline constexpr int kExitPreempted = 3;    // fp8train: stopped by SIGTERM/SIGUSR1 after a checkpoint
// fp8train: a peer rank died, or a collective did not complete within the collective timeout;
// the message names the rank and the collective.
inline constexpr int kExitPeerFailure = 4;
// fp8train: the loss turned NaN or infinite (the message names the step). Not worth a restart:
// the same data and state give the same loss, so fp8d fails the job instead of retrying it.
inline constexpr int kExitNonFinite = 5;
// fp8train: a checkpoint could not be written (a full disk, an I/O error) and
// train.on_checkpoint_error is stop; the message names the file, and the last committed
// checkpoint is intact. fp8d restarts the job from it, as after a failed rank.
inline constexpr int kExitCheckpointFailed = 6;

}  // namespace fp8rt
