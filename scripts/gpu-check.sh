#!/usr/bin/env bash
# The CUDA backend on a machine with an NVIDIA GPU, in one go (about 8 minutes or less): builds
# petrel with CUDA for this GPU's compute capability only, runs the `gpu` suite (golden logits
# with all and half the blocks offloaded, greedy text for 0/half/all blocks, batching, CLI) and the
# backend and moe_ffn conformance tests on the device, the mixture-of-experts placements (experts
# on the GPU, on the CPU with --cpu-moe / --n-cpu-moe 1, an -ot rule) and a two-device split
# (two GPUs when there are, else the one GPU opened twice and CPU + GPU) on the Qwen3-MoE and a
# Mixtral-style model against the CPU's logits and greedy text, then `petrel bench --device cuda
# --gpu-layers all` on tinyllama-shape F16 and Q4_0 models made on the spot, and prints one summary: pass/fail of each
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
  tests/moe_conformance_test \
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
    results+=("PASS  $name"); grep -E '^(cuda |story|synth|moe )' "$work/$name.log" >&2 || true
  else
    results+=("FAIL  $name (log: $work/$name.log kept in ${build}/gpu-check-logs)")
    mkdir -p "$build/gpu-check-logs" && cp "$work/$name.log" "$build/gpu-check-logs/"
    tail -n 30 "$work/$name.log" >&2
  fi
}
run_step gpu-suite meson test -C "$build" --no-rebuild --suite gpu --print-errorlogs --num-processes 1 -v
run_step conformance meson test -C "$build" --no-rebuild backend_conformance_test --print-errorlogs -v \
  --test-args=--gtest_filter='*cuda*'
run_step moe-conformance meson test -C "$build" --no-rebuild moe_conformance_test --print-errorlogs -v \
  --test-args=--gtest_filter='*cuda*'

# --- Mixture of experts split between the CPU and the GPU(s), and two devices ---------------
# Each placement's logits against the CPU's, failing past the F16 row of golden/README.md (the
# CUDA matmul takes cuBLAS on F16 operands past 8 tokens), and its greedy text against the CPU's,
# reported when it differs (the F16 prompt path may turn a near tie).
compare_logits() {  # a.f32 b.f32: prints max abs and relative RMS; fails past F16's row
  python3 - "$1" "$2" <<'PY'
import array, math, sys
a, b = (array.array('f', open(p, 'rb').read()) for p in sys.argv[1:3])
if len(a) != len(b) or not a: sys.exit('logit counts differ: %d vs %d' % (len(a), len(b)))
diff = max(abs(x - y) for x, y in zip(a, b))
rms = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)) / max(1e-30, sum(y * y for y in b)))
print('max abs %.2e, rel rms %.2e' % (diff, rms))
sys.exit(0 if diff <= 0.05 and rms <= 2e-3 else 1)
PY
}
moe_split() {
  local -; set -f  # the placements are split into words, not globbed
  local model=$1 ids=$2; shift 2
  "$petrel" logits -m "$model" --ids "$ids" -o "$work/cpu.f32" -t 4 --cache-type f32 >/dev/null 2>&1 || return 1
  local cpu_text; cpu_text=$("$petrel" run -m "$model" -p "Once upon a time" -n 24 --temp 0 --cache-type f32 2>/dev/null) || return 1
  local placement status=0
  for placement in "$@"; do
    # shellcheck disable=SC2086
    "$petrel" logits -m "$model" --ids "$ids" -o "$work/dev.f32" -t 4 --cache-type f32 $placement >/dev/null 2>"$work/err.txt" ||
      { echo "$placement: $(tail -n1 "$work/err.txt")"; status=1; continue; }
    local stats; stats=$(compare_logits "$work/dev.f32" "$work/cpu.f32") || status=1
    echo "moe $(basename "$model") $placement: $stats"
    # shellcheck disable=SC2086
    [ "$("$petrel" run -m "$model" -p "Once upon a time" -n 24 --temp 0 --cache-type f32 $placement 2>/dev/null)" = "$cpu_text" ] ||
      echo "moe $(basename "$model") $placement: note: greedy text differs from the CPU's"
  done
  return $status
}
mixtral="$work/mixtral-style.gguf"
"$petrel" synth --shape moe-tiny --type f32 --n-vocab 512 --seed 7 -o "$mixtral" >/dev/null 2>&1 || die "petrel synth failed"
qwen3moe="$shared/models/synth-arch/qwen3moe.gguf"
qwen3moe_ids=$(python3 -c "import json; print(','.join(map(str, json.load(open('$shared/golden/synth-arch/parity.json'))['qwen3moe']['ids'])))")
mixtral_ids=1,72,101,108,108,111,44,32,119,111,114,108,100,33
placements=("--device cuda" "--device cuda --cpu-moe" "--device cuda --n-cpu-moe 1"
            "--device cuda -ot blk\\.0\\.ffn_.*=CPU")
both_models() {  # placements...: every placement on both models
  moe_split "$qwen3moe" "$qwen3moe_ids" "$@" && moe_split "$mixtral" "$mixtral_ids" "$@"
}
run_step moe-split both_models "${placements[@]}"
n_gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
if [ "$n_gpus" -ge 2 ]; then
  two=("--device cuda:0,cuda:1 --tensor-split 1,1" "--device cuda:0,cuda:1 --tensor-split 3,1 --cpu-moe")
else  # one GPU: two backends on it, and the CPU plus the GPU
  two=("--device cuda,cuda --tensor-split 1,1" "--device cpu,cuda --tensor-split 1,1 --n-cpu-moe 1")
fi
run_step two-devices both_models "${two[@]}"
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
