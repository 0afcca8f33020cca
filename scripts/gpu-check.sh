#!/usr/bin/env bash
# The CUDA backend on a machine with an NVIDIA GPU, in one go (about 8 minutes or less): builds
# petrel with CUDA for this GPU's compute capability only, runs the `gpu` suite (golden logits
# with all and half the blocks offloaded, greedy text for 0/half/all blocks, batching, CLI) and the
# backend conformance test on the device, then `petrel bench --device cuda --gpu-layers all` on
# tinyllama-shape F16 and Q4_0 models made on the spot, and prints one summary: pass/fail of each
# step, tokens/s of pp512 and tg64, and the decode rate as a fraction of the GPU's memory-bandwidth
# bound (weight bytes read per token / time / peak bandwidth). Needs no network.
#
# Usage: scripts/gpu-check.sh [SHARED_DIR]   (default: $PETREL_SHARED_DIR, else ../shared)
# Environment: BUILD_DIR (default build-gpu-check), JOBS (default nproc), PETREL_PEAK_GBPS (the
# GPU's peak memory bandwidth in GB/s, when the driver does not report it).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
shared=${1:-${PETREL_SHARED_DIR:-$root/../shared}}
build=${BUILD_DIR:-build-gpu-check}
jobs=${JOBS:-$(nproc)}
work=$(mktemp -d /tmp/petrel-gpu-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'gpu-check: %s\n' "$*" >&2; exit 1; }
elapsed() { echo $(( $(date +%s) - start ))s; }

# --- What the machine must have ------------------------------------------------------------
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this script needs an NVIDIA GPU and its driver"
[ -d "$shared/models" ] && [ -d "$shared/golden" ] || die "no test data at '$shared' (pass the shared folder: models/, golden/)"
command -v meson >/dev/null && command -v ninja >/dev/null || die "meson and ninja are needed (scripts/setup.sh installs them)"
nvcc=$(command -v nvcc || true)
[ -n "$nvcc" ] || [ -x "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ] || die "nvcc not found on PATH, in \$CUDA_PATH or /usr/local/cuda"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')
[[ "$cap" =~ ^[0-9]+$ ]] || die "cannot read the compute capability from nvidia-smi (got '$cap')"
say "GPU: $gpu (compute capability $cap)"

# --- Build: CUDA for this GPU only; no Vulkan (the gpu suite then checks CUDA alone) ---------
say "build ($build, -j$jobs)"
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=release -Dshared_dir="$shared" -Dcuda=enabled \
    -Dcuda-arch="$cap" -Dvulkan=disabled -Dtests=enabled -Dbenchmarks=disabled >"$work/setup.log" 2>&1 ||
    { tail -n 30 "$work/setup.log" >&2; die "meson setup failed"; }
else
  meson configure "$build" -Dcuda-arch="$cap" -Dshared_dir="$shared" >/dev/null
fi
# Only what the checks run, so the build stays a few minutes on a workstation.
ninja -C "$build" -j"$jobs" tools/petrel tests/device_backend_test tests/backend_conformance_test \
  >"$work/build.log" 2>&1 || { tail -n 40 "$work/build.log" >&2; die "build failed"; }
petrel="$build/tools/petrel"
"$petrel" info --devices | tee "$work/devices.txt" >&2
grep -q '^cuda     cuda:0 ' "$work/devices.txt" || die "the build does not see the GPU (see the cuda line above)"
say "built in $(elapsed)"

# --- Tests ---------------------------------------------------------------------------------
results=()
run_step() {  # name, command...: runs it, keeps its log, records PASS/FAIL
  local name=$1; shift
  say "$name"
  if "$@" >"$work/$name.log" 2>&1; then
    results+=("PASS  $name"); grep -E '^(cuda |story|synth)' "$work/$name.log" >&2 || true
  else
    results+=("FAIL  $name (log: $work/$name.log kept in ${build}/gpu-check-logs)")
    mkdir -p "$build/gpu-check-logs" && cp "$work/$name.log" "$build/gpu-check-logs/"
    tail -n 30 "$work/$name.log" >&2
  fi
}
run_step gpu-suite meson test -C "$build" --no-rebuild --suite gpu --print-errorlogs --num-processes 1 -v
run_step conformance meson test -C "$build" --no-rebuild backend_conformance_test --print-errorlogs -v \
  --test-args=--gtest_filter='*cuda*'
say "tests done at $(elapsed)"

# --- Bench: tinyllama shape, F16 and Q4_0, every block on the GPU ------------------------------
vocab="$shared/golden/tokenizer/ggml-vocab-llama-spm.gguf"
[ -f "$vocab" ] || die "missing $vocab"
peak_gbps=${PETREL_PEAK_GBPS:-$(sed -n 's/^cuda .* \([0-9][0-9]*\) GB\/s.*/\1/p' "$work/devices.txt" | head -n1)}
[ -n "$peak_gbps" ] && [ "$peak_gbps" != 0 ] || die "the driver reports no memory bandwidth: set PETREL_PEAK_GBPS"
bench_lines=()
field() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p" <<<"$2"; }
for type in F16 Q4_0; do
  model="$work/tinyllama-$type.gguf"
  say "synth tinyllama $type"
  "$petrel" synth --shape tinyllama --type "$type" --vocab "$vocab" -o "$model" >/dev/null 2>"$work/synth.log" ||
    { cat "$work/synth.log" >&2; die "petrel synth failed"; }
  say "bench $type"
  if ! "$petrel" bench -m "$model" --device cuda --gpu-layers all -p 512 -n 64 -r 3 --json \
      >"$work/bench-$type.json" 2>"$work/bench-$type.err"; then
    cat "$work/bench-$type.err" >&2
    results+=("FAIL  bench $type")
    continue
  fi
  pp=$(grep '"test":"pp512"' "$work/bench-$type.json" || true)
  tg=$(grep '"test":"tg64"' "$work/bench-$type.json" || true)
  pp_tps=$(field tokens_per_second "$pp"); tg_tps=$(field tokens_per_second "$tg")
  bytes=$(field read_roof_bytes_per_token "$tg"); layers=$(field gpu_layers "$tg")
  fraction=$(awk -v t="$tg_tps" -v b="$bytes" -v p="$peak_gbps" 'BEGIN { printf "%.2f", t * b / (p * 1e9) }')
  bench_lines+=("$(printf '%-5s pp512 %9.1f t/s   tg64 %7.1f t/s   %6.1f MB/token   %s of %s GB/s   gpu_layers %s' \
    "$type" "$pp_tps" "$tg_tps" "$(awk -v b="$bytes" 'BEGIN { print b / 1e6 }')" "$fraction" "$peak_gbps" "$layers")")
  results+=("PASS  bench $type")
done

# --- Summary -------------------------------------------------------------------------------
echo
echo "petrel gpu-check: $gpu, compute capability $cap, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(elapsed)"
printf '  %s\n' "${results[@]}"
echo "  bench (--device cuda --gpu-layers all, tinyllama shape, median of 3; bound = weight bytes per token / time / peak bandwidth):"
printf '    %s\n' "${bench_lines[@]:-none}"
for r in "${results[@]}"; do [[ $r == FAIL* ]] && exit 1; done
exit 0
