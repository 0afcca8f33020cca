#!/usr/bin/env bash
# Builds Debian packages of petrel with dpkg-deb (docs/DEPLOY.md):
#   petrel          the command (/usr/bin/petrel) and its docs
#   libpetrel0      the C API's shared library (libpetrel.so.0), with shlibs and an ldconfig trigger
#   libpetrel-dev   <petrel/petrel.h>, the libpetrel.so link, libpetrel.a and petrel.pc
#   python3-petrel  the Python package (bindings/python/petrel), over libpetrel0
# Each package's Depends comes from dpkg-shlibdeps over its ELF files (the runtime libraries
# they link: libc6, libstdc++6, libhwy1, libutf8proc2, libpcre2-8-0, libvulkan1 where Vulkan is
# built). The build is release, prefix /usr, every Highway target, tests and benchmarks off, in
# build-deb (or $PETREL_DEB_BUILD_DIR). CUDA is off: its runtime (cuBLAS) is not in Debian's
# archive, so a package linking it would not install on a plain Debian; PETREL_MESON_ARGS adds
# options (-Dcuda=enabled for a package for machines with NVIDIA's repository).
# Usage: scripts/package-deb.sh [OUT_DIR]   (default: dist/)
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir=$(realpath -m "${1:-dist}")
build_dir="${PETREL_DEB_BUILD_DIR:-build-deb}"
for tool in dpkg-deb dpkg-shlibdeps dpkg-architecture; do
  command -v "$tool" >/dev/null || { echo "package-deb: $tool not found (apt-get install dpkg-dev)" >&2; exit 1; }
done

# The Python package goes where Debian's python3 looks (/usr/lib/python3/dist-packages), not
# into the site-packages of whichever python3 is first on PATH (pyenv's, a venv's).
python_dir_option=-Dpython.purelibdir=lib/python3/dist-packages
if [ ! -f "$build_dir/build.ninja" ]; then
  meson setup "$build_dir" --buildtype=release --prefix=/usr -Dtests=disabled -Dbenchmarks=disabled \
    -Dcuda=disabled "$python_dir_option" ${PETREL_MESON_ARGS:-} >&2
else
  meson configure "$build_dir" "$python_dir_option" >&2
