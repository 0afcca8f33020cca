#!/usr/bin/env bash
# Second command of the README: set up, build, and run every test suite: the unit and parity
# tests, then the malformed-file corpus again under AddressSanitizer + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs="${PETREL_TEST_JOBS:-$(nproc)}"
meson test -C build --print-errorlogs --num-processes "$jobs" --suite unit --suite parity --suite cli

# The sanitizer build compiles only what the malformed-input tests need.
if [ ! -f build-asan/build.ninja ]; then
  meson setup build-asan --buildtype=debug -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbenchmarks=disabled >&2
fi
asan_tests=$(meson introspect build-asan --tests | python3 -c '
import json, sys
print(" ".join(t["name"] for t in json.load(sys.stdin) if "malformed" in t["suite"] or any(s.endswith(":malformed") for s in t["suite"])))')
targets=()
for t in $asan_tests; do targets+=("tests/$t"); done
ninja -C build-asan "${targets[@]}" >&2
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
  meson test -C build-asan --no-rebuild --print-errorlogs --suite malformed
