#!/usr/bin/env bash
# petrel beside llama.cpp on the same files and the same machine: `petrel bench` and the given
# llama-bench alternated pass by pass (which engine goes first alternates too), then the table of
# per-pass ratios (docs/PERFORMANCE.md, "Method").
#   scripts/bench_vs.sh [-p PASSES] [-r REPS] [-t THREADS] [-d DIR] [-s SHAPES] [-q TYPES] [-Q QUANTIZER] [-D DEPTHS] [-F FA] [-K CACHE_TYPES] [-P PROMPTS] [-G GEN] [-A PETREL_ARGS] [-n] LLAMA_BENCH [FILES...]
# -p: interleaved passes (default 3); -r: repetitions of each test within a pass, for both engines
# (default 3: a 20 ms test measured once swings with every preemption); -t: threads (default 2).
# Without FILES: the SHAPES (default "small tinyllama") in the TYPES (default
# "Q4_0 Q4_K_M Q8_0 F16") from DIR (default /tmp/petrel-bench-models), written there as
# DIR/SHAPE-TYPE.gguf (TYPE in lower case) when missing. Tests: pp128, pp512, tg64 (-P: the
# prompt lengths, e.g. 512, or 0 for none; -G: the generated length, 0 for none).
# How each type is written:
#   F16, Q4_0, Q4_K_M, IQ4_XS, ... (what `petrel synth --type` takes): `petrel synth`.
#   IQ1_*, IQ2_*, IQ3_* (types and mixes: IQ2_XXS, IQ2_M, IQ3_M, ...): quantized from
#     SHAPE-f16.gguf with the importance matrix SHAPE-imatrix.gguf, made once by `petrel imatrix`
#     over IMATRIX_TEXT (default SHARED/golden/perplexity/stories.txt).
#   TQ1_0, TQ2_0: quantized from SHAPE-ternary-f16.gguf (`petrel synth --weights ternary`, which
#     they hold without loss).
#   MXFP4 (or MXFP4_MOE): every matrix MXFP4 (quantize --pure ... MXFP4_MOE), from
#     SHAPE-f16.gguf.
# -Q: who quantizes those: auto (default: `petrel quantize`, and llama-quantize where petrel
# cannot write the type yet), petrel, or llama. llama-quantize's files are named
# DIR/SHAPE-TYPE.lq.gguf; both engines always read the same file.
# -D: cache depths before each test, e.g. 0,4096,16384 (default 0), passed to both engines as
# their -d (tests named pp512 @ d4096). -F: llama-bench's flash attention, on, off or auto, or
# a list such as on,off (default: llama-bench's own default); with a list each setting gets its
# rows, and a row against the faster setting in each pass. -K: KV cache types, e.g. f16,q8_0 (default f16), passed to
# both engines as -ctk and -ctv with the same list (petrel keeps K and V in one type; rows of
# another type than f16 are named "tg64 @ d4096 kv q8_0").
# -A: more arguments for `petrel bench` alone, e.g. "--bf16-dot on" (word-split; the header
# names them).
# -n: print the commands that would write files and run the benchmarks, and run none.
# Environment: PETREL (default build/tools/petrel), SHARED (default ../shared), OUT (the raw
# JSON lines, default /tmp/petrel-bench-vs.jsonl), LLAMA_QUANTIZE (default: llama-quantize beside
# LLAMA_BENCH), IMATRIX_TEXT.
# Examples:
#   scripts/bench_vs.sh -s small -q "IQ2_XXS IQ3_XXS IQ2_M TQ2_0 MXFP4" LLAMA_BENCH
#   scripts/bench_vs.sh -n -s small -q "TQ1_0 IQ3_S" LLAMA_BENCH     # what it would do
set -euo pipefail
cd "$(dirname "$0")/.."
passes=3 reps=3 threads=2 dir=/tmp/petrel-bench-models shapes="small tinyllama"
prompts=128,512 gen=64 types="q4_0 q4_k_m q8_0 f16" types_given=0 quantizer=auto dry_run=0 depths=0 flash="" cache_types=f16
petrel_extra=()
usage() {
  sed -n '5p' "$0" | sed 's/^# *//' >&2
  exit 2
}
while getopts "p:r:t:d:s:q:Q:D:F:K:P:G:A:nh" opt; do
  case "$opt" in
    p) passes=$OPTARG ;;
    r) reps=$OPTARG ;;
    t) threads=$OPTARG ;;
    d) dir=$OPTARG ;;
    s) shapes=$OPTARG ;;
    q) types=$OPTARG types_given=1 ;;
    Q) quantizer=$OPTARG ;;
    D) depths=$OPTARG ;;
    F) flash=$OPTARG ;;
    K) cache_types=$OPTARG ;;
    P) prompts=$OPTARG ;;
    G) gen=$OPTARG ;;
    A) read -r -a petrel_extra <<< "$OPTARG" ;;
    n) dry_run=1 ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage
