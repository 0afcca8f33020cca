#!/usr/bin/env bash
# Benchmarks the BASELINES.md files side by side with llama.cpp's figures, as fractions of
# same-machine roofs (docs/PERFORMANCE.md). Writes the files with `petrel synth` if missing.
#   scripts/bench_baselines.sh [MODEL_DIR] [OUT.jsonl]     (after scripts/test.sh or a build)
# Environment: PETREL (default build/tools/petrel), SHARED (default ../shared),
# PETREL_CPU_TARGET (default avx2, the baseline machine's instruction set), PETREL_BENCH_MLA (default
# 1: then also decode of the deepseek2-lite shape, latent attention and experts, against its read
# roof; no llama.cpp figure and no target checked here; 0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
models=${1:-/tmp/petrel-bench-models}
out=${2:-/tmp/petrel-bench.jsonl}
petrel=${PETREL:-build/tools/petrel}
shared=${SHARED:-../shared}
export PETREL_CPU_TARGET=${PETREL_CPU_TARGET:-avx2}
mkdir -p "$models"
: > "$out"
for shape in small tinyllama; do
  for type in f16 q8_0 q4_0 q4_k_m; do
    file="$models/$shape-$type.gguf"
    [ -f "$file" ] || "$petrel" synth --shape "$shape" --type "$type" \
        --vocab "$shared/golden/tokenizer/ggml-vocab-llama-spm.gguf" -o "$file" >&2
    "$petrel" bench -m "$file" -p 128,512 -n 64 -t 2 -r 5 --json 2>/dev/null >> "$out"
  done
done
python3 scripts/bench_table.py "$out"
if [ "${PETREL_BENCH_MLA:-1}" != 0 ]; then
  file="$models/deepseek2-lite-q4_0.gguf"
  [ -f "$file" ] || "$petrel" synth --shape deepseek2-lite --type q4_0 --n-vocab 102400 \
      -o "$file" >&2
  "$petrel" bench -m "$file" -p 0 -n 32 -d 0,256 -t 2 -r 3
fi
