#!/usr/bin/env bash
# Installs fp8rt's build and test dependencies from Debian/Ubuntu packages. Idempotent: does
# nothing when everything is present. Works as root (no sudo needed) and as a user with sudo.
# The CUDA toolkit is not installed here: it is expected under /usr/local/cuda (or nvcc on PATH);
# without it the build is CPU-only.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config python3 patchelf file fortunes
  libboost-dev librocksdb-dev libspdlog-dev libfmt-dev
  libopenmpi-dev openmpi-bin libgloo-dev
  libgtest-dev libgmock-dev
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libssl-dev libsentencepiece-dev
  slurm-wlm munge ansible ansible-lint iproute2
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo)
else
  echo "install-deps: missing packages (${missing[*]}) and not root, and sudo is not available" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  "${missing[@]}"