fi
ninja -C "$build_dir" ${PETREL_BUILD_JOBS:+-j "$PETREL_BUILD_JOBS"} tools/petrel src/capi/libpetrel.so.0.1.0 src/capi/libpetrel.a >&2
stage=$(mktemp -d "${TMPDIR:-/tmp}/petrel-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
meson install -C "$build_dir" --no-rebuild --destdir "$stage/install" >"$stage/install.log" 2>&1 ||
  { cat "$stage/install.log" >&2; exit 1; }

version=$(meson introspect "$build_dir" --projectinfo | python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
libdir=usr/lib/$multiarch
installed=$stage/install
for file in usr/bin/petrel "$libdir/libpetrel.so.$version" usr/include/petrel/petrel.h "$libdir/pkgconfig/petrel.pc"; do
  [ -e "$installed/$file" ] || { echo "package-deb: meson install left no /$file" >&2; exit 1; }
done

# Files of each package, moved from the install tree (anything left over is an error, so a new
# installed file is given a package rather than dropped).
take() {  # take PACKAGE PATH...
  local package=$1
  shift
  for path in "$@"; do
    mkdir -p "$stage/$package/$(dirname "$path")"
    mv "$installed/$path" "$stage/$package/$path"
  done
}
take petrel usr/bin/petrel usr/share/doc/petrel
take libpetrel0 "$libdir/libpetrel.so.0" "$libdir/libpetrel.so.$version"
take libpetrel-dev usr/include/petrel/petrel.h "$libdir/libpetrel.so" "$libdir/libpetrel.a" \
  "$libdir/pkgconfig/petrel.pc"
python_dir=usr/lib/python3/dist-packages/petrel
[ -d "$installed/$python_dir" ] || { echo "package-deb: meson install left no /$python_dir" >&2; exit 1; }
take python3-petrel "$python_dir"
left=$(find "$installed" -type f -o -type l)
if [ -n "$left" ]; then
  echo "package-deb: installed files no package takes:" >&2
  echo "$left" >&2
  exit 1
fi
for package in petrel libpetrel0 libpetrel-dev python3-petrel; do
  doc=$stage/$package/usr/share/doc/$package
  mkdir -p "$doc"
  printf 'petrel %s\nLicense: Apache-2.0\n' "$version" >"$doc/copyright"
done
cp docs/LIBRARY.md "$stage/libpetrel-dev/usr/share/doc/libpetrel-dev/"
# Binaries stripped of debug symbols, as Debian ships them.
strip --strip-unneeded "$stage/petrel/usr/bin/petrel" "$stage/libpetrel0/$libdir/libpetrel.so.$version"

# The runtime libraries an ELF file needs, as Debian dependencies. dpkg-shlibdeps reads
# debian/control for the package names, so it runs in a scratch source tree.
shlibdeps() {  # shlibdeps FILE... -> "libc6 (>= 2.34), ..."
  local tree=$stage/shlibdeps
  mkdir -p "$tree/debian"
  printf 'Source: petrel\n\nPackage: petrel\nArchitecture: any\n' >"$tree/debian/control"
  (cd "$tree" && dpkg-shlibdeps -O "$@" 2>"$stage/shlibdeps.log") | sed -n 's/^shlibs:Depends=//p' ||
    { cat "$stage/shlibdeps.log" >&2; return 1; }
}
petrel_depends=$(shlibdeps "$stage/petrel/usr/bin/petrel")
lib_depends=$(shlibdeps "$stage/libpetrel0/$libdir/libpetrel.so.$version")
[ -n "$petrel_depends" ] && [ -n "$lib_depends" ] || { echo "package-deb: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

size_kib() { du -sk --exclude=DEBIAN "$1" | cut -f1; }
control() {  # control PACKAGE DEPENDS DESCRIPTION [EXTRA FIELD LINES]
  local package=$1 depends=$2 description=$3 extra=${4:-}
  mkdir -p "$stage/$package/DEBIAN"
  {
    echo "Package: $package"
    echo "Version: $version"
    echo "Architecture: $arch"
    echo "Maintainer: petrel developers <petrel@localhost>"
    echo "Installed-Size: $(size_kib "$stage/$package")"
    echo "Depends: $depends"
    [ -n "$extra" ] && echo "$extra"
    echo "Section: science"
    echo "Priority: optional"
    echo "Homepage: https://github.com/petrel-llm/petrel"
    echo "Description: $description"
  } >"$stage/$package/DEBIAN/control"
}
control petrel "$petrel_depends" "CPU-first LLM inference engine: the petrel command
 Runs GGUF and Hugging Face models: run, chat, serve (an OpenAI-compatible server), embed,
 quantize, perplexity and benchmarks, on the CPU and, where built, Vulkan or CUDA devices."
control libpetrel0 "$lib_depends" "CPU-first LLM inference engine: the C API library
 libpetrel.so.0, the C API of petrel (<petrel/petrel.h>): models, contexts, streamed
 generation, chat templates, embeddings, LoRA adapters and sessions." "Multi-Arch: same"
# petrel.pc's Requires.private (the libraries libpetrel.a needs, which pkg-config checks even
# without --static) come from the -dev packages that own their .pc files.
dev_depends=""
for required in $(sed -n 's/^Requires.private: *//p' "$stage/libpetrel-dev/$libdir/pkgconfig/petrel.pc" | tr ',' ' '); do
  pc=$(pkg-config --path "$required" 2>/dev/null) ||
    { echo "package-deb: petrel.pc requires $required, which pkg-config does not find" >&2; exit 1; }
  owner=$(dpkg -S "$(realpath "$pc")" 2>/dev/null | head -n 1 | cut -d: -f1) ||
    { echo "package-deb: no package owns $pc (petrel.pc requires $required)" >&2; exit 1; }
  case ", $dev_depends, " in *", $owner, "*) ;; *) dev_depends+=", $owner" ;; esac
done
control libpetrel-dev "libpetrel0 (= $version)$dev_depends" "CPU-first LLM inference engine: C API development files
 The header <petrel/petrel.h>, the libpetrel.so link, the static libpetrel.a and petrel.pc for
 pkg-config." "Multi-Arch: same"
control python3-petrel "libpetrel0 (= $version), python3" "CPU-first LLM inference engine: Python bindings
 The petrel package: models, streamed generation, chat and embeddings from Python, over
 libpetrel.so.0 through ctypes (no compiled extension)."
# Other packages linking libpetrel depend on libpetrel0 of this version or newer; ldconfig runs
# after the library is installed or removed.
echo "libpetrel 0 libpetrel0 (>= $version)" >"$stage/libpetrel0/DEBIAN/shlibs"
echo "activate-noawait ldconfig" >"$stage/libpetrel0/DEBIAN/triggers"

mkdir -p "$out_dir"
for package in petrel libpetrel0 libpetrel-dev python3-petrel; do
  deb=$out_dir/${package}_${version}_${arch}.deb
  dpkg-deb --root-owner-group -Zxz --build "$stage/$package" "$deb" >&2
  echo "$deb"
  dpkg-deb --field "$deb" Depends | sed "s|^|package-deb: $package depends on: |" >&2
done
