#!/usr/bin/env bash
# README command (2): installs dependencies, builds everything (every CUDA file too, when a
# CUDA toolkit is present) and runs the unit tests, then the GPU tests (which skip, each with a
# message, on a machine without a GPU), then the data end-to-end test and the deployment tests
# (Ansible, Slurm, a cluster in network namespaces; each skips with a message without its tools
# or root).
# Environment: BUILD_DIR (default: build), FP8RT_CUDA_ARCHITECTURES (default: 80;89;90a),
# JOBS (default: nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake_args=(-S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP8RT_WERROR=ON)
if [ -n "${FP8RT_CUDA_ARCHITECTURES:-}" ]; then
  cmake_args+=("-DFP8RT_CUDA_ARCHITECTURES=${FP8RT_CUDA_ARCHITECTURES}")
fi
cmake "${cmake_args[@]}"
cmake --build "$BUILD_DIR" -j "$JOBS"

cd "$BUILD_DIR"
ctest -L gpu --output-on-failure -j "$JOBS" --timeout 600
ctest -L unit --output-on-failure -j "$JOBS" --timeout 900
# Bring your own data end to end (fp8data, then fp8train on its shards); deployment: Ansible lint,
# a real Slurm, a namespaced cluster (one at a time: they start daemons or use every core).
ctest -L 'data|ansible|slurm|cluster' --output-on-failure -j 1 --timeout 1200
