#!/usr/bin/env bash
# Coverage-guided fuzzing of petrel's parsers with libFuzzer (docs/FUZZING.md).
#   scripts/fuzz.sh TARGET|all [SECONDS]   run one target (fuzz_gguf, ...) or each in turn for
#                                          SECONDS (default 20) each
#   scripts/fuzz.sh --check                exit 0 when clang++ links -fsanitize=fuzzer
#   scripts/fuzz.sh --list                 the targets
# Builds the targets (and only the libraries they need) with clang, libFuzzer, ASan and UBSan in
# build-fuzz (PETREL_FUZZ_BUILD_DIR). Each run starts from the seed corpus fuzz/corpus/TARGET and
# the inputs that once crashed, fuzz/regressions/TARGET; the new inputs it finds are kept in
# build-fuzz/corpus/TARGET for the next run, crashes in fuzz/crashes/TARGET/. Prints one line per
# target (runs, exec/s, coverage, crashes) and fails when any target crashed.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${PETREL_FUZZ_BUILD_DIR:-build-fuzz}"
cxx="${PETREL_FUZZ_CXX:-clang++}"

targets() {
  sed -n "s/^  '\(fuzz_[a-z_]*\)': .*/\1/p" fuzz/meson.build
}

has_libfuzzer() {
  command -v "$cxx" >/dev/null 2>&1 || return 1
  local dir
  dir=$(mktemp -d)
  printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' >"$dir/t.cc"
  "$cxx" -fsanitize=fuzzer,address,undefined "$dir/t.cc" -o "$dir/t" >/dev/null 2>&1
  local ok=$?
  rm -rf "$dir"
  return $ok
}

case "${1:-}" in
  --check) has_libfuzzer; exit ;;
  --list) targets; exit 0 ;;
  "" | -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
if ! has_libfuzzer; then
  echo "fuzz.sh: $cxx cannot link -fsanitize=fuzzer (apt-get install clang)" >&2
  exit 2
fi
if [ "$1" = all ]; then
  mapfile -t run < <(targets)
else
  targets | grep -qx "$1" || { echo "fuzz.sh: unknown target '$1' (targets: $(targets | tr '\n' ' '))" >&2; exit 2; }
  run=("$1")
fi
seconds="${2:-20}"

if [ ! -f "$build_dir/build.ninja" ]; then
  # -O1 with the sanitizers: faster to build than -O2 and nearly as fast to run.
  CXX="$cxx" CC="${cxx/clang++/clang}" meson setup "$build_dir" -Dfuzz=enabled \
    -Db_sanitize=address,undefined -Db_lundef=false -Doptimization=1 -Ddebug=true \
    -Dtests=disabled -Dbenchmarks=disabled -Dvulkan=disabled -Dcuda=disabled >&2
fi
ninja -C "$build_dir" ${PETREL_BUILD_JOBS:+-j "$PETREL_BUILD_JOBS"} "${run[@]/#/fuzz/}" >&2

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
failed=0
for target in "${run[@]}"; do
  work="$build_dir/corpus/$target"
  crashes="fuzz/crashes/$target"
  mkdir -p "$work" "$crashes" "fuzz/regressions/$target"
  log="$build_dir/fuzz-$target.log"
  # -timeout: an input that runs for seconds is a hang to report; -rss_limit_mb: one that
  # allocates gigabytes is too. New inputs go to the first folder, $work.
  status=0
  "$build_dir/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$crashes/" \
    "$work" "fuzz/corpus/$target" "fuzz/regressions/$target" >"$log" 2>&1 || status=$?
  python3 - "$target" "$seconds" "$log" "$crashes" "$status" <<'PY'
import os, re, sys
target, seconds, log, crashes, status = sys.argv[1:]
text = open(log, errors="replace").read()
def last(pattern, default="?"):
    found = re.findall(pattern, text)
    return found[-1] if found else default
runs = last(r"stat::number_of_executed_units:\s*(\d+)")
speed = last(r"stat::average_exec_per_sec:\s*(\d+)")
cov = last(r"\bcov: (\d+)")
ft = last(r"\bft: (\d+)")
corpus = last(r"\bcorp: (\d+)")
found = len([f for f in os.listdir(crashes) if f.split("-")[0] in ("crash", "leak", "timeout", "oom")])
line = f"fuzz.sh: {target}: {seconds} s, {runs} runs ({speed}/s), cov {cov}, ft {ft}, corpus {corpus}, {found} in {crashes}/"
if status != "0":
    line += f" -- FAILED (exit {status}), see {log}"
print(line, file=sys.stderr)
PY
  if [ "$status" != 0 ]; then
    failed=1
    grep -m1 -A12 "ERROR: \|runtime error:" "$log" >&2 || tail -20 "$log" >&2
    # The input itself, when libFuzzer printed it (small ones): a CI run's crash directory is gone
    # with its machine.
    grep -m1 "^Base64: " "$log" >&2 || true
  fi
done
exit $failed
