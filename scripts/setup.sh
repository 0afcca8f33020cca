#!/usr/bin/env bash
# Installs what petrel needs on Debian 12 / Ubuntu (apt-get, as root or with sudo), then
# configures and builds into ./build. Safe to run again: it installs only what is missing.
# --no-build: install only (scripts/demo.sh configures its own lean build).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  g++ meson ninja-build pkg-config
  libhwy-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev
  # The server: HTTP and JSON.
  libcpp-httplib-dev
  # The Vulkan backend: headers and loader, the shader compiler, a CPU driver (lavapipe) so that
  # the gpu tests run on any machine, and vulkaninfo.
  libvulkan-dev glslc mesa-vulkan-drivers vulkan-tools
  # Pipeline parallelism over several processes or hosts (`mpirun -np N petrel ... --mpi`).
  libopenmpi-dev openmpi-bin
  # Coverage-guided fuzzing of the parsers (scripts/fuzz.sh): clang with libFuzzer.
  clang
)
# Optional packages are installed only when apt knows them: the Khronos validation layer
# (PETREL_VULKAN_VALIDATION=1) is not packaged everywhere, nor is a chromium outside a snap.
optional_packages=(vulkan-validationlayers)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
updated=0
# The web page test (tests/webui_test.cc) drives chromium with puppeteer-core from npm; node and
# npm also run the openai client tests. Each is installed only when its command is missing, so a
# node from elsewhere (NodeSource's, nvm's) is kept.
for pair in chromium:chromium node:nodejs npm:npm; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || optional_packages+=("${pair#*:}")
done
for package in "${optional_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" && continue
  if ((!updated)); then
    $sudo apt-get update -qq
    updated=1
  fi
  if apt-cache show "$package" >/dev/null 2>&1; then missing+=("$package"); fi
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  if ((!updated)); then $sudo apt-get update -qq; fi
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

if [ "${1:-}" = "--no-build" ]; then exit 0; fi
build_dir="${PETREL_BUILD_DIR:-build}"
if [ ! -f "$build_dir/build.ninja" ]; then
  meson setup "$build_dir" --buildtype=release ${PETREL_MESON_ARGS:-} >&2
fi
# PETREL_BUILD_JOBS limits the compile jobs (ninja's default is the core count plus two).
ninja -C "$build_dir" ${PETREL_BUILD_JOBS:+-j "$PETREL_BUILD_JOBS"} >&2
