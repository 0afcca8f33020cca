#!/usr/bin/env bash
# petrel beside llama.cpp on the same files and the same machine: `petrel bench` and the given
# llama-bench alternated pass by pass (which engine goes first alternates too), then the table of
# per-pass ratios (docs/PERFORMANCE.md, "Method").
#   scripts/bench_vs.sh [-p PASSES] [-r REPS] [-t THREADS] [-d DIR] [-s SHAPES] LLAMA_BENCH [FILES...]
# -p: interleaved passes (default 3); -r: repetitions of each test within a pass, for both engines
# (default 3: a 20 ms test measured once swings with every preemption); -t: threads (default 2).
# Without FILES: the SHAPES (default "small tinyllama") in
# Q4_0, Q4_K_M, Q8_0 and F16 from DIR (default /tmp/petrel-bench-models), written there with
# `petrel synth` when missing. Tests: pp128, pp512, tg64.
# Environment: PETREL (default build/tools/petrel), SHARED (default ../shared), OUT (the raw
# JSON lines, default /tmp/petrel-bench-vs.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
passes=3 reps=3 threads=2 dir=/tmp/petrel-bench-models shapes="small tinyllama"
usage() {
  sed -n '5p' "$0" | sed 's/^# *//' >&2
  exit 2
}
while getopts "p:r:t:d:s:h" opt; do
  case "$opt" in
    p) passes=$OPTARG ;;
    r) reps=$OPTARG ;;
    t) threads=$OPTARG ;;
    d) dir=$OPTARG ;;
    s) shapes=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage
for n in "$passes" "$reps" "$threads"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "bench_vs.sh: -p, -r and -t take a positive count, not '$n'" >&2; exit 2; }
done
llama=$1
shift
[ -x "$llama" ] || { echo "bench_vs.sh: $llama is not an executable llama-bench" >&2; exit 2; }
petrel=${PETREL:-build/tools/petrel}
[ -x "$petrel" ] || { echo "bench_vs.sh: no petrel at $petrel (build it, or set PETREL)" >&2; exit 2; }
shared=${SHARED:-../shared}
out=${OUT:-/tmp/petrel-bench-vs.jsonl}

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  mkdir -p "$dir"
  for shape in $shapes; do
    for type in q4_0 q4_k_m q8_0 f16; do
      file="$dir/$shape-$type.gguf"
      [ -f "$file" ] || "$petrel" synth --shape "$shape" --type "$type" \
          --vocab "$shared/golden/tokenizer/ggml-vocab-llama-spm.gguf" -o "$file" >&2
      files+=("$file")
    done
  done
fi
for file in "${files[@]}"; do
  [ -f "$file" ] || { echo "bench_vs.sh: no such file: $file" >&2; exit 2; }
done

# One engine on one file; every JSON line tagged with the engine, pass and file. llama-bench's
# own peak RSS (over all its tests) comes from GNU time when it is installed.
run_petrel() {
  "$petrel" bench -m "$1" -p 128,512 -n 64 -t "$threads" -r "$reps" --json 2>/dev/null |
      python3 scripts/bench_vs_table.py tag petrel "$2" "$1"
}
run_llama() {
  local rss_file lines
  rss_file=$(mktemp)
  lines=$(mktemp)
  local timer=()
  [ -x /usr/bin/time ] && timer=(/usr/bin/time -f "%M" -o "$rss_file")
  "${timer[@]}" "$llama" -m "$1" -p 128,512 -n 64 -t "$threads" -r "$reps" -o jsonl \
      2>/dev/null > "$lines"
  python3 scripts/bench_vs_table.py tag llama "$2" "$1" "$(tail -n 1 "$rss_file")" < "$lines"
  rm -f "$rss_file" "$lines"
}

: > "$out"
for ((pass = 0; pass < passes; ++pass)); do
  echo "pass $((pass + 1)) of $passes" >&2
  for file in "${files[@]}"; do
    if ((pass % 2 == 0)); then
      run_petrel "$file" "$pass" >> "$out"
      run_llama "$file" "$pass" >> "$out"
    else
      run_llama "$file" "$pass" >> "$out"
      run_petrel "$file" "$pass" >> "$out"
    fi
  done
done
python3 scripts/bench_vs_table.py "$out"
