#!/usr/bin/env bash
# README command (1): installs dependencies, builds, builds the English corpus and trains the
# quickstart model (configs/quickstart.yaml) with fp8train on the first GPU, or on the CPU
# (emulated FP8) where there is none. Metrics and checkpoints go to runs/quickstart/.
# Later roadmap steps route this through fp8d --standalone and fp8ctl.
# Environment: BUILD_DIR (default: build), DEVICE (default: auto), JOBS (default: nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
bash scripts/make-corpus.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target fp8train

mkdir -p runs/quickstart
"$BUILD_DIR/runtime/fp8train" --config configs/quickstart.yaml --device "${DEVICE:-auto}" \
  --checkpoint-dir runs/quickstart/ckpt --metrics runs/quickstart/metrics.jsonl
echo "quickstart: done. Metrics: runs/quickstart/metrics.jsonl; checkpoints: runs/quickstart/ckpt"
echo "  inspect the FP8 scale state: $BUILD_DIR/runtime/fp8train --inspect-scales runs/quickstart/ckpt"
