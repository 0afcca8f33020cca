#!/usr/bin/env bash
# Installs the packages of scripts/package-deb.sh into a clean Debian 12 root and runs petrel
# there (docs/DEPLOY.md, How the packages were checked). Needs root (chroot, mounts) and a
# Debian mirror ($PETREL_DEBIAN_MIRROR, default deb.debian.org).
#
# Usage: scripts/check-deb-chroot.sh DIST_DIR MODEL_GGUF [ROOT]
#   ROOT (default /tmp/petrel-deb12-root) is made with `debootstrap --variant=minbase bookworm`
#   when it holds no system yet; a root a previous check used has petrel purged first.
#   The expected text comes from $PETREL_BIN (default build-deb/tools/petrel).
set -euo pipefail
cd "$(dirname "$0")/.."
dist=$(realpath "$1") model=$(realpath "$2") root=${3:-/tmp/petrel-deb12-root}
petrel_bin=${PETREL_BIN:-build-deb/tools/petrel}
prompt="Once upon a time"
[ "$(id -u)" -eq 0 ] || { echo "check-deb-chroot: needs root (chroot and mounts)" >&2; exit 1; }
ls "$dist"/petrel_*.deb "$dist"/libpetrel0_*.deb "$dist"/libpetrel-dev_*.deb >/dev/null

if [ ! -x "$root/usr/bin/apt-get" ]; then
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >&2
  debootstrap --variant=minbase bookworm "$root" "${PETREL_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >&2
fi
mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[i]}" || true; done
}
trap cleanup EXIT
mount -t proc proc "$root/proc" && mounted+=("$root/proc")
mount --bind /dev "$root/dev" && mounted+=("$root/dev")
mkdir -p "$root/model"
mount --bind "$(dirname "$model")" "$root/model" && mounted+=("$root/model")
mount -o remount,bind,ro "$root/model"
cp /etc/resolv.conf "$root/etc/resolv.conf"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }

# A clean start: no petrel from an earlier check, nothing it pulled in kept by hand.
in_root dpkg --purge python3-petrel petrel libpetrel-dev libpetrel0 >/dev/null 2>&1 || true
in_root apt-get autoremove -y -qq --purge >&2 || true
rm -rf "$root/tmp/petrel-debs" && mkdir -p "$root/tmp/petrel-debs"
cp "$dist"/petrel_*.deb "$dist"/libpetrel0_*.deb "$dist"/libpetrel-dev_*.deb "$root/tmp/petrel-debs/"
python_deb=$(ls "$dist"/python3-petrel_*.deb 2>/dev/null | head -n 1)
[ -z "$python_deb" ] || cp "$python_deb" "$root/tmp/petrel-debs/"
in_root apt-get update -qq >&2
# apt resolves the packages' Depends from the mirror: a dependency they forgot fails here or in
# the runs below. pkg-config is for the -dev check only.
in_root sh -c 'apt-get install -y -qq --no-install-recommends /tmp/petrel-debs/*.deb pkg-config' >&2

echo "check-deb-chroot: petrel --version in the chroot:"
in_root petrel --version
expected=$("$petrel_bin" run -m "$model" -p "$prompt" -n 8 --temp 0 2>/dev/null)
actual=$(in_root petrel run -m "/model/$(basename "$model")" -p "$prompt" -n 8 --temp 0)
echo "check-deb-chroot: petrel run in the chroot: $actual"
[ "$actual" = "$expected" ] || { echo "check-deb-chroot: expected '$expected'" >&2; exit 1; }
# Read whole before grep: with pipefail, grep -q leaving early would fail ldconfig's write.
libraries=$(in_root ldconfig -p)
grep -q 'libpetrel.so.0 ' <<<"$libraries" || { echo "check-deb-chroot: ldconfig does not list libpetrel.so.0" >&2; exit 1; }
echo "check-deb-chroot: pkg-config petrel: $(in_root pkg-config --cflags --libs petrel)"
in_root test -f /usr/include/petrel/petrel.h
in_root sh -c 'test -f /usr/lib/*/libpetrel.a' || { echo "check-deb-chroot: no libpetrel.a" >&2; exit 1; }
in_root test -f /usr/share/doc/petrel/README.md || { echo "check-deb-chroot: no docs in /usr/share/doc/petrel" >&2; exit 1; }
if [ -n "$python_deb" ]; then
  # The Python package, from Debian's python3, finding the installed library by itself.
  python_text=$(in_root python3 -c 'import sys, petrel
with petrel.Model(sys.argv[1]) as model:
    print("".join(model.generate(sys.argv[2], max_tokens=8, temperature=0)))' \
    "/model/$(basename "$model")" "$prompt")
  echo "check-deb-chroot: python3 -c 'import petrel ...' in the chroot: $python_text"
  [ "$python_text" = "$expected" ] || { echo "check-deb-chroot: the Python package gave '$python_text', expected '$expected'" >&2; exit 1; }
fi
echo "check-deb-chroot: the packages install and run in a clean Debian 12 root"