for n in "$passes" "$reps" "$threads"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "bench_vs.sh: -p, -r and -t take a positive count, not '$n'" >&2; exit 2; }
done
[[ "$depths" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "bench_vs.sh: -D takes depths like 0,4096, not '$depths'" >&2; exit 2; }
[[ "$prompts" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "bench_vs.sh: -P takes prompt lengths like 128,512, not '$prompts'" >&2; exit 2; }
[[ "$gen" =~ ^[0-9]+$ ]] || { echo "bench_vs.sh: -G takes one generated length like 64, not '$gen'" >&2; exit 2; }
[[ "$cache_types" =~ ^(f32|f16|q8_0)(,(f32|f16|q8_0))*$ ]] || { echo "bench_vs.sh: -K takes KV cache types (f32, f16, q8_0) like f16,q8_0, not '$cache_types'" >&2; exit 2; }
[[ -z "$flash" || "$flash" =~ ^(on|off|auto)(,(on|off|auto))*$ ]] ||
  { echo "bench_vs.sh: -F takes on, off, auto or a list like on,off, not '$flash'" >&2; exit 2; }
case "$quantizer" in
  auto | petrel | llama) ;;
  *) echo "bench_vs.sh: -Q takes auto, petrel or llama, not '$quantizer'" >&2; exit 2 ;;
esac
[ -n "${types// /}" ] || { echo "bench_vs.sh: -q needs at least one type" >&2; exit 2; }
for type in $types; do
  [[ "$type" =~ ^[A-Za-z0-9_]+$ ]] || { echo "bench_vs.sh: -q: '$type' is not a type name" >&2; exit 2; }
done
llama=$1
shift
if ((types_given)) && [ $# -gt 0 ]; then
  echo "bench_vs.sh: -q chooses the files written without FILES; give one or the other" >&2
  exit 2
fi
petrel=${PETREL:-build/tools/petrel}
llama_quantize=${LLAMA_QUANTIZE:-$(dirname "$llama")/llama-quantize}
shared=${SHARED:-../shared}
imatrix_text=${IMATRIX_TEXT:-$shared/golden/perplexity/stories.txt}
vocab=$shared/golden/tokenizer/ggml-vocab-llama-spm.gguf
out=${OUT:-/tmp/petrel-bench-vs.jsonl}
# A dry run checks the arguments and prints the plan, so it needs neither engine built yet.
need_executable() {  # PATH WHAT HINT
  [ -x "$1" ] && return 0
  ((dry_run)) && { echo "bench_vs.sh: (dry run) no $2 at $1 yet" >&2; return 0; }
  echo "bench_vs.sh: no $2 at $1${3:+ ($3)}" >&2
  exit 2
}
need_executable "$llama" llama-bench
need_executable "$petrel" petrel "build it, or set PETREL"

# Runs a command, or with -n prints it (shell-quoted) instead.
run() {
  if ((dry_run)); then
    local line
    line=$(printf '%q ' "$@")
    echo "${line% }"
    return 0
  fi
  "$@"
}

# The functions below leave the path of the file they made or found in `made`; `planned` holds
# the files a dry run would have written, so that each is printed once.
made=""
declare -A planned=()
exists() { [ -f "$1" ] || [ -n "${planned[$1]:-}" ]; }

# DIR/SHAPE-NAME.gguf from `petrel synth` (ARGS: its --type and other options) unless present.
synth_file() {  # SHAPE NAME ARGS...
  local file="$dir/$1-$2.gguf" shape=$1
  shift 2
  if ! exists "$file"; then
    run "$petrel" synth --shape "$shape" "$@" --vocab "$vocab" -o "$file" >&2
    planned[$file]=1
  fi
  made=$file
}

# DIR/SHAPE-imatrix.gguf: petrel's importance matrix of SHAPE-f16.gguf over IMATRIX_TEXT,
# read by both quantizers (llama-quantize takes the GGUF layout too).
imatrix_file() {  # SHAPE
  local file="$dir/$1-imatrix.gguf"
  synth_file "$1" f16 --type f16
  if ! exists "$file"; then
    [ -f "$imatrix_text" ] || { echo "bench_vs.sh: no calibration text $imatrix_text (set IMATRIX_TEXT)" >&2; exit 2; }
    run "$petrel" imatrix -m "$made" -f "$imatrix_text" -t "$threads" --no-progress \
        -o "$file" >&2
    planned[$file]=1
  fi
  made=$file
}

# DIR/SHAPE-NAME.gguf (petrel) or DIR/SHAPE-NAME.lq.gguf (llama-quantize) re-encoded from BASE,
# whichever exists, else written by the -Q choice. PETREL_TYPE / LLAMA_TYPE: the type or mix
# each tool knows it by; FLAGS: --pure and --imatrix FILE, which both tools take.
quantized_file() {  # SHAPE NAME BASE PETREL_TYPE LLAMA_TYPE FLAGS...
  local shape=$1 name=$2 base=$3 petrel_type=$4 llama_type=$5
  shift 5
  local ours="$dir/$shape-$name.gguf" theirs="$dir/$shape-$name.lq.gguf"
  made=$ours
  [ "$quantizer" != llama ] && exists "$ours" && return
  made=$theirs
  [ "$quantizer" != petrel ] && exists "$theirs" && return
  if [ "$quantizer" != llama ]; then
    made=$ours
    if ((dry_run)); then
      run "$petrel" quantize --no-progress "$@" "$base" "$ours" "$petrel_type" >&2
      if [ "$quantizer" = auto ]; then
        echo "  (where petrel cannot write $petrel_type yet, instead:" >&2
        echo "   $(run "$llama_quantize" "$@" "$base" "$theirs" "$llama_type" "$threads") >$dir/$shape-$name.lq.log)" >&2
      fi
      planned[$ours]=1
      return
    fi
    local log
    log=$(mktemp)
    if "$petrel" quantize --no-progress "$@" "$base" "$ours" "$petrel_type" 2> "$log"; then
      cat "$log" >&2
      rm -f "$log"
      return
    fi
    # Only petrel's refusals of the type ("not a type or mix we can write", "petrel cannot
    # write TYPE": no encoder built in) hand it to llama-quantize; any other failure of petrel's
    # quantizer is a failure of the run.
    if [ "$quantizer" = petrel ] ||
        ! grep -q -e "not a type or mix we can write" -e "petrel cannot write" "$log"; then
      cat "$log" >&2
      rm -f "$log"
      exit 1
    fi
    rm -f "$log"
    echo "bench_vs.sh: petrel cannot write $petrel_type yet; llama-quantize writes $theirs" >&2
  fi
  made=$theirs
  need_executable "$llama_quantize" llama-quantize "set LLAMA_QUANTIZE"
  local log=$dir/$shape-$name.lq.log
  if ((dry_run)); then
    echo "$(run "$llama_quantize" "$@" "$base" "$theirs" "$llama_type" "$threads") >$log" >&2
    planned[$theirs]=1
    return
  fi
  if ! "$llama_quantize" "$@" "$base" "$theirs" "$llama_type" "$threads" > "$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "bench_vs.sh: llama-quantize failed (log: $log)" >&2
    exit 1
  fi
}

# The file of one SHAPE in one TYPE (any case), written when missing.
model_file() {  # SHAPE TYPE
  local shape=$1 upper=${2^^} name=${2,,}
  case "$upper" in
    IQ1_* | IQ2_* | IQ3_*)
      imatrix_file "$shape"
      quantized_file "$shape" "$name" "$dir/$shape-f16.gguf" "$upper" "$upper" --imatrix "$made"
      ;;
    TQ1_0 | TQ2_0)
      synth_file "$shape" ternary-f16 --type f16 --weights ternary
      quantized_file "$shape" "$name" "$made" "$upper" "$upper"
      ;;
    MXFP4 | MXFP4_MOE)
      synth_file "$shape" f16 --type f16
      quantized_file "$shape" mxfp4 "$made" MXFP4_MOE MXFP4_MOE --pure
      ;;
    *) synth_file "$shape" "$name" --type "$name" ;;
  esac
}

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  run mkdir -p "$dir" >&2
  for shape in $shapes; do
    for type in $types; do
      model_file "$shape" "$type"
      files+=("$made")
    done
  done
