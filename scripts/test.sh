#!/usr/bin/env bash
# Second command of the README: set up, build, and run every test suite: the unit, parity, cli
# and gpu (Vulkan, CUDA; skipped, saying why, without a device) tests, the load suite (`petrel serve`
# under 32 streaming clients), then the malformed-file corpus and the C API's hostile-use test again
# under AddressSanitizer + UBSan, then the thread pool, scheduler and server tests under ThreadSanitizer,
# then each fuzz target for a few seconds (PETREL_FUZZ=0 leaves that out), then the aarch64 cross build's unit and parity suites under qemu (PETREL_CROSS=0 leaves
# that out). Each part's time is printed as it ends ("test.sh: PART took N s").
set -euo pipefail
cd "$(dirname "$0")/.."
part_start=$SECONDS
part_done() {
  echo "test.sh: $1 took $((SECONDS - part_start)) s" >&2
  part_start=$SECONDS
}
# CUDA is compiled (no device runs it here) for the oldest and the newest architecture the
# backend supports rather than every one: the same sources and both ends of the arch-dependent
# code, at a third of the nvcc time on the 2-core CI machine. PETREL_MESON_ARGS overrides it.
export PETREL_MESON_ARGS="${PETREL_MESON_ARGS:--Dcuda-arch=75;120}"
scripts/setup.sh
part_done "setup and native build"
jobs="${PETREL_TEST_JOBS:-$(nproc)}"
status=0
# The parts that failed, named again at the very end: a CI log is often read from its tail.
failed_parts=()
part_failed() {
  status=1
  failed_parts+=("$1")
}
# `unit` includes the `slow` suite (grammar_sampling_test), which the emulated runs leave out.
meson test -C build --print-errorlogs --num-processes "$jobs" --suite unit --suite parity --suite cli --suite gpu || part_failed "unit, parity, cli and gpu suites"
part_done "unit, parity, cli and gpu suites"
# The load suite: 32 streaming clients for PETREL_LOAD_SECONDS (default 20) against a synthetic
# model; alone, so that the other suites do not take its cores.
meson test -C build --print-errorlogs --num-processes 1 --logbase loadlog --suite load || part_failed "load suite"
part_done "load suite"

# The sanitizer build compiles only what the malformed-input tests need. One of them, the C
# API's hostile-use test, links libpetrel, the whole engine: so that part stays cheap, this
# build has no device backends (the malformed tests use none) and compiles the SIMD kernels for
# the baseline target alone (-Dsimd-targets=baseline: the kernels' own checks are the native
# conformance tests; here what is checked is memory and undefined behaviour in the parsers).
if [ ! -f build-asan/build.ninja ]; then
  meson setup build-asan --buildtype=debug -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbenchmarks=disabled -Dvulkan=disabled -Dcuda=disabled -Dsimd-targets=baseline \
    ${PETREL_MESON_ARGS:-} >&2
