#!/usr/bin/env bash
# First command of the README: set up, build, and generate text from the default model
# (../shared/models/story), or from the model given as $1 (a GGUF file or a Hugging Face folder).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
model="${1:-../shared/models/story}"
prompt="${2:-Once upon a time, there was}"
if [ ! -e "$model" ]; then
  echo "error: model '$model' not found; pass a GGUF file or Hugging Face folder: scripts/demo.sh PATH [PROMPT]" >&2
  exit 1
fi
exec build/tools/petrel run -m "$model" -p "$prompt" -n 64 --temp 0