fi
if ((dry_run)); then
  for file in "${files[@]}"; do
    echo "bench: $file (petrel bench and llama-bench, -p $prompts -n $gen -d $depths -ctk $cache_types -ctv $cache_types -t $threads -r $reps${flash:+ -fa $flash}${petrel_extra[*]:+, petrel also ${petrel_extra[*]}}, $passes passes)"
  done
  exit 0
fi
for file in "${files[@]}"; do
  [ -f "$file" ] || { echo "bench_vs.sh: no such file: $file" >&2; exit 2; }
done

# One engine on one file; every JSON line tagged with the engine, pass and file. llama-bench's
# own peak RSS (over all its tests) comes from GNU time when it is installed.
run_petrel() {
  "$petrel" bench -m "$1" -p "$prompts" -n "$gen" -d "$depths" -ctk "$cache_types" -ctv "$cache_types" -t "$threads" -r "$reps" ${petrel_extra[@]+"${petrel_extra[@]}"} --json 2>/dev/null |
      python3 scripts/bench_vs_table.py tag petrel "$2" "$1"
}
run_llama() {
  local rss_file lines
  rss_file=$(mktemp)
  lines=$(mktemp)
  local timer=()
  [ -x /usr/bin/time ] && timer=(/usr/bin/time -f "%M" -o "$rss_file")
  # -d only where a depth is asked for: llama-bench before mid-2025 has no -d and would fail.
  local depth_args=()
  [ "$depths" != 0 ] && depth_args=(-d "$depths")
  if ! "${timer[@]}" "$llama" -m "$1" -p "$prompts" -n "$gen" "${depth_args[@]}" -ctk "$cache_types" -ctv "$cache_types" ${flash:+-fa "$flash"} -t "$threads" -r "$reps" -o jsonl \
      2>"$lines.err" > "$lines"; then
    echo "bench_vs.sh: llama-bench failed on $1: $(tail -n 1 "$lines.err")" >&2
  fi
  rm -f "$lines.err"
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
