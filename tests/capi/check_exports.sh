#!/bin/sh
# libpetrel.so exports the C API and nothing else: every defined dynamic symbol is petrel_*,
# and the API's entry points are among them.
# Usage: check_exports.sh LIBPETREL_SO
set -eu
lib=$1
symbols=$(nm -D --defined-only "$lib" | awk '{ print $NF }')
others=$(printf '%s\n' "$symbols" | grep -v '^petrel_' || true)
if [ -n "$others" ]; then
  echo "libpetrel.so exports symbols outside the C API:"
  printf '%s\n' "$others" | head -n 20
  echo "($(printf '%s\n' "$others" | wc -l) in all)"
  exit 1
fi
for name in petrel_version petrel_last_error petrel_model_load petrel_model_free \
    petrel_context_new petrel_context_free petrel_context_reset petrel_tokenize \
    petrel_detokenize petrel_generate petrel_sampling_default_params; do
  printf '%s\n' "$symbols" | grep -qx "$name" || { echo "$name is not exported"; exit 1; }
done
echo "libpetrel.so: $(printf '%s\n' "$symbols" | wc -l) symbols, all petrel_*"
