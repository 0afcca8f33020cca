#!/bin/sh
# Installs petrel into a scratch root (`meson install --destdir`), builds tests/capi/capi_test.c
# against the installed header and libpetrel.so as any C program would (cc and
# `pkg-config --cflags --libs petrel`), and runs it with the expected text from `petrel run`.
# Then, from the same install: examples/simple.c linked against libpetrel.a through
# `pkg-config --static`, the Python package imported from its installed folder (finding the
# installed libpetrel by itself), and the docs in share/doc/petrel.
# CAPI_TEST_CFLAGS adds compiler flags, e.g. "-fsanitize=address,undefined -g" (docs/LIBRARY.md).
#
# Usage: run_capi_test.sh BUILD_DIR PETREL_BIN MODEL TEST_SOURCE_DIR
set -eu
build=$1 petrel=$2 model=$3 source=$4
mkdir -p "${TEST_TMPDIR:-/tmp}"
scratch=$(mktemp -d "${TEST_TMPDIR:-/tmp}/capi.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
root=$scratch/root

meson install -C "$build" --no-rebuild --destdir "$root" >"$scratch/install.log" 2>&1 ||
  { cat "$scratch/install.log"; exit 1; }
pc=$(find "$root" -name petrel.pc | head -n 1)
[ -n "$pc" ] || { echo "petrel.pc was not installed"; exit 1; }
# The installed .pc names the final prefix, which --define-variable moves into the scratch root
# (a sysroot would not do: it would move the absolute paths of libraries outside the prefix too,
# such as CUDA's static runtime in Libs.private). The system's own .pc files stay reachable for
# the packages petrel.pc requires.
PKG_CONFIG_LIBDIR=$(dirname "$pc"):$(pkg-config --variable pc_path pkg-config)
export PKG_CONFIG_LIBDIR
prefix=$(pkg-config --variable prefix petrel)
in_root="--define-variable=prefix=$root$prefix"
cflags=$(pkg-config "$in_root" --cflags petrel)
libs=$(pkg-config "$in_root" --libs petrel)
echo "pkg-config petrel: $cflags $libs"
libdir=$(pkg-config "$in_root" --variable libdir petrel)  # in the scratch root
[ -f "$libdir/libpetrel.so" ] || { echo "no libpetrel.so in $libdir"; exit 1; }

# Strict C99: the header must be plain C.
cc -std=c99 -Wall -Wextra -Werror -pedantic ${CAPI_TEST_CFLAGS:-} $cflags \
  -o "$scratch/capi_test" "$source/capi_test.c" $libs -pthread -lm

"$petrel" run -m "$model" -p "Once upon a time" -n 32 --temp 0 >"$scratch/expected.txt" 2>"$scratch/run.log" ||
  { cat "$scratch/run.log"; exit 1; }
printf 'this is not a model\n' >"$scratch/not_a_model.gguf"
# The program must run on the installed library, not the build tree's.
resolved=$(LD_LIBRARY_PATH=$libdir ldd "$scratch/capi_test" | awk '/libpetrel/ { print $3 }')
case $resolved in
  "$libdir"/*) ;;
  *) echo "capi_test resolves libpetrel to '$resolved', not the installed $libdir"; exit 1 ;;
esac
LD_LIBRARY_PATH=$libdir "$scratch/capi_test" "$model" "$scratch/expected.txt" "$scratch/not_a_model.gguf" \
  "$scratch/session.bin"

# The static library: libpetrel.a by its path (a plain -lpetrel would take the .so), the rest of
# the link line from `pkg-config --static`.
[ -f "$libdir/libpetrel.a" ] || { echo "no libpetrel.a in $libdir"; exit 1; }
static_libs=$(pkg-config "$in_root" --static --libs petrel | sed 's/-lpetrel\b//')
echo "pkg-config --static petrel: $static_libs"
cc -std=c99 -Wall -Werror $cflags -o "$scratch/simple_static" "$source/../../examples/simple.c" \
  "$libdir/libpetrel.a" $static_libs
if ldd "$scratch/simple_static" | grep -q libpetrel; then
  echo "simple_static links libpetrel dynamically"; exit 1
fi
"$source/check_example.sh" "$petrel" "$model" "$scratch/simple_static"

# The docs and the Python package, installed beside the library.
[ -n "$(find "$root" -path '*/share/doc/petrel/LIBRARY.md')" ] || { echo "docs not installed"; exit 1; }
package=$(find "$root" -path '*-packages/petrel/__init__.py' | head -n 1)
[ -n "$package" ] || { echo "the Python package was not installed"; exit 1; }
env -u PETREL_LIBRARY PYTHONPATH="$(dirname "$(dirname "$package")")" python3 -c '
import os, sys, petrel
loaded = petrel.library()._name
assert os.path.realpath(loaded).startswith(os.path.realpath(sys.argv[1])), loaded
model = petrel.Model(sys.argv[2])
text = "".join(model.generate("Once upon a time", max_tokens=32, temperature=0))
assert text + "\n" == open(sys.argv[3]).read(), text
print("installed Python package: greedy text matches, library", loaded)
' "$libdir" "$model" "$scratch/expected.txt"
