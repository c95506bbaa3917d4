#!/usr/bin/env bash
# Builds a relocatable bundle: bin/ (fp8rt binaries, test suites, benchmarks) and lib/ (every
# non-system, non-CUDA shared library they need), RPATH $ORIGIN/../lib. The CUDA runtime is
# linked statically; cuBLASLt, NCCL and cuDNN are taken from the node (/usr/local/cuda/lib64,
# the system library path). This is how GPU runs happen and how ansible ships the runtime.
# Usage: scripts/bundle.sh [OUT_DIR]   (default: bundle)
# Environment: FP8RT_CUDA_ARCHITECTURES (default here: 90a, keeps the bundle small),
#              BUILD_DIR (default: build-bundle), JOBS (default: nproc),
#              TARGETS (default: all; e.g. "fp8train fp8rt_gpu_tests" for a partial bundle).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${1:-bundle}
BUILD_DIR=${BUILD_DIR:-build-bundle}
ARCHS=${FP8RT_CUDA_ARCHITECTURES:-90a}
JOBS=${JOBS:-$(nproc)}

bash scripts/install-deps.sh >/dev/null
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "-DFP8RT_CUDA_ARCHITECTURES=${ARCHS}" >/dev/null
if [ -n "${TARGETS:-}" ]; then
  # shellcheck disable=SC2086
  cmake --build "$BUILD_DIR" -j "$JOBS" --target ${TARGETS}
else
  cmake --build "$BUILD_DIR" -j "$JOBS"
fi

rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib"
# Executables: everything the build produced that is an ELF executable (not a CMake helper).
find "$BUILD_DIR" -maxdepth 3 -type f -perm -u+x -not -path '*/CMakeFiles/*' | while read -r f; do
  if file -b "$f" | grep -q 'ELF 64-bit.*executable\|ELF 64-bit.*pie executable'; then
    cp "$f" "$OUT/bin/"
  fi
done
cp scripts/bundle-run-tests.sh "$OUT/bin/run-tests"

# Libraries the node provides itself (system C/C++ runtime, the GPU driver and CUDA libraries).
is_node_lib() {
  case "$1" in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libutil.so*) return 0 ;;
    libstdc++.so*|libgcc_s.so*) return 0 ;;
    libcuda.so*|libcublas*|libcudart*|libnccl*|libcudnn*|libnvidia*|libnvrtc*|libnvJitLink*) return 0 ;;
  esac
  return 1
}

# Copy the closure of shared-library dependencies.
for f in "$OUT"/bin/*; do
  file -b "$f" | grep -q ELF || continue
  ldd "$f" | awk '/=> \//{print $1" "$3}' | while read -r name path; do
    is_node_lib "$name" && continue
    [ -e "$OUT/lib/$name" ] || cp -L "$path" "$OUT/lib/$name"
  done
done
for f in "$OUT"/lib/*; do
  ldd "$f" | awk '/=> \//{print $1" "$3}' | while read -r name path; do
    is_node_lib "$name" && continue
    [ -e "$OUT/lib/$name" ] || cp -L "$path" "$OUT/lib/$name"
  done
done

CUDA_RPATH='/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib'
for f in "$OUT"/bin/*; do
  file -b "$f" | grep -q ELF || continue
  patchelf --set-rpath "\$ORIGIN/../lib:${CUDA_RPATH}" "$f"
done
for f in "$OUT"/lib/*; do
  chmod u+w "$f"
  patchelf --set-rpath '$ORIGIN' "$f"
done
git -C "$ROOT" rev-parse --short HEAD > "$OUT/VERSION" 2>/dev/null || echo unknown > "$OUT/VERSION"
echo "architectures: ${ARCHS}" >> "$OUT/VERSION"
du -sh "$OUT"
