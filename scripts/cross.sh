#!/usr/bin/env bash
# Cross-builds petrel for an embedded Linux board and, with `test`, runs the unit and parity
# suites under qemu-user.
#
#   scripts/cross.sh aarch64|armhf|riscv64 [test] [-- extra meson setup arguments]
#
# Installs what is missing on Debian/Ubuntu (the cross compiler, qemu-user, and the target's
# development libraries through dpkg multiarch), configures build-ARCH with cross/TRIPLET.ini,
# and builds. aarch64 suites run on an emulated NEON-only core (cortex-a72); the core with every
# extension qemu has (max: SVE2, dotprod, i8mm) runs the same NEON code, since the SVE family is
# not built (docs/EMBEDDED.md), so there the dispatch and a greedy run's text are checked rather
# than every suite a second time. Environment:
#   PETREL_CROSS_STATIC     1 (default): link everything but the C library statically
#                           (-Dstatic=true), the binary a board gets; 0: shared libraries
#   PETREL_CROSS_SUITES     suites to run with `test` (default "unit parity")
#   PETREL_CROSS_SKIP_SUITES  tests of these suites are neither built nor run, unless named in
#                           PETREL_CROSS_SUITES (default "slow": minutes each under emulation,
#                           run natively instead; `PETREL_CROSS_SUITES=slow` runs them under qemu)
#   PETREL_CROSS_CPUS       emulated cores the suites run on (QEMU_CPU; default "cortex-a72",
#                           armhf "max")
#   PETREL_CROSS_CHECK_CPUS more cores on which only the SIMD target and the greedy text of the
#                           story model are checked against the first core's (aarch64 default
#                           "max", armhf none)
#   PETREL_CROSS_TARGET     SIMD target `petrel info` must report under qemu (default neon)
#   PETREL_BUILD_JOBS       parallel compile jobs (default: every core)
#   PETREL_TEST_JOBS        parallel test processes (default: every core)
set -euo pipefail
cd "$(dirname "$0")/.."

arch="${1:-}"
shift || true
run_tests=0
if [ "${1:-}" = "test" ]; then
  run_tests=1
  shift
fi
if [ "${1:-}" = "--" ]; then shift; fi

case "$arch" in
  aarch64) triplet=aarch64-linux-gnu; debarch=arm64; qemu=qemu-aarch64 ;;
  armhf) triplet=arm-linux-gnueabihf; debarch=armhf; qemu=qemu-arm ;;
  riscv64) triplet=riscv64-linux-gnu; debarch=riscv64; qemu=qemu-riscv64 ;;
  *)
    echo "usage: scripts/cross.sh aarch64|armhf|riscv64 [test] [-- meson arguments]" >&2
    exit 2
    ;;
esac

# --- toolchain and target libraries -----------------------------------------------------------
# Header-only libraries (CLI11, nlohmann-json) are architecture-independent; the rest come as
# the target's multiarch packages. Google Benchmark and Vulkan are not built for boards.
host_packages=(meson ninja-build pkg-config qemu-user "crossbuild-essential-$debarch"
  libcli11-dev nlohmann-json3-dev)
target_packages=(libc6 libhwy-dev libgtest-dev libgmock-dev libpcre2-dev libutf8proc-dev
  libcpp-httplib-dev)
