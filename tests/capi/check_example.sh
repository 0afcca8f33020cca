#!/bin/sh
# Runs an example program (examples/simple.c or simple.py) on the story model and checks that
# it printed the prompt and then `petrel run`'s greedy 32 tokens: the examples stay correct.
#
# Usage: check_example.sh PETREL_BIN MODEL COMMAND...   (COMMAND gets MODEL and the prompt)
set -eu
petrel=$1 model=$2
shift 2
prompt="Once upon a time"
expected="$prompt$("$petrel" run -m "$model" -p "$prompt" -n 32 --temp 0 2>/dev/null)"
actual=$("$@" "$model" "$prompt")
if [ "$actual" != "$expected" ]; then
  printf 'example printed:\n%s\nexpected:\n%s\n' "$actual" "$expected"
  exit 1
fi
echo "example output matches petrel run: $actual"
