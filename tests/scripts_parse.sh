#!/usr/bin/env bash
# Every script in scripts/ parses: bash -n for the shell scripts, Python's parser for the rest.
# A script edited for a measurement and left broken fails here, not an hour into a long run.
#   tests/scripts_parse.sh SOURCE_ROOT
set -uo pipefail
shopt -s nullglob
root=${1:?usage: scripts_parse.sh SOURCE_ROOT}
status=0 checked=0
for script in "$root"/scripts/*.sh; do
  checked=$((checked + 1))
  bash -n "$script" || { echo "scripts_parse: $script does not parse" >&2; status=1; }
done
for script in "$root"/scripts/*.py; do
  checked=$((checked + 1))
  python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$script" ||
    { echo "scripts_parse: $script does not parse" >&2; status=1; }
done
echo "scripts_parse: $checked scripts checked"
[ "$checked" -gt 0 ] || status=1
exit "$status"
