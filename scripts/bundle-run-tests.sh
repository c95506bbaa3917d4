#!/usr/bin/env bash
# Runs the test suites shipped in a bundle (no CMake/CTest needed on the node).
# Usage: bin/run-tests [unit|gpu|all] [extra gtest args...]
set -uo pipefail
BIN=$(cd "$(dirname "$0")" && pwd)
which=${1:-all}
shift || true
rc=0
if [ "$which" = unit ] || [ "$which" = all ]; then
  echo "== unit suite"; "$BIN/fp8rt_unit_tests" "$@" || rc=1
fi
if [ "$which" = gpu ] || [ "$which" = all ]; then
  echo "== gpu suite"; "$BIN/fp8rt_gpu_tests" "$@" || rc=1
fi
exit $rc
