#!/usr/bin/env bash
# README command (1): installs dependencies, builds, builds the English corpus, starts the product
# on this machine (fp8d --standalone: the scheduler and a node daemon in one process) and trains
# the quickstart model (configs/quickstart.yaml) through it with `fp8ctl submit --wait`, on the
# first GPU in FP8 (NVML finds it), or on a CPU slot with emulated FP8 where there is none.
# The daemon's state, the job's logs, metrics and checkpoints go to runs/fp8d/; the daemon is
# stopped at the end (SIGTERM) unless KEEP_DAEMON=1. It ends by printing a sample of the model's
# text (fp8train --generate).
# Environment: BUILD_DIR (default: build), JOBS (default: nproc), KEEP_DAEMON (default: 0).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
bash scripts/make-corpus.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target fp8train fp8d fp8ctl

# fp8ctl finds a local standalone daemon's URL and token in its data dir.
export FP8D_DATA_DIR=$PWD/runs/fp8d
mkdir -p -m 700 "$FP8D_DATA_DIR"  # fp8d keeps its state private (it would tighten it itself)
rm -f "$FP8D_DATA_DIR/server"
"$BUILD_DIR/cli/fp8d" --standalone --port 0 --data-dir "$FP8D_DATA_DIR" \
  --fp8train "$BUILD_DIR/runtime/fp8train" >>"$FP8D_DATA_DIR/fp8d.log" 2>&1 &
FP8D_PID=$!
if [ "${KEEP_DAEMON:-0}" != 1 ]; then
  trap 'kill -TERM $FP8D_PID 2>/dev/null; wait $FP8D_PID 2>/dev/null || true' EXIT
fi
for _ in $(seq 1 300); do
  [ -s "$FP8D_DATA_DIR/server" ] && break
  kill -0 $FP8D_PID 2>/dev/null || { cat "$FP8D_DATA_DIR/fp8d.log"; exit 1; }
  sleep 0.1
done
echo "quickstart: fp8d --standalone at $(cat "$FP8D_DATA_DIR/server") (log: $FP8D_DATA_DIR/fp8d.log)"
"$BUILD_DIR/cli/fp8ctl" nodes
JOB=$("$BUILD_DIR/cli/fp8ctl" submit configs/quickstart.yaml --wait --poll-ms 500 | tail -1)
"$BUILD_DIR/cli/fp8ctl" status "$JOB"
echo "quickstart: done. Job $JOB: logs and metrics in $FP8D_DATA_DIR/node/jobs/$JOB/," \
     "checkpoints in $FP8D_DATA_DIR/checkpoints/$JOB"
echo "  inspect the FP8 scale state: $BUILD_DIR/runtime/fp8train --inspect-scales $FP8D_DATA_DIR/checkpoints/$JOB"
echo "  export it for transformers:  $BUILD_DIR/runtime/fp8train --export-hf $FP8D_DATA_DIR/checkpoints/$JOB runs/quickstart-hf"
# What the model learned: a sample continuing "The " (the checkpoint's weights on the CPU).
echo "quickstart: a sample from the trained model:"
"$BUILD_DIR/runtime/fp8train" --generate "$FP8D_DATA_DIR/checkpoints/$JOB" --prompt "The " \
  --max-new-tokens 200 --temperature 0.8 --top-k 40