missing=()
for package in "${host_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
for package in "${target_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package:$debarch" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package:$debarch")
done
if ((${#missing[@]})); then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "cross: installing ${missing[*]}" >&2
  if ! dpkg --print-foreign-architectures | grep -qx "$debarch"; then
    $sudo dpkg --add-architecture "$debarch"
  fi
  # Ubuntu serves ARM and RISC-V packages from ports.ubuntu.com, not from the archive its
  # sources name (which would make `apt-get update` fail on the foreign architecture): pin the
  # existing sources to the build machine's architecture and add the ports archive for the rest.
  # shellcheck source=/dev/null
  if [ "$(. /etc/os-release && echo "${ID:-}")" = ubuntu ] && [ ! -f /etc/apt/sources.list.d/petrel-ports.list ]; then
    native=$(dpkg --print-architecture)
    codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
    if [ -f /etc/apt/sources.list ]; then
      $sudo sed -i -E -e "s/^deb (http|mirror|file)/deb [arch=$native] \1/" \
        -e "/^deb \[[^]]*arch=/! s/^deb \[/deb [arch=$native /" /etc/apt/sources.list
    fi
    for file in /etc/apt/sources.list.d/*.sources; do
      [ -f "$file" ] || continue
      grep -q '^Architectures:' "$file" || $sudo sed -i "/^Types:/a Architectures: $native" "$file"
    done
    {
      for pocket in "" -updates -security; do
        echo "deb [arch=arm64,armhf,riscv64] http://ports.ubuntu.com/ubuntu-ports $codename$pocket main universe"
      done
    } | $sudo tee /etc/apt/sources.list.d/petrel-ports.list >/dev/null
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# --- configure and build ----------------------------------------------------------------------
build_dir="build-$arch"
# Static by default: the tests then run the very binary a board gets, and qemu needs none of the
# target's shared libraries but the C library's.
static=false
if [ "${PETREL_CROSS_STATIC:-1}" = "1" ]; then static=true; fi
if [ ! -f "$build_dir/build.ninja" ]; then
  meson setup "$build_dir" --cross-file "cross/$triplet.ini" --buildtype=release \
    -Dvulkan=disabled -Dbenchmarks=disabled -Dstatic=$static ${PETREL_MESON_ARGS:-} "$@" >&2
else
  # --reconfigure rather than `meson configure`: the test list read below must reflect the
  # current meson.build files, which ninja alone would regenerate only later.
  meson setup --reconfigure "$build_dir" -Dstatic=$static >&2
fi
# The petrel binary, and with `test` the executables of the suites to run (not the cli and
# server tests: building them for nothing would double the build on a small CI machine).
# The cli suite drives the petrel binary through the exe_wrapper too, but it is slow under
# emulation; unit and parity cover every kernel and every model path.
suite_names="${PETREL_CROSS_SUITES:-unit parity}"
skipped_suites=()
for suite in ${PETREL_CROSS_SKIP_SUITES-slow}; do
  [[ " $suite_names " == *" $suite "* ]] || skipped_suites+=("$suite")
done
targets=(tools/petrel)
if ((run_tests)); then
  for test in $(meson introspect "$build_dir" --tests |
    SUITES="$suite_names" SKIPPED="${skipped_suites[*]}" python3 -c '
import json, os, sys
def names(var): return {"petrel:" + s for s in os.environ[var].split()}
wanted, skipped = names("SUITES"), names("SKIPPED")
root = sys.argv[1] + "/"
# Only the executables this build makes: a test run by a build-machine program (bash for the
# scripts check) has nothing to build.
print(" ".join(sorted({t["cmd"][0].split(root, 1)[-1] for t in json.load(sys.stdin)
                       if wanted & set(t["suite"]) and not skipped & set(t["suite"])
                       and t["cmd"][0].startswith(root)})))
' "$(cd "$build_dir" && pwd)"); do targets+=("$test"); done
fi
ninja -C "$build_dir" -j "${PETREL_BUILD_JOBS:-$(nproc)}" "${targets[@]}" >&2
echo "cross: built $build_dir/tools/petrel for $triplet (setup and build took $SECONDS s)" >&2
((run_tests)) || exit 0

# --- tests under qemu-user --------------------------------------------------------------------
suites=()
for suite in $suite_names; do suites+=(--suite "$suite"); done
for suite in "${skipped_suites[@]}"; do suites+=(--no-suite "$suite"); done
# No QEMU_LD_PREFIX: see the exe_wrapper note in cross/$triplet.ini.
unset QEMU_LD_PREFIX
status=0
# The SIMD target dispatch picks on the emulated core, as `petrel info` reports it before the
# suites run, and checked against the one expected: NEON on both aarch64 cores, since the SVE
# family is not built (docs/EMBEDDED.md), and on armhf, whose qemu core has NEON.
shared_dir=$(meson introspect "$build_dir" --buildoptions | python3 -c '
import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "shared_dir"))')
if [ -z "$shared_dir" ]; then shared_dir="$(pwd)/../shared"; fi
story="$shared_dir/models/story-gguf/story-f32.gguf"
check_target() {
  local cpu="$1" expected="$2" info target
  if ! info=$(QEMU_CPU="$cpu" "$qemu" "$build_dir/tools/petrel" info -m "$story" 2>&1); then
    echo "cross: petrel info on an emulated $cpu failed: $info" >&2
    return 1
  fi
  target=$(tr -s ' \n' ' ' <<<"$info" | grep -o 'SIMD target [a-z0-9_]*' | awk '{print $3}')
  echo "cross: petrel info on an emulated $cpu: SIMD target ${target:-(none printed)}" >&2
  if [ "$target" != "$expected" ]; then
    echo "cross: expected SIMD target $expected on $cpu" >&2
    return 1
  fi
}
run_suites() {
  local cpu="$1" start=$SECONDS
  echo "cross: $arch ${suite_names// /+} tests on an emulated $cpu" >&2
  check_target "$cpu" "${PETREL_CROSS_TARGET:-neon}" || status=1
  QEMU_CPU="$cpu" meson test -C "$build_dir" --no-rebuild --print-errorlogs \
    --num-processes "${PETREL_TEST_JOBS:-$(nproc)}" --timeout-multiplier 8 \
    --logbase "testlog-$cpu" "${suites[@]}" || status=1
  echo "cross: $arch tests on $cpu took $((SECONDS - start)) s" >&2
}
# The greedy text of the story model on one emulated core, for comparing cores.
greedy_text() {
  QEMU_CPU="$1" "$qemu" "$build_dir/tools/petrel" run -m "$story" -p "Once upon a time" -n 24 \
    --temp 0 -t 2 2>/dev/null
}
check_same_text() {
  local cpu="$1" reference="$2" text
  check_target "$cpu" "${PETREL_CROSS_TARGET:-neon}" || { status=1; return; }
  if ! text=$(greedy_text "$cpu") || [ "$text" != "$reference" ]; then
    echo "cross: greedy text on an emulated $cpu differs from $first_cpu's:" >&2
    printf '  %s\n  %s\n' "$reference" "$text" >&2
    status=1
    return
  fi
  echo "cross: greedy text on an emulated $cpu is $first_cpu's" >&2
}
if [ "$arch" = "aarch64" ]; then
  cpus="${PETREL_CROSS_CPUS:-cortex-a72}" check_cpus="${PETREL_CROSS_CHECK_CPUS-max}"
else
  # qemu-arm's default core (max) has NEON; cortex-a8 or cortex-a9 would run the scalar code.
  cpus="${PETREL_CROSS_CPUS:-max}" check_cpus="${PETREL_CROSS_CHECK_CPUS-}"
fi
for cpu in $cpus; do run_suites "$cpu"; done
if [ -n "$check_cpus" ]; then
  first_cpu="${cpus%% *}"
  reference=$(greedy_text "$first_cpu") || { echo "cross: petrel run on an emulated $first_cpu failed" >&2; status=1; }
  for cpu in $check_cpus; do check_same_text "$cpu" "$reference"; done
fi
exit $status
