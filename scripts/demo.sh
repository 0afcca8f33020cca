#!/usr/bin/env bash
# First command of the README: install what is missing, build only the `petrel` command, and
# generate text from the default model (the story model of the shared data: $PETREL_SHARED_DIR,
# else ../shared), or from the model given as $1 (a GGUF file or a Hugging Face folder).
#
# The build is lean so that the first token comes within minutes on a small machine: its own
# folder (build-demo), no tests, benchmarks or Vulkan, Highway's SIMD kernels compiled once, for
# this machine's CPU (-Dsimd-targets=host: -march=native and Highway's static target, so the
# binary is for this machine), CUDA only when an NVIDIA GPU is present and then for its
# architecture only. The kernels are compiled at -O2 (written with
# Highway's intrinsics, they gain little from -O3) and the rest of petrel at -O1 (src/cpu/
# meson.build keeps the kernels at -O2 in an -O1 build); the libraries and the command are
# unity builds (up to 8 files per compiler run, so the headers they share, nlohmann/json, CLI11,
# httplib, the standard library, are parsed once per run rather than once per file), but for the
# kernels and the model architectures, whose files are written to stand alone. Together that
# is about half the compile time of a plain -O2 build (README). scripts/test.sh builds
# everything else in ./build (every target, every CUDA architecture). The times taken are
# printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
scripts/setup.sh --no-build
shared="${PETREL_SHARED_DIR:-../shared}"
model="${1:-$shared/models/story}"
prompt="${2:-Once upon a time, there was}"
if [ ! -e "$model" ]; then
  echo "error: model '$model' not found; pass a GGUF file or Hugging Face folder: scripts/demo.sh PATH [PROMPT]" >&2
  exit 1
fi

build_dir="${PETREL_DEMO_BUILD_DIR:-build-demo}"
if [ ! -f "$build_dir/build.ninja" ]; then
  cuda=(-Dcuda=disabled)
  # The local GPU's compute capability ("8.9" -> 89), when nvidia-smi sees one.
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .' || true)
  if [[ "$arch" =~ ^[0-9]+$ ]]; then cuda=(-Dcuda=auto "-Dcuda-arch=$arch"); fi
  meson setup "$build_dir" --buildtype=release -Doptimization=1 -Db_ndebug=true -Dtests=disabled \
    -Dunity=on -Dunity_size=8 -Dbenchmarks=disabled -Dvulkan=disabled -Dsimd-targets=host "${cuda[@]}" ${PETREL_MESON_ARGS:-} >&2
fi
build_start=$SECONDS
ninja -C "$build_dir" ${PETREL_BUILD_JOBS:+-j "$PETREL_BUILD_JOBS"} tools/petrel >&2
echo "demo: built in $((SECONDS - build_start)) s ($((SECONDS - start)) s since the start)" >&2
"$build_dir/tools/petrel" run -m "$model" -p "$prompt" -n 64 --temp 0
echo "demo: first run done $((SECONDS - start)) s after the start" >&2