fi
# The suite's executables, as ninja targets (tests/..., fuzz/... for the fuzz corpus replays),
# read after regenerating the build files, so that tests added since an earlier run are in.
ninja -C build-asan build.ninja >&2
asan_targets=$(meson introspect build-asan --tests | python3 -c '
import json, os, sys
print(" ".join(os.path.relpath(t["cmd"][0], "build-asan") for t in json.load(sys.stdin) if "malformed" in t["suite"] or any(s.endswith(":malformed") for s in t["suite"])))')
targets=()
for t in $asan_targets; do targets+=("$t"); done
ninja -C build-asan ${PETREL_BUILD_JOBS:+-j "$PETREL_BUILD_JOBS"} "${targets[@]}" >&2
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
  meson test -C build-asan --no-rebuild --print-errorlogs --suite malformed || part_failed "malformed suite under ASan + UBSan"
part_done "sanitizer build and malformed suite"

# ThreadSanitizer over the threaded parts: the thread pool, the sequence scheduler and its
# cancellation, and `petrel serve` (concurrent, preempted, disconnected and shut-down requests;
# the server_test spawns the petrel of this build, so the server itself runs instrumented). Only
# the `tsan` suite's executables and petrel are built, with the Highway baseline target alone
# (-Dsimd-targets=baseline); a race report fails the run. Suppressions, only ever for a
# third-party library, are in scripts/tsan.supp with the reason for each. Cost on the 2-core CI
# machine from a cold compiler cache: the build about 13 minutes (1,540 CPU-seconds measured with
# CCACHE_DISABLE=1), the run a few minutes more (docs/RELIABILITY.md); a warm cache leaves the run.
if [ ! -f build-tsan/build.ninja ]; then
  meson setup build-tsan --buildtype=debugoptimized -Db_sanitize=thread -Db_lundef=false \
    -Dbenchmarks=disabled -Dvulkan=disabled -Dcuda=disabled -Dsimd-targets=baseline \
    ${PETREL_MESON_ARGS:-} >&2
fi
ninja -C build-tsan build.ninja >&2
tsan_targets=$(meson introspect build-tsan --tests | python3 -c '
import json, os, sys
print(" ".join(os.path.relpath(t["cmd"][0], "build-tsan") for t in json.load(sys.stdin) if "tsan" in t["suite"] or any(s.endswith(":tsan") for s in t["suite"])))')
targets=(tools/petrel)
for t in $tsan_targets; do targets+=("$t"); done
ninja -C build-tsan ${PETREL_BUILD_JOBS:+-j "$PETREL_BUILD_JOBS"} "${targets[@]}" >&2
TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp" \
  meson test -C build-tsan --no-rebuild --print-errorlogs --num-processes 1 --timeout-multiplier 4 \
    --suite tsan || part_failed "tsan suite"
part_done "ThreadSanitizer build and tsan suite"

# Coverage-guided fuzzing (docs/FUZZING.md): each fuzz target built with clang, libFuzzer, ASan
# and UBSan in build-fuzz (the parsers and what they link, not the kernels) and run for
# PETREL_FUZZ_SECONDS (default 10) from its seeds, its regressions and the inputs earlier runs
# kept; a crash fails the run and leaves the input in fuzz/crashes/. scripts/setup.sh installs
# clang; without one that links -fsanitize=fuzzer the part fails, saying why (PETREL_FUZZ=0
# leaves it out; the corpora are still replayed by the malformed suite above).
if [ "${PETREL_FUZZ:-1}" = "1" ]; then
  if scripts/fuzz.sh --check; then
    # fuzz.sh's lines (one per target, and a failure's first report) are kept for the end.
    fuzz_log=$(mktemp)
    fuzz_status=0
    scripts/fuzz.sh all "${PETREL_FUZZ_SECONDS:-10}" 2>"$fuzz_log" || fuzz_status=$?
    cat "$fuzz_log" >&2
    if [ "$fuzz_status" != 0 ]; then
      part_failed "fuzz targets (exit $fuzz_status): $(grep -A3 'FAILED\|ERROR\|error:\|^Base64' "$fuzz_log" | head -16)"
    fi
    rm -f "$fuzz_log"
  else
    echo "test.sh: no clang++ that links -fsanitize=fuzzer (apt-get install clang), so no fuzzing" >&2
    part_failed "fuzz targets: no clang++ that links -fsanitize=fuzzer"
  fi
  part_done "fuzz targets"
fi

# The aarch64 board build (docs/EMBEDDED.md): cross-compiled, then the unit and parity suites
# under qemu-user on a NEON-only core (cortex-a72) and on one with SVE2 (max), each with its own
# log; cross.sh installs the cross compiler, qemu-user and the arm64 libraries when missing. The
# `slow` suite is left out there (it runs natively above). A failure anywhere in it, installing
# included, fails the run. PETREL_CROSS=0 leaves the part out (docs/EMBEDDED.md, Testing under
# emulation, has its times).
logs=(build/meson-logs/testlog.json build/meson-logs/loadlog.json build-asan/meson-logs/testlog.json
  build-tsan/meson-logs/testlog.json)
if [ "${PETREL_CROSS:-1}" = "1" ]; then
  rm -f build-aarch64/meson-logs/testlog-*.json
  PETREL_TEST_JOBS="$jobs" scripts/cross.sh aarch64 test || part_failed "aarch64 cross build and emulated tests"
  part_done "aarch64 cross build and emulated tests"
  for cpu in ${PETREL_CROSS_CPUS:-cortex-a72}; do logs+=("build-aarch64/meson-logs/testlog-$cpu.json"); done
fi

# One closing line over every run, counting test executables (a run that left no log, such as
# a cross build that failed to compile, counts as one failure).
python3 - "${logs[@]}" <<'PY'
import json, os, sys
passed = failed = skipped = 0
for path in sys.argv[1:]:
    if not os.path.exists(path):
        print(f"no test log {path}", file=sys.stderr)
        failed += 1
        continue
    for line in open(path):
        result = json.loads(line).get("result")
        if result in ("OK", "EXPECTEDFAIL"): passed += 1
        elif result == "SKIP": skipped += 1
        else: failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
for part in "${failed_parts[@]}"; do echo "test.sh: FAILED: $part" >&2; done
exit $status
